package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestOrphanMessagesListedAndDrained: messages for instances that were
// never started stay queued through fetches (their start may come) and are
// listed by OrphanMessages; DrainOrphanMessages deletes them - the given
// instances', old enough - in one log record, and keeps those of an
// instance whose start is queued meanwhile.
func TestOrphanMessagesListedAndDrained(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	clk := clock.NewManual(time.Now())
	p := openT(t, "/d", Options{fs: mem, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	createInstance(t, p, "a")
	for _, inst := range []string{"ghost", "ghost", "ghost2"} {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "x", Data: "1"}, 0))
	}
	// A completion ahead of its (delayed) start: not an orphan.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ActivityCompleted{Instance: "early", ExecutionID: 1, ID: 2, Result: "r"}, 0))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("early"), time.Hour))
	if it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
		t.Fatalf("fetch = %+v, %v; want nothing", it, err)
	}
	orphans := func() string {
		t.Helper()
		o, err := p.OrphanMessages(ctx)
		mustNoErr(t, err)
		var insts []string
		for _, m := range o {
			insts = append(insts, m.Instance+"/"+m.Kind)
		}
		return fmt.Sprint(insts)
	}
	if got := orphans(); got != "[ghost/ExternalRaised ghost/ExternalRaised ghost2/ExternalRaised]" {
		t.Fatalf("OrphanMessages = %s", got)
	}
	records := func() int {
		recs, _, _, err := p.scanLog()
		mustNoErr(t, err)
		return len(recs)
	}
	before := records()
	// Not old enough: nothing.
	if d, err := p.DrainOrphanMessages(ctx, nil, time.Hour); err != nil || len(d) != 0 || records() != before {
		t.Fatalf("drain of messages an hour old = %+v, %v (records %d -> %d); want nothing", d, err, before, records())
	}
	clk.Advance(2 * time.Hour)
	d, err := p.DrainOrphanMessages(ctx, []string{"ghost"}, time.Hour)
	if err != nil || len(d) != 2 || d[0].Instance != "ghost" {
		t.Fatalf("drain of ghost = %+v, %v; want its 2 messages", d, err)
	}
	if n := records(); n != before+1 {
		t.Errorf("the drain appended %d log records, want 1", n-before)
	}
	if got := orphans(); got != "[ghost2/ExternalRaised]" {
		t.Errorf("OrphanMessages after draining ghost = %s", got)
	}
	noPendingState(t, p, "ghost")
	// ghost2's start arrives: its messages are no longer orphans, and a
	// drain keeps them.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("ghost2"), time.Hour))
	if d, err := p.DrainOrphanMessages(ctx, nil, 0); err != nil || len(d) != 0 {
		t.Errorf("drain with ghost2's start queued = %+v, %v; want nothing", d, err)
	}
	if got := orphans(); got != "[]" {
		t.Errorf("OrphanMessages with ghost2's start queued = %s", got)
	}
	// Replayed from the log, the drain is the same.
	mustNoErr(t, p.Close())
	r := openT(t, "/d", Options{fs: mem.CrashClone(), Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	if o, err := r.OrphanMessages(ctx); err != nil || len(o) != 0 {
		t.Errorf("after a power loss: OrphanMessages = %+v, %v", o, err)
	}
	if e, err := queuedFor(r.orchQ, instanceKey("ghost")); err != nil || len(e) != 0 {
		t.Errorf("ghost's messages after a power loss: %+v, %v", e, err)
	}
}
