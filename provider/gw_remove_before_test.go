package provider

import (
	"context"
	"testing"
	"time"
)

// TestGWRemoveWorkflowsFarTimes: RemoveWorkflows compares completion times
// as times, so a before outside the years 1678-2262 (where UnixNano is
// undefined) means what it says: one far in the future removes every
// finished execution, one far in the past (or the zero time) none.
func TestGWRemoveWorkflowsFarTimes(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1})
	ref := WorkflowRef{"r", "e1"}
	mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: "default"}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "r")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State:    WorkflowFinished,
		Executed: []WorkflowEvent{gwEv("start", "WorkflowExecutionStarted", 1), gwEv("fin", "WorkflowExecutionFinished", 2)},
	}))
	for _, before := range []time.Time{{}, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1600, 6, 1, 0, 0, 0, 0, time.UTC)} {
		n, err := p.RemoveWorkflows(ctx, before, 0)
		mustNoErr(t, err)
		if n != 0 {
			t.Fatalf("RemoveWorkflows(%v) removed %d", before, n)
		}
	}
	n, err := p.RemoveWorkflows(ctx, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	mustNoErr(t, err)
	if n != 1 {
		t.Fatalf("RemoveWorkflows(3000) removed %d, want 1", n)
	}
	if _, err := p.WorkflowExecutionInfo(ctx, ref); err != ErrWorkflowNotFound {
		t.Fatalf("after the removal: %v", err)
	}
}
