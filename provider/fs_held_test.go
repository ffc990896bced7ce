package provider

import (
	"context"
	"fmt"
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

// TestPeerSet: the rules of peerSet on their own - an entry applies while
// the instance's oldest visible message is the one it was noted with, the
// lease's expiry has not passed and peerLookEvery has not passed since it
// was noted; one that no longer applies is dropped.
func TestPeerSet(t *testing.T) {
	const now = int64(1_000_000)
	look := peerLookEvery.Milliseconds()
	tests := []struct {
		name            string
		sticky          string // the worker the instance is sticky to ("": held)
		until           int64  // the lease's expiry as read
		queue, oldest   string
		worker          string // the asking worker
		at              int64  // when the pass asks
		want, wantAfter bool   // skip, and skip when asked again at the same time
	}{
		{"same message, lease held", "", now + 60_000, "q", "m1", "w", now + 1, true, true},
		{"a new oldest message", "", now + 60_000, "q", "m2", "w", now + 1, false, false},
		{"another queue", "", now + 60_000, "r", "m1", "w", now + 1, false, false},
		{"the lease's expiry passed", "", now + 10, "q", "m1", "w", now + 10, false, false},
		{"peerLookEvery passed", "", now + 60_000, "q", "m1", "w", now + look, false, false},
		{"just before peerLookEvery", "", now + 60_000, "q", "m1", "w", now + look - 1, true, true},
		{"sticky to another worker", "v", now + 60_000, "q", "m1", "w", now + 1, true, true},
		{"sticky to the asking worker", "w", now + 60_000, "q", "m1", "w", now + 1, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s peerSet
			s.note("k", "q", "m1", tc.sticky, tc.until, now)
			if got := s.skip("k", tc.queue, tc.oldest, tc.worker, tc.at); got != tc.want {
				t.Fatalf("skip = %v, want %v", got, tc.want)
			}
			// A miss drops the entry: asked again with what was noted, it
			// no longer skips (the sticky worker itself never skips).
			if got := s.skip("k", "q", "m1", tc.worker, tc.at); got != tc.wantAfter {
				t.Fatalf("skip again = %v, want %v", got, tc.wantAfter)
			}
		})
	}
	t.Run("expired or empty notes are not kept", func(t *testing.T) {
		var s peerSet
		s.note("k", "q", "m1", "", now, now)
		s.note("l", "q", "", "", now+60_000, now)
		if s.skip("k", "q", "m1", "", now) || s.skip("l", "q", "", "", now) || len(s.m) != 0 {
			t.Fatalf("kept %v", s.m)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		var s peerSet
		for i := range peerSetMax + 10 {
			s.note(fmt.Sprint(i), "q", "m", "", now+60_000, now)
		}
		if len(s.m) != peerSetMax {
			t.Fatalf("%d entries, want %d", len(s.m), peerSetMax)
		}
		// Once they expire, they make room.
		s.note("new", "q", "m", "", now+60_000+look, now+60_000)
		if !s.skip("new", "q", "m", "", now+60_001) || len(s.m) != 1 {
			t.Fatalf("after expiry: %d entries, new skipped %v", len(s.m), s.skip("new", "q", "m", "", now+60_001))
		}
	})
}

// TestFetchSkipsInstancesHeldElsewhere: process B's fetch passes over an
// instance whose turn (or workflow task) process A holds: the first pass
// reads its lease, the next ones do not touch its flock or lease
// (peerSet) - until peerLookEvery passes, when a pass looks again; and once
// A's ack consumes the message B saw first, B fetches the instance's next
// message at once, without waiting for that.
func TestFetchSkipsInstancesHeldElsewhere(t *testing.T) {
	ctx := context.Background()
	type kind struct {
		name string
		// start queues instance a's first message; fetch fetches the next
		// item (its instance, "" if none) and returns an ack of its turn
		// that consumes what it fetched; another queues a's next message.
		start, another func(t *testing.T, p *FSProvider)
		fetch          func(t *testing.T, p *FSProvider) (inst string, ack func())
	}
	kinds := []kind{
		{
			name:  "orchestration",
			start: func(t *testing.T, p *FSProvider) { mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0)) },
			another: func(t *testing.T, p *FSProvider) {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "x", Data: "y"}, 0))
			},
			fetch: func(t *testing.T, p *FSProvider) (string, func()) {
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				mustNoErr(t, err)
				if it == nil {
					return "", nil
				}
				return it.Item.Instance, func() {
					mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("a")}, nil, nil, ExecutionMetadata{}, nil))
				}
			},
		},
		{
			name: "workflow task",
			start: func(t *testing.T, p *FSProvider) {
				mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"a", "e1"}, WorkflowStart{Queue: "default", Name: "W"},
					gwEv("start-a", "WorkflowExecutionStarted", 0)))
			},
			another: func(t *testing.T, p *FSProvider) {
				mustNoErr(t, p.SendWorkflowEvent(ctx, "a", "", gwEv("sig", "SignalReceived", 0)))
			},
			fetch: func(t *testing.T, p *FSProvider) (string, func()) {
				task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", time.Minute, 0)
				mustNoErr(t, err)
				if task == nil {
					return "", nil
				}
				return task.Execution.InstanceID, func() {
					mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive, Executed: task.NewEvents}))
				}
			},
		},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewManual(time.Unix(1_700_000_000, 0))
			fsys := &leaseTouchFS{FS: vfs.OS{}, touched: map[string]int{}}
			a := openT(t, dir, Options{Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Owner: "A"})
			b := openT(t, dir, Options{fs: fsys, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Owner: "B"})
			k.start(t, a)
			inst, ack := k.fetch(t, a)
			if inst != "a" {
				t.Fatalf("A fetched %q, want a", inst)
			}
			k.another(t, a) // a's next message, behind the one A's turn holds
			key := instanceKey("a")
			passes := []struct {
				advance time.Duration
				looks   bool
			}{
				{0, true},  // the first pass reads a's lease
				{0, false}, // the next ones skip it
				{peerLookEvery - time.Millisecond, false},
				{time.Millisecond, true}, // peerLookEvery after the read: a look
				{0, false},
			}
			for i, ps := range passes {
				clk.Advance(ps.advance)
				fsys.reset()
				if got, _ := k.fetch(t, b); got != "" {
					t.Fatalf("pass %d: B fetched %q while A holds a", i, got)
				}
				if n := fsys.reset()[key]; (n > 0) != ps.looks {
					t.Fatalf("pass %d: B touched a's lock or lease %d times, want a look: %v", i, n, ps.looks)
				}
			}
			// A's ack consumes the message B saw first: B's next pass looks
			// at once and fetches a's next message.
			ack()
			if got, _ := k.fetch(t, b); got != "a" {
				t.Fatalf("after A's ack, B fetched %q, want a", got)
			}
		})
	}
}

// TestStickyInstanceNotSkippedForItsWorker: a pass for another worker finds
// the instance sticky to worker w and notes it (peerSet); a pass for w, in
// the same process, still fetches it at once.
func TestStickyInstanceNotSkippedForItsWorker(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	p := openT(t, t.TempDir(), Options{Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"a", "e1"}, WorkflowStart{Queue: "default", Name: "W"},
		gwEv("start-a", "WorkflowExecutionStarted", 0)))
	task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", time.Minute, 0)
	if err != nil || task == nil {
		t.Fatal(task, err)
	}
	mustNoErr(t, p.SendWorkflowEvent(ctx, "a", "", gwEv("sig", "SignalReceived", 0)))
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive, Executed: task.NewEvents,
		Worker: "w", Sticky: time.Minute}))
	if other, err := p.FetchWorkflowTask(ctx, []string{"default"}, "v", time.Minute, 0); err != nil || other != nil {
		t.Fatalf("worker v fetched %+v, %v; want nothing (a is sticky to w)", other, err)
	}
	if got, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", time.Minute, 0); err != nil || got == nil || got.Execution.InstanceID != "a" {
		t.Fatalf("worker w fetched %+v, %v; want a", got, err)
	}
}
