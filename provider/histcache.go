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
// reading a history again reads and decodes only the events appended since
// (history.Log.ReadAfter): a long orchestration's turns (a fan-out's
// thousands of completions) would otherwise read, check and decode its
// whole history at every fetch and every ack, in every process.
//
// Why the cached events stay true: an entry is keyed on the execution's
// generation (executionFile.Generation), and is used only under the
// instance flock, after redoPending, with the generation just read from
// state.json. While an execution keeps its generation its history file is
// one append-only log - the applies append at the committed position, a
// repair cuts only a torn tail no mark covers, and a replay (which rewrites
// records with the bytes they had) runs only at Open in a process that has
// the directory alone, before it cached anything - so the bytes a mark
// covers never change under an entry. A
// history removed and created anew (an instance deleted and started again)
// comes with a new state.json and so a new generation, never read through
// an old entry. What ReadAfter can see cheaply it still checks (the file
// reaches the mark, a line ends there); anything unusual - a moved file, a
// corrupt or undecodable record, fewer records than committed, an I/O
// error - drops the entry and the history is read whole, with every check.
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
	gen  string // the execution's generation
}

type histEntry struct {
	k    histKey
	mark history.Mark
	// events are the decoded records and ids their record ids (as the
	// frames say, which ack validation uses). Neither is changed after it
	// is stored: an entry is extended by copy.
	events []Event
	ids    []uint64
}

// get returns the cached entry of k (shared: callers copy).
func (c *histCache) get(k histKey) (*histEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*histEntry), true
}

// put stores e as what the file holds up to e.mark.
func (c *histCache) put(e *histEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[histKey]*list.Element{}
	}
	if el, ok := c.m[e.k]; ok {
		c.bytes -= el.Value.(*histEntry).mark.Size
		c.lru.Remove(el)
		delete(c.m, e.k)
	}
	if e.mark.Size > histCacheBytes/4 {
		return // one huge history would push everything else out
	}
	c.m[e.k] = c.lru.PushFront(e)
	c.bytes += e.mark.Size
	for c.bytes > histCacheBytes {
		el := c.lru.Back()
		old := el.Value.(*histEntry)
		c.bytes -= old.mark.Size
		c.lru.Remove(el)
		delete(c.m, old.k)
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

// loadHistoryCached is loadHistory through the cache, for a caller holding
// the instance flock: it reads the records after the cached mark
// (history.Log.ReadAfter), checks the total against the committed count,
// and returns a copy of the cached events extended by the new ones.
// Without an entry it reads and decodes the whole file the same way. An
// execution without a generation is not cached. Anything unusual returns
// ok false, and loadHistory reads the file again as it always did, to
// report what is wrong.
func (p *FSProvider) loadHistoryCached(key string, exec uint64, gen string, committed int) ([]Event, bool) {
	if gen == "" {
		return nil, false
	}
	k := histKey{key, exec, gen}
	e, _ := p.hist.get(k)
	if e == nil {
		e = &histEntry{k: k}
	}
	s, next, err := history.Open(p.fs, p.historyPath(key, exec)).ReadAfter(e.mark)
	if err != nil || next.Records < committed {
		p.hist.drop(k)
		return nil, false
	}
	if len(s.Records) == 0 {
		return slices.Clone(e.events), true
	}
	n := &histEntry{k: k, mark: next,
		events: make([]Event, len(e.events), next.Records),
		ids:    make([]uint64, len(e.ids), next.Records)}
	copy(n.events, e.events)
	copy(n.ids, e.ids)
	for _, r := range s.Records {
		var ev Event
		// Not json.Unmarshal, which would check the payload's syntax once
		// more before UnmarshalJSON checks it.
		if err := ev.UnmarshalJSON(r.Payload); err != nil {
			p.hist.drop(k)
			return nil, false
		}
		n.events = append(n.events, ev)
		n.ids = append(n.ids, r.ID)
	}
	p.hist.put(n)
	return slices.Clone(n.events), true
}

// historyEnd returns what an ack extending an execution's history needs,
// under the instance flock after redoPending: the record ids of the
// history (from the record frames, so an ack works even when stored events
// no longer decode) and the mark at its end, where the ack's events go.
// It reads through the cache as loadHistoryCached does, but reads the file
// whole, and caches nothing, when there is no entry.
//
// A complete line that fails its CRC (a damaged record: a flipped bit, a bad
// page) does not stop the ack (contract §2.5 step 7, §10.3: the ack is
// append-only and succeeds over corrupted rows; the runtime's only way out
// of a history it cannot read is the poison ack, OrchestrationFailed over
// it). The damaged line is a committed record whose bytes are wrong, not a
// missing one: it keeps its position, the end is after the last complete
// line (history.Log.End), the delta goes there, and nothing before it is
// written (the apply's AppendAtMark reads only what follows that mark, the
// replay's RewriteAtMark rewrites only from it). The ids are the valid
// records' and the id fields the damaged lines have, so that a delta never
// repeats an id the damaged line most likely holds. Every read still
// reports the damaged line (history_error, ErrCorrupt) and fsck still finds
// it. What stops an ack is a history with fewer complete lines than
// committed - records are missing, and the delta would land in their place
// (*history.TruncatedError) - or a log that cannot be used at all (a
// symbolic link: *history.CorruptError).
func (p *FSProvider) historyEnd(key string, exec uint64) (ids []uint64, end history.Mark, err error) {
	committed, gen, err := p.committedCount(key, exec)
	if err != nil {
		return nil, history.Mark{}, err
	}
	log := history.Open(p.fs, p.historyPath(key, exec))
	k := histKey{key, exec, gen}
	if e, ok := p.hist.get(k); ok && gen != "" {
		s, next, err := log.ReadAfter(e.mark)
		if err == nil && next.Records >= committed {
			ids = make([]uint64, len(e.ids), next.Records)
			copy(ids, e.ids)
			for _, r := range s.Records {
				ids = append(ids, r.ID)
			}
			return ids, next, nil
		}
		p.hist.drop(k)
	}
	// Read whole, through damaged lines: the end is after the last
	// complete line, damaged or not (history.Log.End).
	x, err := log.End()
	if err != nil {
		return nil, history.Mark{}, err
	}
	if x.End.Records < committed {
		return nil, history.Mark{}, &history.TruncatedError{Path: log.Path(), Records: x.End.Records - len(x.Damaged),
			Committed: committed, TornBytes: x.TornBytes}
	}
	return x.IDs, x.End, nil
}
