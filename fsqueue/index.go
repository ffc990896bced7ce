package fsqueue

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/oklog/ulid/v2"
)

// Entry is one message in the queue's index: what its name says. It is
// 32 bytes and holds no pointer, so the index costs a few dozen bytes per
// message and nothing for the garbage collector to scan.
type Entry struct {
	// ID is the message's ULID, the first part of its name; it orders the
	// queue (FIFO).
	ID ulid.ULID
	// VisibleAtMs is the visibility time the name carries (ms since the
	// epoch, clamped to [0, MaxVisibleAtMs]): the message's VisibleAtMs.
	VisibleAtMs int64
	// Route is the route hash the name carries: RouteOf the value of the
	// queue's Options.IndexAttr attribute (0 if none). Equal routes mean
	// "maybe the same value": only the body says which (see RouteOf).
	Route uint64
}

// compare orders entries as their names sort: by ULID, then visibility
// time, then route.
func (e Entry) compare(o Entry) int {
	if c := cmp.Compare(binary.BigEndian.Uint64(e.ID[:8]), binary.BigEndian.Uint64(o.ID[:8])); c != 0 {
		return c
	}
	if c := cmp.Compare(binary.BigEndian.Uint64(e.ID[8:]), binary.BigEndian.Uint64(o.ID[8:])); c != 0 {
		return c
	}
	if c := cmp.Compare(e.VisibleAtMs, o.VisibleAtMs); c != 0 {
		return c
	}
	return cmp.Compare(e.Route, o.Route)
}

func (e Entry) less(o Entry) bool { return e.compare(o) < 0 }

// The index is a list of blocks of entries, each block sorted and every
// entry of a block ordered before every entry of the next (a one-level
// B-tree). Per block it keeps the least visibility time of its entries, so
// that finding visible work skips whole blocks of messages that are not due
// (a queue of a million far-future timers and a handful of due messages is
// the normal state of a workflow engine), and a Bloom filter of its routes,
// so that finding one route's messages (one instance's) looks into the few
// blocks that may hold them. Blocks are allocated whole (blockCap entries),
// never grown, so building or growing the index never copies it, and new
// names (which mostly sort last) fill the last block and open new ones.
//
// Every block but the last is at least half full: a listing fills every
// block but the last, a split leaves two halves, and a block that a removal
// leaves below half (minFill) is merged with a neighbour when the two fit
// in one block, or else shares the two blocks' entries evenly with it. A
// block costs its whole capacity whatever it holds, so this is what bounds
// the index's memory by what it holds rather than by what it once held (a
// queue of timers whose earlier three quarters fired, scattered over every
// block, would otherwise keep every block at a quarter full).
//
// Costs, for n messages in at most 2n/blockCap+1 blocks: insert and remove
// O(log n + blockCap); the visible walk O(blocks skipped + entries
// returned); a route lookup O(n/blockCap) filter probes (one word each)
// plus the blocks that pass; memory 34 KiB a block: 34 bytes per entry
// when the blocks are full (as a listing builds them), at most 68 plus one
// block's 34 KiB however the entries came and went. All of it runs under
// the queue's list lock.
type index struct {
	blocks []*block
	n      int
}

const (
	// blockCap is the capacity of a block (32 KiB of entries).
	blockCap = 1024
	// minFill: a block that a removal leaves with fewer entries is merged
	// with a neighbour, or shares its neighbour's entries (rebalance), so
	// that every block but the last holds at least minFill.
	minFill = blockCap / 2
	// bloomWords is the size of a block's route filter: 16 bits per entry
	// of a full block; a key sets 4 bits of one word (a blocked Bloom
	// filter: one memory access per probe), about 0.3 % false positives.
	bloomWords = blockCap / 4
)

type block struct {
	ents []Entry // sorted; never empty in an index; capacity blockCap
	// minVis is the least VisibleAtMs of ents.
	minVis int64
	// stale counts the removals since bloom was rebuilt: a filter keeps
	// the bits of removed routes (more false positives, never a miss).
	stale int
	bloom [bloomWords]uint64
}

func newBlock() *block { return &block{ents: make([]Entry, 0, blockCap), minVis: math.MaxInt64} }

// bloomProbe is where route r's bits are in a block filter.
func bloomProbe(r uint64) (word int, mask uint64) {
	// The route is a hash already: its bits are used directly.
	word = int(r & (bloomWords - 1))
	mask = 1<<(r>>8&63) | 1<<(r>>14&63) | 1<<(r>>20&63) | 1<<(r>>26&63)
	return word, mask
}

func (b *block) addRoute(r uint64) {
	w, m := bloomProbe(r)
	b.bloom[w] |= m
}

func (b *block) mayHold(r uint64) bool {
	w, m := bloomProbe(r)
	return b.bloom[w]&m == m
}

// rebuild recomputes minVis and the filter from ents.
func (b *block) rebuild() {
	b.bloom = [bloomWords]uint64{}
	b.stale = 0
	for _, e := range b.ents {
		b.addRoute(e.Route)
	}
	b.minVis = minVisible(b.ents)
}

func minVisible(ents []Entry) int64 {
	m := int64(math.MaxInt64)
	for _, e := range ents {
		m = min(m, e.VisibleAtMs)
	}
	return m
}

func (b *block) last() Entry { return b.ents[len(b.ents)-1] }

// search returns the position of the first block whose last entry is not
// before e (len(blocks) if e sorts after every entry) and, in it, the
// position of the first entry not before e, and whether that entry is e.
func (x *index) search(e Entry) (bi, i int, found bool) {
	bi = sort.Search(len(x.blocks), func(k int) bool { return x.blocks[k].last().compare(e) >= 0 })
	if bi == len(x.blocks) {
		return bi, 0, false
	}
	i, found = slices.BinarySearchFunc(x.blocks[bi].ents, e, Entry.compare)
	return bi, i, found
}

// insert adds e; false if it is there already.
func (x *index) insert(e Entry) bool {
	bi, i, found := x.search(e)
	if found {
		return false
	}
	if bi == len(x.blocks) {
		// After every entry: the last block, or a new one.
		if bi == 0 || len(x.blocks[bi-1].ents) == blockCap {
			x.blocks = append(x.blocks, newBlock())
		} else {
			bi--
		}
		i = len(x.blocks[bi].ents)
	}
	b := x.blocks[bi]
	if len(b.ents) == blockCap {
		// Split the block in two halves and insert into the right one.
		nb := newBlock()
		nb.ents = append(nb.ents, b.ents[blockCap/2:]...)
		clear(b.ents[blockCap/2:])
		b.ents = b.ents[:blockCap/2]
		b.rebuild()
		nb.rebuild()
		x.blocks = slices.Insert(x.blocks, bi+1, nb)
		if i > blockCap/2 {
			b, i = nb, i-blockCap/2
		}
	}
	b.ents = slices.Insert(b.ents, i, e)
	b.addRoute(e.Route)
	b.minVis = min(b.minVis, e.VisibleAtMs)
	x.n++
	return true
}

// remove drops e; false if it was not there.
func (x *index) remove(e Entry) bool {
	bi, i, found := x.search(e)
	if !found {
		return false
	}
	b := x.blocks[bi]
	b.ents = slices.Delete(b.ents, i, i+1)
	x.n--
	if len(b.ents) == 0 {
		x.blocks = slices.Delete(x.blocks, bi, bi+1)
		return true
	}
	if b.stale++; b.stale > len(b.ents)/2 {
		b.rebuild()
	} else if e.VisibleAtMs == b.minVis {
		b.minVis = minVisible(b.ents)
	}
	if len(b.ents) < minFill {
		x.rebalance(bi)
	}
	return true
}

// rebalance brings block bi, which holds fewer than minFill entries, to at
// least minFill, unless it is the only block: it joins a neighbour if the
// two fit in one block, or else shares the entries of the two evenly with
// its right neighbour (its left one for the last block). The two then hold
// more than blockCap entries, so each gets more than minFill.
func (x *index) rebalance(bi int) {
	for _, j := range []int{bi + 1, bi - 1} {
		if j < 0 || j >= len(x.blocks) {
			continue
		}
		lo, hi := min(bi, j), max(bi, j)
		a, b := x.blocks[lo], x.blocks[hi]
		if len(a.ents)+len(b.ents) > blockCap {
			continue
		}
		a.ents = append(a.ents, b.ents...)
		a.rebuild()
		x.blocks = slices.Delete(x.blocks, hi, hi+1)
		return
	}
	lo := bi
	if bi+1 == len(x.blocks) {
		lo = bi - 1
	}
	if lo < 0 {
		return // the only block
	}
	a, b := x.blocks[lo], x.blocks[lo+1]
	keep := (len(a.ents) + len(b.ents)) / 2 // a's share; b gets the rest
	if k := keep - len(a.ents); k > 0 {
		// a takes b's first k entries.
		a.ents = append(a.ents, b.ents[:k]...)
		b.ents = slices.Delete(b.ents, 0, k)
	} else {
		// b takes a's last -k entries (within its capacity: it ends with
		// at most blockCap).
		b.ents = slices.Insert(b.ents, 0, a.ents[keep:]...)
		clear(a.ents[keep:])
		a.ents = a.ents[:keep]
	}
	a.rebuild()
	b.rebuild()
}

// after returns the position of the first entry after e.
func (x *index) after(e Entry) (bi, i int) {
	bi, i, found := x.search(e)
	if found {
		i++
		if i == len(x.blocks[bi].ents) {
			bi, i = bi+1, 0
		}
	}
	return bi, i
}

// visible appends to out, in name order, the entries visible at nowMs
// (VisibleAtMs <= nowMs) after the entry from (all of them if !hasFrom),
// until out is full; blocks with nothing due are skipped whole.
func (x *index) visible(nowMs int64, from Entry, hasFrom bool, out []Entry) []Entry {
	bi, i := 0, 0
	if hasFrom {
		bi, i = x.after(from)
	}
	for ; bi < len(x.blocks) && len(out) < cap(out); bi, i = bi+1, 0 {
		b := x.blocks[bi]
		if b.minVis > nowMs {
			continue
		}
		for _, e := range b.ents[i:] {
			if e.VisibleAtMs <= nowMs {
				out = append(out, e)
				if len(out) == cap(out) {
					break
				}
			}
		}
	}
	return out
}

// earliest returns the least VisibleAtMs of all entries (math.MaxInt64 if
// there are none).
func (x *index) earliest() int64 {
	at := int64(math.MaxInt64)
	for _, b := range x.blocks {
		at = min(at, b.minVis)
	}
	return at
}

// route appends to out, in name order, the entries whose route is r.
func (x *index) route(r uint64, out []Entry) []Entry {
	for _, b := range x.blocks {
		if !b.mayHold(r) {
			continue
		}
		for _, e := range b.ents {
			if e.Route == r {
				out = append(out, e)
			}
		}
	}
	return out
}

// builder builds an index from entries in any order (a directory listing):
// they fill whole blocks as they come, are then sorted in place across the
// blocks, so a listing of n messages allocates the index once and nothing
// more (no growing array, no second copy to sort into).
type builder struct {
	blocks []*block
	n      int
}

func (b *builder) add(e Entry) {
	if len(b.blocks) == 0 || len(b.blocks[len(b.blocks)-1].ents) == blockCap {
		b.blocks = append(b.blocks, newBlock())
	}
	last := b.blocks[len(b.blocks)-1]
	last.ents = append(last.ents, e)
	b.n++
}

// finish sorts the entries, drops duplicates (a directory listed while it
// changes may name an entry twice) and returns the index.
func (b *builder) finish() *index {
	s := chunked(b.blocks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0)-1)
	s.psort(0, b.n, 2*bits.Len(uint(b.n)), sem, &wg)
	wg.Wait()
	n := b.n
	if n > 1 {
		w := 1
		for r := 1; r < n; r++ {
			if *s.at(r) != *s.at(w - 1) {
				*s.at(w) = *s.at(r)
				w++
			}
		}
		n = w
	}
	// Cut the blocks to n entries; every block but the last stays full.
	nb := (n + blockCap - 1) / blockCap
	clear(b.blocks[nb:])
	blocks := b.blocks[:nb]
	for k, blk := range blocks {
		blk.ents = blk.ents[:min(blockCap, n-k*blockCap)]
		blk.rebuild()
	}
	return &index{blocks: blocks, n: n}
}

// chunked is the entries of a builder's full blocks seen as one array.
type chunked []*block

func (c chunked) at(i int) *Entry { return &c[i/blockCap].ents[i%blockCap] }

// parallelMin is the smallest range whose sorting psort hands to another
// goroutine.
const parallelMin = 1 << 15

// psort is sort on several CPUs: a partition step whose smaller part is
// large is sorted by another goroutine while a slot of sem is free (the
// parts are disjoint ranges of the array).
func (c chunked) psort(lo, hi, depth int, sem chan struct{}, wg *sync.WaitGroup) {
	for hi-lo > parallelMin && depth > 0 {
		depth--
		i, j := c.partition(lo, hi)
		// The smaller part goes elsewhere if it can; the loop goes on with
		// the larger.
		slo, shi := lo, j+1
		if j-lo >= hi-i {
			slo, shi = i, hi
			hi = j + 1
		} else {
			lo = i
		}
		select {
		case sem <- struct{}{}:
			wg.Add(1)
			go func(d int) {
				defer wg.Done()
				c.psort(slo, shi, d, sem, wg)
				<-sem
			}(depth)
		default:
			c.psort(slo, shi, depth, sem, wg)
		}
	}
	c.sort(lo, hi, depth)
}

// partition partitions [lo, hi) (hi-lo >= 2) around a median of three:
// afterwards every entry of [lo, j] is at most the pivot, every one of
// [i, hi) at least, and j < i.
func (c chunked) partition(lo, hi int) (i, j int) {
	mid := lo + (hi-lo)/2
	a, m, z := c.at(lo), c.at(mid), c.at(hi-1)
	if m.less(*a) {
		*a, *m = *m, *a
	}
	if z.less(*m) {
		*m, *z = *z, *m
		if m.less(*a) {
			*a, *m = *m, *a
		}
	}
	p := *m
	i, j = lo, hi-1
	for i <= j {
		for c.at(i).less(p) {
			i++
		}
		for p.less(*c.at(j)) {
			j--
		}
		if i <= j {
			x, y := c.at(i), c.at(j)
			*x, *y = *y, *x
			i++
			j--
		}
	}
	return i, j
}

// sort sorts [lo, hi) in place: a quicksort whose ranges inside one block
// go to slices.SortFunc (most of the work, on contiguous memory), with a
// heapsort fallback after depth levels (no quadratic case).
func (c chunked) sort(lo, hi, depth int) {
	for hi-lo > 1 {
		if lo/blockCap == (hi-1)/blockCap {
			slices.SortFunc(c[lo/blockCap].ents[lo%blockCap:(hi-1)%blockCap+1], Entry.compare)
			return
		}
		if depth == 0 {
			sort.Sort(chunkRange{c, lo, hi})
			return
		}
		depth--
		i, j := c.partition(lo, hi)
		// Recurse into the smaller part, loop on the larger.
		if j-lo < hi-i {
			c.sort(lo, j+1, depth)
			lo = i
		} else {
			c.sort(i, hi, depth)
			hi = j + 1
		}
	}
}

// chunkRange is [lo, hi) of a chunked array as a sort.Interface (the
// fallback of chunked.sort).
type chunkRange struct {
	c      chunked
	lo, hi int
}

func (r chunkRange) Len() int           { return r.hi - r.lo }
func (r chunkRange) Less(i, j int) bool { return r.c.at(r.lo + i).less(*r.c.at(r.lo + j)) }
func (r chunkRange) Swap(i, j int) {
	x, y := r.c.at(r.lo+i), r.c.at(r.lo+j)
	*x, *y = *y, *x
}
