package wal

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A process that has waited twice its bound syncs without claiming the
// lead (package doc, step 3), however fresh the claims it keeps finding.
// How long it has waited must not be measured on the wall clock: a step of
// it backwards (NTP, a VM resumed) while the process waits would otherwise
// keep it waiting for the length of the step while other processes keep
// the lead fresh. Here the wall clock steps back an hour right after the
// process starts waiting, and every look finds a fresh claim.
func TestWaitBoundSurvivesAClockStepBack(t *testing.T) {
	fsys := newMem(t)
	b := openT(t, fsys, 0)
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano()
	var calls, clock atomic.Int64
	clock.Store(t0)
	b.now = func() int64 {
		if calls.Add(1) == 2 { // after groupSync noted when it began waiting
			clock.Add(-int64(time.Hour))
		}
		now := clock.Add(int64(time.Millisecond))
		b.group.w.CompareAndSwap(wLead, b.group.w.Load(wLead), uint64(now)) // a peer's claim, always fresh
		return now
	}
	_, end, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Sync(context.Background(), end) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Sync still waiting after 3 s; its bound is %v (it waits at most twice that)", time.Duration(b.waitBound()))
	}
}
