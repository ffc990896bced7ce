// Package sharedsync shares file-system barriers between the processes that
// use one directory: group commit across processes.
//
// A barrier (syncfs(2)) makes durable every change that completed on the file
// system before it started, whoever made the change. So when several
// processes each need a barrier at about the same time, one barrier that
// starts after all of their writes serves them all. Without coordination
// each process runs its own and they queue behind each other in the kernel
// (one writeback work item per call, one journal commit each).
//
// The coordination state is a small file mapped into every process
// (MAP_SHARED) holding a few counters, and an flock on it that serialises
// the barriers themselves:
//
//	started   sequence number of the last barrier started (incremented, under
//	          the flock, right before the leader calls the barrier)
//	done      sequence number of the last barrier that succeeded, and the
//	          ticket of the process that ran it (a seqlock makes the pair
//	          consistent for readers that do not hold the flock)
//	opens     a ticket counter: each process takes the next ticket after it
//	          opened its barrier descriptor
//	failures  count of barriers that failed, ever
//
// A caller reads started (S) after its writes completed; any barrier with
// sequence number S+1 or more started after that read, hence after the
// writes. The caller is covered once done ≥ S+1. If not, it takes the flock
// (waiting there while another process's barrier runs), checks again, and
// if still not covered runs a barrier itself as S' = max(started, done)+1.
//
// Why tickets. syncfs reports a writeback error only to descriptors opened
// before the error (errseq): a descriptor opened later has sampled it
// already. A barrier run by a process that opened its descriptor after our
// pages hit a writeback error could therefore succeed although our data is
// lost. A process trusts a barrier only if the process that ran it took its
// ticket no later than its own ticket: that process opened its descriptor
// before this one even started writing. (The newest process can use every
// barrier, the oldest only its own; barriers still group: the oldest
// process's barriers serve everyone.) Every failure also increments
// failures, and a process that sees it move fails its own next Sync, so a
// writeback error reported to one process stops all of them.
//
// Crash safety. The file is never synced and needs no recovery: a process
// killed while holding the flock releases it (the kernel drops flocks with
// the descriptor); a leader killed after incrementing started and before
// publishing done just leaves a sequence number that no barrier completes,
// and the next leader uses a higher one. After a reboot the file may hold
// any earlier state; processes only ever wait for numbers above what they
// read, so stale or even garbage counters cost at most one barrier each
// (a done beyond started is treated as corrupt and repaired under the
// flock, never trusted).
package sharedsync

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ErrUnsupported is returned by Open where shared memory or flock is not
// available (non-Linux systems).
var ErrUnsupported = errors.New("sharedsync: not supported on this system")

// ErrClosed is returned by Sync after Close.
var ErrClosed = errors.New("sharedsync: coordinator closed")

// ErrFailed is returned by Sync when a barrier run by another process
// failed since this Coordinator was opened (its data may be lost too).
var ErrFailed = errors.New("sharedsync: a barrier failed in another process")

// fileSize is the size of the shared file (one page).
const fileSize = 4096

// magic marks an initialised shared file ("DUROSYN1").
const magic = 0x314e59534f525544

// Offsets of the 8-byte counters in the shared page.
const (
	offMagic    = 0
	offStarted  = 8
	offVersion  = 16 // seqlock over done and doneTicket: odd while written
	offDone     = 24
	offTicket   = 32 // ticket of the process that ran barrier done
	offOpens    = 40
	offFailures = 48
)

// Coordinator shares one barrier between the processes using one shared
// file. It is safe for concurrent use; concurrent callers in one process
// are serialised (group them in front of it, as the provider does).
type Coordinator struct {
	run    func() error
	ticket uint64 // this process's ticket
	errs   uint64 // failures when opened

	mu    sync.Mutex
	words *[fileSize / 8]uint64
	plat  platform

	// Stats (for tests and benchmarks): barriers this process ran, and
	// Syncs answered by a barrier of another process.
	ran, shared atomic.Uint64

	// testHookTarget, when set by a test, runs in Sync once the barrier
	// the call needs is known, before Sync looks for it.
	testHookTarget func()
}

// word returns the counter at off.
func (c *Coordinator) word(off int) *uint64 { return &c.words[off/8] }

func atomicAdd(p *uint64, d uint64) uint64 { return atomic.AddUint64(p, d) }

func (c *Coordinator) load(off int) uint64 { return atomic.LoadUint64(c.word(off)) }

func (c *Coordinator) store(off int, v uint64) { atomic.StoreUint64(c.word(off), v) }

// readDone reads the last completed barrier and its leader's ticket; ok is
// false if a leader was publishing them at that moment (or died doing so).
func (c *Coordinator) readDone() (done, ticket uint64, ok bool) {
	for range 4 {
		v1 := c.load(offVersion)
		if v1&1 == 1 {
			continue
		}
		done, ticket = c.load(offDone), c.load(offTicket)
		if c.load(offVersion) == v1 {
			return done, ticket, true
		}
	}
	return 0, 0, false
}

// publishDone records a completed barrier; the caller holds the flock.
func (c *Coordinator) publishDone(seq uint64) {
	v := c.load(offVersion) | 1 // odd: publishing (also repairs a dead writer's odd version)
	c.store(offVersion, v)
	c.store(offDone, seq)
	c.store(offTicket, c.ticket)
	c.store(offVersion, v+1)
}

// covered reports whether a trusted barrier numbered target or higher has
// completed.
func (c *Coordinator) covered(target uint64) bool {
	done, ticket, ok := c.readDone()
	return ok && done >= target && done <= c.load(offStarted) && ticket <= c.ticket
}

// Sync returns nil once a barrier that started after Sync was called has
// completed successfully and is trusted by this process (see the package
// comment): every change completed before the call is durable. It runs
// the barrier itself unless another process's barrier serves.
func (c *Coordinator) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.words == nil {
		return ErrClosed
	}
	if c.load(offFailures) != c.errs {
		return ErrFailed
	}
	started := c.load(offStarted)
	if done := c.load(offDone); done > started {
		started = done // corrupt or stale: wait beyond both
	}
	target := started + 1
	if c.testHookTarget != nil {
		c.testHookTarget()
	}
	if c.covered(target) {
		// A barrier numbered target started after our read of started and
		// has already completed (possible when another leader raced us).
		c.shared.Add(1)
		return nil
	}
	if err := c.plat.lock(); err != nil {
		return err
	}
	defer c.plat.unlock()
	if c.load(offFailures) != c.errs {
		return ErrFailed
	}
	if c.covered(target) {
		c.shared.Add(1)
		return nil
	}
	// Leader. Under the flock nobody else publishes, so the counters are
	// stable; a version left odd by a dead leader is repaired by publishDone.
	seq := max(c.load(offStarted), c.load(offDone)) + 1
	c.store(offStarted, seq)
	c.ran.Add(1)
	if err := c.run(); err != nil {
		atomic.AddUint64(c.word(offFailures), 1)
		c.errs++ // this process learns of its own failure from err
		return err
	}
	c.publishDone(seq)
	return nil
}

// Ticket returns this process's ticket (tests).
func (c *Coordinator) Ticket() uint64 { return c.ticket }

// Stats returns how many barriers this Coordinator ran and how many of its
// Syncs another process's barrier answered.
func (c *Coordinator) Stats() (ran, shared uint64) { return c.ran.Load(), c.shared.Load() }

// Close unmaps the shared file and closes it.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.words = nil
	return c.plat.close()
}

// init sets up a freshly mapped page: the caller holds the flock.
func (c *Coordinator) init(mem []byte) {
	c.words = (*[fileSize / 8]uint64)(unsafe.Pointer(&mem[0]))
	if c.load(offMagic) != magic {
		for off := 8; off < fileSize; off += 8 {
			c.store(off, 0)
		}
		c.store(offMagic, magic)
	}
	if c.load(offDone) > c.load(offStarted) {
		c.store(offStarted, c.load(offDone)) // corrupt: make it consistent
	}
	c.errs = c.load(offFailures)
}
