package provider

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
)

// clockPair opens two providers ("processes" A and B) on one directory,
// sharing one manual clock, as processes of one host share its wall clock.
func clockPair(t *testing.T) (a, b *FSProvider, clk *clock.Manual) {
	t.Helper()
	dir := t.TempDir()
	clk = clock.NewManual(time.Now())
	a = openT(t, dir, Options{Clock: clk, SweepInterval: -1, Owner: "A"})
	b = openT(t, dir, Options{Clock: clk, SweepInterval: -1, Owner: "B"})
	return a, b, clk
}

// bothAck runs two acks at once and returns their errors.
func bothAck(fa, fb func() error) (errA, errB error) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); <-start; errA = fa() }()
	go func() { defer wg.Done(); <-start; errB = fb() }()
	close(start)
	wg.Wait()
	return errA, errB
}

// TestOrchestrationClockSteps pins the clock-step rule (docs/design.md
// §4, "Clock steps") for orchestration locks. A fetches a turn with lock length L; the
// host clock steps; B fetches.
//
//   - forward by L: B gets the turn with a new token; A and B then ack at
//     the same moment and only B's ack commits; A's renew and abandon are
//     refused (ErrInvalidLockToken, permanent), and A's ack wrote nothing;
//   - forward by L with no taker: A's ack and renew fail with the permanent
//     ErrLockExpired and write nothing; A may abandon, and the turn is
//     fetched again;
//   - back by L: A's lock lasts L longer. B cannot fetch the turn before 2L
//     of real time after A's fetch, and A, alive, acks normally.
func TestOrchestrationClockSteps(t *testing.T) {
	const L = 5 * time.Second
	ctx := context.Background()
	setup := func(t *testing.T) (a, b *FSProvider, clk *clock.Manual, it *LockedOrchestrationItem, ack func(p *FSProvider, tok string) error) {
		a, b, clk = clockPair(t)
		createInstance(t, a, "ck")
		mustNoErr(t, a.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "ck", Name: "e", Data: "1"}, 0))
		it, err := a.FetchOrchestrationItem(ctx, L, 0, nil)
		if err != nil || it == nil {
			t.Fatal(it, err)
		}
		ev := started("ck")
		ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
		ack = func(p *FSProvider, tok string) error {
			out := []WorkItem{ExternalRaised{Instance: "other", Name: "from-" + p.owner, Data: "x"}}
			return p.AckOrchestrationItem(ctx, tok, 1, []Event{ev}, nil, out, ExecutionMetadata{}, nil)
		}
		return a, b, clk, it, ack
	}
	// committed checks the instance's history length and the outbound
	// messages: exactly one ack's effects.
	committed := func(t *testing.T, p *FSProvider, events int, from string) {
		t.Helper()
		if h, err := p.Read(ctx, "ck"); err != nil || len(h) != events {
			t.Fatalf("history has %d events (%v), want %d", len(h), err, events)
		}
		var outs []string
		entries, _ := allQueued(p.orchQ)
		for _, e := range entries {
			if e.Attrs[attrInstance] == "other" {
				m, _ := p.orchQ.Get(e.Name)
				w, _ := UnmarshalWorkItem(m.Payload)
				outs = append(outs, w.(ExternalRaised).Name)
			}
		}
		if from == "" && len(outs) != 0 || from != "" && (len(outs) != 1 || outs[0] != "from-"+from) {
			t.Fatalf("outbound messages %v, want exactly one ack's (%q)", outs, from)
		}
	}

	t.Run("forward by the lease length", func(t *testing.T) {
		a, b, clk, itA, ack := setup(t)
		clk.Advance(L)
		itB, err := b.FetchOrchestrationItem(ctx, L, 0, nil)
		if err != nil || itB == nil || itB.LockToken == itA.LockToken {
			t.Fatalf("B's fetch after A's lock expired = %+v, %v; want the turn with a new token", itB, err)
		}
		errA, errB := bothAck(func() error { return ack(a, itA.LockToken) }, func() error { return ack(b, itB.LockToken) })
		if errB != nil {
			t.Fatalf("B's ack: %v", errB)
		}
		if !errors.Is(errA, ErrInvalidLockToken) || IsRetryable(errA) {
			t.Fatalf("zombie A's ack: %v, want permanent ErrInvalidLockToken", errA)
		}
		committed(t, b, 2, "B")
		if err := a.RenewOrchestrationItemLock(ctx, itA.LockToken, L); !errors.Is(err, ErrInvalidLockToken) {
			t.Errorf("zombie A's renew: %v, want ErrInvalidLockToken", err)
		}
		if err := a.AbandonOrchestrationItem(ctx, itA.LockToken, 0, false); !errors.Is(err, ErrInvalidLockToken) {
			t.Errorf("zombie A's abandon: %v, want ErrInvalidLockToken", err)
		}
	})

	t.Run("forward by the lease length, no taker", func(t *testing.T) {
		a, b, clk, itA, ack := setup(t)
		clk.Advance(L)
		if err := ack(a, itA.LockToken); !errors.Is(err, ErrLockExpired) || IsRetryable(err) {
			t.Fatalf("A's ack of its expired lock: %v, want permanent ErrLockExpired", err)
		}
		if err := a.RenewOrchestrationItemLock(ctx, itA.LockToken, L); err == nil || IsRetryable(err) {
			t.Fatalf("A's renew of its expired lock: %v, want a permanent error", err)
		}
		committed(t, a, 1, "")
		mustNoErr(t, a.AbandonOrchestrationItem(ctx, itA.LockToken, 0, false))
		itB, err := b.FetchOrchestrationItem(ctx, L, 0, nil)
		if err != nil || itB == nil {
			t.Fatalf("B's fetch after A abandoned: %+v, %v", itB, err)
		}
		mustNoErr(t, ack(b, itB.LockToken))
		committed(t, b, 2, "B")
	})

	t.Run("forward by just under the lease length", func(t *testing.T) {
		a, b, clk, itA, ack := setup(t)
		clk.Advance(L - time.Millisecond)
		if itB, err := b.FetchOrchestrationItem(ctx, L, 0, nil); err != nil || itB != nil {
			t.Fatalf("B fetched %+v (%v) while A's lock is live", itB, err)
		}
		mustNoErr(t, a.RenewOrchestrationItemLock(ctx, itA.LockToken, L))
		mustNoErr(t, ack(a, itA.LockToken))
		committed(t, a, 2, "A")
	})

	t.Run("back by the lease length, holder alive", func(t *testing.T) {
		a, b, clk, itA, ack := setup(t)
		clk.Advance(-L)
		if itB, err := b.FetchOrchestrationItem(ctx, L, 0, nil); err != nil || itB != nil {
			t.Fatalf("B fetched %+v (%v) while A's lock is live", itB, err)
		}
		mustNoErr(t, ack(a, itA.LockToken))
		committed(t, a, 2, "A")
	})

	t.Run("back by the lease length, holder dead", func(t *testing.T) {
		a, b, clk, itA, ack := setup(t)
		clk.Advance(-L)
		clk.Advance(2*L - time.Millisecond)
		if itB, err := b.FetchOrchestrationItem(ctx, L, 0, nil); err != nil || itB != nil {
			t.Fatalf("B fetched %+v (%v) 2L-1ms after A's fetch; the lock lasts L+step", itB, err)
		}
		clk.Advance(time.Millisecond)
		itB, err := b.FetchOrchestrationItem(ctx, L, 0, nil)
		if err != nil || itB == nil {
			t.Fatalf("B's fetch 2L after A's fetch = %+v, %v; want the turn", itB, err)
		}
		errA, errB := bothAck(func() error { return ack(a, itA.LockToken) }, func() error { return ack(b, itB.LockToken) })
		if errB != nil || !errors.Is(errA, ErrInvalidLockToken) {
			t.Fatalf("acks after takeover: A %v, B %v; want only B's to commit", errA, errB)
		}
		committed(t, b, 2, "B")
	})
}

// TestWorkItemClockSteps is the clock-step rule for activity locks: after a
// forward step by L, B fetches the work item A holds; of the two acks only
// B's commits, so exactly one completion reaches the orchestrator queue. A
// step back by L keeps A's lock L longer.
func TestWorkItemClockSteps(t *testing.T) {
	const L = 30 * time.Second
	ctx := context.Background()
	setup := func(t *testing.T) (a, b *FSProvider, clk *clock.Manual, itA *LockedWorkItem) {
		a, b, clk = clockPair(t)
		mustNoErr(t, a.EnqueueForWorker(ctx, ActivityExecute{Instance: "ck", ExecutionID: 1, ID: 7, Name: "act", Input: "in"}))
		itA, err := a.FetchWorkItem(ctx, L, 0, nil, TagFilter{Mode: TagDefaultOnly})
		if err != nil || itA == nil {
			t.Fatal(itA, err)
		}
		return a, b, clk, itA
	}
	completions := func(t *testing.T, p *FSProvider) []string {
		t.Helper()
		var out []string
		entries, _ := allQueued(p.orchQ)
		for _, e := range entries {
			m, _ := p.orchQ.Get(e.Name)
			w, _ := UnmarshalWorkItem(m.Payload)
			if c, ok := w.(ActivityCompleted); ok {
				out = append(out, c.Result)
			}
		}
		return out
	}
	done := func(by string) WorkItem { return ActivityCompleted{Instance: "ck", ExecutionID: 1, ID: 7, Result: by} }

	t.Run("forward by the lease length", func(t *testing.T) {
		a, b, clk, itA := setup(t)
		clk.Advance(L)
		itB, err := b.FetchWorkItem(ctx, L, 0, nil, TagFilter{Mode: TagDefaultOnly})
		if err != nil || itB == nil || itB.AttemptCount != 2 {
			t.Fatalf("B's fetch after A's lock expired = %+v, %v; want attempt 2", itB, err)
		}
		errA, errB := bothAck(func() error { return a.AckWorkItem(ctx, itA.LockToken, done("A")) },
			func() error { return b.AckWorkItem(ctx, itB.LockToken, done("B")) })
		if errB != nil {
			t.Fatalf("B's ack: %v", errB)
		}
		if errA == nil || IsRetryable(errA) {
			t.Fatalf("zombie A's ack: %v, want a permanent error", errA)
		}
		if got := completions(t, b); len(got) != 1 || got[0] != "B" {
			t.Fatalf("completions %v, want exactly B's", got)
		}
		if err := a.RenewWorkItemLock(ctx, itA.LockToken, L); err == nil || IsRetryable(err) {
			t.Errorf("zombie A's renew: %v, want a permanent error", err)
		}
	})

	t.Run("back by the lease length", func(t *testing.T) {
		a, b, clk, itA := setup(t)
		clk.Advance(-L)
		clk.Advance(2*L - time.Millisecond)
		if itB, err := b.FetchWorkItem(ctx, L, 0, nil, TagFilter{Mode: TagDefaultOnly}); err != nil || itB != nil {
			t.Fatalf("B fetched %+v (%v) 2L-1ms after A's fetch", itB, err)
		}
		mustNoErr(t, a.RenewWorkItemLock(ctx, itA.LockToken, L))
		mustNoErr(t, a.AckWorkItem(ctx, itA.LockToken, done("A")))
		if got := completions(t, a); len(got) != 1 || got[0] != "A" {
			t.Fatalf("completions %v, want exactly A's", got)
		}
	})
}
