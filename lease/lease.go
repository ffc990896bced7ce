// Package lease implements crash-safe, expiring ownership of a resource shared
// by several processes on one host, any of which may be killed (kill -9) at any
// instant.
//
// # Two levels of exclusion
//
// A resource is a pair of files: a lock file and a lease file.
//
//   - The lock file is the target of an exclusive flock (through [vfs.FS.Lock],
//     which puts an in-process mutex in front of a fresh gofrs/flock per
//     acquisition). It is short-term mutual exclusion for one read-check-write
//     of the lease file: a [Guard]. The lock file is empty and is created on
//     first use ([Store.Lock]; [Store.LockExisting] never creates it). The
//     kernel drops a flock when its holder dies, so a killed process never
//     leaves the resource locked.
//   - The lease file is ownership with an expiry across the (possibly long) gap
//     between flock sections, such as the fetch→ack gap of a queue item. It is
//     only ever changed inside a Guard; checking a lease outside the flock and
//     then writing is unsafe (two writers can both "verify" their own token).
//
// # Reclaiming a resource
//
// A resource that is no longer needed can be removed, lock file included,
// by its holder: [Guard.Reclaim] removes the lease file and then the lock
// file while still holding the flock (the last use of that lock file), and
// the Guard is dead from then on. This is safe against a process that holds
// or is about to take the lock because every lock is lock-then-verify
// ([vfs.FS.Lock]): once the flock is had, the lock file's path must still
// name the locked file. A waiter that was blocked on the removed file gets a
// flock nobody else can find, sees that the path no longer names it, and
// locks again - [Store.Lock] creating the lock file (and its directory)
// anew, [Store.LockExisting] reporting [ErrGone]. So at any time at most one
// Guard holds the file a lock path names, and no live Guard holds a removed
// one. The rule that makes this hold: only the holder of a lock file's flock
// removes it, and only as the last thing it does with it. A caller that owns
// the directory may remove it after Reclaim, with rmdir (never a recursive
// removal: a new lock file may already be there).
//
// A new resource at the same paths starts from nothing: no lease, so no
// token of the old one is ever accepted, and fences start again from
// minFence. A kill -9 during Reclaim leaves the lease file gone and the lock
// file still there (an empty, free resource), or both gone.
//
// The clock is read only after the flock is held ([Guard.Now] and every Guard
// operation), so a lease is never computed from a time read before waiting for
// the lock (duroxide issue #46: such a lease can be born expired).
//
// # On-disk format
//
// The lease file is one JSON object (padded with trailing spaces when
// written in place):
//
//	{"token":"…","owner":"…","fence":N,"acquired_at_ms":N,"expires_at_ms":N,"data":<raw JSON>}
//
// Its fields:
//
//   - token: a canonical UUID v4 naming the current holding; "" means released
//     (free). Tokens are compared as strings.
//   - owner: free-form holder description (process or worker id), "" when released.
//   - fence: the lease epoch. It increments on every successful Acquire (every
//     change of holder) and never decreases; Release and Renew keep it.
//   - acquired_at_ms, expires_at_ms: Unix milliseconds. A lease is held iff
//     token != "" and expires_at_ms > now; it is acquirable iff it is missing,
//     released, or expires_at_ms <= now.
//   - data: an opaque application payload (the provider keeps per-instance queue
//     state there), omitted when empty. Acquire, Renew and Release preserve it;
//     only [Guard.Write] replaces it.
//
// Unknown fields are ignored on read and dropped by the next write.
//
// # Writing in place
//
// A lease changes at every fetch and release, so with
// [Store.WithInPlaceWrites] (volatile leases only) [Guard.Write] overwrites
// the existing file in place when the new content fits in it (one write at
// offset 0, padded with spaces to the file's size): no new file, no rename,
// no freed blocks. Creating and deleting files is what costs most on a busy
// ext4 (inode allocation skips recently deleted inodes; freed blocks are
// discarded at each journal commit), and leases were a quarter of it. A new
// file, or content that outgrew the file, is written by atomic replace and
// padded to a multiple of 512 bytes so that later writes fit. Every write
// happens under the flock, so no two writers interleave. What a crash leaves:
//
//   - kill -9 during the write: the write of one page to the page cache is
//     not interrupted (a fatal signal is checked between pages), so the file
//     has the old or the new content; a lease file longer than a page is
//     never written in place ([vfs.Overwrite] replaces it);
//   - power loss: leases are never synced; the file may have the old or the
//     new content, or be torn; all holders are dead then, and a torn file is
//     unparseable (the rule below) or, if a torn mix happens to parse, still
//     cannot lower a fence below the durable one the provider derives
//     elsewhere (docs/design.md §4, "Locks");
//   - a failed write (EIO, ENOSPC while the file was still sparse): the old
//     content is written back and the call fails; if that fails too, the file
//     is unparseable and the rule below applies.
//
// Readers without the flock ([Store.Inspect]) may race a write and read a
// torn mix; Inspect rereads on a parse error, and its result is a hint for
// monitoring that callers re-check under the flock.
//
// # Unparseable lease files
//
// A lease file that is not a JSON object of this shape (empty, NUL bytes
// after a power loss in process-crash-safe mode, truncated, wrong field
// types, damaged from outside) is corrupt, and so is a symbolic link in place
// of the lease file when the FS refuses to follow it ([vfs.ErrSymlink]; a
// replacing write renames over the link, never writing through it). The
// rule is:
//
//   - [Guard.Read] and [Store.Inspect] report an error wrapping [ErrCorrupt];
//   - nobody can prove they hold it: [Guard.Renew] and [Guard.Release]
//     refuse every token with [ErrNotHolder] (also wrapping [ErrCorrupt]) and
//     write nothing;
//   - [Guard.Acquire] treats it as free and overwrites it with a fresh lease
//     whose fence is minFence+1 and whose Data is empty (the file cannot
//     tell the old fence or data).
//
// This is safe because the decision is made under the flock: one Acquire
// wins and every later caller sees its (valid) lease as held. A holder whose
// lease file was damaged loses the lease and fails on its next Renew or
// Release. Its fence may equal the rescuer's (if minFence is below it), so
// the token, not the fence, is what rejects it; fences stay monotonic as
// long as callers pass their durable state's highest fence as minFence.
// Liveness is bounded too: a corrupt file never blocks a resource.
//
// # Crash analysis
//
// Every change is: flock → read clock → read lease file → check → write a
// temporary file (name starts with [vfs.TempPrefix]) → fsync it → rename it over
// the lease file → fsync the directory → unlock. A kill -9 at any point:
//
//   - before the rename leaves the old lease file intact (Acquire did not
//     happen, Renew did not extend, Release did not release) and possibly a
//     temporary file, which nobody reads and a sweeper removes by its prefix.
//     The flock dies with the process, so the next caller proceeds at once.
//   - after the rename leaves the new lease in full (rename is atomic in the
//     kernel, and the page cache survives the process), though the caller
//     never learned of its success. That is harmless for each operation, as
//     follows.
//
// After an Acquire's rename, the new lease names a holder that is dead (or
// that never got the token). Nobody can renew or release it without the
// token, so it simply expires after its TTL and the next Acquire takes it over
// with a higher fence: a crashed holder costs at most one TTL of
// unavailability, the price of never having two live holders. After a Renew's
// rename the lease is extended; a dead holder's lease just expires later.
// After a Release's rename the lease is free, which is what the releaser
// wanted. A holder that dies between operations (between Acquire and Release,
// say) leaves a lease that simply expires.
//
// A power loss differs only in durability, which is a property of the
// [vfs.FS]: with a syncing FS, a completed operation (one that returned nil)
// survives; an interrupted one leaves either the old or the new lease, never a
// mix, because the new content is fsynced before it gets its name. With
// [vfs.NoSync] (process-crash-safe mode) even a completed operation may revert
// to an older lease file, or to no lease file at all. Two things keep that
// safe: all processes died with the power, so no holder survives to be
// contradicted; and fences stay monotonic only if the caller passes, as
// minFence to [Guard.Acquire], the highest fence recorded in its own durable
// state (for example the last fence written to a history). That is why
// Acquire takes minFence.
//
// # Clock steps
//
// Leases assume a single host's wall clock, and expiry is judged by the clock
// of the process that decides, read under the flock. Who may change a lease
// never depends on the clock - that is the flock, the token and the fence -
// only when a lease stops being held does. When the host's clock steps by Δ:
//
//   - Forward: every lease's remaining time shrinks by Δ. A lease may expire
//     while its holder still works, and another caller may Acquire it (new
//     token, higher fence). From then on the old holder's Renew and Release
//     fail with [ErrNotHolder] whatever its own clock says, and a caller that
//     commits under the flock after checking its token (the provider's ack)
//     is refused. A forward step can cost duplicated work, never two
//     holders at once.
//   - Back: every lease's remaining time grows by Δ. A live holder notices
//     nothing. A dead holder's lease stays held until its expiry time comes
//     round again: ttl + Δ of real time after its last Acquire or Renew.
//
// Renew computes the new expiry from the renewer's clock, so right after a
// step back a renewal can set an earlier expiry than the one it replaces.
//
// The margin this is designed and tested for is a step of up to one lease
// length (ttl) in either direction: then a lease whose holder died is free
// again between 0 and 2×ttl of real time after its last Acquire or Renew.
// Larger forward steps behave the same (every lease expires at once); a
// larger step back extends the leases of dead holders by the whole step
// (live holders still release theirs normally).
package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// Errors returned by lease operations. They are wrapped with context; test
// them with errors.Is.
var (
	// ErrNotHolder means the token does not match the current lease (it was
	// released, taken over, never existed, or the token is empty).
	ErrNotHolder = errors.New("lease: not the holder")
	// ErrExpired means the token matches but the lease has expired.
	ErrExpired = errors.New("lease: expired")
	// ErrHeld means someone else holds an unexpired lease.
	ErrHeld = errors.New("lease: held by another owner")
	// ErrCorrupt means the lease file could not be parsed.
	ErrCorrupt = errors.New("lease: corrupt lease file")
	// ErrGone means the resource's lock file does not exist
	// ([Store.LockExisting]) or was removed by [Guard.Reclaim] (operations
	// on that Guard). Errors wrapping it from LockExisting also satisfy
	// vfs.IsNotExist.
	ErrGone = errors.New("lease: resource gone (no lock file)")
)

// errUnlocked is returned by Guard operations after Unlock.
var errUnlocked = errors.New("lease: guard already unlocked")

// Lease is the content of a lease file. The zero Lease is free.
type Lease struct {
	// Token names the current holding (a UUID v4); "" means released.
	Token string `json:"token"`
	// Owner describes the holder; "" when released.
	Owner string `json:"owner"`
	// Fence is the lease epoch: it increments on every change of holder and
	// never decreases.
	Fence uint64 `json:"fence"`
	// AcquiredAtMs is when the current holder acquired the lease (Unix ms).
	AcquiredAtMs int64 `json:"acquired_at_ms"`
	// ExpiresAtMs is when the lease stops being held (Unix ms, exclusive).
	ExpiresAtMs int64 `json:"expires_at_ms"`
	// Data is an opaque JSON payload preserved across Acquire, Renew and
	// Release. It is omitted from the file when empty.
	Data json.RawMessage `json:"data,omitempty"`
}

// HeldAt reports whether the lease is held at nowMs (Unix ms): it has a token
// and expires strictly after nowMs. A lease is acquirable iff it is not held.
func (l Lease) HeldAt(nowMs int64) bool { return l.Token != "" && l.ExpiresAtMs > nowMs }

// Store performs lease operations on a file system with a clock. It is safe
// for concurrent use; it holds no state besides its FS and clock.
type Store struct {
	fsys    vfs.FS
	clk     clock.Clock
	tmpDir  string
	inPlace bool
}

// NewStore returns a Store doing all I/O and locking through fsys and reading
// time from clk.
func NewStore(fsys vfs.FS, clk clock.Clock) *Store {
	return &Store{fsys: fsys, clk: clk}
}

// WithTempDir returns a Store that writes lease files through temporary
// files in dir (see vfs.WriteFileVia), so that a writer killed mid-write
// leaves garbage only there. dir must be on the same file system.
func (s *Store) WithTempDir(dir string) *Store {
	c := *s
	c.tmpDir = dir
	return &c
}

// WithInPlaceWrites returns a Store whose [Guard.Write] overwrites an
// existing lease file in place when the new content fits (see "Writing in
// place"). Use it only for volatile leases (an FS that does not sync, as
// the provider's): a power loss can tear a file written in place, which the
// rule for unparseable files then covers; a durable lease must be replaced
// atomically, the default.
func (s *Store) WithInPlaceWrites() *Store {
	c := *s
	c.inPlace = true
	return &c
}

// Guard is one flock critical section on a resource (a lock file and a lease
// file). All lease reads and writes that decide anything happen through a
// Guard. A Guard is meant for the goroutine that took it; only Unlock may be
// called concurrently. Keep the Guard referenced until Unlock: it keeps the
// underlying flock referenced, so the lock is not dropped by a finalizer.
type Guard struct {
	s         *Store
	u         vfs.Unlocker
	lockPath  string
	leasePath string
	unlocked  atomic.Bool
	reclaimed atomic.Bool

	// known is the lease file's content as this Guard last read or wrote
	// it (valid when haveKnown). Every change of a lease file happens under
	// its flock, which the Guard holds, so the file cannot change until
	// Unlock except through this Guard: a second Read in the same section
	// returns it without reading the file again. A failed Write forgets it
	// (the file may hold the old content, the new, or neither).
	known     Lease
	knownOK   bool
	haveKnown bool
}

// maxPrepare bounds how often Lock and TryLock recreate a directory that a
// reclaimer removed between their mkdir and their lock.
const maxPrepare = 100

// Lock takes the flock on lockPath, waiting until ctx is done, and returns a
// Guard for the lease file at leasePath. It creates the parent directories of
// both paths (with [vfs.DirPerm]) and the lock file if they are missing,
// again if a reclaimer removes them meanwhile (see "Reclaiming a
// resource"). lockPath and leasePath must differ: the lease file is
// replaced by rename, which would change the lock file's identity.
func (s *Store) Lock(ctx context.Context, lockPath, leasePath string) (*Guard, error) {
	for try := 1; ; try++ {
		err := s.prepare(lockPath, leasePath)
		if err == nil {
			var u vfs.Unlocker
			if u, err = s.fsys.Lock(ctx, lockPath); err == nil {
				return &Guard{s: s, u: u, lockPath: lockPath, leasePath: leasePath}, nil
			}
			err = fmt.Errorf("lease: lock %s: %w", lockPath, err)
		}
		// Not exist: a reclaimer removed the directory after prepare.
		if !vfs.IsNotExist(err) || try == maxPrepare || ctx.Err() != nil {
			return nil, err
		}
	}
}

// TryLock is Lock without waiting: ok is false (with a nil error) if another
// goroutine or process holds the flock.
func (s *Store) TryLock(lockPath, leasePath string) (g *Guard, ok bool, err error) {
	for try := 1; ; try++ {
		err := s.prepare(lockPath, leasePath)
		if err == nil {
			var u vfs.Unlocker
			var ok bool
			u, ok, err = s.fsys.TryLock(lockPath)
			if err == nil && !ok {
				return nil, false, nil
			}
			if err == nil {
				return &Guard{s: s, u: u, lockPath: lockPath, leasePath: leasePath}, true, nil
			}
			err = fmt.Errorf("lease: trylock %s: %w", lockPath, err)
		}
		// Not exist: a reclaimer removed the directory after prepare.
		if !vfs.IsNotExist(err) || try == maxPrepare {
			return nil, false, err
		}
	}
}

// LockExisting is Lock for a resource that must exist: it creates nothing,
// and fails with an error wrapping [ErrGone] (and satisfying vfs.IsNotExist)
// if the lock file does not exist, or was reclaimed while the call waited.
// Without wait, ok is false (with a nil error) if another goroutine or
// process holds the flock. Callers that only read or change an existing
// resource use it, so that looking never creates one.
func (s *Store) LockExisting(ctx context.Context, lockPath, leasePath string, wait bool) (g *Guard, ok bool, err error) {
	if lockPath == "" || leasePath == "" || filepath.Clean(lockPath) == filepath.Clean(leasePath) {
		return nil, false, fmt.Errorf("lease: bad lock and lease paths %q, %q", lockPath, leasePath)
	}
	u, ok, err := s.fsys.LockExisting(ctx, lockPath, wait)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil, false, fmt.Errorf("%w: %s: %w", ErrGone, lockPath, err)
		}
		return nil, false, fmt.Errorf("lease: lock %s: %w", lockPath, err)
	}
	if !ok {
		return nil, false, nil
	}
	return &Guard{s: s, u: u, lockPath: lockPath, leasePath: leasePath}, true, nil
}

// prepare validates the paths and creates their parent directories.
func (s *Store) prepare(lockPath, leasePath string) error {
	if lockPath == "" || leasePath == "" {
		return errors.New("lease: empty lock or lease path")
	}
	if filepath.Clean(lockPath) == filepath.Clean(leasePath) {
		return fmt.Errorf("lease: lock path and lease path are the same file %s", lockPath)
	}
	if err := s.ensureDir(filepath.Dir(lockPath)); err != nil {
		return err
	}
	if d := filepath.Dir(leasePath); d != filepath.Dir(lockPath) {
		return s.ensureDir(d)
	}
	return nil
}

// ensureDir creates dir and its missing ancestors, then fsyncs the parent of
// every directory it created so that the new entries survive a power loss.
// An existing directory costs one stat.
func (s *Store) ensureDir(dir string) error {
	fi, err := s.fsys.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("lease: %s is not a directory", dir)
		}
		return nil
	}
	if !vfs.IsNotExist(err) {
		return fmt.Errorf("lease: stat %s: %w", dir, err)
	}
	// Find the missing directories, deepest first.
	var missing []string
	for d := dir; ; {
		if _, err := s.fsys.Stat(d); err == nil || !vfs.IsNotExist(err) {
			break
		}
		missing = append(missing, d)
		p := filepath.Dir(d)
		if p == d {
			break
		}
		d = p
	}
	if err := s.fsys.MkdirAll(dir, vfs.DirPerm); err != nil {
		return fmt.Errorf("lease: mkdir %s: %w", dir, err)
	}
	for _, d := range missing {
		if err := s.fsys.SyncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("lease: mkdir %s: sync parent: %w", d, err)
		}
	}
	return nil
}

// Now reads the store's clock. Inside a Guard the flock is held, so a time
// read here is never older than the lock acquisition.
func (g *Guard) Now() time.Time { return g.s.clk.Now() }

// Read reads the lease file. A missing file gives the zero Lease and
// exists == false with a nil error, and so does a reclaimed Guard. An
// unparseable file gives an error wrapping [ErrCorrupt] (exists is true).
// Only the first Read of a Guard reads the file: later ones return what it
// read or what [Guard.Write] wrote since, which is what the file holds, as
// nobody else writes it while the flock is held. An error is not
// remembered (the next Read reads the file again).
func (g *Guard) Read() (l Lease, exists bool, err error) {
	if g.unlocked.Load() {
		return Lease{}, false, errUnlocked
	}
	if g.reclaimed.Load() {
		return Lease{}, false, nil
	}
	if g.haveKnown {
		return g.known.clone(), g.knownOK, nil
	}
	l, exists, err = readLease(g.s.fsys, g.leasePath)
	if err == nil {
		g.known, g.knownOK, g.haveKnown = l.clone(), exists, true
	}
	return l, exists, err
}

// clone returns l with its own copy of Data, so that a caller changing the
// bytes of one copy never changes another.
func (l Lease) clone() Lease {
	if len(l.Data) == 0 {
		l.Data = nil // as a read of the file gives it ("data" is omitted)
	} else {
		l.Data = slices.Clone(l.Data)
	}
	return l
}

// Reclaim removes the resource: the lease file, then the lock file, while
// the flock is still held (see "Reclaiming a resource"). From then on the
// Guard reads no lease and every write fails with [ErrGone]; Unlock still
// releases the flock. Either file being missing already is fine (a Reclaim
// interrupted by a crash is finished by the next one). If removing the
// lease file fails nothing is reclaimed and the Guard stays usable; if
// removing the lock file fails the resource is left empty and free, the
// Guard usable, and the error returned.
func (g *Guard) Reclaim() error {
	if g.unlocked.Load() {
		return errUnlocked
	}
	if g.reclaimed.Load() {
		return nil
	}
	if err := g.removeLease(); err != nil {
		return fmt.Errorf("lease: reclaim %s: %w", g.leasePath, err)
	}
	if err := g.s.fsys.Remove(g.lockPath); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("lease: reclaim %s: %w", g.lockPath, err)
	}
	g.reclaimed.Store(true)
	return nil
}

// RemoveLease removes the lease file (a missing one is fine) and keeps the
// lock file: the resource is then free, with no fence, and Read reports no
// lease. It is the first half of [Guard.Reclaim], for a caller that has
// work to finish between the two.
func (g *Guard) RemoveLease() error {
	if g.unlocked.Load() {
		return errUnlocked
	}
	if g.reclaimed.Load() {
		return nil
	}
	if err := g.removeLease(); err != nil {
		return fmt.Errorf("lease: remove %s: %w", g.leasePath, err)
	}
	return nil
}

// removeLease removes the lease file; a missing one is fine.
func (g *Guard) removeLease() error {
	g.haveKnown = false
	if err := g.s.fsys.Remove(g.leasePath); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	g.known, g.knownOK, g.haveKnown = Lease{}, false, true
	return nil
}

// Reclaimed reports whether Reclaim removed the resource: its lock file no
// longer exists and the Guard can change nothing.
func (g *Guard) Reclaimed() bool { return g.reclaimed.Load() }

// readLease reads and parses the lease file at path.
func readLease(fsys vfs.FS, path string) (Lease, bool, error) {
	b, err := fsys.ReadFile(path)
	if err != nil {
		if vfs.IsNotExist(err) {
			return Lease{}, false, nil
		}
		if vfs.IsPlanted(err) {
			// A link (or a FIFO, a directory) planted in place of the
			// lease file is not read through; it is unusable like an
			// unparseable file, with the same rule.
			return Lease{}, true, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return Lease{}, false, fmt.Errorf("lease: read %s: %w", path, err)
	}
	l, err := decode(b)
	if err != nil {
		return Lease{}, true, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	return l, true, nil
}

// decode parses lease file content; it accepts only a JSON object.
func decode(b []byte) (Lease, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return Lease{}, errors.New("not a JSON object")
	}
	var l Lease
	if err := json.Unmarshal(t, &l); err != nil {
		return Lease{}, err
	}
	return l, nil
}

// Write replaces the lease file's content with l: by atomic replace, or in
// place if the Store writes in place and it fits (see "Writing in place"). Its durability
// follows the FS ([vfs.NoSync] makes it survive kill -9 but not power loss).
// Write checks nothing: callers must not lower the fence. l.Data must be
// valid JSON or empty.
func (g *Guard) Write(l Lease) error {
	if g.unlocked.Load() {
		return errUnlocked
	}
	if g.reclaimed.Load() {
		return fmt.Errorf("%w: %s was reclaimed", ErrGone, g.lockPath)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("lease: encode %s: %w", g.leasePath, err)
	}
	b = append(b, '\n')
	g.haveKnown = false // until this write is known to have succeeded
	if g.s.inPlace {
		if done, err := vfs.Overwrite(g.s.fsys, g.leasePath, b, nil); done || err != nil {
			if err != nil {
				return fmt.Errorf("lease: %w", err)
			}
			g.known, g.knownOK, g.haveKnown = l.clone(), true, true
			return nil
		}
		b = vfs.PadBlock(b) // room for later writes in place
	}
	if err := vfs.WriteFileVia(g.s.fsys, g.s.tmpDir, g.leasePath, b); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	g.known, g.knownOK, g.haveKnown = l.clone(), true, true
	return nil
}

// ttlMs converts a TTL to whole milliseconds, refusing TTLs that would make a
// lease born expired.
func ttlMs(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return 0, fmt.Errorf("lease: ttl %v is shorter than 1ms", ttl)
	}
	return ms, nil
}

// Acquire takes the lease for owner for ttl if it is free: the lease file is
// missing, released (token ""), expired (expires_at_ms <= now) or unparseable
// (treated as free and overwritten; its fence is then unknown and taken from
// minFence). Otherwise it returns an error wrapping [ErrHeld].
//
// The new lease has a fresh UUID v4 token, Fence = max(old fence, minFence) + 1,
// AcquiredAtMs = now, ExpiresAtMs = now + ttl, and the old Data. now is read
// inside the call, after the flock was taken. Callers pass as minFence the
// highest fence in their own durable state (0 if none) so fences stay monotonic
// even if the lease file reverted after a power loss.
//
// Crash: before the rename the old lease stays; after it, the new lease names
// a holder that may never learn its token, and it expires after ttl.
func (g *Guard) Acquire(owner string, ttl time.Duration, minFence uint64) (Lease, error) {
	if g.unlocked.Load() {
		return Lease{}, errUnlocked
	}
	ms, err := ttlMs(ttl)
	if err != nil {
		return Lease{}, err
	}
	nowMs := clock.Ms(g.Now())
	old, exists, err := g.Read()
	switch {
	case errors.Is(err, ErrCorrupt):
		old = Lease{} // documented rule: an unparseable lease is free
	case err != nil:
		return Lease{}, err
	case exists && old.HeldAt(nowMs):
		return Lease{}, fmt.Errorf("%w: owner %q, fence %d, expires at %d ms (now %d ms)",
			ErrHeld, old.Owner, old.Fence, old.ExpiresAtMs, nowMs)
	}
	base := max(old.Fence, minFence)
	if base == math.MaxUint64 {
		return Lease{}, fmt.Errorf("lease: fence overflow at %s", g.leasePath)
	}
	l := Lease{
		Token:        uuid.NewString(),
		Owner:        owner,
		Fence:        base + 1,
		AcquiredAtMs: nowMs,
		ExpiresAtMs:  nowMs + ms,
		Data:         old.Data,
	}
	if err := g.Write(l); err != nil {
		return Lease{}, err
	}
	return l, nil
}

// current reads the lease and checks that token holds it (ignoring expiry).
// A missing or unparseable lease file means nobody can prove ownership, so it
// is reported as ErrNotHolder (an unparseable one also wraps ErrCorrupt).
func (g *Guard) current(token string) (Lease, error) {
	if token == "" {
		return Lease{}, fmt.Errorf("%w: empty token", ErrNotHolder)
	}
	l, exists, err := g.Read()
	switch {
	case errors.Is(err, ErrCorrupt):
		return Lease{}, fmt.Errorf("%w: %w", ErrNotHolder, err)
	case err != nil:
		return Lease{}, err
	case !exists:
		return Lease{}, fmt.Errorf("%w: no lease file %s", ErrNotHolder, g.leasePath)
	case l.Token != token:
		return Lease{}, fmt.Errorf("%w: lease %s has another token (fence %d)", ErrNotHolder, g.leasePath, l.Fence)
	}
	return l, nil
}

// Renew extends the lease held by token to now + ttl. It returns an error
// wrapping [ErrNotHolder] if token is empty or does not match the lease, and
// [ErrExpired] if it matches but the lease has expired (an expired lease must
// be acquired again, with a new fence). Fence, Owner and Data are kept.
//
// Crash: before the rename the old expiry stays; after it the lease is
// extended, and if the holder died it expires later.
func (g *Guard) Renew(token string, ttl time.Duration) (Lease, error) {
	if g.unlocked.Load() {
		return Lease{}, errUnlocked
	}
	ms, err := ttlMs(ttl)
	if err != nil {
		return Lease{}, err
	}
	nowMs := clock.Ms(g.Now())
	l, err := g.current(token)
	if err != nil {
		return Lease{}, err
	}
	if !l.HeldAt(nowMs) {
		return Lease{}, fmt.Errorf("%w: fence %d expired at %d ms (now %d ms)", ErrExpired, l.Fence, l.ExpiresAtMs, nowMs)
	}
	l.ExpiresAtMs = nowMs + ms
	if err := g.Write(l); err != nil {
		return Lease{}, err
	}
	return l, nil
}

// Release frees the lease held by token: Token, Owner, AcquiredAtMs and
// ExpiresAtMs become zero; Fence and Data are kept. It returns an error
// wrapping [ErrNotHolder] if token is empty or does not match. Expiry is not
// checked: a holder may release its expired lease as long as nobody has taken
// it over. Release returns the released lease.
//
// Crash: before the rename the lease stays held and expires on its own; after
// it the lease is free.
func (g *Guard) Release(token string) (Lease, error) {
	if g.unlocked.Load() {
		return Lease{}, errUnlocked
	}
	l, err := g.current(token)
	if err != nil {
		return Lease{}, err
	}
	l.Token, l.Owner, l.AcquiredAtMs, l.ExpiresAtMs = "", "", 0, 0
	if err := g.Write(l); err != nil {
		return Lease{}, err
	}
	return l, nil
}

// Unlock releases the flock. It is idempotent; Guard operations after Unlock
// fail.
func (g *Guard) Unlock() error {
	g.unlocked.Store(true)
	if err := g.u.Unlock(); err != nil {
		return fmt.Errorf("lease: unlock %s: %w", g.lockPath, err)
	}
	return nil
}

// with runs fn in one flock section and unlocks, joining any unlock error.
func (s *Store) with(ctx context.Context, lockPath, leasePath string, fn func(g *Guard) error) error {
	g, err := s.Lock(ctx, lockPath, leasePath)
	if err != nil {
		return err
	}
	err = fn(g)
	return errors.Join(err, g.Unlock())
}

// Acquire takes the lease for owner in one flock section, with minFence 0
// (see [Guard.Acquire]). It waits for the flock until ctx is done.
func (s *Store) Acquire(ctx context.Context, lockPath, leasePath, owner string, ttl time.Duration) (Lease, error) {
	var l Lease
	err := s.with(ctx, lockPath, leasePath, func(g *Guard) (err error) {
		l, err = g.Acquire(owner, ttl, 0)
		return err
	})
	return l, err
}

// Renew extends the lease held by token in one flock section (see
// [Guard.Renew]).
func (s *Store) Renew(ctx context.Context, lockPath, leasePath, token string, ttl time.Duration) (Lease, error) {
	var l Lease
	err := s.with(ctx, lockPath, leasePath, func(g *Guard) (err error) {
		l, err = g.Renew(token, ttl)
		return err
	})
	return l, err
}

// Release frees the lease held by token in one flock section (see
// [Guard.Release]).
func (s *Store) Release(ctx context.Context, lockPath, leasePath, token string) error {
	return s.with(ctx, lockPath, leasePath, func(g *Guard) error {
		_, err := g.Release(token)
		return err
	})
}

// Inspect reads the lease file without taking the flock. A write in place
// may race the read (see "Writing in place"), so an unparseable read is
// retried a few times; the result may be stale, or rarely a torn mix, by the
// time it returns. Use it for monitoring and hints, never to decide a
// change (take a Guard for that). lockPath is accepted for symmetry with the
// other operations and is not touched. A missing file gives exists == false;
// an unparseable one an error wrapping [ErrCorrupt].
func (s *Store) Inspect(ctx context.Context, lockPath, leasePath string) (Lease, bool, error) {
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return Lease{}, false, err
		}
		l, exists, err := readLease(s.fsys, leasePath)
		if !errors.Is(err, ErrCorrupt) || vfs.IsPlanted(err) || try == 3 {
			return l, exists, err
		}
		time.Sleep(time.Millisecond)
	}
}
