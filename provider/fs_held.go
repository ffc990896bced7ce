package provider

import (
	"context"
	"errors"
	"sync"
	"time"
)

// heldSet is what a process knows, without reading, of the instance locks
// it holds itself: an instance whose lock this process's fetch took - a
// turn or workflow task in flight - is held until its lease's expiry, so a
// fetch pass skips it without taking its flock and reading its lease. A
// pass would otherwise do that for every instance in flight, on every pass:
// a turn's own messages stay visible in the queue until its ack deletes
// them. (A CPU profile of go-workflows' bench scenario at 1 process put
// about a third of durofs's CPU time in fetch passes' flocks and lease
// reads.)
//
// It is a hint that only ever skips a look, never decides anything: an
// entry lives from the fetch that took the lock to the first ack, abandon,
// renew, completion or extension of that instance by this process (each
// drops it before it takes the flock; a renewal or extension that succeeds
// sets the new expiry), to the instance's reclaim in this process, or to
// the lease's expiry, whichever comes first. While it lives, the lease on
// disk is this process's unexpired one unless another process deleted the
// instance meanwhile (a forced deletion): then a new instance of the same
// id waits, in this process only, until this process's turn ends (its ack
// fails) or the old lease's expiry. No other process ever consults the set.
type heldSet struct {
	mu    sync.Mutex
	until map[string]int64 // instance key -> lease expiry (Unix ms)
}

// hold records that this process holds key's lock until untilMs.
func (h *heldSet) hold(key string, untilMs, nowMs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until == nil {
		h.until = map[string]int64{}
	}
	if len(h.until) >= 1024 && len(h.until)%1024 == 0 {
		// Entries of turns that were never acked (a caller that dropped
		// its item) go once they expire; the map holds what is in flight.
		for k, u := range h.until {
			if u <= nowMs {
				delete(h.until, k)
			}
		}
	}
	h.until[key] = untilMs
}

// drop forgets key: the next fetch pass looks at its lease. It returns the
// expiry it knew (0 if none).
func (h *heldSet) drop(key string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	until := h.until[key]
	delete(h.until, key)
	return until
}

// held reports whether this process holds key's lock at nowMs.
func (h *heldSet) held(key string, nowMs int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until[key] > nowMs
}

// peerSet is what a process learned, by reading, of instance locks held by
// other processes (or sticky to another go-workflows worker): a fetch pass
// that found an instance's lease held passes over the instance in later
// passes without taking its flock and reading its lease again, as long as
//
//   - the instance's oldest visible message in that queue is still the one
//     it was when the lease was read. The holder's ack, completion or
//     deletion removes the messages its turn consumed, which usually
//     include that one (they were visible when the holder fetched, and
//     stay until its ack), so a new oldest message means the lock may be
//     free and the next pass looks;
//   - the lease's expiry, as read, has not passed;
//   - and at most peerLookEvery has passed since the read. That bounds
//     what the first condition misses: a holder that releases the lock
//     without removing that message (a duroxide abandon), or whose turn
//     did not take it (a message an earlier abandon delayed; a holder
//     whose view of the queue lagged behind this process's). The holder's
//     own process drops its entry as it ends its turn (dropHeld) and
//     fetches the instance again at once.
//
// A fetch pass would otherwise take the flock and read the lease of every
// instance in flight in any process, in every pass of every poller: at 4
// go-workflows worker processes about 40 % of a worker's CPU went there
// (BENCHMARKS.md, "Session of 2026-11-27 (night)"). Like heldSet it only ever skips a look: the
// worst a wrong entry does is delay this process's fetch of an instance by
// peerLookEvery, while other processes and the holder fetch it. An entry of
// an instance sticky to a go-workflows worker never holds up that worker's
// own passes (several workers may share one process's provider).
type peerSet struct {
	mu sync.Mutex
	m  map[string]peerEntry // instance key -> what was read
}

type peerEntry struct {
	sticky  string // the go-workflows worker it is sticky to ("" if held)
	queue   string // the queue the pass met the instance in
	oldest  string // the instance's oldest visible message there when read
	untilMs int64  // skip until then (Unix ms)
}

// peerLookEvery bounds how long a pass skips an instance it found held
// elsewhere without looking again.
const peerLookEvery = 250 * time.Millisecond

// peerSetMax bounds the entries: when full, expired ones go; if none has,
// nothing is added (the passes then look, as without the set).
const peerSetMax = 4096

// note records that key's lock, whose oldest visible message in queue is
// oldest, is held elsewhere - or, if sticky is not empty, kept for that
// go-workflows worker - until untilMs (as read at nowMs).
func (s *peerSet) note(key, queue, oldest, sticky string, untilMs, nowMs int64) {
	untilMs = min(untilMs, nowMs+peerLookEvery.Milliseconds())
	if untilMs <= nowMs || oldest == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]peerEntry{}
	}
	if len(s.m) >= peerSetMax {
		for k, e := range s.m {
			if e.untilMs <= nowMs {
				delete(s.m, k)
			}
		}
		if len(s.m) >= peerSetMax {
			return
		}
	}
	s.m[key] = peerEntry{sticky: sticky, queue: queue, oldest: oldest, untilMs: untilMs}
}

// skip reports whether a pass (for go-workflows worker worker, or "") that
// meets key first through its message oldest in queue may pass over it
// without looking; an entry that no longer applies is dropped.
func (s *peerSet) skip(key, queue, oldest, worker string, nowMs int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok {
		return false
	}
	if e.untilMs <= nowMs || e.queue != queue || e.oldest != oldest {
		delete(s.m, key)
		return false
	}
	// An instance sticky to the asking worker is that worker's to fetch.
	return e.sticky == "" || e.sticky != worker
}

// drop forgets key.
func (s *peerSet) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// dropHeld forgets what this process knows of key's lock, before it ends,
// renews or extends its own turn on key: the heldSet entry, and a peerSet
// entry that a pass made while the heldSet had none (after an ack or
// abandon of this process's turn failed, a pass finds the lease still held
// - by this process).
func (p *FSProvider) dropHeld(key string) {
	p.held.drop(key)
	p.peers.drop(key)
}

// endHeld is dropHeld for a call that ends, renews or extends this
// process's turn on key under token, and returns the context that bounds
// its wait for key's flock (leaseWaitCtx, with the expiry the heldSet knew).
func (p *FSProvider) endHeld(ctx context.Context, key, token string) (context.Context, context.CancelFunc) {
	until := p.held.drop(key)
	p.peers.drop(key)
	return p.leaseWaitCtx(ctx, key, token, until)
}

// leaseWaitCtx bounds how long a call holding instance key's lease under
// token (an orchestration turn's ack, renewal or abandon; a workflow task's
// completion or extension) waits for the instance's flock: until the lease
// expires, plus claimExpiryMargin. The expiry is untilMs if this process's
// heldSet knew it (not 0: no read on an ack's path), else as the lease file
// read without the flock says; just the margin if the file does not name
// token (the call will fail on it anyway) or cannot be read. Other
// processes hold that flock only for short sections - a fetch pass looking
// at the lease, a deletion - but one stopped inside such a section
// (SIGSTOP, a frozen cgroup) holds it until it resumes, and past the
// lease's expiry the call could not succeed anyway: it waits no longer than
// the lease it holds lasts, not for the stopped process (claimCtx is the
// same rule for work items; TestOrchestrationCallsDoNotWaitForAStoppedLockHolder).
func (p *FSProvider) leaseWaitCtx(ctx context.Context, key, token string, untilMs int64) (context.Context, context.CancelFunc) {
	if untilMs == 0 {
		if cur, _, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key)); err == nil && cur.Token == token {
			untilMs = cur.ExpiresAtMs
		}
	}
	wait := claimExpiryMargin + max(0, time.Duration(untilMs-p.nowMs())*time.Millisecond)
	return context.WithTimeout(ctx, wait)
}

// leaseWaitErr is the error of a call on instance key's lease under token
// whose wait for the instance's flock, bounded by wctx (leaseWaitCtx), ended
// with err. If the bound ran out (the flock stayed held past the lease's
// expiry) the lease file, read without the flock, may settle the call: one
// that is gone or names another token (or none) says the lease was lost
// for good - tokens are never reused, and a write in place cannot show a
// token older than the fetch that gave the caller its own - so the call
// fails as it would under the flock, with invalid; one that names token and
// has expired too, if expired is not "" (the call checks expiry: no one can
// renew an expired lease), fails with expired. Otherwise, or if the file
// cannot be read, the error is retryable (TestOrchestrationCallsDoNotWaitForAStoppedLockHolder).
func (p *FSProvider) leaseWaitErr(op string, ctx, wctx context.Context, err error, key, token, invalid, expired string) error {
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		cur, exists, rerr := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key))
		switch {
		case rerr != nil:
		case !exists || cur.Token != token:
			return Permanentf(op, ErrInvalidLockToken, "%s", invalid)
		case expired != "" && !cur.HeldAt(p.nowMs()):
			return Permanentf(op, errTokenExpired, "%s", expired)
		}
		return Retryablef(op, err, "the instance's flock was held by another process (stopped?) until past the lease's expiry")
	}
	return Retryablef(op, err, "lock instance: %v", err)
}
