package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// delayedOrchPassCost enqueues n starts, fetches each one and abandons it
// with a one-hour delay (nothing is due for an hour) - in the measured
// provider, or, with other, in a second provider on the directory (another
// process) - then returns the files one FetchOrchestrationItem pass (poll
// timeout 0, which returns nil) of the measured provider opens and the
// directories it lists, after a first pass.
func delayedOrchPassCost(t *testing.T, n int, other bool) (opens, listings int64) {
	t.Helper()
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	cfs := vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))
	p := openT(t, dir, Options{fs: cfs, Clock: clk, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	abandoner := p
	if other {
		abandoner = openT(t, dir, Options{Clock: clk, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1, Owner: "other"})
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		mustNoErr(t, abandoner.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("d-%05d", i)), 0))
	}
	for i := 0; i < n; i++ {
		it, err := abandoner.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch %d: %v %v", i, it, err)
		}
		mustNoErr(t, abandoner.AbandonOrchestrationItem(ctx, it.LockToken, time.Hour, false))
	}
	// A first pass (which learns what another process's abandons left),
	// then the measured pass: nothing changed.
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
		t.Fatalf("first pass: %v %v", it, err)
	}
	before := cfs.Files()
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
		t.Fatalf("pass: %v %v", it, err)
	}
	after := cfs.Files()
	return after.Opens - before.Opens, after.Listings - before.Listings
}

// TestOrchFetchPassSkipsDelayedAbandonsWithoutIO (mutation that fails it:
// tryFetchOrchestration walking Queue.Visible instead of Queue.Due): an
// abandon with a delay keeps the message visible by its name (the delay
// lives in the instance's lease state), so every fetch pass used to lock
// and read the lease of every such instance although none was due. The
// delay is now a deferral in the orchestrator queue of the process that
// abandoned, or that read it under the flock (another process's abandon:
// one look per delay), and a pass that finds nothing costs the same with
// 100 or 800 delayed instances.
func TestOrchFetchPassSkipsDelayedAbandonsWithoutIO(t *testing.T) {
	for _, other := range []bool{false, true} {
		wantFlatCost(t, fmt.Sprintf("files opened and directories listed by one empty fetch pass, abandoned by another process %v, per delayed instances", other), 100, 800,
			func(n int) int64 {
				opens, lists := delayedOrchPassCost(t, n, other)
				return opens + lists
			})
	}
}

// wantFlatCost fails the test if cost(large) is more than twice
// cost(small) (plus a little): a cost that grows with n, where it must not.
func wantFlatCost(t *testing.T, what string, small, large int, cost func(n int) int64) {
	t.Helper()
	a, b := cost(small), cost(large)
	t.Logf("%s: %d at %d, %d at %d", what, a, small, b, large)
	if b > 2*a+16 {
		t.Errorf("%s: %d at %d, %d at %d: it grows with them", what, a, small, b, large)
	}
}

// TestDelayedOrchMessageFetchedWhenDue (mutation that fails it:
// deferDelayed deferring a message one ms past its delay): a deferral never
// holds a message back past the delay its abandon gave it, in the process
// that abandoned and in another that learnt the delay.
func TestDelayedOrchMessageFetchedWhenDue(t *testing.T) {
	ctx := context.Background()
	for _, other := range []bool{false, true} {
		a, b, clk := clockPair(t)
		abandoner := a
		if other {
			abandoner = b
		}
		createInstance(t, a, "late")
		mustNoErr(t, a.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "late", Name: "e", Data: "1"}, 0))
		it, err := abandoner.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatal(it, err)
		}
		mustNoErr(t, abandoner.AbandonOrchestrationItem(ctx, it.LockToken, time.Second, false))
		for range 2 {
			if it, err := a.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
				t.Fatalf("abandoned by another process %v: fetch before the delay ran out = %v, %v", other, it, err)
			}
		}
		clk.Advance(time.Second - time.Millisecond)
		if it, err := a.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
			t.Fatalf("abandoned by another process %v: fetch 1 ms before the delay ran out = %v, %v", other, it, err)
		}
		clk.Advance(time.Millisecond)
		it, err = a.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil || it.Item.Instance != "late" {
			t.Fatalf("abandoned by another process %v: fetch when the delay ran out = %v, %v; want the instance", other, it, err)
		}
	}
}

// filteredOutPassOpens starts n instances, pins each to duroxide 9.0.0 with
// its first ack, gives each a new visible message, and returns the files
// one FetchOrchestrationItem pass opens with a capability filter that
// accepts only 0.x (so nothing is fetched), after a first such pass.
func filteredOutPassOpens(t *testing.T, n int) int64 {
	t.Helper()
	dir := t.TempDir()
	cfs := vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))
	p := openT(t, dir, Options{fs: cfs, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	ctx := context.Background()
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("f-%05d", i)), 0))
	}
	pin := SemVer{Major: 9}
	for i := 0; i < n; i++ {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch %d: %v %v", i, it, err)
		}
		m := md("TestOrch", "1.0.0")
		m.PinnedDuroxideVersion = &pin
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(it.Item.Instance)}, nil, nil, m, nil))
	}
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: fmt.Sprintf("f-%05d", i), Name: "e", Data: "d"}, 0))
	}
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, v0Filter()); err != nil || it != nil {
		t.Fatalf("first pass: %v %v", it, err)
	}
	before := cfs.Files().Opens
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, v0Filter()); err != nil || it != nil {
		t.Fatalf("pass: %v %v", it, err)
	}
	return cfs.Files().Opens - before
}

// v0Filter accepts duroxide 0.x only.
func v0Filter() *DispatcherCapabilityFilter {
	return &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{{Min: SemVer{}, Max: SemVer{Major: 0, Minor: 999}}}}
}

// TestFilteredFetchPassKeepsRejectedPins (mutation that fails it:
// filterAllowsCached reading the files every time): a dispatcher whose
// capability filter rejects the queued instances (a rolling upgrade: the
// new runtime's dispatcher beside instances pinned to another duroxide
// version) used to read every rejected instance's instance.json,
// executions/ listing and state.json on every poll. A rejected pin is kept
// until one of its instance's messages leaves the queue (rejectedPins):
// an empty filtered pass costs the same with 100 or 400 rejected
// instances.
func TestFilteredFetchPassKeepsRejectedPins(t *testing.T) {
	wantFlatCost(t, "files opened by one empty filtered fetch pass, per rejected instances", 100, 400,
		func(n int) int64 { return filteredOutPassOpens(t, n) })
}

// TestFilterSeesPinChangedByAnotherProcess (mutation that fails it:
// applyEvents not counting removals in RemovalGen): a's filtered pass keeps
// the pin that rejected an instance; when another process's ack pins the
// instance to a version a's filter accepts (the ack consumes the
// instance's messages), a's next pass reads the pin again and fetches the
// instance. The same holds when a's own ack changes the pin.
func TestFilterSeesPinChangedByAnotherProcess(t *testing.T) {
	ctx := context.Background()
	for _, other := range []bool{false, true} {
		a, b, _ := clockPair(t)
		acker := a
		if other {
			acker = b
		}
		const inst = "pinned"
		mustNoErr(t, a.EnqueueForOrchestrator(ctx, startItem(inst), 0))
		ack := func(pin SemVer, exec uint64, delta []Event) {
			t.Helper()
			it, err := acker.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || it == nil {
				t.Fatalf("unfiltered fetch: %v %v", it, err)
			}
			m := md("TestOrch", "1.0.0")
			m.PinnedDuroxideVersion = &pin
			mustNoErr(t, acker.AckOrchestrationItem(ctx, it.LockToken, exec, delta, nil, nil, m, nil))
		}
		ack(SemVer{Major: 9}, 1, []Event{started(inst)})
		mustNoErr(t, a.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "e", Data: "1"}, 0))
		for range 2 {
			if it, err := a.FetchOrchestrationItem(ctx, 30*time.Second, 0, v0Filter()); err != nil || it != nil {
				t.Fatalf("other %v: filtered fetch of an instance pinned to 9.0.0 = %v, %v; want none", other, it, err)
			}
		}
		ack(SemVer{Minor: 5}, 1, nil)
		mustNoErr(t, a.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "e", Data: "2"}, 0))
		it, err := a.FetchOrchestrationItem(ctx, 30*time.Second, 0, v0Filter())
		if err != nil || it == nil || it.Item.Instance != inst {
			t.Fatalf("other %v: filtered fetch after the pin changed to 0.5.0 = %v, %v; want %q", other, it, err, inst)
		}
	}
}
