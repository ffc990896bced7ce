package provider

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestAckIOFaultChangesNothing injects an I/O error at each step of an ack
// before and at its commit point, in both commit modes. The ack must fail
// with a retryable error, leave no visible trace (history, queues, commit
// records, staged files), keep the lock (a fetch sees nothing), and succeed
// with the same token once the fault is gone. A failed barrier is fatal to
// the process (fs_barrier.go): the retry then needs a reopened provider.
func TestAckIOFaultChangesNothing(t *testing.T) {
	eio := syscall.EIO
	cases := []struct {
		mode CommitSync
		name string
		op   string
		nth  int
	}{
		{CommitPerFile, "stage write fails (ENOSPC)", "write", 1},
		{CommitPerFile, "stage fsync fails", "sync", 1},
		{CommitPerFile, "stage rename fails", "rename", 1},
		{CommitPerFile, "queue dir fsync after staging fails", "syncdir", 1},
		{CommitPerFile, "commit record write fails", "write", 2},
		{CommitPerFile, "commit record fsync fails", "sync", 2},
		{CommitPerFile, "commit record rename fails", "rename", 2},
		{CommitPerFile, "commits dir fsync fails (record already renamed)", "syncdir", 2},
		{CommitBarrier, "stage write fails (ENOSPC)", "write", 1},
		// Barrier mode writes staged files under their staged name (no
		// rename; fsqueue.StageDeferred): the first rename is the record's.
		{CommitBarrier, "commit record write fails", "write", 2},
		{CommitBarrier, "barrier fails", "syncfs", 1},
		// The previous turn's record is still there (barrier mode keeps it
		// for the cleaner): the new one is swapped in by an exchange
		// (fs_spares.go).
		{CommitBarrier, "commit record exchange fails", "exchange", 1},
		{CommitBarrier, "commits dir fsync fails (record already renamed)", "syncdir", 1},
	}
	for _, c := range cases {
		t.Run(c.mode.String()+"/"+c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewStrictMem()
			mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
			opts := Options{FS: mem, SweepInterval: -1, CommitSync: c.mode}
			p := openT(t, "/d", opts)
			createInstance(t, p, "io")
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "io", Name: "e", Data: "1"}, 0))
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			ev := started("io")
			ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
			out := []WorkItem{ExternalRaised{Instance: "other", Name: "x", Data: "y"}}
			ack := func(p *FSProvider) error {
				return p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, out, ExecutionMetadata{}, nil)
			}
			recordBefore, _ := mem.ReadFile("/d/commits/io.json") // barrier mode: the previous turn's, until cleaned
			var injected error = eio
			if c.op == "write" && c.nth == 1 {
				injected = syscall.ENOSPC
			}
			mem.InjectError(c.op, c.nth, injected)
			err = ack(p)
			mem.ClearFaults()
			if err == nil {
				t.Fatal("ack succeeded despite the injected fault")
			}
			if !IsRetryable(err) || !errors.Is(err, injected) {
				t.Errorf("ack error = %v; want a retryable error wrapping %v", err, injected)
			}
			if h, _ := p.Read(ctx, "io"); len(h) != 1 {
				t.Errorf("history has %d events after a failed ack, want 1", len(h))
			}
			names, _ := mem.ReadDirNames("/d/commits")
			recordAfter, _ := mem.ReadFile("/d/commits/io.json")
			// The previous record may go only once the barrier covered its
			// apply: when the fault hit after the barrier and our rename.
			replacedAfterBarrier := c.mode == CommitBarrier && c.op == "syncdir" && recordAfter == nil
			if len(names) > 1 || (string(recordAfter) != string(recordBefore) && !replacedAfterBarrier) {
				t.Errorf("commit records changed by a failed ack: %v", names)
			}
			if s, _ := p.orchQ.Staged(); len(s) != 0 {
				t.Errorf("staged messages left: %v", s)
			}
			if again, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || again != nil {
				t.Errorf("fetch after a failed ack = %+v, %v; want nothing (the lock stays)", again, err)
			}
			if c.op == "syncfs" {
				// The process is poisoned: every commit fails until reopened.
				if err := ack(p); !errors.Is(err, ErrSyncFailed) || !IsRetryable(err) {
					t.Errorf("ack after a failed barrier = %v; want a retryable ErrSyncFailed", err)
				}
				mustNoErr(t, p.Close())
				p = openT(t, "/d", opts)
			}
			// The fault cleared, the same token commits the turn exactly once.
			mustNoErr(t, ack(p))
			if h, _ := p.Read(ctx, "io"); len(h) != 2 {
				t.Errorf("history has %d events after the retried ack, want 2", len(h))
			}
			entries, _ := p.orchQ.List()
			if len(entries) != 1 || entries[0].Attrs[attrInstance] != "other" {
				t.Errorf("queue after the retried ack = %+v, want only the outbound message", entries)
			}
		})
	}
}

// TestWorkAckIOFaultChangesNothing injects an I/O error at each step of a
// work-item ack up to its commit point (the acked claim), in both commit
// modes. The ack must fail retryably, publish no completion, leave the item
// in place and still locked by its holder (another fetch gets nothing),
// leave nothing staged, and succeed with the same token once the fault is
// gone - after a reopen if a barrier failed (fs_barrier.go).
func TestWorkAckIOFaultChangesNothing(t *testing.T) {
	eio := syscall.EIO
	cases := []struct {
		mode CommitSync
		name string
		op   string
		nth  int
	}{
		{CommitPerFile, "stage write fails (ENOSPC)", "write", 1},
		{CommitPerFile, "stage fsync fails", "sync", 1},
		{CommitPerFile, "stage rename fails", "rename", 1},
		{CommitPerFile, "queue dir fsync after staging fails", "syncdir", 1},
		{CommitPerFile, "claim write fails", "write", 2},
		{CommitPerFile, "claim fsync fails", "sync", 2},
		{CommitPerFile, "claim rename fails", "rename", 2},
		{CommitPerFile, "claims dir fsync fails (claim already renamed)", "syncdir", 2},
		{CommitBarrier, "stage write fails (ENOSPC)", "write", 1},
		{CommitBarrier, "claim write fails", "write", 2},
		{CommitBarrier, "barrier fails", "syncfs", 1},
		{CommitBarrier, "claim rename fails", "rename", 1},
		{CommitBarrier, "claims dir fsync fails (claim already renamed)", "syncdir", 1},
	}
	for _, c := range cases {
		t.Run(c.mode.String()+"/"+c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewStrictMem()
			mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
			opts := Options{FS: mem, SweepInterval: -1, CommitSync: c.mode}
			p := openT(t, "/d", opts)
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 7, Name: "a", Input: "x"}))
			w, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags())
			if err != nil || w == nil {
				t.Fatal(w, err)
			}
			ack := func(p *FSProvider) error {
				return p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "wi", ExecutionID: 1, ID: 7, Result: "r"})
			}
			var injected error = eio
			if c.op == "write" && c.nth == 1 {
				injected = syscall.ENOSPC
			}
			mem.InjectError(c.op, c.nth, injected)
			err = ack(p)
			mem.ClearFaults()
			if err == nil {
				t.Fatal("work ack succeeded despite the injected fault")
			}
			if !IsRetryable(err) || !errors.Is(err, injected) {
				t.Errorf("work ack error = %v; want a retryable error wrapping %v", err, injected)
			}
			if entries, _ := p.orchQ.List(); len(entries) != 0 {
				t.Errorf("completion published by a failed work ack: %+v", entries)
			}
			if s, _ := p.orchQ.Staged(); len(s) != 0 {
				t.Errorf("staged completions left: %v", s)
			}
			if entries, _ := p.workQ.List(); len(entries) != 1 {
				t.Errorf("worker queue after a failed ack: %+v, want the item", entries)
			}
			if again, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags()); err != nil || again != nil {
				t.Errorf("fetch after a failed work ack = %+v, %v; want nothing (the lock stays)", again, err)
			}
			if c.op == "syncfs" {
				if err := ack(p); !errors.Is(err, ErrSyncFailed) || !IsRetryable(err) {
					t.Errorf("work ack after a failed barrier = %v; want a retryable ErrSyncFailed", err)
				}
				mustNoErr(t, p.Close())
				p = openT(t, "/d", opts)
			}
			mustNoErr(t, ack(p))
			entries, _ := p.orchQ.List()
			if len(entries) != 1 || entries[0].Attrs[attrInstance] != "wi" {
				t.Errorf("orchestrator queue after the retried ack = %+v, want the completion once", entries)
			}
			if entries, _ := p.workQ.List(); len(entries) != 0 {
				t.Errorf("worker queue after the retried ack: %+v, want empty", entries)
			}
		})
	}
}
