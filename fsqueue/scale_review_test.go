package fsqueue

// Scale review (branch review-scale).

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// delayedClaimPassOpens enqueues n messages and gives each the claim an
// Abandon with a one-hour delay leaves (no token, VisibleAtMs an hour
// ahead: what provider.AbandonWorkItem with a delay writes), then returns
// the files one ClaimNext pass opens - it finds nothing, since nothing is
// due - after a first, warming pass.
func delayedClaimPassOpens(t *testing.T, n int) int64 {
	t.Helper()
	dir := t.TempDir()
	cfs := vfs.Counting(vfs.NoSync(vfs.OS{}))
	clk := clock.NewManual(time.Now())
	q, err := Open(cfs, dir, Options{Clock: clk, VolatileClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	later := clk.Now().Add(time.Hour).UnixMilli()
	for range n {
		name, err := q.Enqueue(Message{Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.WithClaim(ctx, name, func(g *ClaimGuard) error {
			return g.Write(Claim{Attempt: 1, VisibleAtMs: later})
		}); err != nil {
			t.Fatal(err)
		}
	}
	for pass := range 2 {
		before := cfs.Files().Opens
		c, err := q.ClaimNext(ctx, "w", time.Minute, nil)
		if err != nil || c != nil {
			t.Fatalf("ClaimNext = %v, %v; want nothing (every message is delayed)", c, err)
		}
		if pass == 1 {
			return cfs.Files().Opens - before
		}
	}
	panic("unreachable")
}

// TestScaleClaimNextPassWithDelayedAbandons: a message abandoned with a
// delay stays visible by its name (the delay is in its claim file), so
// every ClaimNext pass walks every such message and checks its claim. The
// claim cache holds claimCacheItems (4096) parsed claims; past that, a pass
// walking the delayed messages in name order evicts each claim before it
// is needed again, and reads every claim file on every poll. A poll that
// finds nothing should not cost O(delayed messages) file reads.
func TestScaleClaimNextPassWithDelayedAbandons(t *testing.T) {
	if testing.Short() {
		t.Skip("writes thousands of files")
	}
	small, large := 1000, claimCacheItems+1000
	a := delayedClaimPassOpens(t, small)
	b := delayedClaimPassOpens(t, large)
	t.Logf("files opened by one empty ClaimNext pass: %d with %d delayed messages, %d with %d", a, small, b, large)
	if b > 2*a+16 {
		t.Errorf("an empty ClaimNext pass opens %d files with %d messages abandoned with a delay, %d with %d: O(delayed messages) claim reads per poll",
			b, large, a, small)
	}
}
