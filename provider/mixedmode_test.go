package provider

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/wal"
)

// openBothModes opens /d of a strict in-memory FS with a Durable provider,
// then tries a ProcessCrashSafe one beside it: nil if Open refused it with
// wal.ErrModeMismatch (any other error fails the test).
func openBothModes(t *testing.T) (*vfs.MemFS, Options, *FSProvider, *FSProvider) {
	t.Helper()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	mem.MarkAllSynced()
	opts := Options{fs: mem, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Owner: "durable"}
	d := openT(t, "/d", opts)
	popts := opts
	popts.Durability, popts.Owner = ProcessCrashSafe, "pcs"
	pcs, err := Open("/d", popts)
	if err != nil {
		if !errors.Is(err, wal.ErrModeMismatch) {
			t.Fatalf("Open in the other mode: %v, want wal.ErrModeMismatch (or the scenarios to hold)", err)
		}
		return mem, opts, d, nil
	}
	return mem, opts, d, pcs
}

// TestMixedDurabilityCheckpointKeepsDurableAck: a Durable process and a
// ProcessCrashSafe process open one directory (nothing refuses it). The
// Durable process acknowledges an ack - its record durable in the log, its
// files applied unsynced as the protocol says - and the other process's
// checkpoint, which fsyncs nothing (ProcessCrashSafe), advances the
// checkpoint past the record. A power loss then loses the acknowledged
// turn: the files were never synced and the record is below the checkpoint,
// so the replay does not bring it back. Either the second Open must be
// refused, or the Durable process's ack must survive.
func TestMixedDurabilityCheckpointKeepsDurableAck(t *testing.T) {
	ctx := context.Background()
	mem, opts, d, pcs := openBothModes(t)
	if pcs == nil {
		return // refused: what the scenario needs
	}

	mustNoErr(t, d.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "a", Orchestration: "o", ExecutionID: 1}, 0))
	it, err := d.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %v %v", it, err)
	}
	mustNoErr(t, d.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("a")}, nil, nil, md("o", "1"), nil))
	// The acknowledged turn is durable in the Durable process's sense.

	mustNoErr(t, pcs.Checkpoint(ctx)) // the ProcessCrashSafe process's background checkpoint
	if c, _ := pcs.wal.Checkpoint(); c == 0 {
		t.Fatal("the ProcessCrashSafe checkpoint did not move")
	}
	// The kernel writes the new checkpoint file and its directory entry
	// back on its own (an ext4 journal commit within seconds; the
	// ProcessCrashSafe process never syncs them, but nothing holds them
	// back either); the Durable process's applied files are not written
	// back yet.
	f, err := mem.OpenFile("/d/wal/checkpoint", os.O_RDONLY, 0)
	mustNoErr(t, err)
	mustNoErr(t, f.Sync())
	mustNoErr(t, f.Close())
	mustNoErr(t, mem.SyncDir("/d/wal"))

	mem.Crash() // power loss: both processes die
	p, err := Open("/d", opts)
	mustNoErr(t, err)
	defer p.Close()
	h, err := p.ReadHistory(ctx, "a")
	if err != nil || len(h) != 1 {
		t.Fatalf("after the power loss the Durable process's acknowledged turn is lost: history of a = %d events, err %v (want 1)", len(h), err)
	}
}

// TestMixedDurabilityGroupSyncCoversNothing: the same mix at the log's
// group commit. A ProcessCrashSafe process's "sync" is a no-op, but it
// publishes the shared synced mark like a real one; a Durable process whose
// frame lies below the mark then acknowledges it without any fdatasync, and
// a power loss loses it.
func TestMixedDurabilityGroupSyncCoversNothing(t *testing.T) {
	ctx := context.Background()
	mem, _, d, pcs := openBothModes(t)
	if pcs == nil {
		return // refused: what the scenario needs
	}
	defer pcs.Close()

	// The Durable process appends a frame; before it syncs, the other
	// process commits one of its own (append + its no-op group sync).
	_, dEnd, err := d.wal.Append([]byte(`{"id":"durable-frame"}`))
	mustNoErr(t, err)
	_, err = pcs.wal.Commit(ctx, []byte(`{"id":"pcs-frame"}`))
	mustNoErr(t, err)
	before := mem.SyncCount()
	mustNoErr(t, d.wal.Sync(ctx, dEnd)) // the Durable process's commit point
	if mem.SyncCount() == before {
		t.Errorf("the Durable process's commit point ran no fdatasync: the ProcessCrashSafe process's no-op sync covered its frame")
	}
	mem.Crash()
	found := false
	l, err := wal.OpenReadOnly(mem, "/d/wal", wal.Options{})
	mustNoErr(t, err)
	_, _ = l.ScanAll(0, func(_ wal.LSN, payload []byte) error {
		if string(payload) == `{"id":"durable-frame"}` {
			found = true
		}
		return nil
	})
	if !found {
		t.Errorf("after the power loss the Durable process's acknowledged frame is gone")
	}
}

// TestOpenRefusesTheOtherDurabilityMode: while a directory is open, a
// process in the other mode is refused (either way round); once the
// directory's processes are gone, the next opener sets the mode.
func TestOpenRefusesTheOtherDurabilityMode(t *testing.T) {
	for _, first := range []Durability{Durable, ProcessCrashSafe} {
		other := ProcessCrashSafe
		if first == ProcessCrashSafe {
			other = Durable
		}
		t.Run(first.String(), func(t *testing.T) {
			mem := vfs.NewStrictMem()
			mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
			opts := Options{fs: mem, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Durability: first}
			a := openT(t, "/d", opts)
			same := openT(t, "/d", opts)
			oopts := opts
			oopts.Durability = other
			if p, err := Open("/d", oopts); !errors.Is(err, wal.ErrModeMismatch) {
				if p != nil {
					p.Close()
				}
				t.Fatalf("Open(%v) while %v processes have the directory open: %v, want wal.ErrModeMismatch", other, first, err)
			}
			mustNoErr(t, a.Close())
			mustNoErr(t, same.Close())
			p, err := Open("/d", oopts)
			if err != nil {
				t.Fatalf("Open(%v) once the %v processes closed the directory: %v", other, first, err)
			}
			mustNoErr(t, p.Close())
		})
	}
}
