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
// before and at its commit point. The ack must fail with a retryable error,
// leave no visible trace (history, queues, commit records, staged files),
// keep the lock (a fetch sees nothing), and succeed with the same token once
// the fault is gone.
func TestAckIOFaultChangesNothing(t *testing.T) {
	eio := syscall.EIO
	cases := []struct {
		name string
		op   string
		nth  int
	}{
		{"stage write fails (ENOSPC)", "write", 1},
		{"stage fsync fails", "sync", 1},
		{"stage rename fails", "rename", 1},
		{"queue dir fsync after staging fails", "syncdir", 1},
		{"commit record write fails", "write", 2},
		{"commit record fsync fails", "sync", 2},
		{"commit record rename fails", "rename", 2},
		{"commits dir fsync fails (record already renamed)", "syncdir", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewStrictMem()
			mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
			p := openT(t, "/d", Options{FS: mem, SweepInterval: -1})
			createInstance(t, p, "io")
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "io", Name: "e", Data: "1"}, 0))
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			ev := started("io")
			ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
			out := []WorkItem{ExternalRaised{Instance: "other", Name: "x", Data: "y"}}
			ack := func() error {
				return p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, out, ExecutionMetadata{}, nil)
			}
			var injected error = eio
			if c.op == "write" && c.nth == 1 {
				injected = syscall.ENOSPC
			}
			mem.InjectError(c.op, c.nth, injected)
			err = ack()
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
			if names, _ := mem.ReadDirNames("/d/commits"); len(names) != 0 {
				t.Errorf("commit records left: %v", names)
			}
			if s, _ := p.orchQ.Staged(); len(s) != 0 {
				t.Errorf("staged messages left: %v", s)
			}
			if again, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || again != nil {
				t.Errorf("fetch after a failed ack = %+v, %v; want nothing (the lock stays)", again, err)
			}
			// The fault cleared, the same token commits the turn exactly once.
			mustNoErr(t, ack())
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
