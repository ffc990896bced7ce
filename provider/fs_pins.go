package provider

import "sync"

// rejectedPins is what a process's fetch passes learned, by reading, of the
// pinned duroxide versions of instances that a capability filter rejected:
// a later pass passes over such an instance without reading its
// instance.json, executions/ and state.json again, as long as the
// orchestrator queue's removal generation of the instance
// (fsqueue.Queue.RemovalGen) is the one read before the files were.
//
// Why that is enough: an execution's pin is written only by the apply of a
// commit of its instance (an ack's metadata), a new current execution only
// by such an apply too, and every such commit consumes the non-empty batch
// of messages its turn fetched: its apply writes state.json and
// instance.json first and deletes the batch last (fs_commit.go). The
// deletion moves the generation - in this process at once, in others when
// their queue's index learns of it (the directory watch) - so a pass after
// it reads the files again, and finds the new pin. A deletion of the
// instance removes its messages too. Without a directory watch the index
// is listed anew whenever the queue directory changes, which moves every
// generation: the cache then holds only while the queue is still. A commit
// left half-applied by a dead process is seen when someone finishes it (a
// fetch under the flock, or the background recovery), as before: an
// unlocked pass never saw its pin before that either.
//
// Like heldSet and peerSet it only ever skips a look in one process, never
// decides anything: fetchLocked checks the filter again, under the flock,
// on the files. A pin that a filter accepts is not kept (its instance is
// looked at anyway).
//
// It holds at most rejectedPinsMax instances (an instance key and a few
// words each). An entry whose generation moved is dropped when a pass
// meets it; when the table is full, an arbitrary eighth of it goes (Go's
// map order), so that eviction costs O(1) per entry added. A pass over
// more rejected instances than the bound reads the files of some of them,
// as without the table.
type rejectedPins struct {
	mu sync.Mutex
	m  map[string]rejectedPin // instance key -> its pin, as read
}

type rejectedPin struct {
	gen uint64 // the removal generation read before the pin was
	v   SemVer
}

// rejectedPinsMax bounds the instances rejectedPins holds.
const rejectedPinsMax = 16384

// get returns key's pin if it was read at removal generation gen.
func (r *rejectedPins) get(key string, gen uint64) (SemVer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[key]
	if !ok {
		return SemVer{}, false
	}
	if e.gen != gen {
		delete(r.m, key)
		return SemVer{}, false
	}
	return e.v, true
}

// put records that key's pin was v at removal generation gen.
func (r *rejectedPins) put(key string, gen uint64, v SemVer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]rejectedPin{}
	}
	if _, ok := r.m[key]; !ok && len(r.m) >= rejectedPinsMax {
		r.evictLocked()
	}
	r.m[key] = rejectedPin{gen: gen, v: v}
}

// evictLocked makes room for one entry. The caller holds r.mu.
func (r *rejectedPins) evictLocked() {
	n := len(r.m) / 8
	for k := range r.m {
		if n <= 0 {
			break
		}
		delete(r.m, k)
		n--
	}
}
