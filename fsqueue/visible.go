package fsqueue

import (
	"container/heap"
	"slices"
	"strings"
)

// The visibility index splits the message index in two, so that finding
// visible work does not walk past messages that are not visible yet (a
// queue of 100,000 far-future timers and a handful of due messages is
// the normal state of a workflow engine):
//
//   - visible: the entries whose header VisibleAtMs is at most horizon,
//     sorted by name (FIFO), handed out by ListVisible as a shared
//     snapshot (copy-on-write, like sorted);
//   - later: the other entries, in a min-heap by (VisibleAtMs, name).
//
// horizon is the largest time ListVisible was asked about. Message files
// are immutable, so an entry only ever moves from later to visible, when a
// call passes a later time: a fetch costs O(log n) per message that became
// due since the previous one, not O(delayed messages). Every change to the
// index (relistLocked, insertSorted, removeEntry) keeps the two parts in
// step with it; after an index error the next relist rebuilds them (see
// listCache). All of it runs under q.list.mu.

// ListVisible returns the messages whose header visibility time is at most
// nowMs (ms since the epoch), sorted by name (FIFO), without scanning the
// messages that are not visible yet. Like [Queue.List] it refreshes the
// index first, and the returned slice and its Attrs maps are shared and
// immutable. A claim may still override a message's visibility (see
// [Claim]); ListVisible judges the header only.
//
// Calls with non-decreasing nowMs are the fast path; a call with an earlier
// time than a previous one (a clock stepped back, or callers with different
// clocks) filters a copy of the visible set instead.
func (q *Queue) ListVisible(nowMs int64) ([]Entry, error) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := q.refreshLocked(); err != nil {
		return nil, err
	}
	if !c.visOn {
		// Built on first use, so a queue only ever listed whole (or only
		// claimed from) keeps no second index.
		c.visOn = true
		c.horizon = nowMs
		q.rebuildVisibleLocked()
	}
	if nowMs < c.horizon {
		out := make([]Entry, 0, len(c.visible))
		for _, e := range c.visible {
			if e.VisibleAtMs <= nowMs {
				out = append(out, e)
			}
		}
		return out, nil
	}
	q.promoteLocked(nowMs)
	c.visShared = true
	return c.visible, nil
}

// promoteLocked moves the entries due at nowMs (> horizon) from later into
// visible and advances horizon.
func (q *Queue) promoteLocked(nowMs int64) {
	c := &q.list
	if nowMs <= c.horizon {
		return
	}
	c.horizon = nowMs
	var due []Entry
	for c.later.Len() > 0 && c.later.items[0].VisibleAtMs <= nowMs {
		due = append(due, heap.Pop(&c.later).(Entry))
	}
	switch {
	case len(due) == 0:
	case len(due) <= promoteInsertMax:
		for _, e := range due {
			q.insertVisible(e)
		}
	default:
		// Many at once (a burst of timers, or the first call after a full
		// listing): one merge, O(visible + due log due).
		slices.SortFunc(due, compareNames)
		c.visible = mergeByName(c.visible, due)
		c.visShared = false
	}
}

// promoteInsertMax is how many due entries are inserted one by one (each
// a binary search and a move of the tail) rather than merged.
const promoteInsertMax = 8

// rebuildVisibleLocked recomputes visible and later from sorted (after a
// full listing).
func (q *Queue) rebuildVisibleLocked() {
	c := &q.list
	c.visible = make([]Entry, 0, len(c.sorted))
	c.visShared = false
	c.later.reset()
	for _, e := range c.sorted {
		if e.VisibleAtMs <= c.horizon {
			c.visible = append(c.visible, e)
		} else {
			c.later.push(e)
		}
	}
	heap.Init(&c.later)
}

// addVisibleLocked puts a new index entry into visible or later.
func (q *Queue) addVisibleLocked(e Entry) {
	c := &q.list
	if e.VisibleAtMs <= c.horizon {
		q.insertVisible(e)
		return
	}
	heap.Push(&c.later, e)
}

// removeVisibleLocked drops an index entry (as it was indexed) from
// visible or later.
func (q *Queue) removeVisibleLocked(e Entry) {
	c := &q.list
	if e.VisibleAtMs > c.horizon {
		if i, ok := c.later.pos[e.Name]; ok {
			heap.Remove(&c.later, i)
		}
		return
	}
	removeByName(&c.visible, &c.visShared, e.Name)
}

func (q *Queue) insertVisible(e Entry) {
	insertByName(&q.list.visible, &q.list.visShared, e)
}

// insertByName inserts e into the name-ordered slice *s, copying it first
// if *shared (copy-on-write: a slice handed out is never modified). It
// reports false if the name was already there.
func insertByName(s *[]Entry, shared *bool, e Entry) bool {
	i, found := slices.BinarySearchFunc(*s, e.Name, entryName)
	if found {
		return false
	}
	own(s, shared)
	*s = slices.Insert(*s, i, e)
	return true
}

// removeByName removes name from the name-ordered slice *s (copy-on-write
// as insertByName).
func removeByName(s *[]Entry, shared *bool, name string) {
	if i, found := slices.BinarySearchFunc(*s, name, entryName); found {
		own(s, shared)
		*s = slices.Delete(*s, i, i+1)
	}
}

// own makes *s safe to modify: a copy if it was handed out.
func own(s *[]Entry, shared *bool) {
	if *shared {
		*s = slices.Clone(*s)
		*shared = false
	}
}

func entryName(x Entry, name string) int { return strings.Compare(x.Name, name) }
func compareNames(a, b Entry) int        { return strings.Compare(a.Name, b.Name) }

// mergeByName merges two name-sorted slices into a new one (a name in
// both is kept once).
func mergeByName(a, b []Entry) []Entry {
	out := make([]Entry, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch strings.Compare(a[i].Name, b[j].Name) {
		case -1:
			out = append(out, a[i])
			i++
		case 1:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// laterHeap is a min-heap of entries by (VisibleAtMs, Name) that can
// remove an entry by name (container/heap with a position map).
type laterHeap struct {
	items []Entry
	pos   map[string]int
}

func (h *laterHeap) reset() {
	h.items = h.items[:0]
	h.pos = map[string]int{}
}

// push appends without restoring the heap order (call heap.Init after).
func (h *laterHeap) push(e Entry) {
	if h.pos == nil {
		h.pos = map[string]int{}
	}
	h.pos[e.Name] = len(h.items)
	h.items = append(h.items, e)
}

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (h *laterHeap) Len() int { return len(h.items) }
func (h *laterHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.VisibleAtMs != b.VisibleAtMs {
		return a.VisibleAtMs < b.VisibleAtMs
	}
	return a.Name < b.Name
}
func (h *laterHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i].Name] = i
	h.pos[h.items[j].Name] = j
}
func (h *laterHeap) Push(x any) { h.push(x.(Entry)) }
func (h *laterHeap) Pop() any {
	n := len(h.items) - 1
	e := h.items[n]
	h.items[n] = Entry{} // drop the Attrs reference
	h.items = h.items[:n]
	delete(h.pos, e.Name)
	return e
}
