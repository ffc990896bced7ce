package provider

import (
	"context"
	"testing"
	"time"
)

// holdInstanceLock holds instance inst's flock (creating its lock file, as
// a fetch or an enqueue of a start may) from another goroutine - a process
// stopped inside a section on it (a fetch pass looking at its lease, an
// ack) - until release is called (or the test ends).
func holdInstanceLock(t *testing.T, p *FSProvider, inst string) (release func()) {
	t.Helper()
	g, err := p.lockInstance(context.Background(), instanceKey(inst))
	mustNoErr(t, err)
	var once bool
	release = func() {
		if !once {
			once = true
			_ = g.Unlock()
		}
	}
	t.Cleanup(release)
	return release
}

// TestDeletionDoesNotHoldMembersWhileWaitingForAStoppedHolder: a deletion
// takes its members' flocks in order and holds them until it is applied.
// If one member's flock is held by a stopped process, the deletion must not
// wait for it holding the others: every ack of those instances (by live
// processes whose turns are in flight) would wait as long as the stop. The
// deletion lets them go, waits for the busy one alone, and tries again: the
// live ack goes through meanwhile, and the deletion completes once the
// stopped process resumes.
//
// On main the deletion waited holding the first member's flock: the ack of
// that member returned only when its context ended.
func TestDeletionDoesNotHoldMembersWhileWaitingForAStoppedHolder(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	first, second := "del-a", "del-b"
	if instanceKey(first) > instanceKey(second) {
		first, second = second, first
	}
	createInstance(t, p, first)
	createInstance(t, p, second)
	// A live worker's turn of first is in flight (an event after completion).
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: first, Name: "late", Data: "1"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != first {
		t.Fatalf("fetch = %+v, %v; want a turn of %s", it, err, first)
	}

	// Another process is stopped holding second's flock.
	release := holdInstanceLock(t, p, second)
	delDone := make(chan error, 1)
	go func() {
		_, err := p.DeleteInstancesAtomic(ctx, []string{first, second}, true)
		delDone <- err
	}()
	// Wait until the deletion holds first's flock (it then waits for second).
	awaitLocked(t, p, instanceKey(first), "the deletion")

	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ackErr := notStalled(t, "the ack", func() error { release(); return nil }, func() error {
		ev := Event{EventID: 2, InstanceID: first, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
			Kind: ExternalEvent{Name: "late", Data: "1"}}
		return p.AckOrchestrationItem(actx, it.LockToken, 1, []Event{ev}, nil, nil, md("TestOrch", "1.0.0"), nil)
	})
	if actx.Err() != nil {
		t.Errorf("the ack of %s returned (%v) only when its context ended: the deletion held its flock while it waited for %s's stopped holder", first, ackErr, second)
	}

	release()
	awaitResumed(t, delDone, "the deletion")
	for _, id := range []string{first, second} {
		if _, err := p.GetInstanceInfo(ctx, id); err == nil {
			t.Errorf("%s still exists after its deletion", id)
		}
	}
}
