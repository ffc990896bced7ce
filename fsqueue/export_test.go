package fsqueue

import (
	crand "crypto/rand"
	"time"

	"github.com/durofs/durofs/internal/vfs"

	"github.com/oklog/ulid/v2"
)

// SetBusyWaitHook sets the hook ClaimNext runs when it starts waiting for a
// busy message; the returned func removes it.
func SetBusyWaitHook(f func(name string)) (undo func()) {
	testHookBusyWait = f
	return func() { testHookBusyWait = nil }
}

// BusyWaitForTest is busyWait.
const BusyWaitForTest = busyWait

// SetClaimReadHook sets the hook a watched claim cache runs between reading
// a claim file and caching it; the returned func removes it.
func SetClaimReadHook(f func(name string)) (undo func()) {
	testHookClaimRead = f
	return func() { testHookClaimRead = nil }
}

// AsAnotherProcess gives the process-wide name source a fresh state - new
// monotonic entropy, no last time - as a process started now would have:
// names made after it are ordered against earlier ones by clock ms only,
// unless the queue has Options.Order.
func AsAnotherProcess() {
	nameGen.mu.Lock()
	defer nameGen.mu.Unlock()
	nameGen.lastMs = 0
	nameGen.entropy = &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(crand.Reader, 0)}
}

// RecycleForTest removes path through r (recycling it if it can).
func RecycleForTest(r *Recycler, fsys vfs.FS, path string) error { return r.remove(fsys, path) }

// TrimForTest trims r's pool as NewRecycler does, at time now.
func TrimForTest(r *Recycler, now time.Time) error { return r.trim(now) }
