package provider

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

func openT(t testing.TB, dir string, opts Options) *FSProvider {
	t.Helper()
	p, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func mustNoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func started(inst string) Event {
	return Event{EventID: 1, InstanceID: inst, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
		Kind: OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"}}
}

func md(name, version string) ExecutionMetadata {
	return ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version}
}

// logCommit commits rec for its instance (marks the lease, appends to the
// log, syncs) and does not apply it: the state a writer killed right after
// its commit point leaves.
func logCommit(t *testing.T, p *FSProvider, rec *commitRecord) {
	t.Helper()
	g, err := p.leases.Lock(context.Background(), p.lockPath(rec.Key), p.leasePath(rec.Key))
	mustNoErr(t, err)
	defer g.Unlock()
	mustNoErr(t, p.commitLocked(context.Background(), []*lease.Guard{g}, rec))
}

// pendingCommits lists the logged records a lease or claim still marks
// pending (committed, not fully applied).
func pendingCommits(t *testing.T, p *FSProvider) []PendingCommitInfo {
	t.Helper()
	pcs, err := p.PendingCommits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pcs
}

// leaseMark returns the pending mark in an instance's lease (nil: none).
func leaseMark(t *testing.T, p *FSProvider, inst string) *pendingMark {
	t.Helper()
	key := instanceKey(inst)
	cur, _, err := p.leases.Inspect(context.Background(), p.lockPath(key), p.leasePath(key))
	if errors.Is(err, lease.ErrCorrupt) {
		return nil // leases are volatile: unreadable (after a power loss) is free, with no mark
	}
	if err != nil {
		t.Fatalf("read the lease of %s: %v", inst, err)
	}
	return decodeOrchState(cur).Pending
}

// noPendingState fails if a commit is left in flight: a mark in one of the
// instances' leases, a logged record still marked pending, or a staged file.
func noPendingState(t *testing.T, p *FSProvider, insts ...string) {
	t.Helper()
	for _, inst := range insts {
		if m := leaseMark(t, p, inst); m != nil {
			t.Errorf("the lease of %s still marks commit %+v pending", inst, m)
		}
		if marked, err := p.deletionMarked(instanceKey(inst)); marked || err != nil {
			t.Errorf("%s has a deletion marker (%v)", inst, err)
		}
	}
	if pcs := pendingCommits(t, p); len(pcs) != 0 {
		t.Errorf("pending commits: %+v", pcs)
	}
	for _, q := range []*fsqueue.Queue{p.orchQ, p.workQ} {
		if s, err := q.Staged(); err != nil || len(s) != 0 {
			t.Errorf("staged files in %s: %v, %v", q.Dir(), s, err)
		}
	}
}

// strictMemT opens a provider on /d of a strict in-memory file system
// (power loss: mem.Crash), with the background sweep and checkpoint off;
// opts reopens it.
func strictMemT(t *testing.T) (*vfs.MemFS, Options, *FSProvider) {
	t.Helper()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	mem.MarkAllSynced()
	opts := Options{fs: mem, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	return mem, opts, openT(t, "/d", opts)
}
