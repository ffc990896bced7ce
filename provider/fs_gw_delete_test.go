package provider

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
)

// gwMessages counts the published messages of every workflow queue.
func gwMessages(t *testing.T, p *FSProvider) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, activity := range []bool{false, true} {
		dirs, err := p.gwQueueDirs(activity)
		mustNoErr(t, err)
		for _, dir := range dirs {
			q, err := p.gwQueue(dir)
			mustNoErr(t, err)
			q.Invalidate()
			entries, err := q.List()
			mustNoErr(t, err)
			if len(entries) > 0 {
				out[dir] = len(entries)
			}
		}
	}
	return out
}

// gwRunningParent builds a running go-workflows instance "parent" (queue
// "default") with a sub-workflow "child" (queue "other") it started, two
// activity tasks a1 and a2 in queue "acts", a future timer and a signal.
func gwRunningParent(t *testing.T, p *FSProvider) {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"parent", "e1"}, WorkflowStart{Queue: "default", Name: "P"}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "parent")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State: WorkflowActive,
		Executed: []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2),
			gwEv("a1", "ActivityScheduled", 3), gwEv("a2", "ActivityScheduled", 4), gwEv("tim", "TimerScheduled", 5), gwEv("sub", "SubWorkflowScheduled", 6)},
		Activities: []WorkflowActivity{{Queue: "acts", EventID: "a1", Payload: json.RawMessage(`{"a":1}`)}, {Queue: "acts", EventID: "a2", Payload: json.RawMessage(`{"a":2}`)}},
		Timers:     []WorkflowEvent{gwTimer("fire", time.UnixMilli(p.nowMs()).Add(time.Hour), 5)},
		Sends: []WorkflowSend{{Target: WorkflowRef{"child", "c1"}, Start: &WorkflowStart{Queue: "other", Name: "C", Parent: &WorkflowParent{"parent", "e1", 6}},
			Events: []WorkflowEvent{gwEv("cstart", "WorkflowExecutionStarted", 0)}}},
	}))
	mustNoErr(t, p.SendWorkflowEvent(ctx, "parent", "", gwEv("sig", "SignalReceived", 0)))
}

// gwFetchActivity fetches the next activity task of queue "acts" and checks
// it is eventID's.
func gwFetchActivity(t *testing.T, p *FSProvider, eventID string) *WorkflowActivityTask {
	t.Helper()
	at, err := p.FetchWorkflowActivity(context.Background(), []string{"acts"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if at == nil || at.EventID != eventID {
		t.Fatalf("activity task %+v, want %s", at, eventID)
	}
	return at
}

// gwDeletionFixture is gwRunningParent with a1 claimed and a2 completed by
// a commit that was not applied; it returns a1's token.
func gwDeletionFixture(t *testing.T, p *FSProvider) string {
	t.Helper()
	gwRunningParent(t, p)
	a1, a2 := gwFetchActivity(t, p, "a1"), gwFetchActivity(t, p, "a2")
	crashAfterCommit(t, "gw_act", func() {
		_ = p.CompleteWorkflowActivity(context.Background(), a2.Token, gwEv("a2done", "ActivityCompleted", 0))
	})
	return a1.Token
}

// TestGWDeleteRemovesWorkflowMessages: the orchestration deletion (Admin
// DeleteInstance, durofs delete) of a go-workflows instance tree removes its
// pending events and its activity tasks - claimed ones, and the completion
// of one whose commit was not applied - in its one log record: a deletion
// whose writer dies right after its commit point is finished from the
// record alone by another process.
func TestGWDeleteRemovesWorkflowMessages(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "applied"
		if crash {
			name = "crash after the commit point"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{SweepInterval: -1, CheckpointInterval: -1}
			p1, p2 := openT(t, dir, opts), openT(t, dir, opts)
			token := gwDeletionFixture(t, p1)
			// parent: timer, signal, a1 (claimed), a2 (completion pending);
			// child: its start event.
			want := map[string]int{"gw-workflow-default": 2, "gw-workflow-other": 1, "gw-activity-acts": 2}
			if got := gwMessages(t, p1); !maps.Equal(got, want) {
				t.Fatalf("before: %v, want %v", got, want)
			}
			var res DeleteInstanceResult
			var err error
			del := func() { res, err = p1.DeleteInstance(ctx, "parent", true) }
			if crash {
				crashAfterCommit(t, "delete", del)
				mustNoErr(t, p2.Recover(ctx))
			} else {
				del()
				mustNoErr(t, err)
				// The completed activity's result was published before the
				// listing, and deleted with the rest.
				if res.InstancesDeleted != 2 || res.QueueMessagesDeleted != 6 {
					t.Fatalf("result %+v, want 2 instances and 6 messages", res)
				}
			}
			if got := gwMessages(t, p2); len(got) != 0 {
				t.Fatalf("workflow queue messages left: %v", got)
			}
			for _, ref := range []WorkflowRef{{"parent", "e1"}, {"child", "c1"}} {
				if _, err := p2.WorkflowExecutionInfo(ctx, ref); !errors.Is(err, ErrWorkflowNotFound) {
					t.Fatalf("%v after the deletion: %v", ref, err)
				}
			}
			if err := p1.CompleteWorkflowActivity(ctx, token, gwEv("a1done", "ActivityCompleted", 0)); !errors.Is(err, ErrWorkflowTaskLost) {
				t.Fatalf("completing a deleted activity task: %v, want ErrWorkflowTaskLost", err)
			}
			if at, err := p2.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0); err != nil || at != nil {
				t.Fatalf("an activity task of a deleted instance is fetched: %+v %v", at, err)
			}
			// A new instance with the id starts clean.
			mustNoErr(t, p2.CreateWorkflow(ctx, WorkflowRef{"parent", "e1"}, WorkflowStart{Queue: "default", Name: "P"}, gwEv("start2", "WorkflowExecutionStarted", 0)))
			task := gwFetchOf(t, p2, "parent")
			if len(task.NewEvents) != 1 || task.NewEvents[0].ID != "start2" {
				t.Fatalf("the re-created instance got %+v", task.NewEvents)
			}
		})
	}
}

// TestGWDeleteIsDurable: a checkpoint after the deletion of a go-workflows
// instance makes the removal of its workflow queue messages durable (it
// fsyncs their directories): after a power loss that
// keeps only what was synced, none comes back.
func TestGWDeleteIsDurable(t *testing.T) {
	ctx := context.Background()
	mem := plStrictMem(t)
	opts := plOptions(mem, Durable, clock.NewManual(plStart), "A")
	p, err := Open(plDir, opts)
	mustNoErr(t, err)
	gwDeletionFixture(t, p)
	mustNoErr(t, p.checkpointOnce(ctx, true, true))
	if _, err := p.DeleteInstance(ctx, "parent", true); err != nil {
		t.Fatal(err)
	}
	mustNoErr(t, p.checkpointOnce(ctx, true, true))
	mustNoErr(t, p.Close())
	mem.Crash()
	p, err = Open(plDir, opts)
	mustNoErr(t, err)
	defer p.Close()
	if got := gwMessages(t, p); len(got) != 0 {
		t.Fatalf("after the power loss, deleted workflow queue messages are back: %v", got)
	}
	q, err := p.gwQueue("gw-activity-acts")
	mustNoErr(t, err)
	if claims, err := q.Claims(); err != nil || len(claims) != 0 {
		t.Fatalf("after the power loss, claims %v %v", claims, err)
	}
}
