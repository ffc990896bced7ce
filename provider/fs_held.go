package provider

import "sync"

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

// drop forgets key: the next fetch pass looks at its lease.
func (h *heldSet) drop(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.until, key)
}

// held reports whether this process holds key's lock at nowMs.
func (h *heldSet) held(key string, nowMs int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until[key] > nowMs
}
