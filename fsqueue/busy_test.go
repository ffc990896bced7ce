package fsqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestClaimNextWaitsForABrieflyBusyMessage: a claimable message whose
// lock is held (by an ack, a cleanup, another claimer) is skipped at first;
// when nothing else is claimable ClaimNext waits for it up to busyWait and
// claims it if the lock comes free, else reports nothing.
func TestClaimNextWaitsForABrieflyBusyMessage(t *testing.T) {
	for _, tc := range []struct {
		name          string
		releaseOnWait bool
		wantClaim     bool
	}{
		{"released while ClaimNext waits", true, true},
		{"held past the wait", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			q := openQueue(t, vfs.OS{}, t.TempDir(), clock.NewManual(time.Now()))
			name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
			held, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
			go func() {
				done <- q.WithClaim(ctx, name, func(*fsqueue.ClaimGuard) error {
					close(held)
					<-release
					return nil
				})
			}()
			<-held
			waits := 0
			defer fsqueue.SetBusyWaitHook(func(n string) {
				waits++
				if n == name && tc.releaseOnWait {
					close(release)
					if err := <-done; err != nil {
						t.Error(err)
					}
				}
			})()
			start := time.Now()
			c, err := q.ClaimNext(ctx, "owner", time.Minute, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.releaseOnWait {
				if d := time.Since(start); d < fsqueue.BusyWaitForTest {
					t.Errorf("ClaimNext gave up after %v, before busyWait", d)
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if waits != 1 || (c != nil) != tc.wantClaim {
				t.Fatalf("ClaimNext = %+v after %d wait(s); want a claim: %v, after 1 wait", c, waits, tc.wantClaim)
			}
		})
	}
}

// TestHeldMessageHoldsUpNothingElse: a process stopped (SIGSTOP) while it
// holds one message's lock must not hold up any other message: every other
// message can be claimed, renewed, abandoned and acknowledged (WithClaim) at
// once. With locks shared between messages (the shard lock files of queue
// format 1) the other messages of the held one's shard waited until the
// holder ran again.
func TestHeldMessageHoldsUpNothingElse(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, vfs.OS{}, t.TempDir(), clock.NewManual(time.Now()))
	var names []string
	for range 256 { // enough that format 1's 64 shards would collide
		names = append(names, enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)}))
	}
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- q.WithClaim(ctx, names[0], func(*fsqueue.ClaimGuard) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	defer func() {
		close(release)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// A wait for the held lock would never end: each operation has a
	// deadline far beyond what it takes even on a loaded machine, as a hang
	// detector (its error names the operation that waited).
	op := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Minute) }
	for i := 1; i < len(names); i++ {
		octx, cancel := op()
		c, err := q.ClaimNext(octx, "w", time.Hour, nil)
		cancel()
		if err != nil || c == nil {
			t.Fatalf("claim %d: %+v, %v", i, c, err)
		}
		if c.Message.Name == names[0] {
			t.Fatal("claimed the held message")
		}
		octx, cancel = op()
		_, err = q.Renew(octx, c.Claim.Token, time.Hour)
		cancel()
		if err != nil {
			t.Fatalf("renew %s: %v", c.Message.Name, err)
		}
		octx, cancel = op()
		err = q.WithClaim(octx, c.Message.Name, func(g *fsqueue.ClaimGuard) error { return q.Delete(c.Message.Name) })
		cancel()
		if err != nil {
			t.Fatalf("delete %s under its lock: %v", c.Message.Name, err)
		}
	}
}

// TestWithClaimOfAGoneMessage: once a message is gone (only a holder of its
// lock deletes it) WithClaim runs without a lock; its claim can be read and
// removed but not written, and Renew and Abandon report ErrNotFound.
func TestWithClaimOfAGoneMessage(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, vfs.OS{}, t.TempDir(), clock.NewManual(time.Now()))
	name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
	c, err := q.ClaimNext(ctx, "w", time.Hour, nil)
	if err != nil || c == nil {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if err := q.DeleteMessage(name); err != nil {
		t.Fatal(err)
	}
	err = q.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
		if ok, err := g.MessageExists(); ok || err != nil {
			t.Errorf("MessageExists = %v, %v; want false", ok, err)
		}
		got, exists, err := g.Read()
		if err != nil || !exists || got.Token != c.Claim.Token {
			t.Errorf("Read = %+v %v %v; want the inert claim", got, exists, err)
		}
		if err := g.Write(fsqueue.Claim{}); !errors.Is(err, fsqueue.ErrNotFound) {
			t.Errorf("Write of a gone message's claim: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Renew(ctx, c.Claim.Token, time.Hour); !errors.Is(err, fsqueue.ErrNotFound) {
		t.Fatalf("Renew: %v, want ErrNotFound", err)
	}
	if err := q.Abandon(ctx, c.Claim.Token, 0, false); !errors.Is(err, fsqueue.ErrNotFound) {
		t.Fatalf("Abandon: %v, want ErrNotFound", err)
	}
}
