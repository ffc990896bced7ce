package provider

import (
	"context"
	"testing"
	"time"
)

// TestDeletionRemovesCompletionOfAWorkAckCommittedBeforeIt: a work ack of
// an instance's activity commits (its record is in the log) and is applied
// a moment later (its completion published, its item deleted). A forced
// deletion of the instance that runs in between comes after the ack in the
// log, so - as in the reference, where the ack's transaction committed
// first - it must delete the completion with the instance's other
// orchestrator messages. Otherwise the completion survives the deletion
// and is delivered to the next instance of the same id (whose activity ids
// start over): the new instance receives the old incarnation's result
// (contract test 100's hazard).
func TestDeletionRemovesCompletionOfAWorkAckCommittedBeforeIt(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	ev := func(id uint64, kind EventKind) Event {
		return Event{EventID: id, InstanceID: "x", ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26", Kind: kind}
	}
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("x"), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch = %+v, %v", it, err)
	}
	act := ActivityExecute{Instance: "x", ExecutionID: 1, ID: 2, Name: "act", Input: "in"}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("x"), ev(2, ActivityScheduled{Name: "act", Input: "in"})},
		[]WorkItem{act}, nil, md("TestOrch", "1.0.0"), nil))
	w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatalf("fetch work = %+v, %v", w, err)
	}

	// The work ack stops right after its commit point.
	committed, resume := make(chan struct{}), make(chan struct{})
	testHookAfterCommitPoint = func(kind string) {
		if kind == "work_ack" {
			close(committed)
			<-resume
		}
	}
	t.Cleanup(func() { testHookAfterCommitPoint = nil })
	ackDone := make(chan error, 1)
	go func() {
		ackDone <- p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "stale-result"})
	}()
	<-committed

	// The deletion comes after the ack in the log.
	if _, err := p.DeleteInstance(ctx, "x", true); err != nil {
		close(resume)
		t.Fatalf("delete: %v", err)
	}
	close(resume)
	mustNoErr(t, <-ackDone)
	testHookAfterCommitPoint = nil
	mustNoErr(t, p.Recover(ctx)) // finishes whatever either left

	if _, err := p.GetInstanceInfo(ctx, "x"); err == nil {
		t.Fatal("x exists after its deletion")
	}
	// A new instance of the same id.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("x"), 0))
	var got *LockedOrchestrationItem
	for i := 0; i < 3 && got == nil; i++ {
		got, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		mustNoErr(t, err)
	}
	if got == nil {
		t.Fatal("the new x was not fetched")
	}
	for _, m := range got.Item.Messages {
		if ac, ok := m.(ActivityCompleted); ok {
			t.Errorf("the new instance x received the deleted instance's completion %+v", ac)
		}
	}
}
