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

// TestClaimClockSteps pins the clock-step rule for claims (package
// documentation, "Clock steps"): a claim's expiry is judged by the clock of
// the process deciding, under the shard flock. Process A claims a message
// for L; the host clock steps; process B tries to claim.
//
//   - forward by L: B claims it (attempt 2, a new token); A can neither renew
//     nor abandon it any more (ErrNotHolder), so A cannot release B's claim;
//   - forward by L with no taker: A's renew says ErrExpired; its abandon
//     still works (expiry is not checked) and the message is claimable;
//   - back by L: A's claim lives L longer; B gets it only 2L of real time
//     after A's claim.
func TestClaimClockSteps(t *testing.T) {
	const L = 30 * time.Second
	cases := []struct {
		name     string
		step     time.Duration
		wait     time.Duration
		takeover bool
	}{
		{"forward by the lease length", L, 0, true},
		{"forward by just under the lease length", L - time.Millisecond, 0, false},
		{"back by the lease length", -L, 0, false},
		{"back by the lease length, 2L-1ms later", -L, 2*L - time.Millisecond, false},
		{"back by the lease length, 2L later", -L, 2 * L, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			clk := clock.NewManual(time.Now())
			qa := openQueue(t, vfs.OS{}, dir, clk)
			qb := openQueue(t, vfs.OS{}, dir, clk) // a second "process"
			name := enqueue(t, qa, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
			a := mustClaim(t, qa, L, nil)
			clk.Advance(c.step)
			clk.Advance(c.wait)

			b, err := qb.ClaimNext(ctx, "B", L, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !c.takeover {
				if b != nil {
					t.Fatalf("B claimed %s (attempt %d) while A's claim is live", b.Message.Name, b.Claim.Attempt)
				}
				if _, err := qa.Renew(ctx, a.Claim.Token, L); err != nil {
					t.Fatalf("A's Renew while held: %v", err)
				}
				return
			}
			if b == nil || b.Message.Name != name || b.Claim.Attempt != 2 || b.Claim.Token == a.Claim.Token {
				t.Fatalf("B's claim after A's expired = %+v, want %s attempt 2 with a new token", b, name)
			}
			if _, err := qa.Renew(ctx, a.Claim.Token, L); !errors.Is(err, fsqueue.ErrNotHolder) {
				t.Errorf("zombie A's Renew: %v, want ErrNotHolder", err)
			}
			if err := qa.Abandon(ctx, a.Claim.Token, 0, false); !errors.Is(err, fsqueue.ErrNotHolder) {
				t.Errorf("zombie A's Abandon: %v, want ErrNotHolder", err)
			}
			// A step back that makes A's old deadline look valid changes nothing.
			clk.Advance(-L)
			if _, err := qa.Renew(ctx, a.Claim.Token, L); !errors.Is(err, fsqueue.ErrNotHolder) {
				t.Errorf("zombie A's Renew after a step back: %v, want ErrNotHolder", err)
			}
			if _, err := qb.Renew(ctx, b.Claim.Token, L); err != nil {
				t.Errorf("B's Renew: %v", err)
			}
		})
	}

	t.Run("forward by the lease length, no taker", func(t *testing.T) {
		ctx := context.Background()
		dir := t.TempDir()
		clk := clock.NewManual(time.Now())
		q := openQueue(t, vfs.OS{}, dir, clk)
		enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
		a := mustClaim(t, q, L, nil)
		clk.Advance(L)
		if _, err := q.Renew(ctx, a.Claim.Token, L); !errors.Is(err, fsqueue.ErrExpired) {
			t.Fatalf("A's Renew of its expired claim: %v, want ErrExpired", err)
		}
		if err := q.Abandon(ctx, a.Claim.Token, 0, false); err != nil {
			t.Fatalf("A's Abandon of its expired claim: %v", err)
		}
		if c := mustClaim(t, q, L, nil); c.Claim.Attempt != 2 {
			t.Fatalf("claim after abandon = attempt %d, want 2", c.Claim.Attempt)
		}
	})
}

// TestVisibilityClockSteps: visibility is a wall-clock time too. A message
// enqueued for "now" just before the clock steps back by L is invisible
// until the clock catches up (L of real time); one delayed by d becomes
// visible d early after a forward step of d.
func TestVisibilityClockSteps(t *testing.T) {
	const L = 30 * time.Second
	ctx := context.Background()
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, dir, clk)
	now := clock.Ms(clk.Now())
	enqueue(t, q, fsqueue.Message{VisibleAtMs: now, Payload: json.RawMessage(`"now"`)})
	clk.Advance(-L)
	mustNotClaim(t, q, nil)
	clk.Advance(L - time.Millisecond)
	mustNotClaim(t, q, nil)
	clk.Advance(time.Millisecond)
	c := mustClaim(t, q, L, nil)
	if err := q.Abandon(ctx, c.Claim.Token, 2*L, true); err != nil {
		t.Fatal(err)
	}
	mustNotClaim(t, q, nil)
	clk.Advance(2 * L) // a forward step by the whole delay
	mustClaim(t, q, L, nil)
}
