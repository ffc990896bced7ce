//go:build linux

package vfs

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lowHalf is the byte offset of a 64-bit word's low 32 bits, which futex(2)
// compares.
var lowHalf = func() int {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return 0
	}
	return 4
}()

// futex(2) operations (not in x/sys/unix).
const (
	futexWait = 0
	futexWake = 1
)

type osWords struct {
	mu  sync.RWMutex // Close against use: an unmapped page must not be touched
	mem []byte
	n   int
}

func mapOS(f *os.File, n int) (Words, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("vfs: map %s: %w", f.Name(), err)
	}
	if n <= 0 || fi.Size() < int64(8*n) {
		return nil, fmt.Errorf("vfs: map %s: %d words need %d bytes, the file has %d", f.Name(), n, 8*n, fi.Size())
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("vfs: map %s: %w", f.Name(), err)
	}
	var mem []byte
	var merr error
	if err := rc.Control(func(fd uintptr) {
		mem, merr = unix.Mmap(int(fd), 0, 8*n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}); err != nil {
		return nil, fmt.Errorf("vfs: map %s: %w", f.Name(), err)
	}
	if merr != nil {
		return nil, fmt.Errorf("vfs: map %s: %w", f.Name(), merr)
	}
	return &osWords{mem: mem, n: n}, nil
}

func (w *osWords) Len() int { return w.n }

// word returns word i's address, or nil once the words are closed (w.mu
// read-held).
func (w *osWords) word(i int) *uint64 {
	if w.mem == nil {
		return nil
	}
	return (*uint64)(unsafe.Pointer(&w.mem[8*i]))
}

func (w *osWords) Load(i int) uint64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if p := w.word(i); p != nil {
		return atomic.LoadUint64(p)
	}
	return 0
}

func (w *osWords) CompareAndSwap(i int, old, new uint64) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if p := w.word(i); p != nil {
		return atomic.CompareAndSwapUint64(p, old, new)
	}
	return false
}

func (w *osWords) Wait(i int, v uint64, d time.Duration) {
	if d <= 0 {
		return
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.mem == nil {
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	addr := unsafe.Pointer(&w.mem[8*i+lowHalf])
	// Not FUTEX_PRIVATE: the word is shared with other processes. EAGAIN
	// (the word changed), EINTR and ETIMEDOUT all mean: look again.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(addr), futexWait, uintptr(uint32(v)), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func (w *osWords) Wake(i int) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.mem == nil {
		return
	}
	addr := unsafe.Pointer(&w.mem[8*i+lowHalf])
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(addr), futexWake, uintptr(1<<31-1), 0, 0, 0)
}

func (w *osWords) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mem == nil {
		return nil
	}
	err := unix.Munmap(w.mem)
	w.mem = nil
	if err != nil {
		return fmt.Errorf("vfs: unmap: %w", err)
	}
	return nil
}
