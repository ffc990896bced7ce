package provider

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// ioFault is one injected failure: the first future call of op fails with
// err (short >= 0: a short write of that many bytes, then err).
type ioFault struct {
	name  string
	op    string
	err   error
	short int
}

func (f ioFault) inject(mem *vfs.MemFS) {
	if f.short >= 0 {
		mem.InjectShortWrite(1, f.short, f.err)
		return
	}
	mem.InjectError(f.op, 1, f.err)
}

// writeFaults fail each step of an atomic file write: create, write (ENOSPC
// and a short write), fsync, rename or link, directory fsync.
func writeFaults(publish string) []ioFault {
	return []ioFault{
		{"create fails (ENOSPC)", "open", syscall.ENOSPC, -1},
		{"write fails (ENOSPC)", "write", syscall.ENOSPC, -1},
		{"short write (ENOSPC after 10 bytes)", "write", syscall.ENOSPC, 10},
		{"fsync fails (EIO)", "sync", syscall.EIO, -1},
		{publish + " fails (EIO)", publish, syscall.EIO, -1},
		{"directory fsync fails (EIO)", "syncdir", syscall.EIO, -1},
	}
}

// memProvider opens a provider on a fresh strict MemFS with a manual clock.
func memProvider(t *testing.T) (*FSProvider, *vfs.MemFS, *clock.Manual) {
	t.Helper()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	clk := clock.NewManual(time.Now())
	return openT(t, "/d", Options{fs: mem, Clock: clk, SweepInterval: -1, CheckpointInterval: -1}), mem, clk
}

// wantFault checks that err is a retryable error caused by the fault.
func wantFault(t *testing.T, what string, err error, f ioFault) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded despite the fault", what)
	}
	if !IsRetryable(err) || !errors.Is(err, f.err) {
		t.Fatalf("%s: %v, want a retryable error wrapping %v", what, err, f.err)
	}
}

// noTemps fails if a temporary file of a failed write was left in dir.
func noTemps(t *testing.T, mem *vfs.MemFS, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		names, _ := mem.ReadDirNames(d)
		for _, n := range names {
			if vfs.IsTemp(n) {
				t.Errorf("temporary file left in %s: %s", d, n)
			}
		}
	}
}

// TestEnqueueIOFault: an I/O fault at any step of an enqueue fails it with
// a retryable error and leaves no message (not even after a failed
// directory fsync, when the message had been published: it is taken back)
// and no temporary file; the enqueue succeeds once the fault is gone.
func TestEnqueueIOFault(t *testing.T) {
	ctx := context.Background()
	sites := []struct {
		name    string
		enqueue func(p *FSProvider) error
		queue   func(p *FSProvider) string
	}{
		{"orchestrator", func(p *FSProvider) error {
			return p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "i", Name: "e", Data: "d"}, 0)
		}, func(p *FSProvider) string { return p.orchQ.Dir() }},
		{"worker", func(p *FSProvider) error {
			return p.EnqueueForWorker(ctx, ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "a"})
		}, func(p *FSProvider) string { return p.workQ.Dir() }},
	}
	for _, s := range sites {
		for _, f := range writeFaults("link") {
			t.Run(s.name+"/"+f.name, func(t *testing.T) {
				p, mem, _ := memProvider(t)
				f.inject(mem)
				err := s.enqueue(p)
				mem.ClearFaults()
				wantFault(t, "enqueue", err, f)
				names, _ := mem.ReadDirNames(s.queue(p))
				for _, n := range names {
					if strings.HasSuffix(n, ".json") && n != "fsqueue.json" {
						t.Errorf("message file left after a failed enqueue: %s", n)
					}
				}
				noTemps(t, mem, s.queue(p), "/d/tmp")
				q := p.orchQ
				if s.name == "worker" {
					q = p.workQ
				}
				if entries, _ := q.List(); len(entries) != 0 {
					t.Fatalf("queue lists %d messages after a failed enqueue", len(entries))
				}
				mustNoErr(t, s.enqueue(p))
				if entries, _ := q.List(); len(entries) != 1 {
					t.Fatalf("queue lists %d messages after the retry, want 1", len(entries))
				}
			})
		}
	}
}

// leaseFaults fail the steps of an instance lease write. Lease files are
// never fsynced (leases are not durable state), so there is no fsync step
// to fail, and an existing lease is overwritten in place (lease package,
// "Writing in place"), so there is no rename: the short write checks that
// the old content is written back (else the lease would be unparseable and
// its holder's renew or abandon refused). The rename of a new lease file is
// covered by the lease package's TestInPlaceWrites.
var leaseFaults = []ioFault{
	{"open fails (EIO)", "open", syscall.EIO, -1},
	{"write fails (ENOSPC)", "write", syscall.ENOSPC, -1},
	{"short write (ENOSPC after 10 bytes)", "write", syscall.ENOSPC, 10},
}

// TestInstanceLeaseIOFault: an I/O fault while fetch, renew or abandon
// writes the instance lease fails the call with a retryable error and leaves
// the lease as it was: a failed fetch locks nothing (the next fetch gets the
// turn, attempt 1), a failed renew or abandon leaves the holder's lock in
// place (nobody else can fetch; the same call succeeds once the fault is
// gone).
func TestInstanceLeaseIOFault(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*FSProvider, *vfs.MemFS) {
		p, mem, _ := memProvider(t)
		createInstance(t, p, "lf")
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "lf", Name: "e", Data: "1"}, 0))
		return p, mem
	}
	fetch := func(p *FSProvider) (*LockedOrchestrationItem, error) {
		return p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	}
	for _, f := range leaseFaults {
		t.Run("fetch/"+f.name, func(t *testing.T) {
			p, mem := setup(t)
			f.inject(mem)
			it, err := fetch(p)
			mem.ClearFaults()
			if it != nil {
				t.Fatalf("fetch returned %+v despite the fault", it.Item)
			}
			wantFault(t, "fetch", err, f)
			noTemps(t, mem, "/d/tmp", p.instDir(instanceKey("lf")))
			it, err = fetch(p)
			if err != nil || it == nil || it.AttemptCount != 1 {
				t.Fatalf("fetch after the fault = %+v, %v; want the turn at attempt 1", it, err)
			}
		})
		t.Run("renew/"+f.name, func(t *testing.T) {
			p, mem := setup(t)
			it, err := fetch(p)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			f.inject(mem)
			err = p.RenewOrchestrationItemLock(ctx, it.LockToken, time.Minute)
			mem.ClearFaults()
			wantFault(t, "renew", err, f)
			if again, err := fetch(p); err != nil || again != nil {
				t.Fatalf("fetch after a failed renew = %+v, %v; want nothing (still locked)", again, err)
			}
			mustNoErr(t, p.RenewOrchestrationItemLock(ctx, it.LockToken, time.Minute))
			ev := started("lf")
			ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
			mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil))
		})
		t.Run("abandon/"+f.name, func(t *testing.T) {
			p, mem := setup(t)
			it, err := fetch(p)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			f.inject(mem)
			err = p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true)
			mem.ClearFaults()
			wantFault(t, "abandon", err, f)
			if again, err := fetch(p); err != nil || again != nil {
				t.Fatalf("fetch after a failed abandon = %+v, %v; want nothing (still locked)", again, err)
			}
			mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))
			again, err := fetch(p)
			if err != nil || again == nil || again.AttemptCount != 1 {
				t.Fatalf("fetch after the abandon = %+v, %v; want the turn at attempt 1 (ignore_attempt)", again, err)
			}
		})
	}
}

// TestWorkClaimIOFault: the same for a work item's claim. Claims are
// volatile like leases (no fsync at all). A fetch creates the claim (create,
// write and rename faults apply); renew and abandon overwrite it in place
// (open, write and short-write faults, and a failed touch of claims/ after
// the write: fsqueue, "Claims written in place"). Every fault changes
// nothing: the call fails retryably and the next one succeeds.
func TestWorkClaimIOFault(t *testing.T) {
	ctx := context.Background()
	const lock = time.Minute
	fetch := func(p *FSProvider) (*LockedWorkItem, error) {
		return p.FetchWorkItem(ctx, lock, 0, nil, TagFilter{})
	}
	workClaimIOFaults(t, fetch)
}

func workClaimIOFaults(t *testing.T, fetch func(p *FSProvider) (*LockedWorkItem, error)) {
	ctx := context.Background()
	const lock = time.Minute
	setup := func(t *testing.T) (*FSProvider, *vfs.MemFS, *clock.Manual) {
		p, mem, clk := memProvider(t)
		mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wf", ExecutionID: 1, ID: 1, Name: "a"}))
		return p, mem, clk
	}
	for _, f := range writeFaults("rename") {
		if f.op == "sync" || f.op == "syncdir" {
			continue // volatile claims are never synced
		}
		t.Run("fetch/"+f.name, func(t *testing.T) {
			p, mem, _ := setup(t)
			f.inject(mem)
			it, err := fetch(p)
			mem.ClearFaults()
			if it != nil {
				t.Fatalf("fetch returned an item despite the fault")
			}
			wantFault(t, "fetch", err, f)
			noTemps(t, mem, p.workQ.Dir(), p.workQ.Dir()+"/claims")
			it, err = fetch(p)
			if err != nil || it == nil {
				t.Fatalf("fetch after the fault = %+v, %v; want the item", it, err)
			}
			mustNoErr(t, p.AckWorkItem(ctx, it.LockToken, nil))
		})
	}
	inPlace := append(slices.Clone(leaseFaults), ioFault{"touch of claims/ fails (EIO)", "touch", syscall.EIO, -1})
	for _, replace := range inPlace {
		t.Run("renew/"+replace.name, func(t *testing.T) {
			p, mem, _ := setup(t)
			it, err := fetch(p)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			replace.inject(mem)
			err = p.RenewWorkItemLock(ctx, it.LockToken, lock)
			mem.ClearFaults()
			wantFault(t, "renew", err, replace)
			if again, err := fetch(p); err != nil || again != nil {
				t.Fatalf("fetch after a failed renew = %+v, %v; want nothing (still locked)", again, err)
			}
			mustNoErr(t, p.RenewWorkItemLock(ctx, it.LockToken, lock))
			mustNoErr(t, p.AckWorkItem(ctx, it.LockToken, nil))
		})
		t.Run("abandon/"+replace.name, func(t *testing.T) {
			p, mem, _ := setup(t)
			it, err := fetch(p)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			replace.inject(mem)
			err = p.AbandonWorkItem(ctx, it.LockToken, 0, true)
			mem.ClearFaults()
			wantFault(t, "abandon", err, replace)
			if again, err := fetch(p); err != nil || again != nil {
				t.Fatalf("fetch after a failed abandon = %+v, %v; want nothing (still locked)", again, err)
			}
			mustNoErr(t, p.AbandonWorkItem(ctx, it.LockToken, 0, true))
			again, err := fetch(p)
			if err != nil || again == nil || again.AttemptCount != 1 {
				t.Fatalf("fetch after the abandon = %+v, %v; want the item at attempt 1", again, err)
			}
		})
	}
}
