package provider

import (
	"context"
	"slices"
	"testing"
	"time"
)

func gwEventIDs(task *WorkflowTask) []string {
	var ids []string
	for _, ev := range task.NewEvents {
		ids = append(ids, ev.ID)
	}
	return ids
}

// TestGWBatchOrderByVisibility: a workflow task's pending events come in
// the order they became visible (as go-workflows' SQLite and redis backends
// deliver them), not in enqueue order: a timer scheduled before a signal
// arrived but due after it comes after it, and before a signal sent after
// it was due; a timer due in the past became visible when it was enqueued.
// A batch fetched again after its lock expired keeps that order, with the
// events that arrived meanwhile placed by the same rule.
func TestGWBatchOrderByVisibility(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1})
	ref := WorkflowRef{"b", "e1"}
	mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: "default"}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "b")
	// Sent while the task runs: enqueued before the timers below.
	mustNoErr(t, p.SendWorkflowEvent(ctx, "b", "", gwEv("sig0", "SignalReceived", 0)))
	due := time.Now().Add(300 * time.Millisecond)
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State:    WorkflowActive,
		Executed: []WorkflowEvent{gwEv("start", "WorkflowExecutionStarted", 1)},
		Timers:   []WorkflowEvent{gwTimer("late", due, 2), gwTimer("past", time.Now().Add(-time.Hour), 3)},
	}))
	// The timer "past" is visible at once: wait for the task to go by.
	task = gwFetchOf(t, p, "b")
	if ids := gwEventIDs(task); !slices.Equal(ids, []string{"sig0", "past"}) {
		t.Fatalf("first batch %v, want [sig0 past]", ids)
	}
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State:    WorkflowActive,
		Executed: []WorkflowEvent{gwEv("sig0", "SignalReceived", 2), gwEv("past", "TimerFired", 3)},
	}))

	mustNoErr(t, p.SendWorkflowEvent(ctx, "b", "", gwEv("early", "SignalReceived", 0)))
	if time.Now().After(due) {
		t.Skip("the signal came after the timer was due (machine too slow)")
	}
	time.Sleep(time.Until(due) + 20*time.Millisecond)
	mustNoErr(t, p.SendWorkflowEvent(ctx, "b", "", gwEv("after", "SignalReceived", 0)))
	want := []string{"early", "late", "after"}
	task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", 100*time.Millisecond, 0)
	mustNoErr(t, err)
	if task == nil {
		t.Fatal("no task")
	}
	if ids := gwEventIDs(task); !slices.Equal(ids, want) {
		t.Fatalf("batch %v, want %v", ids, want)
	}

	// The lock expires uncompleted; the batch is fetched again with one
	// more event.
	mustNoErr(t, p.SendWorkflowEvent(ctx, "b", "", gwEv("more", "SignalReceived", 0)))
	time.Sleep(150 * time.Millisecond)
	task = gwFetchOf(t, p, "b")
	if want = append(want, "more"); !slices.Equal(gwEventIDs(task), want) {
		t.Fatalf("batch fetched again %v, want %v", gwEventIDs(task), want)
	}
}
