package provider

import (
	"errors"
	"fmt"
	"iter"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// Reading the queues. A queue's index is built from its file names, which
// carry each message's ULID, visibility time and route - the hash of the
// instance key it is for (fsqueue, name.go) - and nothing else: whatever
// else a reader decides on (the instance id, the kind, a session, a tag, an
// activity's identity) is in the message's body, read through the queue's
// bounded cache. A route says "maybe this instance": two keys may share
// one (by chance, about 1 in 2^64 per pair), so every reader that acts on
// a message of an instance checks the body's key (queuedFor); readers that
// only count or keep state by name may take the route as it is.

// queued is a message of a queue with its header (the attributes are the
// cache's: read only).
type queued struct {
	fsqueue.Header
	// Entry is what the message's name says (its route among it).
	Entry fsqueue.Entry
}

// readQueued reads e's header. ok is false if the message is gone or its
// file cannot be used (fsck reports it; fetches skip it).
func readQueued(q *fsqueue.Queue, e fsqueue.Entry) (m queued, ok bool, err error) {
	h, err := q.HeaderOf(e)
	switch {
	case err == nil:
		return queued{Entry: e, Header: h}, true, nil
	case vfs.IsNotExist(err), errors.Is(err, fsqueue.ErrCorrupt):
		return queued{}, false, nil
	default:
		return queued{}, false, err
	}
}

// queuedFor returns q's messages for instance key, in name order: the
// entries of the key's route whose body names the key (a colliding
// instance's are left out). Gone and damaged messages are skipped.
func queuedFor(q *fsqueue.Queue, key string) ([]queued, error) {
	entries, err := q.ListRoute(key)
	if err != nil {
		return nil, err
	}
	out := make([]queued, 0, len(entries))
	for _, e := range entries {
		m, ok, err := readQueued(q, e)
		if err != nil {
			return nil, err
		}
		if ok && m.Attrs[attrKey] == key {
			out = append(out, m)
		}
	}
	return out, nil
}

// eachQueued calls fn with every message of q and its header, in name
// order, stopping at fn's first error. Gone and damaged messages are
// skipped. It reads every message's header: for admin and inspection, not
// for finding work.
func eachQueued(q *fsqueue.Queue, fn func(m queued) error) error {
	for e, err := range q.All() {
		if err != nil {
			return fmt.Errorf("list %s: %w", q.Dir(), err)
		}
		m, ok, err := readQueued(q, e)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// namedQueue is a queue and its directory name under queues/.
type namedQueue struct {
	dir string
	q   *fsqueue.Queue
}

// mergedEntry is an entry of one of several queues.
type mergedEntry struct {
	namedQueue
	e fsqueue.Entry
}

// visibleMerged iterates the visible messages of several queues in name
// (FIFO) order across them, lazily: a walk that stops at its first
// candidate reads no more of the queues than that. An error ends the
// iteration (with the queue it came from).
func visibleMerged(qs []namedQueue, nowMs int64) iter.Seq2[mergedEntry, error] {
	return func(yield func(mergedEntry, error) bool) {
		type head struct {
			next func() (fsqueue.Entry, error, bool)
			e    fsqueue.Entry
			name string
			ok   bool
		}
		heads := make([]head, len(qs))
		for i, nq := range qs {
			next, stop := iter.Pull2(nq.q.Visible(nowMs))
			defer stop()
			heads[i].next = next
		}
		advance := func(i int) error {
			e, err, ok := heads[i].next()
			if err != nil {
				return err
			}
			heads[i].e, heads[i].ok = e, ok
			if ok {
				heads[i].name = e.Name()
			}
			return nil
		}
		for i := range heads {
			if err := advance(i); err != nil {
				yield(mergedEntry{namedQueue: qs[i]}, err)
				return
			}
		}
		for {
			best := -1
			for i, h := range heads {
				if h.ok && (best < 0 || h.name < heads[best].name) {
					best = i
				}
			}
			if best < 0 {
				return
			}
			if !yield(mergedEntry{qs[best], heads[best].e}, nil) {
				return
			}
			if err := advance(best); err != nil {
				yield(mergedEntry{namedQueue: qs[best]}, err)
				return
			}
		}
	}
}
