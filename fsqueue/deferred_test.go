package fsqueue

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// delayedClaimPassCost enqueues n messages and gives each the claim an
// Abandon with a one-hour delay leaves (no token, VisibleAtMs an hour
// ahead: what provider.AbandonWorkItem with a delay writes), written
// through another Queue on the directory (another process), then returns
// the files opened and directories listed by one ClaimNext pass of this
// Queue - it finds nothing, since nothing is due - after a first pass that
// learns the delays.
func delayedClaimPassCost(t *testing.T, n int) (opens, listings int64) {
	t.Helper()
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	writer, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk, VolatileClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	cfs := vfs.Counting(vfs.NoSync(vfs.OS{}))
	q, err := Open(cfs, dir, Options{Clock: clk, VolatileClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if c, err := q.ClaimNext(ctx, "w", time.Minute, nil); err != nil || c != nil { // index and watches
		t.Fatalf("ClaimNext of an empty queue = %v, %v", c, err)
	}
	later := clk.Now().Add(time.Hour).UnixMilli()
	for range n {
		name, err := writer.Enqueue(Message{Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := writer.WithClaim(ctx, name, func(g *ClaimGuard) error {
			return g.Write(Claim{Attempt: 1, VisibleAtMs: later})
		}); err != nil {
			t.Fatal(err)
		}
	}
	for pass := range 2 {
		before := cfs.Files()
		c, err := q.ClaimNext(ctx, "w", time.Minute, nil)
		if err != nil || c != nil {
			t.Fatalf("ClaimNext = %v, %v; want nothing (every message is delayed)", c, err)
		}
		if pass == 1 {
			after := cfs.Files()
			return after.Opens - before.Opens, after.Listings - before.Listings
		}
	}
	return 0, 0
}

// TestClaimNextSkipsDelayedAbandonsWithoutReads (mutation that fails it:
// ClaimNext walking Queue.Visible instead of Queue.Due): a message abandoned
// with a delay stays visible by its name (the delay is in its claim), and
// the claim cache holds claimCacheItems parsed claims, so a ClaimNext pass
// over more delayed messages than that read every claim file on every
// poll. The delay read from a claim (written here by another Queue: another
// process) is kept as a deferral, and later passes skip the message
// without a look until then: an empty pass costs the same with 1,000 or
// claimCacheItems+1,000 delayed messages.
func TestClaimNextSkipsDelayedAbandonsWithoutReads(t *testing.T) {
	if testing.Short() {
		t.Skip("writes thousands of files")
	}
	small, large := 1000, claimCacheItems+1000
	ao, al := delayedClaimPassCost(t, small)
	bo, bl := delayedClaimPassCost(t, large)
	t.Logf("one empty ClaimNext pass: %d files opened, %d directories listed with %d delayed messages; %d, %d with %d",
		ao, al, small, bo, bl, large)
	if bo+bl > 2*(ao+al)+16 {
		t.Errorf("an empty ClaimNext pass opens %d files and lists %d directories with %d messages abandoned with a delay, %d and %d with %d: O(delayed messages) per poll",
			bo, bl, large, ao, al, small)
	}
}

// openPair opens two Queues ("processes") on one directory with one manual
// clock.
func openPair(t *testing.T) (a, b *Queue, clk *clock.Manual) {
	t.Helper()
	dir := t.TempDir()
	clk = clock.NewManual(time.Now())
	var err error
	if a, err = Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk, VolatileClaims: true, Notify: func() {}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if b, err = Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk, VolatileClaims: true, Notify: func() {}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return a, b, clk
}

// TestDelayedMessageIsClaimedWhenDue (mutation that fails it: deferrals.set
// keeping a deferral one ms longer than its claim says): a deferral never
// hides a message past its delay, whether the delay was written by this
// Queue or read from another's claim.
func TestDelayedMessageIsClaimedWhenDue(t *testing.T) {
	a, b, clk := openPair(t)
	ctx := context.Background()
	for _, abandoner := range []*Queue{a, b} {
		name, err := a.Enqueue(Message{Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		c, err := abandoner.ClaimNext(ctx, "x", time.Minute, nil)
		if err != nil || c == nil || c.Message.Name != name {
			t.Fatalf("ClaimNext = %v, %v; want %s", c, err, name)
		}
		if err := abandoner.Abandon(ctx, c.Claim.Token, time.Second, false); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the first pass of b learns a's delay, the second skips it
			if c, err := b.ClaimNext(ctx, "b", time.Minute, nil); err != nil || c != nil {
				t.Fatalf("ClaimNext before the delay ran out = %v, %v", c, err)
			}
		}
		clk.Advance(time.Second - time.Millisecond)
		if c, err := b.ClaimNext(ctx, "b", time.Minute, nil); err != nil || c != nil {
			t.Fatalf("ClaimNext 1 ms before the delay ran out = %v, %v", c, err)
		}
		clk.Advance(time.Millisecond)
		c, err = b.ClaimNext(ctx, "b", time.Minute, nil)
		if err != nil || c == nil || c.Message.Name != name {
			t.Fatalf("ClaimNext when the delay ran out = %v, %v; want %s", c, err, name)
		}
		if err := b.Delete(name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeferralFollowsAnotherProcessesClaimWrite (mutation that fails it:
// applyClaimEventsLocked not dropping the deferral of a changed claim): a
// deferral that b learnt from a delayed claim goes when another process
// rewrites that claim to make the message visible at once (a
// ClaimGuard.Write: nothing else shortens a delay), and b's next pass
// claims it.
func TestDeferralFollowsAnotherProcessesClaimWrite(t *testing.T) {
	a, b, clk := openPair(t)
	ctx := context.Background()
	name, err := a.Enqueue(Message{Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	later := clk.Now().Add(time.Hour).UnixMilli()
	write := func(c Claim) {
		t.Helper()
		if err := a.WithClaim(ctx, name, func(g *ClaimGuard) error { return g.Write(c) }); err != nil {
			t.Fatal(err)
		}
	}
	write(Claim{Attempt: 1, VisibleAtMs: later})
	for range 2 {
		if c, err := b.ClaimNext(ctx, "b", time.Minute, nil); err != nil || c != nil {
			t.Fatalf("ClaimNext of a delayed message = %v, %v", c, err)
		}
	}
	b.claims.mu.Lock()
	watched := b.claims.watch != nil
	b.claims.mu.Unlock()
	if !watched {
		t.Skip("no watch of claims/ on this system: another process's change is seen when the delay runs out (deferred.go)")
	}
	if n := b.deferred.len(); n != 1 {
		t.Fatalf("b holds %d deferrals, want 1 (learnt from the claim)", n)
	}
	write(Claim{Attempt: 1})
	c, err := b.ClaimNext(ctx, "b", time.Minute, nil)
	if err != nil || c == nil || c.Message.Name != name {
		t.Fatalf("ClaimNext after the delay was taken back = %v, %v; want %s", c, err, name)
	}
}

// TestQuietWithOnlyDelayedMessages (mutation that fails it: quiet ignoring
// deferrals): a queue whose only visible messages are deferred is quiet
// until the earliest of them comes due, so an idle consumer backs off as
// it does over timers, instead of polling at its poll interval.
func TestQuietWithOnlyDelayedMessages(t *testing.T) {
	_, b, clk := openPair(t)
	ctx := context.Background()
	var names []string
	for range 2 {
		name, err := b.Enqueue(Message{Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for i, d := range []time.Duration{time.Hour, time.Minute} {
		c, err := b.ClaimNext(ctx, "b", time.Minute, nil)
		if err != nil || c == nil || c.Message.Name != names[i] {
			t.Fatalf("ClaimNext = %v, %v; want %s", c, err, names[i])
		}
		if err := b.Abandon(ctx, c.Claim.Token, d, false); err != nil {
			t.Fatal(err)
		}
	}
	skipWithoutWatch(t, b, ": never quiet")
	now := clock.Ms(clk.Now())
	until, quiet, err := b.Quiet(now)
	if err != nil || !quiet || until != now+time.Minute.Milliseconds() {
		t.Fatalf("Quiet with only delayed messages = %d, %v, %v; want quiet until %d (the earlier delay)", until, quiet, err, now+time.Minute.Milliseconds())
	}
	b.Undefer(names[1])
	if _, quiet, err := b.Quiet(now); err != nil || quiet {
		t.Fatalf("Quiet with a message not deferred = %v, %v; want not quiet", quiet, err)
	}
}

// TestDeferralsAreBounded (mutation that fails it: no check of deferCap in
// deferrals.set): a Queue holds at most deferCap deferrals; when the table
// is full, deferrals that came due are swept out to make room, and a
// message whose deferral was not kept is still walked by Due.
func TestDeferralsAreBounded(t *testing.T) {
	defer func(n int) { deferCap = n }(deferCap)
	deferCap = 4
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	q, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var names []string
	for range 6 {
		name, err := q.Enqueue(Message{Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	now := clock.Ms(clk.Now())
	for i, name := range names {
		q.Defer(name, now+int64(1+i)*1000)
	}
	if n := q.deferred.len(); n != deferCap {
		t.Fatalf("%d deferrals held, want the bound %d", n, deferCap)
	}
	var due []string
	for e, err := range q.Due(now) {
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, e.Name())
	}
	if len(due) != len(names)-deferCap {
		t.Fatalf("Due walked %d messages, want the %d whose deferral was not kept", len(due), len(names)-deferCap)
	}
	clk.Advance(1500 * time.Millisecond) // the first deferral comes due
	q.Defer(names[5], clock.Ms(clk.Now())+time.Hour.Milliseconds())
	q.deferred.mu.Lock()
	_, kept := q.deferred.m[mustEntry(t, names[5])]
	n := len(q.deferred.m)
	q.deferred.mu.Unlock()
	if !kept || n > deferCap {
		t.Fatalf("after a deferral came due: new one kept %v, %d held; want it kept, at most %d", kept, n, deferCap)
	}
}

func mustEntry(t *testing.T, name string) Entry {
	t.Helper()
	e, ok := parseName(name)
	if !ok {
		t.Fatalf("bad name %q", name)
	}
	return e
}

// TestRemovalGenMovesOnRemoval (mutation that fails it: applyEvents not
// counting removals): RemovalGen moves when a message of the value's route
// is removed - by this Queue, or by another process as the index learns
// it - and not when one is added.
func TestRemovalGenMovesOnRemoval(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	open := func() *Queue {
		q, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk, IndexAttr: "k", Notify: func() {}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	a, b := open(), open()
	gen := func(q *Queue) uint64 {
		t.Helper()
		if _, err := q.Len(); err != nil { // brings the index up to date
			t.Fatal(err)
		}
		g, err := q.RemovalGen("x")
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g0 := gen(b)
	var names []string
	for range 2 {
		name, err := a.Enqueue(Message{Attrs: map[string]string{"k": "x"}, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if g := gen(b); g != g0 {
		b.list.mu.Lock()
		watched := b.list.watch != nil
		b.list.mu.Unlock()
		if watched {
			t.Fatalf("RemovalGen moved from %d to %d on adds", g0, g)
		}
		g0 = g // relisted without a watch: every generation moves
	}
	if err := b.Delete(names[0]); err != nil {
		t.Fatal(err)
	}
	g1 := gen(b)
	if g1 == g0 {
		t.Fatal("RemovalGen did not move on this Queue's Delete")
	}
	if err := a.Delete(names[1]); err != nil {
		t.Fatal(err)
	}
	if g := gen(b); g == g1 {
		t.Fatal("RemovalGen did not move on another Queue's Delete")
	}
}
