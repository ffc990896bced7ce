package fsqueue

import "errors"

// removalGens counts the removals of messages that the index learns of,
// per bucket of routes, so that a caller can keep something it read about
// one route's value (an instance) for as long as none of that value's
// messages went: [Queue.RemovalGen]. It costs nothing until the first
// RemovalGen call, then removalSlots counters (128 KiB) whatever the size
// of the queue. Routes share a bucket by their low bits: a removal of
// another route's message in the same bucket changes the generation too,
// which only costs its caller a look it did not need.
type removalGens struct {
	// epoch grows whenever the index is built anew or dropped: removals
	// made meanwhile are not known one by one.
	epoch uint64
	slots []uint64 // nil until RemovalGen is first called
}

// removalSlots is the number of route buckets.
const removalSlots = 1 << 14

// bumpLocked counts a removal of a message of route r. The caller holds
// q.list.mu.
func (g *removalGens) bumpLocked(r uint64) {
	if g.slots != nil {
		g.slots[r&(removalSlots-1)]++
	}
}

// epochLocked records that removals may have gone uncounted. The caller
// holds q.list.mu.
func (g *removalGens) epochLocked() { g.epoch++ }

// RemovalGen returns a number that changes (grows) whenever this Queue
// learns that a message whose route is RouteOf(value) was removed - by its
// own Delete or DeleteMessage, or, through its index, by any process - and
// whenever its index is built anew (after which removals may have gone
// unseen). It may change for other removals too, never the reverse. A
// caller that reads state which only a removal of one of value's messages
// can change - the provider's instances: every commit that changes an
// instance writes its files and then deletes the messages its turn
// consumed - may keep what it read, keyed on the generation read before
// it, until the generation moves. The index is not brought up to date
// here: a removal it has not learned of yet moves the generation when it
// does. It needs Options.IndexAttr.
func (q *Queue) RemovalGen(value string) (uint64, error) {
	if q.opts.IndexAttr == "" {
		return 0, errors.New("fsqueue: RemovalGen without Options.IndexAttr")
	}
	r := RouteOf(value)
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	g := &q.removals
	if g.slots == nil {
		g.slots = make([]uint64, removalSlots)
		g.epoch++
	}
	// Both counters only grow, so their sum moves whenever either does.
	return g.epoch + g.slots[r&(removalSlots-1)], nil
}
