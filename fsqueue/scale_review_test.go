package fsqueue

// Scale review (branch review-scale).

import (
	"cmp"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// ownAfterEnqueues opens a queue with Options.Notify (as the provider's
// queues are), lets it build its index and directory watch (one listing:
// a fetch), then enqueues n messages through it without any further
// fetch, and returns how many names its listCache.own set holds.
func ownAfterEnqueues(t *testing.T, n int) int {
	t.Helper()
	dir := t.TempDir()
	q, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clock.NewManual(time.Now()), Notify: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.List(); err != nil { // a fetch pass: index and watch
		t.Fatal(err)
	}
	q.list.mu.Lock()
	notifying := q.list.notifying
	q.list.mu.Unlock()
	if !notifying {
		t.Skip("no waitable directory watch on this system")
	}
	for range n {
		if _, err := q.Enqueue(Message{Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	q.list.mu.Lock()
	defer q.list.mu.Unlock()
	return len(q.list.own)
}

// TestScaleOwnSetGrowsWithoutFetches: a Queue whose watch is on remembers
// every name it adds (listCache.own) until a refresh applies the name's
// watch event. A process that fetched from a queue once, and whose last
// pass found work (so notifyLoop is not armed), then only adds to it - an
// orchestrator dispatcher stopped while the process's worker acks keep
// publishing completions, or its client keeps enqueuing starts - keeps one
// entry per message it ever added: memory grows with the messages added,
// without bound (the kernel's queue of the same events overflows and is
// dropped, but own is cleared only by the next listing).
func TestScaleOwnSetGrowsWithoutFetches(t *testing.T) {
	small, large := 200, 3000
	a := ownAfterEnqueues(t, small)
	b := ownAfterEnqueues(t, large)
	t.Logf("listCache.own entries after enqueues with no fetch: %d after %d, %d after %d", a, small, b, large)
	if b > 2*a+16 {
		t.Errorf("the own set holds %d names after %d enqueues, %d after %d: grows with every message added while nothing fetches",
			b, large, a, small)
	}
}

// indexBytesPerEntry returns the index's memory per entry it holds: its
// blocks are allocated whole (blockCap entries and a filter each).
func indexBytesPerEntry(x *index) float64 {
	per := float64(blockCap*int(unsafe.Sizeof(Entry{})) + bloomWords*8)
	return per * float64(len(x.blocks)) / float64(x.n)
}

// TestScaleIndexMemoryAfterTimersFire: a queue of n timers, named in
// creation order with fire times in random order (a million timers is
// "the normal state of a workflow engine", index.go), whose earliest 74 %
// then fire and are consumed. The index keeps the blocks they were in -
// a block is merged only below mergeBelow (a quarter full) - so the
// remaining quarter costs ~3x the documented 34 bytes a message, and up to
// 4x (blocks of mergeBelow+1 entries) - index.go says "at least half full
// blocks", design.md "about 34 bytes per queued message". Still O(queued),
// but the documented figure (34 MB for a million) can be ~100-136 MB.
func TestScaleIndexMemoryAfterTimersFire(t *testing.T) {
	const n = 200_000
	rng := rand.New(rand.NewPCG(1, 2))
	var b builder
	ents := make([]Entry, n)
	for i := range ents {
		var e Entry
		binary.BigEndian.PutUint64(e.ID[:8], uint64(i)) // creation order
		e.VisibleAtMs = int64(rng.IntN(1 << 40))        // fire time: random
		e.Route = rng.Uint64()
		ents[i] = e
		b.add(e)
	}
	x := b.finish()
	full := indexBytesPerEntry(x)
	slices.SortFunc(ents, func(a, b Entry) int { return cmp.Compare(a.VisibleAtMs, b.VisibleAtMs) })
	for _, e := range ents[:n*74/100] { // fired and consumed, earliest first
		if !x.remove(e) {
			t.Fatal("remove failed")
		}
	}
	after := indexBytesPerEntry(x)
	t.Logf("index bytes per queued message: %.1f with %d queued; %.1f after 74%% fired (%d queued, %d blocks)", full, n, after, x.n, len(x.blocks))
	if after > 2*full {
		t.Errorf("the index costs %.1f bytes per queued message after most timers fired, %.1f before: its blocks stay allocated at quarter density", after, full)
	}
}
