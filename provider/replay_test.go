package provider

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestReplayAfterDeletionReachedDisk: a deletion whose removals reached the
// disk before a checkpoint covered the acks before it. The replay after the
// power loss meets a history shorter than an ack's base (the file is gone);
// it must skip that append - the deletion is replayed next - not fail.
func TestReplayAfterDeletionReachedDisk(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	mem.MarkAllSynced()
	clk := clock.NewManual(time.Now())
	opts := Options{fs: mem, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	p := openT(t, "/d", opts)
	turn := func(events ...Event) {
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, events, nil, nil, md("o", "1"), nil))
	}
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "a", Orchestration: "o", ExecutionID: 1}, 0))
	turn(started("a"))
	mustNoErr(t, p.checkpointOnce(ctx, true, true)) // the first ack is below the checkpoint
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e", Data: "1"}, 0))
	ev := started("a")
	ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
	st := "Completed"
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	mustNoErr(t, err)
	m := md("o", "1")
	m.Status = &st
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, m, nil))
	if _, err := p.DeleteInstance(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	mem.MarkAllSynced() // the deletion reached the disk; the checkpoint did not move
	mem.Crash()
	p2, err := Open("/d", opts)
	if err != nil {
		t.Fatalf("reopen after the power loss: %v", err)
	}
	defer p2.Close()
	if n := p2.RecoveryStats().RecordsReplayed; n < 2 {
		t.Errorf("replayed %d records, want the ack and the deletion", n)
	}
	if ids, _ := p2.ListInstances(ctx); len(ids) != 0 {
		t.Errorf("instances after the replay: %v, want none", ids)
	}
	mustNoErr(t, p2.checkpointOnce(ctx, true, true))
	if recs, _, _, err := p2.scanLog(); err != nil || len(recs) != 0 {
		t.Errorf("the checkpoint did not pass the replayed records: %d left, %v", len(recs), err)
	}
}

// killFSWithBoot is a plKillFS that reports its MemFS's boot id, as the
// provider reads it from a simulated machine.
type killFSWithBoot struct {
	*plKillFS
	mem *vfs.MemFS
}

func (k killFSWithBoot) BootID() (string, error) { return k.mem.BootID() }

// TestReplayCutShortIsRedone: after a power loss, the process that opens
// the directory alone replays the log; killed (kill -9) at any point of that
// replay, the next process to open it - in the same boot - must replay
// again, not take the unfinished replay for done. Every committed turn is
// there at the end, for every kill point.
func TestReplayCutShortIsRedone(t *testing.T) {
	ctx := context.Background()
	for at := 1; ; at++ {
		mem := vfs.NewStrictMem()
		mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
		mem.MarkAllSynced()
		clk := clock.NewManual(time.Now())
		opts := Options{fs: mem, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
		p, err := Open("/d", opts)
		mustNoErr(t, err)
		insts := []string{"a", "b", "c"}
		for _, id := range insts {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: id, Orchestration: "o", ExecutionID: 1}, 0))
		}
		for range insts {
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				t.Fatalf("fetch: %v %v", it, err)
			}
			mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(it.Item.Instance)}, nil, nil, md("o", "1"), nil))
		}
		mem.Crash() // power loss: the acks are in the log, their files are not

		sw := &plKillSwitch{at: at}
		kopts := opts
		kopts.fs = killFSWithBoot{sw.newFS(mem, "replayer"), mem}
		if p2, err := Open("/d", kopts); err == nil {
			// The replay finished before the at-th change: every kill
			// point was tried.
			_ = p2.Close()
			if !sw.fired() {
				if at == 1 {
					t.Fatal("the reopen after the power loss changed nothing: no replay to cut short")
				}
				return
			}
		}
		p3, err := Open("/d", opts) // same boot: the killed process's page cache stays
		if err != nil {
			t.Fatalf("kill at change %d of the replay: reopen: %v", at, err)
		}
		for _, id := range insts {
			h, err := p3.ReadHistory(ctx, id)
			if err != nil || len(h) != 1 {
				t.Errorf("kill at change %d of the replay: history of %s = %d events, %v; want the acked turn", at, id, len(h), err)
			}
		}
		_ = p3.Close()
		if t.Failed() {
			return
		}
	}
}
