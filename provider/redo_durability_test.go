package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// plSegKillFS is plKillFS that, once armed, kills its process at the first
// sync of a log segment through a frame-writing handle (opened O_RDWR:
// the group sync of an append, never a segment's preparation or grow):
// the process dies between its append and the fdatasync that would have
// been its commit point, its frame in the page cache only.
type plSegKillFS struct {
	*plKillFS
	armed atomic.Bool
}

func (k *plSegKillFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := k.plKillFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if flag != os.O_RDWR || filepath.Base(filepath.Dir(name)) != "wal" || filepath.Base(name) == "group" {
		return f, nil
	}
	return &plSegKillFile{plKillFile: f.(*plKillFile), k: k}, nil
}

type plSegKillFile struct {
	*plKillFile
	k *plSegKillFS
}

func (f *plSegKillFile) Sync() error {
	if f.k.armed.Load() {
		f.k.killNow()
		return errPLKilled
	}
	return f.plKillFile.Sync()
}

// TestRedoMakesTheRecordDurableBeforeApplying: a process that finishes a
// dead writer's commit (redoPending) makes the writer's log frame durable
// before it applies it (fs_wal.go: "Applied effects must never precede
// durability: another process could consume what this apply publishes").
// A dies right after appending its ack (frame unsynced, alone in its
// segment); B's recovery applies it, publishing its work item; B fetches
// and acks the work item (its record in a later segment, whose sync does
// not cover A's frame). After a power loss, A's turn must be in the
// history: an ack that returned OK consumed what it published.
func TestRedoMakesTheRecordDurableBeforeApplying(t *testing.T) {
	ctx := context.Background()
	mem := plStrictMem(t)
	clk := clock.NewManual(plStart)
	b, err := Open(plDir, plOptions(mem, Durable, clk, "B")) // alone: records the boot
	mustNoErr(t, err)
	defer b.Close()
	ka := &plSegKillFS{plKillFS: (&plKillSwitch{}).newFS(mem, "A")}
	a, err := Open(plDir, plOptions(ka, Durable, clk, "A"))
	mustNoErr(t, err)

	// Payloads over half a segment (plSegSize): each record fills its own.
	big := strings.Repeat("x", plSegSize/2)
	mustNoErr(t, b.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "s", Orchestration: "Orch", Input: "{}", ExecutionID: 1}, 0))
	it, err := a.FetchOrchestrationItem(ctx, plLock, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("A's fetch: %v %v", it, err)
	}
	ts := uint64(plStart.UnixMilli())
	delta := []Event{
		{EventID: 1, InstanceID: "s", ExecutionID: 1, TimestampMs: ts, DuroxideVersion: "0.1.26", Kind: OrchestrationStarted{Name: "Orch", Version: "1.0.0", Input: "{}"}},
		{EventID: 2, InstanceID: "s", ExecutionID: 1, TimestampMs: ts, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "Act", Input: big}},
	}
	work := []WorkItem{ActivityExecute{Instance: "s", ExecutionID: 1, ID: 2, Name: "Act", Input: big}}
	ka.armed.Store(true)
	if err := a.AckOrchestrationItem(ctx, it.LockToken, 1, delta, work, nil, md("Orch", "1.0.0"), nil); err == nil {
		t.Fatal("A's ack returned OK: A was not killed at its log sync")
	}
	if !ka.dead.Load() {
		t.Fatalf("A was not killed at its log sync")
	}
	m := leaseMark(t, b, "s")
	if m == nil {
		t.Fatal("A's ack left no pending mark: it died before its append")
	}
	lr, err := b.findRecord(instanceKey("s"), m)
	if err != nil || lr == nil {
		t.Fatalf("A's record is not in the log (%v): it died before its append", err)
	}

	// B finishes A's commit, then consumes what it published.
	clk.Advance(2 * plLock)
	mustNoErr(t, b.Recover(ctx))
	wi, err := b.FetchWorkItem(ctx, plLock, 0, nil, DefaultOnlyTags())
	if err != nil || wi == nil {
		t.Fatalf("B's fetch of A's work item: %v %v", wi, err)
	}
	mustNoErr(t, b.AckWorkItem(ctx, wi.LockToken, ActivityCompleted{Instance: "s", ExecutionID: 1, ID: 2, Result: big}))
	if b.wal.End().Segment() <= lr.lsn.Segment() {
		t.Fatalf("B's work ack ends at %v, in the segment of A's record (%v): its sync would cover A's frame", b.wal.End(), lr.lsn)
	}

	// The power loss, with B still running (its Close would checkpoint).
	img := mem.CrashClone()
	clk.Advance(time.Hour)
	c, err := Open(plDir, plOptions(img, Durable, clk, "C"))
	mustNoErr(t, err)
	defer c.Close()
	hist, err := c.Read(ctx, "s")
	mustNoErr(t, err)
	if len(hist) < 2 {
		t.Fatalf("after the power loss the history of s has %d events, want A's turn (2): B's work ack, which returned OK, consumed the work item A's turn published; A's log frame was applied by B's redo without being made durable", len(hist))
	}
}
