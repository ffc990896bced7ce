package provider

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gwFsckFixture is gwRunningParent with the child finished (its result sent
// to the parent) and a1 claimed.
func gwFsckFixture(t *testing.T, p *FSProvider) {
	t.Helper()
	ctx := context.Background()
	gwRunningParent(t, p)
	ct, err := p.FetchWorkflowTask(ctx, []string{"other"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	mustNoErr(t, p.CompleteWorkflowTask(ctx, ct, WorkflowTaskResult{
		State: WorkflowFinished, Executed: []WorkflowEvent{gwEv("cts", "WorkflowTaskStarted", 1), gwEv("cstart", "WorkflowExecutionStarted", 2), gwEv("cfin", "WorkflowExecutionFinished", 3)},
		Sends: []WorkflowSend{{Target: WorkflowRef{"parent", "e1"}, Events: []WorkflowEvent{gwEv("subdone", "SubWorkflowCompleted", 0)}}},
	}))
	gwFetchActivity(t, p, "a1")
}

// gwQueueFile returns the path of the first message of a go-workflows
// queue whose event id is eid.
func gwQueueFile(t *testing.T, p *FSProvider, dir, eid string) (name, path string) {
	t.Helper()
	q, err := p.gwQueue(dir)
	mustNoErr(t, err)
	entries, err := allQueued(q)
	mustNoErr(t, err)
	for _, e := range entries {
		if e.Attrs[attrEventID] == eid {
			return e.Name, filepath.Join(q.Dir(), e.Name+".json")
		}
	}
	t.Fatalf("no message %s in %s", eid, dir)
	return "", ""
}

func ageFile(t *testing.T, path string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	mustNoErr(t, os.Chtimes(path, old, old))
}

// TestFsckGWKinds: fsck checks the go-workflows queues and instances. A
// directory with running and finished go-workflows instances is clean; each
// case damages it one way and checks the finding and its repair.
func TestFsckGWKinds(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name       string
		damage     func(t *testing.T, p *FSProvider, dir string)
		kind, path string
		severity   string
		repairable bool
		check      func(t *testing.T, p *FSProvider) // after the repair
	}{
		{
			name: "orphan claim of an activity task",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				_, path := gwQueueFile(t, p, "gw-activity-acts", "a1")
				mustNoErr(t, os.Remove(path))
			},
			kind: FsckOrphanClaim, path: "queues/gw-activity-acts/claims/", severity: SeverityWarning, repairable: true,
		},
		{
			name: "staged event of a commit that never happened",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				q, err := p.gwQueue("gw-workflow-default")
				mustNoErr(t, err)
				ref, err := p.gwStage("gw-workflow-default", p.gwEventMessage(q, "parent", "e1", gwEv("lost", "SignalReceived", 0), p.nowMs(), instanceKey("parent")))
				mustNoErr(t, err)
				ageFile(t, filepath.Join(q.Dir(), ".staged-"+ref.Name+".json"))
			},
			kind: FsckStagedOrphan, path: "queues/gw-workflow-default/.staged-", severity: SeverityWarning, repairable: true,
		},
		{
			name: "staged activity result of a completion that never happened",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				name, _ := gwQueueFile(t, p, "gw-activity-acts", "a1")
				q, err := p.gwQueue("gw-workflow-default")
				mustNoErr(t, err)
				ref, err := p.gwStage("gw-workflow-default", p.gwEventMessage(q, "parent", "e1", gwEv("a1done", "ActivityCompleted", 0), p.nowMs(), "gwa:gw-activity-acts/"+name))
				mustNoErr(t, err)
				ageFile(t, filepath.Join(q.Dir(), ".staged-"+ref.Name+".json"))
			},
			kind: FsckStagedOrphan, path: "queues/gw-workflow-default/.staged-", severity: SeverityWarning, repairable: true,
		},
		{
			name: "unparseable pending event",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				q, err := p.gwQueue("gw-workflow-default")
				mustNoErr(t, err)
				mustNoErr(t, os.WriteFile(filepath.Join(q.Dir(), q.NewName(0, "")+".json"), []byte(`{"name":`), 0o600))
			},
			kind: FsckUnparseable, path: "queues/gw-workflow-default/", severity: SeverityError, repairable: true,
		},
		{
			name: "activity task without its routing attributes",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				_, path := gwQueueFile(t, p, "gw-activity-acts", "a2")
				var m map[string]any
				data, err := os.ReadFile(path)
				mustNoErr(t, err)
				mustNoErr(t, json.Unmarshal(data, &m))
				delete(m["attrs"].(map[string]any), attrWFQueue)
				data, err = json.Marshal(m)
				mustNoErr(t, err)
				mustNoErr(t, os.WriteFile(path, data, 0o600))
			},
			kind: FsckUnparseable, path: "queues/gw-activity-acts/", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				if at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w2", time.Minute, 0); err != nil || at != nil {
					t.Errorf("the quarantined task is still fetched: %+v %v", at, err)
				}
			},
		},
		{
			name: "activity completion committed, not applied",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
				mustNoErr(t, err)
				crashAfterCommit(t, "gw_act", func() { _ = p.CompleteWorkflowActivity(ctx, at.Token, gwEv("a2done", "ActivityCompleted", 0)) })
			},
			kind: FsckPendingCommit, path: "queues/gw-activity-acts/claims/", severity: SeverityWarning, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				task := gwFetchOf(t, p, "parent")
				if len(task.NewEvents) != 3 || task.NewEvents[2].ID != "a2done" {
					t.Errorf("after the repair the parent gets %+v", task.NewEvents)
				}
			},
		},
		{
			name: "workflow commit logged, not applied",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				crashAfterCommit(t, "gw", func() {
					_ = p.CreateWorkflow(ctx, WorkflowRef{"late", "l1"}, WorkflowStart{Queue: "other", Name: "L"}, gwEv("lstart", "WorkflowExecutionStarted", 0))
				})
			},
			kind: FsckPendingCommit, path: "instances/late/lease.json", severity: SeverityWarning, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				task, err := p.FetchWorkflowTask(ctx, []string{"other"}, "w", time.Minute, 0)
				mustNoErr(t, err)
				if task == nil || len(task.NewEvents) != 1 || task.NewEvents[0].ID != "lstart" {
					t.Errorf("after the repair the new instance gets %+v", task)
				}
			},
		},
		{
			name: "events of an instance that is gone",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				q, err := p.gwQueue("gw-workflow-default")
				mustNoErr(t, err)
				old := time.Now().Add(-3 * time.Hour).UnixMilli()
				_, err = q.Enqueue(p.gwEventMessage(q, "ghost", "g1", gwEv("boo", "SignalReceived", 0), old, instanceKey("ghost")))
				mustNoErr(t, err)
			},
			kind: FsckUnknownInstance, path: "queues/gw-workflow-default/", severity: SeverityWarning, repairable: false,
		},
		{
			name: "unparseable state.json of a go-workflows execution",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				mustNoErr(t, os.WriteFile(p.execStatePath(instanceKey("child"), 1), []byte("{"), 0o600))
			},
			kind: FsckUnparseable, path: "instances/child/executions/1/state.json", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				ef, err := p.readExecutionFile(instanceKey("child"), 1)
				mustNoErr(t, err)
				if ef == nil || ef.Status != "Completed" || ef.EventCount != 3 || ef.StartedAtMs == 0 || ef.CompletedAtMs == nil {
					t.Errorf("rebuilt state.json %+v", ef)
				}
			},
		},
		{
			name: "unparseable instance.json of a go-workflows instance is left",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				mustNoErr(t, os.WriteFile(p.instFilePath(instanceKey("parent")), []byte("{"), 0o600))
			},
			kind: FsckUnparseable, path: "instances/parent/instance.json", severity: SeverityError, repairable: false,
		},
		{
			name: "unparseable instance.json of a go-workflows instance with no history yet is left",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"fresh", "f1"}, WorkflowStart{Queue: "default", Name: "F"}, gwEv("fstart", "WorkflowExecutionStarted", 0)))
				mustNoErr(t, os.WriteFile(p.instFilePath(instanceKey("fresh")), []byte("{"), 0o600))
			},
			kind: FsckUnparseable, path: "instances/fresh/instance.json", severity: SeverityError, repairable: false,
		},
		{
			name: "drifted counter of a go-workflows instance",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				path := p.instFilePath(instanceKey("parent"))
				data, err := os.ReadFile(path)
				mustNoErr(t, err)
				var m map[string]any
				mustNoErr(t, json.Unmarshal(data, &m))
				m["total_events"] = 1 // below what the history holds
				data, err = json.Marshal(m)
				mustNoErr(t, err)
				mustNoErr(t, os.WriteFile(path, data, 0o600))
			},
			kind: FsckCounterDrift, path: "instances/parent/instance.json", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				x, err := p.WorkflowExecutionInfo(ctx, WorkflowRef{"parent", "e1"})
				if err != nil || x.State != WorkflowActive || x.Events != 6 {
					t.Errorf("the repair lost the instance's executions: %+v %v", x, err)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			gwFsckFixture(t, p)
			if rep := fsckT(t, dir, false); !rep.Clean() {
				t.Fatalf("fresh directory: %+v", rep.Remaining())
			}
			c.damage(t, p, dir)
			rep := fsckT(t, dir, false)
			f := findingOf(rep, c.kind, "")
			for i := range rep.Findings {
				if g := &rep.Findings[i]; g.Kind == c.kind && strings.Contains(filepath.ToSlash(g.Path), c.path) {
					f = g
				}
			}
			if f == nil || !strings.Contains(filepath.ToSlash(f.Path), c.path) || f.Severity != c.severity || f.Repaired {
				t.Fatalf("no unrepaired %s %s finding for %s: %+v", c.severity, c.kind, c.path, rep.Findings)
			}
			for _, g := range rep.Findings {
				if g.Kind != c.kind && g.Severity != SeverityInfo {
					t.Errorf("unexpected finding: %+v", g)
				}
			}
			rep = fsckT(t, dir, true)
			repaired := false
			for _, g := range rep.Findings {
				if g.Kind == c.kind && strings.Contains(filepath.ToSlash(g.Path), c.path) {
					repaired = g.Repaired
				}
			}
			if repaired != c.repairable {
				t.Fatalf("repair: %+v", rep.Findings)
			}
			after := fsckT(t, dir, false)
			if c.repairable && !after.Clean() {
				t.Errorf("after repair: %+v", after.Remaining())
			}
			if !c.repairable && after.Clean() {
				t.Errorf("an unrepairable finding vanished: %+v", after.Findings)
			}
			if c.check != nil {
				c.check(t, openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}))
			}
		})
	}
}
