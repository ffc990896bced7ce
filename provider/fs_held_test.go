package provider

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// leaseTouchFS records the instance keys whose lock or lease file is read
// or locked through it.
type leaseTouchFS struct {
	vfs.FS
	mu      sync.Mutex
	touched map[string]int
}

func (f *leaseTouchFS) note(name string) {
	if b := filepath.Base(name); b != "lease.json" && b != "lock" {
		return
	}
	key := filepath.Base(filepath.Dir(name))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.touched[key]++
}

func (f *leaseTouchFS) reset() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.touched
	f.touched = map[string]int{}
	return t
}

func (f *leaseTouchFS) ReadFile(name string) ([]byte, error) {
	f.note(name)
	return f.FS.ReadFile(name)
}

func (f *leaseTouchFS) LockExisting(ctx context.Context, name string, wait bool) (vfs.Unlocker, bool, error) {
	f.note(name)
	return f.FS.LockExisting(ctx, name, wait)
}

func (f *leaseTouchFS) Lock(ctx context.Context, name string) (vfs.Unlocker, error) {
	f.note(name)
	return f.FS.Lock(ctx, name)
}

func (f *leaseTouchFS) TryLock(name string) (vfs.Unlocker, bool, error) {
	f.note(name)
	return f.FS.TryLock(name)
}

// TestFetchSkipsInstancesHeldHere: while this process's turn (or workflow
// task) on an instance is in flight, a fetch pass passes over the
// instance's messages - which stay visible until the ack - without taking
// its flock or reading its lease (fs_held.go); once the turn ends (here: it
// is abandoned, or completed) the instance is fetched again at once, and
// once its lease expires, fetched again by anyone.
func TestFetchSkipsInstancesHeldHere(t *testing.T) {
	ctx := context.Background()
	type kind struct {
		name string
		// start queues instance inst's first message; fetch fetches
		// the next item (its instance and a function ending its turn;
		// "" if none).
		start func(t *testing.T, p *FSProvider, inst string)
		fetch func(t *testing.T, p *FSProvider, lock time.Duration) (inst string, end func())
	}
	kinds := []kind{
		{
			name: "orchestration",
			start: func(t *testing.T, p *FSProvider, inst string) {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
			},
			fetch: func(t *testing.T, p *FSProvider, lock time.Duration) (string, func()) {
				it, err := p.FetchOrchestrationItem(ctx, lock, 0, nil)
				mustNoErr(t, err)
				if it == nil {
					return "", nil
				}
				return it.Item.Instance, func() { mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, false)) }
			},
		},
		{
			name: "workflow task",
			start: func(t *testing.T, p *FSProvider, inst string) {
				mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{inst, "e1"}, WorkflowStart{Queue: "default", Name: "W"},
					gwEv("start-"+inst, "WorkflowExecutionStarted", 0)))
			},
			fetch: func(t *testing.T, p *FSProvider, lock time.Duration) (string, func()) {
				task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", lock, 0)
				mustNoErr(t, err)
				if task == nil {
					return "", nil
				}
				return task.Execution.InstanceID, func() {
					mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive}))
				}
			},
		},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			clk := clock.NewManual(time.Unix(1_700_000_000, 0))
			fsys := &leaseTouchFS{FS: vfs.OS{}, touched: map[string]int{}}
			p := openT(t, t.TempDir(), Options{fs: fsys, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			k.start(t, p, "a")
			a, endA := k.fetch(t, p, time.Minute)
			if a != "a" {
				t.Fatalf("fetched %q, want a", a)
			}
			if k.name == "workflow task" {
				// A new event for a while its task runs.
				mustNoErr(t, p.SendWorkflowEvent(ctx, "a", "", gwEv("sig", "SignalReceived", 0)))
			}
			k.start(t, p, "b")
			fsys.reset()
			if b, _ := k.fetch(t, p, time.Minute); b != "b" {
				t.Fatalf("fetched %q, want b", b)
			}
			if n := fsys.reset()[instanceKey("a")]; n != 0 {
				t.Fatalf("the pass touched the lock or lease of the instance held here %d times, want 0", n)
			}
			// The turn ends: a is fetched again at once.
			endA()
			if a, _ := k.fetch(t, p, time.Minute); a != "a" {
				t.Fatalf("after its turn ended, fetched %q, want a", a)
			}
			// Its lease expires: fetched again.
			clk.Advance(2 * time.Minute)
			if a, _ := k.fetch(t, p, time.Minute); a == "" || !strings.Contains("ab", a) {
				t.Fatalf("after the leases expired, fetched %q, want a or b", a)
			}
		})
	}
}
