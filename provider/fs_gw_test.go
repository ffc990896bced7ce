package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func gwEv(id, typ string, seq int64) WorkflowEvent {
	return WorkflowEvent{ID: id, Type: typ, SequenceID: seq, TimestampMs: 1,
		Data: json.RawMessage(fmt.Sprintf(`{"id":%q,"sid":%d,"t":%q}`, id, seq, typ))}
}

func gwTimer(id string, at time.Time, seid int64) WorkflowEvent {
	ev := gwEv(id, "TimerFired", 0)
	ev.VisibleAtMs, ev.ScheduleEventID = at.UnixMilli(), seid
	return ev
}

// gwFetch fetches the next workflow task of queue "default" (nil if none).
func gwFetch(t *testing.T, p *FSProvider) *WorkflowTask {
	t.Helper()
	task, err := p.FetchWorkflowTask(context.Background(), []string{"default"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	return task
}

func gwFetchOf(t *testing.T, p *FSProvider, instance string) *WorkflowTask {
	t.Helper()
	for range 50 {
		task := gwFetch(t, p)
		if task == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if task.Execution.InstanceID == instance {
			return task
		}
		t.Fatalf("fetched a task of %s, want %s", task.Execution.InstanceID, instance)
	}
	t.Fatalf("no task for %s", instance)
	return nil
}

// crashAfterCommit makes the next commit of kind panic right after its
// commit point (before any apply): what a kill -9 there leaves, with the
// flocks released by the unwinding defers as the kernel releases a dead
// process's flocks.
func crashAfterCommit(t *testing.T, kind string, f func()) {
	t.Helper()
	type crash struct{}
	testHookAfterCommitPoint = func(k string) {
		if k == kind {
			panic(crash{})
		}
	}
	defer func() { testHookAfterCommitPoint = nil }()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crash); !ok {
				panic(r)
			}
			return
		}
		t.Fatalf("no %q commit happened", kind)
	}()
	f()
}

// TestGWCommittedNotAppliedIsFinished: a workflow commit whose writer died
// right after its commit point is finished by whoever next takes a flock
// it marks, in another provider (process) on the directory - its parts
// independently - and an activity completion by the sweep.
func TestGWCommittedNotAppliedIsFinished(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SweepInterval: -1, CheckpointInterval: -1}
	p1, p2 := openT(t, dir, opts), openT(t, dir, opts)

	// A creation: the instance looks absent (no instance.json) but a signal
	// finds its lease, takes the flock, and finishes the creation first.
	crashAfterCommit(t, "gw", func() {
		_ = p1.CreateWorkflow(ctx, WorkflowRef{"parent", "e1"}, WorkflowStart{Queue: "default", Name: "P"}, gwEv("start", "WorkflowExecutionStarted", 0))
	})
	if _, err := p2.WorkflowExecutionInfo(ctx, WorkflowRef{"parent", "e1"}); err != ErrWorkflowNotFound {
		t.Fatalf("before the redo: %v, want not found", err)
	}
	mustNoErr(t, p2.SendWorkflowEvent(ctx, "parent", "", gwEv("sig", "SignalReceived", 0)))
	x, err := p2.WorkflowExecutionInfo(ctx, WorkflowRef{"parent", "e1"})
	mustNoErr(t, err)
	if x.State != WorkflowActive || x.Queue != "default" || x.Name != "P" {
		t.Fatalf("execution %+v", x)
	}

	// A task completion creating a sub-workflow and scheduling an activity:
	// the child's part is finished by a signal to the child, the parent's by
	// the parent's next fetch.
	task := gwFetchOf(t, p1, "parent")
	if len(task.NewEvents) != 2 || task.NewEvents[0].ID != "start" || task.NewEvents[1].ID != "sig" {
		t.Fatalf("new events %+v", task.NewEvents)
	}
	crashAfterCommit(t, "gw", func() {
		_ = p1.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
			State:      WorkflowActive,
			Executed:   []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("sig", "SignalReceived", 3), gwEv("act", "ActivityScheduled", 4), gwEv("sub", "SubWorkflowScheduled", 5)},
			Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: json.RawMessage(`{"a":1}`)}},
			Sends: []WorkflowSend{{Target: WorkflowRef{"child", "c1"}, Start: &WorkflowStart{Name: "C", Parent: &WorkflowParent{"parent", "e1", 5}},
				Events: []WorkflowEvent{gwEv("cstart", "WorkflowExecutionStarted", 0)}}},
		})
	})
	if h, _ := p2.WorkflowHistory(ctx, WorkflowRef{"parent", "e1"}, nil); len(h) != 0 {
		t.Fatalf("history before the redo: %d events", len(h))
	}
	mustNoErr(t, p2.SendWorkflowEvent(ctx, "child", "", gwEv("csig", "SignalReceived", 0)))
	cx, err := p2.WorkflowExecutionInfo(ctx, WorkflowRef{"child", "c1"})
	mustNoErr(t, err)
	if cx.Parent == nil || *cx.Parent != (WorkflowParent{"parent", "e1", 5}) || cx.Queue != "default" {
		t.Fatalf("child %+v", cx)
	}
	ct := gwFetchOf(t, p2, "child") // the parent has nothing visible: its batch was consumed
	if len(ct.NewEvents) != 2 || ct.NewEvents[0].ID != "cstart" || ct.NewEvents[1].ID != "csig" {
		t.Fatalf("child events %+v", ct.NewEvents)
	}
	// The parent's part is still pending: the checkpoint pass finishes it.
	mustNoErr(t, p2.Recover(ctx))
	h, err := p2.WorkflowHistory(ctx, WorkflowRef{"parent", "e1"}, nil)
	mustNoErr(t, err)
	if len(h) != 5 || h[4].ID != "sub" || h[4].SequenceID != 5 {
		t.Fatalf("parent history %+v", h)
	}
	after := int64(3)
	if h, _ := p2.WorkflowHistory(ctx, WorkflowRef{"parent", "e1"}, &after); len(h) != 2 {
		t.Fatalf("history after 3: %d events", len(h))
	}

	// An activity completion: finished by the sweep (Recover).
	at, err := p1.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if at == nil || at.EventID != "act" || at.Instance != (WorkflowRef{"parent", "e1"}) {
		t.Fatalf("activity task %+v", at)
	}
	crashAfterCommit(t, "gw_act", func() { _ = p1.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0)) })
	mustNoErr(t, p2.Recover(ctx))
	pt := gwFetchOf(t, p2, "parent")
	if len(pt.NewEvents) != 1 || pt.NewEvents[0].ID != "done" {
		t.Fatalf("parent events %+v", pt.NewEvents)
	}
	if err := p1.CompleteWorkflowActivity(ctx, at.Token, gwEv("done2", "ActivityCompleted", 0)); err == nil {
		t.Fatal("a second completion of the activity succeeded")
	}
	st, err := p2.WorkflowStats(ctx)
	mustNoErr(t, err)
	if st.ActiveExecutions != 2 || len(st.ActivityTasks) != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// gwSnapshot reads every file a workflow commit writes (instance files,
// execution states, histories, queue messages), by path.
func gwSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	walk := func(root string, keep func(rel string) bool) {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(dir, path)
			if keep(rel) {
				data, err := os.ReadFile(path)
				mustNoErr(t, err)
				out[rel] = string(data)
			}
			return nil
		})
	}
	walk(filepath.Join(dir, "instances"), func(rel string) bool {
		b := filepath.Base(rel)
		return b == "instance.json" || b == "state.json" || b == "history.jsonl"
	})
	entries, _ := os.ReadDir(filepath.Join(dir, "queues"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "gw-") {
			walk(filepath.Join(dir, "queues", e.Name()), func(rel string) bool {
				return filepath.Dir(rel) == filepath.Join("queues", e.Name()) && !strings.HasPrefix(filepath.Base(rel), ".") && filepath.Base(rel) != "fsqueue.json"
			})
		}
	}
	return out
}

// TestGWReplayRewritesEverything: the log alone rebuilds every file the
// workflow commits wrote. A workload of every record kind runs with
// checkpoints off; then every applied file is deleted (what a power loss
// can do to unsynced files) and a process that opens the directory alone
// replays the log: the files must come back byte for byte.
func TestGWReplayRewritesEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SweepInterval: -1, CheckpointInterval: -1}
	p := openT(t, dir, opts)
	parent, child := WorkflowRef{"parent", "e1"}, WorkflowRef{"child", "c1"}

	mustNoErr(t, p.CreateWorkflow(ctx, parent, WorkflowStart{Queue: "default", Name: "P", Metadata: json.RawMessage(`{"k":"v"}`)}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "parent")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State:      WorkflowActive,
		Executed:   []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("act", "ActivityScheduled", 3), gwEv("tim", "TimerScheduled", 4), gwEv("sub", "SubWorkflowScheduled", 5)},
		Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: json.RawMessage(`{"a":1}`)}},
		Timers:     []WorkflowEvent{gwTimer("fire", time.Now().Add(time.Hour), 4)},
		Sends: []WorkflowSend{{Target: child, Start: &WorkflowStart{Name: "C", Parent: &WorkflowParent{"parent", "e1", 5}},
			Events: []WorkflowEvent{gwEv("cstart", "WorkflowExecutionStarted", 0)}}},
		Worker: "w", Sticky: time.Minute,
	}))
	at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	mustNoErr(t, p.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0)))
	mustNoErr(t, p.SendWorkflowEvent(ctx, "parent", "", gwEv("sig", "SignalReceived", 0)))

	// The child finishes and tells the parent.
	ct := gwFetchOf(t, p, "child")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, ct, WorkflowTaskResult{
		State: WorkflowFinished, Executed: []WorkflowEvent{gwEv("cts", "WorkflowTaskStarted", 1), gwEv("cstart", "WorkflowExecutionStarted", 2), gwEv("cfin", "WorkflowExecutionFinished", 3)},
		Sends: []WorkflowSend{{Target: parent, Events: []WorkflowEvent{gwEv("subdone", "SubWorkflowCompleted", 0)}}},
	}))
	// The parent cancels its timer and continues as new.
	task = gwFetchOf(t, p, "parent")
	if len(task.NewEvents) != 3 {
		t.Fatalf("parent events %+v", task.NewEvents)
	}
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State: WorkflowContinuedAsNew,
		Executed: []WorkflowEvent{gwEv("ts2", "WorkflowTaskStarted", 6), gwEv("done", "ActivityCompleted", 7), gwEv("sig", "SignalReceived", 8),
			gwEv("subdone", "SubWorkflowCompleted", 9), gwEv("tc", "TimerCanceled", 10), gwEv("can", "WorkflowExecutionContinuedAsNew", 11)},
		CanceledTimers: []int64{4},
		Sends: []WorkflowSend{{Target: WorkflowRef{"parent", "e2"}, Start: &WorkflowStart{Queue: "default", Name: "P"},
			Events: []WorkflowEvent{gwEv("start2", "WorkflowExecutionStarted", 0)}}},
	}))
	if fe, err := p.FutureWorkflowEvents(ctx); err != nil || len(fe) != 0 {
		t.Fatalf("future events %v %v", fe, err)
	}
	mustNoErr(t, p.RemoveWorkflow(ctx, child))
	if _, err := p.WorkflowExecutionInfo(ctx, child); err != ErrWorkflowNotFound {
		t.Fatalf("removed child: %v", err)
	}
	n, err := p.RemoveWorkflows(ctx, time.Now().Add(time.Second), 10)
	mustNoErr(t, err)
	if n != 1 {
		t.Fatalf("removed %d executions, want the continued-as-new one", n)
	}
	x, err := p.WorkflowExecutionInfo(ctx, WorkflowRef{"parent", "e2"})
	mustNoErr(t, err)
	if x.Number != 2 || x.State != WorkflowActive {
		t.Fatalf("new execution %+v", x)
	}

	want := gwSnapshot(t, dir)
	closeKeepingLog(t, p, dir)
	mustNoErr(t, os.RemoveAll(filepath.Join(dir, "instances")))
	entries, err := os.ReadDir(filepath.Join(dir, "queues"))
	mustNoErr(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "gw-") {
			mustNoErr(t, os.RemoveAll(filepath.Join(dir, "queues", e.Name())))
		}
	}
	// As after a reboot: the log records the boot it was used in, and
	// replays everything since the checkpoint only when that changed.
	p2 := replayAfterReboot(t, dir, opts)
	wantSameFiles(t, "after the replay", gwSnapshot(t, dir), want)
	task = gwFetchOf(t, p2, "parent")
	if len(task.NewEvents) != 1 || task.NewEvents[0].ID != "start2" || task.Execution.ExecutionID != "e2" {
		t.Fatalf("after the replay: %+v", task)
	}
}

// TestGWPruneLeavesWorkflowInstancesAlone: an orchestration prune must not
// rewrite a workflow instance's instance.json (it would drop its
// executions).
func TestGWPruneLeavesWorkflowInstancesAlone(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	ref := WorkflowRef{"w", "e1"}
	mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: "default", Name: "W"}, gwEv("s", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "w")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowContinuedAsNew,
		Executed: []WorkflowEvent{gwEv("s", "WorkflowExecutionStarted", 1)},
		Sends: []WorkflowSend{{Target: WorkflowRef{"w", "e2"}, Start: &WorkflowStart{Queue: "default", Name: "W"},
			Events: []WorkflowEvent{gwEv("s2", "WorkflowExecutionStarted", 0)}}}}))
	res, err := p.PruneExecutionsBulk(ctx, InstanceFilter{}, PruneOptions{})
	mustNoErr(t, err)
	if res.ExecutionsDeleted != 0 {
		t.Fatalf("prune removed %d executions of a workflow instance", res.ExecutionsDeleted)
	}
	for _, r := range []WorkflowRef{ref, {"w", "e2"}} {
		if _, err := p.WorkflowExecutionInfo(ctx, r); err != nil {
			t.Fatalf("%v after prune: %v", r, err)
		}
	}
}

// closeKeepingLog closes p but leaves dir's write-ahead log as it was before
// Close's last checkpoint, as if the process had died instead.
func closeKeepingLog(t *testing.T, p *FSProvider, dir string) {
	t.Helper()
	walDir := filepath.Join(dir, "wal")
	walFiles := map[string][]byte{}
	walEntries, err := os.ReadDir(walDir)
	mustNoErr(t, err)
	for _, e := range walEntries {
		if !e.IsDir() {
			data, err := os.ReadFile(filepath.Join(walDir, e.Name()))
			mustNoErr(t, err)
			walFiles[e.Name()] = data
		}
	}
	mustNoErr(t, p.Close())
	for name, data := range walFiles {
		mustNoErr(t, os.WriteFile(filepath.Join(walDir, name), data, 0o600))
	}
	if _, ok := walFiles["checkpoint"]; !ok {
		mustNoErr(t, os.Remove(filepath.Join(walDir, "checkpoint")))
	}
}

// replayAfterReboot opens dir as after a reboot (the log records the boot
// it was used in, and replays everything since the checkpoint only when
// that changed) and fails the test if nothing was replayed.
func replayAfterReboot(t *testing.T, dir string, opts Options) *FSProvider {
	t.Helper()
	mustNoErr(t, os.Remove(filepath.Join(dir, "wal", "boot")))
	p := openT(t, dir, opts)
	if p.RecoveryStats().RecordsReplayed == 0 {
		t.Fatal("nothing was replayed")
	}
	return p
}

// wantSameFiles fails the test unless got and want (path -> content) are
// equal, naming each difference.
func wantSameFiles(t *testing.T, when string, got, want map[string]string) {
	t.Helper()
	for path, data := range want {
		if got[path] != data {
			t.Errorf("%s %s:\n got %q\nwant %q", path, when, got[path], data)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("%s exists only %s", path, when)
		}
	}
}
