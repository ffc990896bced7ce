package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durofs/durofs/lease"
)

// TestClockSteps pins the clock-step rule of the package documentation
// ("Clock steps"): expiry is judged by the wall clock of the process that
// decides, under the flock. A holder A acquires a lease of length L at t0;
// then the host's clock steps by step; then another process B tries to
// take the lease over.
//
//   - forward by L (or more): A's lease has expired by B's clock, B takes it
//     over with a higher fence, and from then on A can neither renew nor
//     release it (ErrNotHolder): one holder at a time;
//   - forward by less than L: the lease is still held; A renews normally;
//   - back by L: the lease lives L longer. If A died, B gets it exactly 2L
//     of real time after A's acquisition (t0+L by the stepped clock), not
//     earlier; A, alive, keeps renewing and releasing normally.
func TestClockSteps(t *testing.T) {
	const L = 30 * time.Second
	cases := []struct {
		name string
		step time.Duration
		// wait is how much real time passes after the step before B's
		// first attempt; takeover whether that attempt succeeds.
		wait     time.Duration
		takeover bool
	}{
		{"forward by the lease length", L, 0, true},
		{"forward by twice the lease length", 2 * L, 0, true},
		{"forward by just under the lease length", L - time.Millisecond, 0, false},
		{"back by the lease length", -L, 0, false},
		{"back by the lease length, 2L-1ms later", -L, 2*L - time.Millisecond, false},
		{"back by the lease length, 2L later", -L, 2 * L, true},
		{"back by half the lease length, 1.5L later", -L / 2, L + L/2, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			a := f.acquire(t, "A", L)
			f.clk.Advance(c.step)
			f.clk.Advance(c.wait)

			b, err := f.s.Acquire(ctx, f.lockPath, f.leasePath, "B", L)
			if !c.takeover {
				if !errors.Is(err, lease.ErrHeld) {
					t.Fatalf("B's Acquire at %+v: %v, want ErrHeld", f.clk.Now().Sub(t0), err)
				}
				// A is still the holder: it renews (from its clock) and
				// releases normally.
				r, err := f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, L)
				if err != nil {
					t.Fatalf("A's Renew while held: %v", err)
				}
				if want := nowMs + (c.step + c.wait + L).Milliseconds(); r.ExpiresAtMs != want || r.Fence != a.Fence {
					t.Fatalf("A's renewed lease = %+v, want expiry %d and fence %d", r, want, a.Fence)
				}
				if err := f.s.Release(ctx, f.lockPath, f.leasePath, a.Token); err != nil {
					t.Fatalf("A's Release: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("B's Acquire of A's expired lease: %v", err)
			}
			if b.Fence != a.Fence+1 || b.Token == a.Token {
				t.Fatalf("B's lease = %+v after A's %+v: want a new token and fence %d", b, a, a.Fence+1)
			}
			// A is a zombie now: whatever its clock says, it cannot act.
			if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, L); !errors.Is(err, lease.ErrNotHolder) {
				t.Errorf("zombie A's Renew: %v, want ErrNotHolder", err)
			}
			if err := f.s.Release(ctx, f.lockPath, f.leasePath, a.Token); !errors.Is(err, lease.ErrNotHolder) {
				t.Errorf("zombie A's Release: %v, want ErrNotHolder", err)
			}
			// Even if the clock now steps back by a lease length, so that
			// A's old expiry looks valid again, nothing changes for A.
			f.clk.Advance(-L)
			if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, L); !errors.Is(err, lease.ErrNotHolder) {
				t.Errorf("zombie A's Renew after a step back: %v, want ErrNotHolder", err)
			}
			if got, _ := f.read(t); !equalLease(got, b) {
				t.Fatalf("lease file = %+v, want B's %+v", got, b)
			}
		})
	}
}

// TestClockStepBackRenewUsesRenewersClock: a renewal computes the new expiry
// from the renewer's clock, so after a step back it can be earlier than the
// expiry it replaces; the lease is still held by the same token and fence.
func TestClockStepBackRenewUsesRenewersClock(t *testing.T) {
	const L = 30 * time.Second
	f := newFixture(t)
	a := f.acquire(t, "A", L)
	f.clk.Advance(-L)
	r, err := f.s.Renew(context.Background(), f.lockPath, f.leasePath, a.Token, L)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExpiresAtMs != nowMs || r.Token != a.Token || r.Fence != a.Fence {
		t.Fatalf("renewed after a step back = %+v, want expiry %d (now+L by the stepped clock)", r, nowMs)
	}
}
