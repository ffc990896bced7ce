package vfs

import (
	"encoding/binary"
	"fmt"
	"time"
)

// memWords maps a MemFS file's first words (MapWords). They live in the
// file's data like a MAP_SHARED page in the page cache: every handle on the
// same file sees them at once, and they are unsynced data, so
// [MemFS.Crash] and [MemFS.CrashClone] drop them and
// [MemFS.CrashCloneWriteback] keeps them (a power loss after the kernel wrote
// the page back). A handle of a crashed generation reads zeros and changes
// nothing, like a closed mapping.
type memWords struct {
	f      *memFile
	n      int
	closed bool // guarded by f.m.mu
}

func (f *memFile) mapWords(n int) (Words, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("mmap"); err != nil {
		return nil, err
	}
	if !f.read || !f.write || f.n.dir {
		return nil, memPathErr("mmap", f.name, fmt.Errorf("%w: not a file open for reading and writing", ErrNoMap))
	}
	if n <= 0 || int64(len(f.n.data)) < int64(8*n) {
		return nil, memPathErr("mmap", f.name, fmt.Errorf("%d words need %d bytes, the file has %d", n, 8*n, len(f.n.data)))
	}
	return &memWords{f: f, n: n}, nil
}

func (w *memWords) Len() int { return w.n }

// live reports whether the mapping is open and its process alive (m.mu
// held).
func (w *memWords) live() bool { return !w.closed && w.f.gen == w.f.m.gen }

// load reads word i (m.mu held). A file shrunk under the mapping reads as
// zeros, like the page a real mapping would fault on is not there.
func (w *memWords) load(i int) uint64 {
	d := w.f.n.data
	if int64(len(d)) < int64(8*(i+1)) {
		return 0
	}
	return binary.NativeEndian.Uint64(d[8*i:])
}

func (w *memWords) Load(i int) uint64 {
	w.f.m.mu.Lock()
	defer w.f.m.mu.Unlock()
	if !w.live() {
		return 0
	}
	return w.load(i)
}

func (w *memWords) CompareAndSwap(i int, old, new uint64) bool {
	w.f.m.mu.Lock()
	defer w.f.m.mu.Unlock()
	if !w.live() || int64(len(w.f.n.data)) < int64(8*(i+1)) || w.load(i) != old {
		return false
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], new)
	w.f.n.writeAt(int64(8*i), b[:])
	return true
}

func (w *memWords) Wait(i int, v uint64, d time.Duration) {
	if d <= 0 {
		return
	}
	w.f.m.mu.Lock()
	if !w.live() || uint32(w.load(i)) != uint32(v) {
		w.f.m.mu.Unlock()
		return
	}
	if w.f.n.wake == nil {
		w.f.n.wake = make(chan struct{})
	}
	ch := w.f.n.wake
	w.f.m.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func (w *memWords) Wake(int) {
	w.f.m.mu.Lock()
	defer w.f.m.mu.Unlock()
	if w.f.n.wake != nil {
		close(w.f.n.wake)
		w.f.n.wake = nil
	}
}

func (w *memWords) Close() error {
	w.f.m.mu.Lock()
	defer w.f.m.mu.Unlock()
	w.closed = true
	return nil
}
