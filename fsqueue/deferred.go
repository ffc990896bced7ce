package fsqueue

import (
	"iter"
	"math"
	"sync"
)

// Deferrals: what this Queue knows, in memory, of messages that are
// visible by their names but will not be due before a later time - a
// claim's VisibleAtMs (an Abandon with a delay, [Claim]), or a delay its
// caller keeps elsewhere and reports with [Queue.Defer] (the provider's
// instance leases). [Queue.Due] leaves such a message out until then
// without reading anything, and [Queue.Quiet] counts it as not visible, so
// a poll over a queue of delayed messages neither reads their claims nor
// polls faster than when the queue holds only timers.
//
// A deferral is a hint, never a decision: every message handed out is
// decided on a fresh read under its lock, and a deferral only makes this
// process pass a message over until its time. So that it never hides a
// message longer than the delay it stands for, it is dropped when the
// message's claim changes: by a write or removal of the claim through this
// Queue (ClaimNext, Renew, Abandon, [ClaimGuard.Write], [ClaimGuard.Remove],
// [Queue.Delete]), and by any change of the claim file that the watch of
// claims/ reports (Linux), including other processes' writes; all of them
// when that watch lost events or was dropped, and on [Queue.Invalidate].
// Without a watch of claims/, a deferral learned from another process's
// claim lasts until its time: a claim that another process changes to make
// the message visible earlier (only a [ClaimGuard.Write] can: an abandoned
// claim holds no token, so nobody renews or abandons it, and ClaimNext
// takes it only once it is due) is seen by this process at the latest when
// the delay it read runs out.
//
// Memory is bounded: at most deferCap deferrals are held (about 50 bytes
// each). A deferral goes when its time comes (the walk that meets it drops
// it), when its message goes, or when its claim changes (above). When the
// table is full, those that have come due are swept out, at most once per
// deferSweepEveryMs; if it is still full a new deferral is not kept, and
// its message costs a read of its claim on every pass, as without the
// table.
type deferrals struct {
	mu sync.Mutex
	m  map[Entry]int64 // message -> not due before (ms since the epoch)
	// minAt is at most the least value of m (math.MaxInt64 when m is empty).
	minAt int64
	// sweptAt is when (queue clock, ms) a full table was last swept.
	sweptAt int64
	// changes counts the calls of set and drop (a claim written or
	// removed through this Queue, a Defer, a message deleted): a deferral
	// learnt from a claim read (learn) is kept only if none happened since
	// the read began, so that a write racing the read - which dropped
	// nothing yet - is not undone by the deferral of what it replaced.
	changes uint64
}

// deferCap bounds the deferrals a Queue holds (a variable for the test of
// the bound).
var deferCap = 1 << 17

// deferSweepEveryMs bounds how often a full table is swept for deferrals
// that came due.
const deferSweepEveryMs = 1000

// set records that e is not due before at (as known at nowMs). A time
// that is not after nowMs or after the name's own visibility time drops
// what was known of e.
func (d *deferrals) set(e Entry, at, nowMs int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.changes++
	d.setLocked(e, at, nowMs)
}

// version returns the count of changes, for learn.
func (d *deferrals) version() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changes
}

// learn is set for a deferral read from a claim whose read began when the
// count of changes was since (version): it is kept only if no set or drop
// happened meanwhile.
func (d *deferrals) learn(e Entry, at, nowMs int64, since uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changes == since {
		d.setLocked(e, at, nowMs)
	}
}

// setLocked is set without counting it. The caller holds d.mu.
func (d *deferrals) setLocked(e Entry, at, nowMs int64) {
	if at <= nowMs || at <= e.VisibleAtMs {
		delete(d.m, e)
		return
	}
	if _, ok := d.m[e]; !ok && len(d.m) >= deferCap {
		if nowMs < d.minAt || nowMs-d.sweptAt < deferSweepEveryMs {
			return
		}
		d.sweepLocked(nowMs)
		if len(d.m) >= deferCap {
			return
		}
	}
	if d.m == nil {
		d.m = map[Entry]int64{}
	}
	if len(d.m) == 0 {
		d.minAt = math.MaxInt64
	}
	d.m[e] = at
	d.minAt = min(d.minAt, at)
}

// sweepLocked drops the deferrals due at nowMs. The caller holds d.mu.
func (d *deferrals) sweepLocked(nowMs int64) {
	d.sweptAt = nowMs
	d.minAt = math.MaxInt64
	for e, at := range d.m {
		if at <= nowMs {
			delete(d.m, e)
		} else {
			d.minAt = min(d.minAt, at)
		}
	}
}

// drop forgets what was known of e.
func (d *deferrals) drop(e Entry) {
	d.mu.Lock()
	d.changes++
	delete(d.m, e)
	d.mu.Unlock()
}

// reset forgets everything.
func (d *deferrals) reset() {
	d.mu.Lock()
	d.m = nil
	d.mu.Unlock()
}

// len is the number of deferrals held.
func (d *deferrals) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// dueLocked reports whether e, visible by its name at nowMs, is due (not
// deferred past nowMs); a deferral that came due is dropped. The caller
// holds d.mu.
func (d *deferrals) dueLocked(e Entry, nowMs int64) bool {
	at, ok := d.m[e]
	if !ok {
		return true
	}
	if at <= nowMs {
		delete(d.m, e)
		return true
	}
	return false
}

// Defer tells this Queue that the message name, visible by its name, is
// not due before notBeforeMs (ms since the epoch, by the queue's clock):
// its caller keeps a delay of its own that the message's file and claim
// do not show (the provider's instance leases). Until then [Queue.Due]
// leaves it out and [Queue.Quiet] does not count it, in this Queue only;
// the deferral goes when its time comes, when the message is deleted or
// its claim changes through this Queue, and by [Queue.Undefer]. It is a
// hint: a caller that defers a message whose delay it then shortens must
// undefer it, or this Queue passes the message over until notBeforeMs.
// A name that is not a message name is ignored; so is a deferral beyond
// the bound of what a Queue holds (see deferred.go).
func (q *Queue) Defer(name string, notBeforeMs int64) {
	if e, ok := parseName(name); ok {
		q.deferred.set(e, notBeforeMs, q.clock.Now().UnixMilli())
	}
}

// Undefer drops what [Queue.Defer] (or a claim read or written through
// this Queue) told of message name.
func (q *Queue) Undefer(name string) {
	if e, ok := parseName(name); ok {
		q.deferred.drop(e)
	}
}

// noteClaim updates what is known of e's visibility from its claim c, just
// written or read at nowMs: an abandoned claim (no token, no state) whose
// VisibleAtMs is ahead defers the message until then; any other claim
// drops its deferral.
func (q *Queue) noteClaim(e Entry, c *Claim, nowMs int64) {
	if c != nil && c.Token == "" && c.State == "" && c.VisibleAtMs > nowMs {
		q.deferred.set(e, c.VisibleAtMs, nowMs)
		return
	}
	q.deferred.drop(e)
}

// Due is [Queue.Visible] without the messages deferred past nowMs (see
// [Queue.Defer]; a claim's delay that this Queue wrote or read): the walk
// of consumers that look for work. It passes over a deferred message
// without reading anything, so a queue of delayed messages costs a
// consumer's pass no file reads.
func (q *Queue) Due(nowMs int64) iter.Seq2[Entry, error] { return q.walk(nowMs, true) }

// quietUntilLocked is what [Queue.Quiet] says of a queue that has entries
// visible by their names at nowMs: quiet if every one of them is deferred
// past nowMs, until the earliest moment a message becomes visible by its
// name or comes due. The caller holds q.list.mu.
func (q *Queue) quietUntilLocked(nowMs int64) (untilMs int64, quiet bool) {
	d := &q.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.m) == 0 {
		return 0, false
	}
	untilMs = math.MaxInt64
	for _, b := range q.list.idx.blocks {
		if b.minVis > nowMs {
			untilMs = min(untilMs, b.minVis)
			continue
		}
		for _, e := range b.ents {
			if e.VisibleAtMs > nowMs {
				untilMs = min(untilMs, e.VisibleAtMs)
				continue
			}
			at, ok := d.m[e]
			if !ok || at <= nowMs {
				return 0, false
			}
			untilMs = min(untilMs, at)
		}
	}
	return untilMs, true
}
