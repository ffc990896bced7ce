package provider

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

// TestQueueDepthsDoNotWaitForAStoppedClaimHolder: GetQueueDepths reads
// every claim under its item's lock; one held by a stopped process must not
// hold the call up (it counts the item as claimed). On main it waited with
// the caller's context.
func TestQueueDepthsDoNotWaitForAStoppedClaimHolder(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}))
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 3, Name: "act", Input: "y"}))
	it, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
	if err != nil || it == nil {
		t.Fatalf("fetch = %+v, %v", it, err)
	}
	ct, _ := parseWorkToken(it.LockToken)
	item, _ := fsqueue.NameFromToken(ct)
	release := holdClaim(t, p.workQ, item)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d QueueDepths
	mustNoErr(t, notStalled(t, "GetQueueDepths", release, func() (err error) {
		d, err = p.GetQueueDepths(cctx)
		return err
	}))
	if cctx.Err() != nil {
		t.Fatal("GetQueueDepths returned only when its context ended: it waited for the stopped holder of a claim lock")
	}
	if d.WorkerQueue != 1 {
		t.Errorf("WorkerQueue = %d, want 1 (the claimed item is not counted)", d.WorkerQueue)
	}
}
