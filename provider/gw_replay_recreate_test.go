package provider

import (
	"context"
	"testing"
)

// TestGWReplayAfterRemovalAndRecreation: an instance id whose last
// execution was removed (its directory reclaimed) and that was created
// again numbers its new execution 1 again, so executions/1/history.jsonl
// is the new execution's. A power loss after all of it reached the disk
// but before a checkpoint passed the first incarnation's appends replays
// them against the new, shorter history: a replay must skip an append to
// a history a later record of the log removes (as it does for a history
// that is gone), not leave the instance stuck - every later commit of the
// instance (its removal, the re-creation, the new execution's task) queued
// behind one that can never be applied.
func TestGWReplayAfterRemovalAndRecreation(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)
	start := WorkflowStart{Queue: "default", Name: "W"}

	// The first incarnation of x: three events (checkpointed), then two
	// more and finished; then removed.
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"x", "e1"}, start, gwEv("s1", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "x")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
		Executed: []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("s1", "WorkflowExecutionStarted", 2), gwEv("tf1", "WorkflowTaskFinished", 3)}}))
	mustNoErr(t, p.checkpointOnce(ctx, true, true))
	mustNoErr(t, p.SendWorkflowEvent(ctx, "x", "", gwEv("sig", "SignalReceived", 0)))
	task = gwFetchOf(t, p, "x")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowFinished,
		Executed: []WorkflowEvent{gwEv("sig", "SignalReceived", 4), gwEv("fin", "WorkflowExecutionFinished", 5)}}))
	mustNoErr(t, p.RemoveWorkflow(ctx, WorkflowRef{"x", "e1"}))

	// The second: the same instance id, a new execution (number 1 again),
	// one event.
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"x", "e2"}, start, gwEv("s2", "WorkflowExecutionStarted", 0)))
	task = gwFetchOf(t, p, "x")
	if task.Execution.Number != 1 {
		t.Logf("the new execution is number %d", task.Execution.Number)
	}
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
		Executed: []WorkflowEvent{gwEv("s2", "WorkflowExecutionStarted", 1)}}))

	mem.MarkAllSynced() // every applied file reached the disk; the checkpoint did not move
	mem.Crash()
	p2, err := Open("/d", opts)
	if err != nil {
		t.Fatalf("reopen after the power loss: %v", err)
	}
	defer p2.Close()
	if sc, err := p2.StuckCommits(ctx); err != nil || len(sc) != 0 {
		t.Fatalf("after the replay: stuck commits %+v (%v)", sc, err)
	}
	if _, err := p2.WorkflowExecutionInfo(ctx, WorkflowRef{"x", "e1"}); err != ErrWorkflowNotFound {
		t.Fatalf("the removed execution: %v, want not found", err)
	}
	x, err := p2.WorkflowExecutionInfo(ctx, WorkflowRef{"x", "e2"})
	mustNoErr(t, err)
	if x.State != WorkflowActive || x.Events != 1 || x.LastSequenceID != 1 {
		t.Fatalf("the new execution after the replay: %+v", x)
	}
	mustNoErr(t, p2.SendWorkflowEvent(ctx, "x", "", gwEv("sig2", "SignalReceived", 0)))
	task = gwFetchOf(t, p2, "x")
	mustNoErr(t, p2.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
		Executed: []WorkflowEvent{gwEv("sig2", "SignalReceived", 2)}}))
	h, err := p2.WorkflowHistory(ctx, WorkflowRef{"x", "e2"}, nil)
	mustNoErr(t, err)
	if len(h) != 2 || h[0].ID != "s2" || h[1].ID != "sig2" {
		t.Fatalf("history of the new execution: %+v", h)
	}
}
