package provider

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestRedoFindsARecordBeyondAWriteInFlight: a committed record whose writer
// died before applying it is found and applied by the next holder of the
// instance's flock even while another process's record, reserved before it
// in the log, is still being written (that process is stopped inside its
// append). findRecord reads to the log's tail (wal.ScanAll); a scan bounded
// by the written-through point (wal.Scan, what checkpoints use) would stop
// before the dead writer's record, take its mark for one whose commit never
// happened, and lose the committed turn.
func TestRedoFindsARecordBeyondAWriteInFlight(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	mem.MarkAllSynced()
	clk := clock.NewManual(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	opts := func(f vfs.FS) Options {
		return Options{fs: f, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	}
	fa := &faultFS{MemFS: mem}
	a := openT(t, "/d", opts(fa))
	b := openT(t, "/d", opts(&faultFS{MemFS: mem}))
	fetch := func(p *FSProvider, inst string) string {
		t.Helper()
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil || it.Item.Instance != inst {
			t.Fatalf("fetch %s: %+v %v", inst, it, err)
		}
		return it.LockToken
	}
	ack := func(p *FSProvider, token, inst string) error {
		return p.AckOrchestrationItem(ctx, token, 1, []Event{started(inst)}, nil, nil, md("TestOrch", "1.0.0"), nil)
	}
	tx, ty := fetch(a, "x"), fetch(b, "y")

	// a reserves its record's place in the log and stops before writing it.
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the providers close (cleanups run last first)
	fa.arm("write", isSegment, func(*vfs.MemFS) { close(reached); <-release })
	aDone := make(chan error, 1)
	go func() { aDone <- ack(a, tx, "x") }()
	<-reached
	// b commits y's turn after it and dies before applying it.
	crashAfterCommit(t, "ack", func() { _ = ack(b, ty, "y") })

	// The next process takes y once b's lease ran out: it must finish b's
	// committed turn (which consumed y's start), not serve the start again.
	c := openT(t, "/d", opts(&faultFS{MemFS: mem}))
	clk.Advance(31 * time.Second)
	if it, err := c.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
		t.Fatalf("fetch after b's death = %+v, %v; want nothing (b's committed turn consumed y's start)", it, err)
	}
	if h, err := c.Read(ctx, "y"); err != nil || len(h) != 1 {
		t.Fatalf("history of y = %d events (%v), want b's committed turn", len(h), err)
	}
	let()
	mustNoErr(t, <-aDone)
	if h, err := c.Read(ctx, "x"); err != nil || len(h) != 1 {
		t.Fatalf("history of x = %d events (%v), want a's turn", len(h), err)
	}
}
