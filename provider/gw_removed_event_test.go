package provider

import (
	"context"
	"testing"
	"time"
)

// TestGWEventOfRemovedInstanceIsDropped: a workflow may finish without
// waiting for an activity it scheduled, and a finished instance may be
// removed (RemoveWorkflow, the auto-expiration) while that activity runs.
// Its completion then publishes a pending event for an instance whose
// directory is gone. A fetch must drop it, as it drops the events of any
// execution that is gone: left in the queue it stays visible forever,
// and every workflow task poller of the queue, in every process, passes
// over it every poll interval (the queue is never quiet) for good.
func TestGWEventOfRemovedInstanceIsDropped(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	at := gwFinishedWithActivity(t, p)
	mustNoErr(t, p.RemoveWorkflow(ctx, WorkflowRef{"x", "e1"}))
	mustNoErr(t, p.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0)))

	if task := gwFetch(t, p); task != nil {
		t.Fatalf("a task of the removed instance: %+v", task)
	}
	q, err := p.gwQueue(gwWorkflowQueue("default"))
	mustNoErr(t, err)
	if n, err := q.Len(); err != nil || n != 0 {
		t.Fatalf("after a fetch pass the workflow queue holds %d event(s) of the removed instance (%v)", n, err)
	}
	if _, quiet, err := q.Quiet(p.nowMs()); err != nil || !quiet {
		t.Fatalf("the workflow queue is not quiet (%v): its pollers look again every poll interval", err)
	}
}

// TestGWOldActivityResultDoesNotReachANewIncarnation: an instance is
// removed while an activity it scheduled runs, and created again under the
// same id (a new execution id, as go-workflows gives every creation); the
// old activity's result, completed after that, names the old execution, and
// the new one's task must not receive it - live, and after a power loss,
// when the replay applies the removal, the creation and the completion in
// log order.
func TestGWOldActivityResultDoesNotReachANewIncarnation(t *testing.T) {
	for _, powerLoss := range []bool{false, true} {
		t.Run(map[bool]string{false: "live", true: "after a power loss"}[powerLoss], func(t *testing.T) {
			ctx := context.Background()
			mem, opts, p := strictMemT(t)
			at := gwFinishedWithActivity(t, p)
			mustNoErr(t, p.RemoveWorkflow(ctx, WorkflowRef{"x", "e1"}))
			mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"x", "e2"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("s2", "WorkflowExecutionStarted", 0)))
			mustNoErr(t, p.CompleteWorkflowActivity(ctx, at.Token, gwEv("old-result", "ActivityCompleted", 0)))
			if powerLoss {
				mem.Crash()
				p = openT(t, "/d", opts)
			}
			task := gwFetchOf(t, p, "x")
			if task.Execution.ExecutionID != "e2" {
				t.Fatalf("task of execution %s, want e2", task.Execution.ExecutionID)
			}
			for _, ev := range task.NewEvents {
				if ev.ID == "old-result" {
					t.Fatalf("the new execution received the removed one's activity result: %+v", task.NewEvents)
				}
			}
			if len(task.NewEvents) != 1 || task.NewEvents[0].ID != "s2" {
				t.Fatalf("the new execution's first task holds %+v; want its start alone", task.NewEvents)
			}
		})
	}
}

// gwFinishedWithActivity creates workflow instance x (execution e1), whose
// first task schedules an activity and finishes the workflow without
// waiting for it, and fetches that activity's task, still running.
func gwFinishedWithActivity(t *testing.T, p *FSProvider) *WorkflowActivityTask {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"x", "e1"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("s1", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "x")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowFinished,
		Executed:   []WorkflowEvent{gwEv("s1", "WorkflowExecutionStarted", 1), gwEv("act", "ActivityScheduled", 2), gwEv("fin", "WorkflowExecutionFinished", 3)},
		Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: []byte(`{}`)}}}))
	at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if at == nil {
		t.Fatal("no activity task")
	}
	return at
}
