package fsqueue

import (
	"cmp"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// modelEntries is the reference the index is checked against: a sorted
// slice of entries.
type modelEntries []Entry

func (m modelEntries) visible(nowMs int64, from Entry, hasFrom bool, limit int) []Entry {
	var out []Entry
	for _, e := range m {
		if hasFrom && e.compare(from) <= 0 {
			continue
		}
		if e.VisibleAtMs <= nowMs && len(out) < limit {
			out = append(out, e)
		}
	}
	return out
}

func (m modelEntries) route(r uint64) []Entry {
	var out []Entry
	for _, e := range m {
		if e.Route == r {
			out = append(out, e)
		}
	}
	return out
}

// randEntry makes an entry with a random ULID (so inserts land anywhere,
// splitting full blocks), one of few routes and a visibility time around now.
func randEntry(rng *rand.Rand) Entry {
	var e Entry
	binary.BigEndian.PutUint64(e.ID[:8], rng.Uint64()>>2)
	binary.BigEndian.PutUint64(e.ID[8:], rng.Uint64())
	e.Route = uint64(rng.IntN(50)) * 0x9E3779B97F4A7C15
	e.VisibleAtMs = int64(rng.IntN(1000))
	return e
}

// checkIndex compares every view of x with the model, and the invariants
// of the blocks: sorted, in order, non-empty, within capacity, at least
// half full but the last, minVis exact, every route in its block's filter.
func checkIndex(t *testing.T, step int, x *index, m modelEntries, rng *rand.Rand) {
	t.Helper()
	var all []Entry
	for bi, b := range x.blocks {
		if len(b.ents) == 0 || len(b.ents) > blockCap || cap(b.ents) != blockCap {
			t.Fatalf("step %d: block %d holds %d entries (cap %d)", step, bi, len(b.ents), cap(b.ents))
		}
		if bi < len(x.blocks)-1 && len(b.ents) < minFill {
			t.Fatalf("step %d: block %d of %d holds %d entries, fewer than minFill (%d)", step, bi, len(x.blocks), len(b.ents), minFill)
		}
		if b.minVis != minVisible(b.ents) {
			t.Fatalf("step %d: block %d minVis %d, want %d", step, bi, b.minVis, minVisible(b.ents))
		}
		for _, e := range b.ents {
			if !b.mayHold(e.Route) {
				t.Fatalf("step %d: block %d's filter misses route %x", step, bi, e.Route)
			}
		}
		all = append(all, b.ents...)
	}
	if !slices.IsSortedFunc(all, Entry.compare) || !slices.Equal(all, m) || x.n != len(m) {
		t.Fatalf("step %d: index holds %d entries (n %d), model %d", step, len(all), x.n, len(m))
	}
	now := int64(rng.IntN(1100))
	limit := 1 + rng.IntN(300)
	var from Entry
	hasFrom := len(m) > 0 && rng.IntN(2) == 0
	if hasFrom {
		from = m[rng.IntN(len(m))]
		if rng.IntN(3) == 0 {
			from = randEntry(rng) // a position that is no entry
		}
	}
	got := x.visible(now, from, hasFrom, make([]Entry, 0, limit))
	if want := m.visible(now, from, hasFrom, limit); !slices.Equal(got, want) {
		t.Fatalf("step %d: visible(%d, limit %d) = %d entries, want %d", step, now, limit, len(got), len(want))
	}
	r := uint64(rng.IntN(50)) * 0x9E3779B97F4A7C15
	if got, want := x.route(r, nil), m.route(r); !slices.Equal(got, want) {
		t.Fatalf("step %d: route %x = %d entries, want %d", step, r, len(got), len(want))
	}
}

// TestIndexBlocks drives the block index through random inserts (anywhere:
// full blocks split) and removals (blocks shrink, merge, vanish), and a
// rebuild from a listing with duplicates now and then, checking it against
// a sorted slice after every step.
func TestIndexBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := &index{}
	var m modelEntries
	for step := range 30000 {
		switch r := rng.IntN(1000); {
		case r < 2:
			// Rebuild from an unordered listing that names some twice.
			var b builder
			order := rng.Perm(len(m))
			for _, i := range order {
				b.add(m[i])
				if rng.IntN(20) == 0 {
					b.add(m[i])
				}
			}
			x = b.finish()
		case r < 550 || len(m) < 3000 && r < 700:
			e := randEntry(rng)
			if rng.IntN(4) == 0 && len(m) > 0 {
				// Mostly-ascending names, as new messages are.
				e.ID = m[len(m)-1].ID
				e.ID[15]++
			}
			i, found := slices.BinarySearchFunc(m, e, Entry.compare)
			if x.insert(e) == found {
				t.Fatalf("step %d: insert = %v with the entry there: %v", step, !found, found)
			}
			if !found {
				m = slices.Insert(m, i, e)
			}
		default:
			if len(m) == 0 {
				continue
			}
			e := m[rng.IntN(len(m))]
			if rng.IntN(10) == 0 {
				e = randEntry(rng) // not there
			}
			i, found := slices.BinarySearchFunc(m, e, Entry.compare)
			if x.remove(e) != found {
				t.Fatalf("step %d: remove = %v, entry there: %v", step, !found, found)
			}
			if found {
				m = slices.Delete(m, i, i+1)
			}
		}
		if step%50 == 0 || len(m) < 40 {
			checkIndex(t, step, x, m, rng)
		}
	}
	checkIndex(t, -1, x, m, rng)
}

// TestBuilderSorts: the in-place sort across blocks, on sizes around the
// block size and on adversarial orders (sorted, reversed, all in one
// route, many equal ULID prefixes), including the heapsort fallback.
func TestBuilderSorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, blockCap - 1, blockCap, blockCap + 1, 3*blockCap + 17, 20000, 150_000} {
		for _, order := range []string{"random", "sorted", "reversed", "few prefixes"} {
			es := make([]Entry, n)
			for i := range es {
				es[i] = randEntry(rng)
				if order == "few prefixes" {
					binary.BigEndian.PutUint64(es[i].ID[:8], uint64(i%3))
				}
			}
			want := slices.SortedFunc(slices.Values(es), Entry.compare)
			switch order {
			case "sorted":
				es = slices.Clone(want)
			case "reversed":
				es = slices.Clone(want)
				slices.Reverse(es)
			}
			for _, depth := range []int{-1, 0, 1} {
				if n > parallelMin && depth >= 0 {
					// The forced fallback is the same code at every size;
					// above parallelMin only finish's parallel sort is new.
					continue
				}
				var b builder
				for _, e := range es {
					b.add(e)
				}
				if depth >= 0 {
					// Force the fallback at this depth.
					chunked(b.blocks).sort(0, b.n, depth)
				}
				x := b.finish()
				var got []Entry
				for _, blk := range x.blocks {
					got = append(got, blk.ents...)
				}
				want := slices.CompactFunc(slices.Clone(want), func(a, b Entry) bool { return a == b })
				if !slices.Equal(got, want) || x.n != len(want) {
					t.Fatalf("n %d, %s, depth %d: the built index is not the sorted entries", n, order, depth)
				}
			}
		}
	}
}

// BenchmarkIndexMemory reports the index's memory per message for a queue
// of a million messages: bytes/msg is the heap the index keeps (measured
// after a GC), alloc-bytes/msg what building it allocated in all (the
// garbage it leaves counts towards a process's peak). Two ways to get
// there: the listing the first fetch after Open builds it from (random
// order, as readdir returns names), and as many inserts one by one (new
// messages: ascending names).
func BenchmarkIndexMemory(b *testing.B) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(5, 6))
	es := make([]Entry, n)
	for i := range es {
		es[i] = randEntry(rng)
	}
	for _, how := range []string{"listing", "inserts"} {
		b.Run(how, func(b *testing.B) {
			var kept, alloc uint64
			for b.Loop() {
				var ms0, ms1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				var x *index
				switch how {
				case "listing":
					var bl builder
					for _, e := range es {
						bl.add(e)
					}
					x = bl.finish()
				default:
					x = &index{}
					var e Entry
					for i := range n {
						binary.BigEndian.PutUint64(e.ID[:8], uint64(i))
						x.insert(e)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&ms1)
				kept, alloc = ms1.HeapAlloc-ms0.HeapAlloc, ms1.TotalAlloc-ms0.TotalAlloc
				runtime.KeepAlive(x)
			}
			b.ReportMetric(float64(kept)/n, "bytes/msg")
			b.ReportMetric(float64(alloc)/n, "alloc-bytes/msg")
		})
	}
}

// indexBytesPerEntry returns the index's memory per entry it holds: its
// blocks are allocated whole (blockCap entries and a filter each).
func indexBytesPerEntry(x *index) float64 {
	return float64(indexBlockBytes*len(x.blocks)) / float64(x.n)
}

// indexBlockBytes is what one block of the index costs.
const indexBlockBytes = blockCap*int(unsafe.Sizeof(Entry{})) + bloomWords*8

// TestIndexMemoryBoundedAfterTimersFire: a queue of n timers, named in
// creation order with fire times in random order (index.go: the normal
// state of a workflow engine), whose earliest 74 % then fire and are
// consumed, scattered over every block. The index's blocks stay at least
// half full (but the last): it costs at most twice what it costs full, 68
// bytes per queued message, not the four times blocks merged only below a
// quarter full would cost.
func TestIndexMemoryBoundedAfterTimersFire(t *testing.T) {
	const n = 200_000
	rng := rand.New(rand.NewPCG(1, 2))
	var b builder
	ents := make([]Entry, n)
	for i := range ents {
		var e Entry
		binary.BigEndian.PutUint64(e.ID[:8], uint64(i)) // creation order
		e.VisibleAtMs = rng.Int64N(1 << 40)             // fire time: random
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
	if limit := float64(indexBlockBytes*(2*x.n/blockCap+1)) / float64(x.n); after > limit {
		t.Errorf("the index costs %.1f bytes per queued message after most timers fired (%.1f full): more than half-full blocks (%.1f)", after, full, limit)
	}
	for bi, blk := range x.blocks[:len(x.blocks)-1] {
		if len(blk.ents) < minFill {
			t.Fatalf("block %d of %d holds %d entries, fewer than minFill (%d)", bi, len(x.blocks), len(blk.ents), minFill)
		}
	}
}
