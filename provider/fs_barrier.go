package provider

// Barrier commits: how a durable ack gets by with two syncs.
//
// The per-file protocol (CommitPerFile) makes every file an ack touches
// durable on its own - staged messages, the commit record, the history
// append, state.json, instance.json, the queue directories - and only then
// removes the commit record: 18 fsyncs for a typical turn. The barrier
// protocol (CommitBarrier, the default where the OS has syncfs(2) with error
// reporting) makes the same guarantees with two:
//
//  1. everything before the commit point (staged messages, the record's
//     temporary file) is written unsynced, then ONE file-system barrier
//     (syncfs) makes it durable - together with everything any earlier
//     commit of any instance applied without syncing;
//  2. the record is renamed into commits/ and that directory is fsynced:
//     the commit point, durable when the ack returns;
//  3. the record is applied without any sync, and stays in commits/ until a
//     LATER barrier has made the apply durable; only then a cleaner removes
//     it (without a sync: if the removal is lost the record is applied
//     again, which is idempotent).
//
// Why this is crash-safe. Say a power loss happens. Every commit point C
// that completed was preceded by a barrier, so everything applied before C's
// barrier started is durable. An apply whose effects were lost therefore
// started after the last barrier, and its record is still in commits/ (the
// cleaner removes a record only after a barrier that started once the apply
// had finished), so recovery applies it again. Nothing durable can depend on
// the lost effects: another commit that consumed a message this apply
// published would have run a barrier of its own before its commit point,
// making the publish durable first.
//
// The "applied" marker. A record that stays in commits/ after its apply
// would be re-applied by every later flock holder. To skip that, the apply
// writes the record's commit id into the instance's lease (the last step of
// apply; leases are never synced), and the record carries the boot id of
// the machine it was committed in. A flock holder skips a record whose
// commit id the lease names and whose boot id is the current boot: within
// one boot the page cache is coherent, so the marker proves the apply ran to
// its end. After a reboot (power loss, OS crash) the boot id differs and
// every record left is applied again, because the marker may have reached
// the disk while the apply's effects did not.
//
// Group commit. Concurrent commits share both syncs: a barrier that starts
// after a commit's writes completed serves it, and so does an fsync of
// commits/ (or claims/) that starts after its rename. Within a process,
// groupBarrier gathers the callers that arrive while a sync runs into the
// next one. Between processes (on the real file system), the barrier runs
// through internal/sharedsync: a mapped counter file (sync.shm) and an
// flock let a process whose writes another process's barrier covers skip
// its own, so N processes under load do not queue N barriers in the kernel.
// Trust follows the order processes opened their barrier descriptors (see
// that package on syncfs error reporting), and a failure anywhere stops
// every process.
//
// Work-item acks follow the same pattern with the acked claim as the commit
// record (fsqueue.ClaimGuard.Commit), removed by the cleaner after a later
// barrier.
//
// A failed barrier is fatal for the process: syncfs reports a writeback
// error once, and the pages it failed to write may since have been marked
// clean (fsyncgate), so no later barrier can prove anything. The provider
// fails every later commit with ErrSyncFailed and stops removing records;
// it must be reopened (and the disk checked).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// CommitSync selects how a durable provider makes a commit durable.
type CommitSync int

const (
	// CommitAuto uses CommitBarrier where the file system supports it
	// (Linux 5.8+, whose syncfs(2) reports writeback errors) and
	// CommitPerFile elsewhere. The default.
	CommitAuto CommitSync = iota
	// CommitPerFile fsyncs every file and directory a commit touches before
	// the call returns, and removes the commit record at once.
	CommitPerFile
	// CommitBarrier makes a commit durable with one file-system barrier
	// (syncfs) and one directory fsync, applies it without syncing, and
	// removes its record after a later barrier (see fs_barrier.go). Open
	// fails if the file system has no barrier.
	CommitBarrier
)

// String returns "auto", "per-file" or "barrier".
func (c CommitSync) String() string {
	switch c {
	case CommitPerFile:
		return "per-file"
	case CommitBarrier:
		return "barrier"
	}
	return "auto"
}

// ErrSyncFailed means a file-system barrier (syncfs) failed: data written
// since the previous successful barrier may not be on disk. The provider
// refuses further commits (as retryable errors); reopen it, and check the
// disk and the kernel log.
var ErrSyncFailed = errors.New("file-system sync failed; reopen the provider")

// groupBarrier runs file-system barriers for the process. Callers that
// arrive while one runs wait for the next one and share it (group commit),
// so N concurrent acks cost about two barriers, not N. The same type groups
// the fsyncs of one directory (newGroupSync), where a failure is reported
// to the callers of that round only.
type groupBarrier struct {
	run    func() error
	sticky bool // a failure fails every later call (barriers: fsyncgate)

	mu        sync.Mutex
	cond      *sync.Cond
	started   uint64 // barriers started so far (the last one's sequence number)
	done      uint64 // sequence number of the last barrier that succeeded
	failedSeq uint64 // sequence number of the last barrier that failed
	lastErr   error  // its error
	running   bool
	err       error // sticky: set by the first failure
}

// newGroupBarrier groups file-system barriers: the first failure is sticky
// (see ErrSyncFailed).
func newGroupBarrier(run func() error) *groupBarrier {
	b := &groupBarrier{run: run, sticky: true}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// newGroupSync groups the fsyncs of one directory: an fsync that starts
// after a rename completed makes it durable, so concurrent commits renaming
// into the same directory share one. A failure is returned to the callers
// whose round failed; the next call tries again (each commit that got the
// error is rolled back, as with an fsync of its own).
func newGroupSync(run func() error) *groupBarrier {
	b := &groupBarrier{run: run}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Sync returns once a barrier that started after Sync was called has
// completed: every change the caller completed before calling is durable.
func (b *groupBarrier) Sync() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	target := b.started + 1 // a running barrier may have started before our writes
	for {
		if b.err != nil {
			return b.err
		}
		if b.done >= target {
			return nil
		}
		if b.failedSeq >= target {
			return b.lastErr
		}
		if b.running {
			b.cond.Wait()
			continue
		}
		b.running = true
		b.started++
		seq := b.started
		b.mu.Unlock()
		err := b.run()
		b.mu.Lock()
		b.running = false
		switch {
		case err == nil:
			b.done = seq
		case b.sticky:
			b.err = fmt.Errorf("%w: %w", ErrSyncFailed, err)
		default:
			b.failedSeq, b.lastErr = seq, err
		}
		b.cond.Broadcast()
	}
}

// epoch returns the sequence number of the last barrier started. A change
// completed before epoch() was called is durable once covered(epoch) holds.
func (b *groupBarrier) epoch() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started
}

// covered reports whether a barrier started after epoch has succeeded.
func (b *groupBarrier) covered(epoch uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err == nil && b.done > epoch
}

// failed reports whether a barrier has failed.
func (b *groupBarrier) failed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

// cleanup is a commit record (an instance's commits/<key>.json, or an acked
// work-item claim) whose apply has finished and which may be removed once a
// barrier covers that apply.
type cleanup struct {
	claim bool   // an acked claim (worker item name in key) rather than a record
	key   string // instance key, or worker item name
	id    string // the record's commit id, or the claim's token
}

// cleaner holds this process's cleanups, each with the barrier epoch at
// which its apply had finished.
type cleaner struct {
	mu      sync.Mutex
	pending map[cleanup]uint64
}

// cleanInterval is how often the cleaner looks at its cleanups; a record
// waits at most about this long after its apply (plus one idle barrier).
const cleanInterval = 100 * time.Millisecond

// scheduleCleanup registers a finished apply. It is a no-op in per-file
// mode, where the apply removes its own record.
func (p *FSProvider) scheduleCleanup(claim bool, key, id string) {
	if p.barrier == nil {
		return
	}
	c := cleanup{claim: claim, key: key, id: id}
	epoch := p.barrier.epoch()
	p.clean.mu.Lock()
	if _, ok := p.clean.pending[c]; !ok { // keep the oldest epoch
		p.clean.pending[c] = epoch
	}
	p.clean.mu.Unlock()
}

// cleanLoop removes covered records until the provider closes, then does a
// final barrier and removes what it covers.
func (p *FSProvider) cleanLoop() {
	defer p.wg.Done()
	t := time.NewTicker(cleanInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.cleanOnce(true)
			return
		case <-t.C:
			p.cleanOnce(false)
		}
	}
}

// cleanOnce removes every pending record a barrier covers. If none is
// covered yet it runs a barrier itself (cheap when nothing is dirty), so
// the records of an idle process go within about two cleanIntervals.
func (p *FSProvider) cleanOnce(final bool) {
	if p.barrier.failed() {
		return // nothing can be proven durable any more: keep every record
	}
	p.clean.mu.Lock()
	todo := make(map[cleanup]uint64, len(p.clean.pending))
	anyCovered := false
	for c, epoch := range p.clean.pending {
		todo[c] = epoch
		if p.barrier.covered(epoch) {
			anyCovered = true
		}
	}
	p.clean.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	if !anyCovered || final {
		if err := p.barrier.Sync(); err != nil {
			p.log.Error("durofs: file-system barrier failed; commits are refused until the provider is reopened", "err", err)
			return
		}
	}
	for c, epoch := range todo {
		if !p.barrier.covered(epoch) {
			continue
		}
		done, err := p.cleanupOne(c, final)
		if err != nil {
			p.log.Warn("durofs: removing an applied commit record", "key", c.key, "err", err)
		}
		if done {
			p.clean.mu.Lock()
			delete(p.clean.pending, c)
			p.clean.mu.Unlock()
		}
	}
}

// cleanupOne removes one covered record if it is still the one whose apply
// was covered (a later commit of the instance may have replaced it, which
// also finishes the cleanup). done is false if the lock was busy: try again.
// The final cleanup (Close) waits up to a second for each lock.
func (p *FSProvider) cleanupOne(c cleanup, final bool) (done bool, err error) {
	wait := 20 * time.Millisecond
	if final {
		wait = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if c.claim {
		err := p.workQ.WithClaim(ctx, c.key, func(g *fsqueue.ClaimGuard) error {
			cl, exists, err := g.Read()
			if err != nil || !exists || cl.State != claimStateAcked || cl.Token != c.id {
				return err
			}
			return p.workQ.DeleteClaim(c.key)
		})
		if errors.Is(err, context.DeadlineExceeded) {
			return false, nil
		}
		return true, err
	}
	// Most records are replaced by their instance's next commit before the
	// cleaner comes (a chain's next turn follows within milliseconds).
	// Commit records are sealed and read safely without the instance lock
	// (fs_spares.go), and a commit id never comes back once replaced, so a
	// record that is gone or names another commit needs no lock at all.
	if id, exists, err := p.recordCommitID(c.key); err == nil && (!exists || id != c.id) {
		return true, nil
	}
	if !final {
		// An instance with queued messages is about to be fetched: do not
		// make that fetch find its flock busy (its next commit replaces the
		// record anyway; then the id check below finishes this cleanup).
		if queued, err := p.orchQ.ListAttr(c.key); err == nil && len(queued) > 0 {
			return false, nil
		}
	}
	g, err := p.leases.Lock(ctx, p.lockPath(c.key), p.leasePath(c.key))
	if errors.Is(err, context.DeadlineExceeded) {
		return false, nil // its holder is busy with it; try again later
	}
	if err != nil {
		return true, err
	}
	defer g.Unlock()
	id, exists, err := p.recordCommitID(c.key)
	if err != nil || !exists || id != c.id {
		return true, err
	}
	// The record becomes a spare rather than a freed inode (fs_spares.go).
	if err := fsqueue.RemoveVia(p.fs, p.recyclerOrNil(), p.commitPath(c.key)); err != nil && !vfs.IsNotExist(err) {
		return true, err
	}
	return true, nil
}
