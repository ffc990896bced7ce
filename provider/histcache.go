package provider

import (
	"container/list"
	"slices"
	"sync"

	"github.com/durofs/durofs/history"
)

// histCacheBytes bounds the history files whose decoded events a process
// keeps (the sum of their sizes; the events take about as much again).
const histCacheBytes = 8 << 20

// histCache keeps the decoded events of the executions a process read
// last, each with the history.Mark of the bytes they came from, so that
// reading a history again decodes only the events appended since
// (history.Log.ReadAfter): a long orchestration's turns (a fan-out's
// hundreds of completions) would otherwise decode its whole history again
// at every turn, in every process. It is a cache of what the file said,
// never a source of truth: every read still reads state.json's committed
// count and the whole file, and uses the cached events only if the file
// still begins with the very bytes they were decoded from (same length and
// CRC-32C); a file cut, emptied, rewritten, replaced or removed is decoded
// afresh, with every check a whole read makes.
// Least recently used entries go first.
type histCache struct {
	mu    sync.Mutex
	bytes int64
	lru   list.List // of *histEntry, most recent first
	m     map[histKey]*list.Element
}

type histKey struct {
	key  string
	exec uint64
}

type histEntry struct {
	k      histKey
	mark   history.Mark
	events []Event // never changed after it is stored: extended by copy
}

// get returns the cached entry of k (its events are shared: callers copy).
func (c *histCache) get(k histKey) (history.Mark, []Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		return history.Mark{}, nil, false
	}
	c.lru.MoveToFront(el)
	e := el.Value.(*histEntry)
	return e.mark, e.events, true
}

// put stores events as what the file holds up to mark.
func (c *histCache) put(k histKey, mark history.Mark, events []Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[histKey]*list.Element{}
	}
	if el, ok := c.m[k]; ok {
		c.bytes -= el.Value.(*histEntry).mark.Size
		c.lru.Remove(el)
		delete(c.m, k)
	}
	if mark.Size > histCacheBytes/4 {
		return // one huge history would push everything else out
	}
	c.m[k] = c.lru.PushFront(&histEntry{k: k, mark: mark, events: events})
	c.bytes += mark.Size
	for c.bytes > histCacheBytes {
		el := c.lru.Back()
		e := el.Value.(*histEntry)
		c.bytes -= e.mark.Size
		c.lru.Remove(el)
		delete(c.m, e.k)
	}
}

// drop forgets k.
func (c *histCache) drop(k histKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		c.bytes -= el.Value.(*histEntry).mark.Size
		c.lru.Remove(el)
		delete(c.m, k)
	}
}

// loadHistoryCached is loadHistory through the cache: it reads the file,
// checks that it still begins with the bytes the cached events came from
// (history.Log.ReadAfter: their length and CRC-32C), decodes only the
// records after them, checks the total against the committed count, and
// returns a copy of the cached events extended by the new ones. Without an
// entry it reads and decodes the whole file the same way. Anything unusual
// - a moved file, a corrupt or undecodable record, fewer records than
// committed, an I/O error - returns ok false, and loadHistory reads the
// file again as it always did, to report what is wrong.
func (p *FSProvider) loadHistoryCached(key string, exec uint64, committed int) ([]Event, bool) {
	k := histKey{key, exec}
	mark, cached, _ := p.hist.get(k)
	s, next, err := history.Open(p.fs, p.historyPath(key, exec)).ReadAfter(mark)
	if err != nil || next.Records < committed {
		p.hist.drop(k)
		return nil, false
	}
	if len(s.Records) == 0 {
		return slices.Clone(cached), true
	}
	events := make([]Event, len(cached), len(cached)+len(s.Records))
	copy(events, cached)
	for _, r := range s.Records {
		var ev Event
		// Not json.Unmarshal, which would check the payload's syntax once
		// more before UnmarshalJSON checks it.
		if err := ev.UnmarshalJSON(r.Payload); err != nil {
			p.hist.drop(k)
			return nil, false
		}
		events = append(events, ev)
	}
	p.hist.put(k, next, events)
	return slices.Clone(events), true
}
