package provider

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCorruptInstanceLease: an instance's lease.json damaged while a turn is
// locked follows the lease package's rule (a corrupt lease is free, and
// nobody can prove they hold it). The holder's ack, renew and abandon fail
// permanently with ErrInvalidLockToken and write nothing; the next fetch
// takes the instance with a fence above the last committed one, and its ack
// commits.
func TestCorruptInstanceLease(t *testing.T) {
	for _, c := range []struct{ name, data string }{
		{"empty", ""},
		{"NUL bytes", "\x00\x00\x00\x00"},
		{"truncated", `{"token":"x","fen`},
		{"not an object", `[1,2]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			p := openT(t, t.TempDir(), Options{SweepInterval: -1})
			createInstance(t, p, "cl")
			key := instanceKey("cl")
			committed, err := p.readInstanceFile(key)
			if err != nil || committed == nil {
				t.Fatal(committed, err)
			}
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "cl", Name: "e", Data: "1"}, 0))
			old, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || old == nil {
				t.Fatal(old, err)
			}
			mustNoErr(t, writeFileForTest(p, p.leasePath(key), []byte(c.data)))

			ev := started("cl")
			ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
			ack := func(tok string) error {
				return p.AckOrchestrationItem(ctx, tok, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
			}
			for name, err := range map[string]error{
				"ack":     ack(old.LockToken),
				"renew":   p.RenewOrchestrationItemLock(ctx, old.LockToken, time.Minute),
				"abandon": p.AbandonOrchestrationItem(ctx, old.LockToken, 0, false),
			} {
				if !errors.Is(err, ErrInvalidLockToken) || IsRetryable(err) {
					t.Errorf("%s by the holder of a corrupt lease: %v, want permanent ErrInvalidLockToken", name, err)
				}
			}
			if h, _ := p.Read(ctx, "cl"); len(h) != 1 {
				t.Fatalf("history after refused ack has %d events, want 1", len(h))
			}

			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || it == nil || len(it.Item.Messages) != 1 {
				t.Fatalf("fetch after the lease was damaged = %+v, %v; want the queued event", it, err)
			}
			g, err := p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
			mustNoErr(t, err)
			cur, _, err := g.Read()
			g.Unlock()
			mustNoErr(t, err)
			if cur.Fence <= committed.LastFence {
				t.Errorf("fence after takeover of a corrupt lease = %d, want > last committed %d", cur.Fence, committed.LastFence)
			}
			mustNoErr(t, ack(it.LockToken))
			if h, _ := p.Read(ctx, "cl"); len(h) != 2 {
				t.Fatalf("history after the new holder's ack has %d events, want 2", len(h))
			}
			// The zombie still cannot commit after the new holder released.
			if err := ack(old.LockToken); !errors.Is(err, ErrInvalidLockToken) {
				t.Errorf("late ack by the old holder: %v, want ErrInvalidLockToken", err)
			}
		})
	}
}

// TestWorkAckPastACorruptInstanceLease: a work ack that finds its
// instance's deletion marker takes the instance's flock and finishes what
// the lease marks (settleDeletion); a lease that stays unreadable reads as
// one without marks, as everywhere else, so that it cannot fail the acks of
// the instance's items for good (an instance waiting for its activities
// has no turn that would write a new lease), and the marker, with no
// deletion behind it, is removed.
func TestWorkAckPastACorruptInstanceLease(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	runActivities(t, p, "cw", 1)
	w := fetchOneWork(t, p)
	mustNoErr(t, writeFileForTest(p, p.leasePath(instanceKey("cw")), []byte("\x00\x00\x00\x00")))
	mustNoErr(t, p.markDeleting(instanceKey("cw")))
	mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "cw", ExecutionID: 1, ID: 2, Result: "r"}))
	if marked, err := p.deletionMarked(instanceKey("cw")); marked || err != nil {
		t.Fatalf("deletion marker after the ack: %v, %v; want it removed", marked, err)
	}
}
