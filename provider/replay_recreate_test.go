package provider

import (
	"context"
	"testing"
	"time"
)

// TestReplayAfterDeleteAndRecreate is TestGWReplayAfterRemovalAndRecreation
// for an orchestration: a deleted instance id started again has an
// execution 1 again, and a power loss after all of it reached the disk but
// before a checkpoint passed the first instance's appends replays them
// against the new, shorter history. The replay must skip them (the
// deletion is replayed after them), not leave the instance stuck.
func TestReplayAfterDeleteAndRecreate(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)
	turn := func(m ExecutionMetadata, events ...Event) {
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, events, nil, nil, m, nil))
	}
	ext := func(id uint64) Event {
		ev := started("a")
		ev.EventID, ev.Kind = id, ExternalEvent{Name: "e", Data: "1"}
		return ev
	}
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "a", Orchestration: "o", ExecutionID: 1}, 0))
	turn(md("o", "1"), started("a"), ext(2))
	mustNoErr(t, p.checkpointOnce(ctx, true, true))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e", Data: "1"}, 0))
	st := "Completed"
	m := md("o", "1")
	m.Status = &st
	turn(m, ext(3))
	if _, err := p.DeleteInstance(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "a", Orchestration: "o", ExecutionID: 1}, 0))
	turn(md("o", "1"), started("a"))
	mem.MarkAllSynced()
	mem.Crash()
	p2, err := Open("/d", opts)
	mustNoErr(t, err)
	defer p2.Close()
	if sc, err := p2.StuckCommits(ctx); err != nil || len(sc) != 0 {
		t.Fatalf("after the replay: stuck commits %+v (%v)", sc, err)
	}
	if h, err := p2.Read(ctx, "a"); err != nil || len(h) != 1 {
		t.Fatalf("history of the new instance after the replay: %d events (%v), want 1", len(h), err)
	}
}
