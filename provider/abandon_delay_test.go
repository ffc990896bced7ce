package provider

import (
	"context"
	"testing"
	"time"
)

// TestAbandonDelayCoversTheInstance: abandon with a delay makes every
// message of the instance that is visible at that moment - the abandoned
// batch and messages that arrived while it was locked - invisible until
// now+delay (contract §2.6), and leaves a future timer's time alone.
func TestAbandonDelayCoversTheInstance(t *testing.T) {
	ctx := context.Background()
	p, _, clk := memProvider(t)
	createInstance(t, p, "ad")
	fetch := func() *LockedOrchestrationItem {
		t.Helper()
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		mustNoErr(t, err)
		return it
	}
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "ad", Name: "e1", Data: "1"}, 0))
	it := fetch()
	if it == nil || len(it.Item.Messages) != 1 {
		t.Fatalf("first fetch = %+v, want the batch of e1", it)
	}
	// Arrive while the instance is locked: one visible now, one timer due
	// after the delay has passed.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "ad", Name: "e2", Data: "2"}, 0))
	fireAt := uint64(clk.Now().Add(2 * time.Second).UnixMilli())
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, TimerFired{Instance: "ad", ExecutionID: 1, ID: 9, FireAtMs: fireAt}, 2*time.Second))

	mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 500*time.Millisecond, false))
	if again := fetch(); again != nil {
		t.Fatalf("fetch right after abandon(500ms) = %d message(s), want nothing: e2 arrived before the abandon and is delayed too", len(again.Item.Messages))
	}
	clk.Advance(600 * time.Millisecond)
	again := fetch()
	if again == nil || len(again.Item.Messages) != 2 {
		t.Fatalf("fetch after the delay = %+v, want e1 and e2 (not the timer, due later)", again)
	}
	mustNoErr(t, p.AbandonOrchestrationItem(ctx, again.LockToken, 0, false))
	clk.Advance(2 * time.Second)
	if last := fetch(); last == nil || len(last.Item.Messages) != 3 {
		t.Fatalf("fetch after the timer's time = %+v, want all three", last)
	}
}
