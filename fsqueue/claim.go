package fsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// Claim is the peek-lock lease of one message, stored in claims/<name>.json.
type Claim struct {
	// Token identifies the lease: "<name>.<uuid>", fresh for every claim.
	// Empty means not held (abandoned).
	Token string `json:"token"`
	// Owner is the caller's identity of the holder, for diagnostics.
	Owner string `json:"owner,omitempty"`
	// LockedUntilMs is when the lease expires (ms since the epoch).
	LockedUntilMs int64 `json:"locked_until_ms"`
	// Attempt counts the leases handed out for the message (1 for the
	// first delivery).
	Attempt uint32 `json:"attempt"`
	// VisibleAtMs overrides the message's visibility time when non-zero; it
	// is set by Abandon with a delay.
	VisibleAtMs int64 `json:"visible_at_ms,omitempty"`
	// State is "" normally. Callers may set other states (for example
	// "acked") with [ClaimGuard.Write]; a message whose claim has a non-empty
	// State is never claimed again, and Sweep keeps such claims.
	State string `json:"state,omitempty"`
	// Data is opaque caller data. ClaimNext keeps it from the previous claim.
	Data json.RawMessage `json:"data,omitempty"`
}

// Claimed is a message handed out by [Queue.ClaimNext] with its new claim.
type Claimed struct {
	// Message is the claimed message.
	Message Message
	// Claim is the lease just written; Claim.Token is needed to renew,
	// abandon or acknowledge.
	Claim Claim
}

// SweepStats counts what [Queue.Sweep] removed.
type SweepStats struct {
	// TempRemoved is the number of old temporary files removed.
	TempRemoved int
	// OrphanClaimsRemoved is the number of claims removed whose message and
	// staged file were both gone.
	OrphanClaimsRemoved int
}

// claimCache caches the listing of claims/ and parsed claim files for the
// ClaimNext pre-filter. Decisions are always re-made under the flock.
//
// With a watch of claims/ and its files' contents (inotify, Linux), names
// and entries are kept exact by the watch's events, drained once per
// ClaimNext pass: an entry is dropped when its file is added, removed or
// written, so a claim that did not change since it was read costs nothing
// to check again, however busy claims/ is. The kernel queues a write's
// event before the write returns, so a claim read before a write is
// dropped at the next drain - unless a drain consumed that event while the
// read was in flight: gen counts the drains that brought events (and the
// relistings), and a read during which gen moved is not cached.
//
// Without a watch the names are re-listed when claims/'s mtime says they
// may have changed, and each entry is checked against its file's identity
// (cachedClaim).
type claimCache struct {
	mu          sync.Mutex
	watch       vfs.DirWatch // nil: no watch (the mtime rule)
	watchTried  bool
	rewatch     bool // a failed watch was dropped: watch anew (see listCache.rewatch)
	gen         uint64
	setValid    bool
	setMtime    time.Time // mtime of claims/ observed by the last listing
	setListedAt time.Time // real time taken before that listing's Stat
	// names: the messages with claim files. Without a watch it is replaced,
	// never mutated (snapshots share it); with one it is kept under mu.
	names   map[Entry]struct{}
	entries lru[Entry, claimEntry] // bounded: claimCacheItems
	// moved: the queue directory's watch reported it removed or replaced
	// (refreshLocked): claims/ is now another directory than the one the
	// watch follows, which reports nothing of it, so the watch is dropped
	// at the next snapshot. Atomic: set holding the index lock only.
	moved atomic.Bool
}

// errCorrupt marks a claim file that exists but cannot be parsed.
var errCorrupt = errors.New("corrupt file")

// claimCacheItems bounds the parsed claims kept for the pre-filter (a
// variable for the test of the bound).
var claimCacheItems = 4096

type claimEntry struct {
	claim   Claim
	exists  bool
	corrupt bool
	// identity of the file the claim was read from, and the real time
	// taken before it was read
	ino    uint64
	size   int64
	mtime  time.Time
	ctime  time.Time
	readAt time.Time
	// the entry was known correct at real time validAt, when claims/ had
	// mtime dirMtime
	dirMtime time.Time
	validAt  time.Time
}

// claimSnap is the set of messages that had claim files at one listing
// (without a watch), or marks a pass of a watched cache (names nil).
type claimSnap struct {
	names    map[Entry]struct{}
	dirMtime time.Time
	watched  bool
}

// hasClaim reports whether e had a claim file in the snapshot.
func (q *Queue) hasClaim(e Entry, snap claimSnap) bool {
	if !snap.watched {
		_, ok := snap.names[e]
		return ok
	}
	q.claims.mu.Lock()
	_, ok := q.claims.names[e]
	q.claims.mu.Unlock()
	return ok
}

// NameFromToken returns the message name a claim token belongs to.
func NameFromToken(token string) (name string, ok bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", false
	}
	name, id := token[:i], token[i+1:]
	if !validName(name) || len(id) != 36 {
		return "", false
	}
	if u, err := uuid.Parse(id); err != nil || u == uuid.Nil || u.String() != id {
		return "", false
	}
	return name, true
}

func newToken(name string) string { return name + "." + uuid.NewString() }

// claimable reports whether a message with entry e and claim c (nil: none)
// may be claimed at now.
func claimable(e Entry, c *Claim, now int64) bool {
	vis := e.VisibleAtMs
	if c != nil && c.VisibleAtMs != 0 {
		vis = c.VisibleAtMs
	}
	if vis > now {
		return false
	}
	if c == nil {
		return true
	}
	if c.State != "" {
		return false
	}
	return c.Token == "" || c.LockedUntilMs <= now
}

// ClaimNext claims the first message, in FIFO (name) order, that is visible
// (by its name's visibility time, which a claim may only push back), not
// claimed (no claim, an empty token or an expired lease), has an empty
// claim State and satisfies eligible (nil accepts all). eligible receives the
// current claim or nil; it may be called more than once per message and must
// not retain the claim. The new claim has a fresh token, Owner owner,
// LockedUntilMs = now+lockFor (now read after the message's lock is held),
// Attempt one more than before, and the previous VisibleAtMs and Data.
//
// Messages whose lock is held by someone else are skipped at first;
// if nothing else was claimable, ClaimNext waits for them in turn, up to
// busyWait (20 ms) in all, since message locks are held only for short
// critical sections. (nil, nil) means nothing was claimable right now; poll again
// later.
// ClaimNext never returns a lease that has already expired.
func (q *Queue) ClaimNext(ctx context.Context, owner string, lockFor time.Duration, eligible func(Entry, *Claim) bool) (*Claimed, error) {
	if lockFor < time.Millisecond {
		return nil, fmt.Errorf("fsqueue: claim: lockFor %v is shorter than 1ms", lockFor)
	}
	now := clock.Ms(q.clock.Now())
	var snap claimSnap
	if q.deferred.len() > 0 {
		// Changes of claims that defer messages are applied before the
		// walk passes over them (see deferrals).
		var err error
		if snap, err = q.claimSnapshot(); err != nil {
			return nil, err
		}
	}
	var busy []Entry // claimable, but their lock was held when tried
	for e, err := range q.Due(now) {
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if snap.names == nil && !snap.watched {
			if snap, err = q.claimSnapshot(); err != nil {
				return nil, err
			}
		}
		if q.msgs.damaged(e) {
			continue // a file that does not decode: never handed out
		}
		var cp *Claim
		if q.hasClaim(e, snap) {
			c, exists, err := q.cachedClaim(e, snap, now)
			if err != nil {
				return nil, err
			}
			if exists {
				cp = &c
			}
		}
		if !claimable(e, cp, now) || (eligible != nil && !eligible(e, cp)) {
			continue
		}
		got, err := q.tryClaim(ctx, e, owner, lockFor, eligible, 0)
		if errors.Is(err, errBusy) {
			busy = append(busy, e)
			continue
		}
		if err != nil {
			return nil, err
		}
		if got != nil {
			return got, nil
		}
	}
	// Nothing else was claimable. Message locks are held only for short
	// critical sections (a claim, an ack, a cleanup), so a message that was
	// merely busy is worth a short wait rather than reporting no work.
	deadline := time.Now().Add(busyWait) // for all of them together
	for _, e := range busy {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		got, err := q.tryClaim(ctx, e, owner, lockFor, eligible, wait)
		if errors.Is(err, errBusy) {
			continue
		}
		if err != nil || got != nil {
			return got, err
		}
	}
	return nil, nil
}

// busyWait bounds how long [Queue.ClaimNext], having found nothing else,
// waits in all for the locks of messages that were busy.
const busyWait = 20 * time.Millisecond

// errBusy: tryClaim did not get the message's lock in time.
var errBusy = errors.New("fsqueue: message lock busy")

// testHookClaimRead, when set by a test, runs when the pre-filter of a
// watched claim cache has read a claim file and not yet cached it.
var testHookClaimRead func(name string)

// testHookBusyWait, when set by a test, runs when ClaimNext starts waiting
// for a busy message.
var testHookBusyWait func(name string)

// tryClaim claims e if it gets its message's lock (at once, or within
// wait) and e is still claimable under the lock. It returns (nil, nil) if e
// is not claimable, is gone or its file is damaged, errBusy if the lock was
// not free.
func (q *Queue) tryClaim(ctx context.Context, e Entry, owner string, lockFor time.Duration, eligible func(Entry, *Claim) bool, wait time.Duration) (_ *Claimed, err error) {
	name := e.Name()
	lctx := ctx
	if wait > 0 {
		if testHookBusyWait != nil {
			testHookBusyWait(name)
		}
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	u, ok, err := q.fsys.LockExisting(lctx, q.msgPath(name), wait > 0)
	switch {
	case err == nil && !ok:
		return nil, errBusy
	case err == nil:
	case vfs.IsNotExist(err):
		q.forget(name) // consumed or deleted since it was listed
		return nil, nil
	case wait > 0 && lctx.Err() != nil && ctx.Err() == nil:
		return nil, errBusy
	case planted(err):
		return nil, q.skipLinked(name, err)
	default:
		return nil, fmt.Errorf("fsqueue: claim %s: %w", name, err)
	}
	defer func() {
		if uerr := u.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("fsqueue: claim %s: unlock: %w", name, uerr)
		}
	}()

	old, exists, err := q.readClaim(name)
	if err != nil {
		if !errors.Is(err, errCorrupt) {
			return nil, err
		}
		// A claim file that cannot be parsed (only possible after a power
		// loss without fsync) is treated as no claim: redelivery.
		q.log.Warn("fsqueue: overwriting unreadable claim", "dir", q.dir, "name", name, "err", err)
		old, exists = Claim{}, false
	}
	now := clock.Ms(q.clock.Now()) // after the flock is held
	var cp *Claim
	if exists {
		cp = &old
	}
	if !claimable(e, cp, now) || (eligible != nil && !eligible(e, cp)) {
		q.noteClaim(e, cp, now)
		return nil, nil
	}
	// The body, before anything is written: a damaged file (which the
	// index, built from names, does list) is never handed out.
	m, err := q.Get(name)
	switch {
	case err == nil:
	case vfs.IsNotExist(err):
		q.forget(name)
		return nil, nil
	case errors.Is(err, ErrCorrupt):
		return nil, nil // logged by read, once while it is cached
	default:
		return nil, err
	}
	c := Claim{
		Token:         newToken(name),
		Owner:         owner,
		LockedUntilMs: now + lockFor.Milliseconds(),
		Attempt:       old.Attempt + 1,
		VisibleAtMs:   old.VisibleAtMs,
		Data:          old.Data,
	}
	if err := q.writeClaim(name, c); err != nil {
		return nil, err
	}
	// Only a holder of its lock deletes a message, but a queue without
	// claims discipline (Delete of a message nobody locks) could still
	// remove it: then our claim is an orphan and goes.
	if _, err := q.fsys.Lstat(q.msgPath(name)); err != nil {
		if !vfs.IsNotExist(err) {
			return nil, fmt.Errorf("fsqueue: claim %s: %w", name, err)
		}
		q.forget(name)
		q.log.Debug("fsqueue: claimed message vanished", "dir", q.dir, "name", name)
		if err := q.fsys.Remove(q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
			return nil, fmt.Errorf("fsqueue: claim %s: remove: %w", name, err)
		}
		return nil, nil
	}
	if clock.Ms(q.clock.Now()) >= c.LockedUntilMs {
		// Born expired (a clock jump, or a write slower than lockFor): put
		// back what was there, so the message is as if never claimed.
		q.log.Debug("fsqueue: lease expired while claiming", "dir", q.dir, "name", name)
		if exists {
			return nil, q.writeClaim(name, old)
		}
		if err := q.fsys.Remove(q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
			return nil, fmt.Errorf("fsqueue: claim %s: remove: %w", name, err)
		}
		return nil, nil
	}
	return &Claimed{Message: m, Claim: c}, nil
}

// claimSnapshot returns the names that have claim files, re-reading claims/
// only if it may have changed (same rule as List).
func (q *Queue) claimSnapshot() (claimSnap, error) {
	c := &q.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.moved.Swap(false) && c.watch != nil {
		q.log.Warn("fsqueue: the queue directory was replaced; watching its claims anew", "dir", q.claimsDir)
		q.dropClaimsWatchLocked()
	}
	if c.watch != nil && c.setValid {
		events, overflow, err := c.watch.Drain()
		if err == nil && !overflow {
			q.applyClaimEventsLocked(events)
			return claimSnap{watched: true}, nil
		}
		if err != nil {
			// The watch may be dead for good (claims/ removed or replaced:
			// vfs.ErrWatchGone): claims/ is watched anew, then listed.
			q.log.Warn("fsqueue: claims watch failed; re-listing", "dir", q.claimsDir, "err", err)
			q.dropClaimsWatchLocked()
		}
		c.setValid = false
	}
	if !c.watchTried || c.rewatch {
		c.watchTried = true
		// The watch starts before the first listing, so no change between
		// the two is missed.
		if w, ok := vfs.WatchDirContents(q.fsys, q.claimsDir); ok {
			c.watch, c.setValid, c.rewatch = w, false, false
		}
	}
	if c.watch != nil {
		return q.watchedClaimSnapshotLocked()
	}
	t0 := time.Now()
	fi, err := q.fsys.Stat(q.claimsDir)
	if err != nil {
		return claimSnap{}, fmt.Errorf("fsqueue: list %s: %w", q.claimsDir, err)
	}
	c.rewatch = false // claims/ is there, and cannot be watched: poll
	mtime := fi.ModTime()
	if c.setValid && mtime.Equal(c.setMtime) && settled(c.setListedAt, c.setMtime) {
		return claimSnap{names: c.names, dirMtime: mtime}, nil
	}
	names, err := q.listClaimSet()
	if err != nil {
		return claimSnap{}, err
	}
	// The map is replaced, never mutated, so snapshots can share it.
	c.names, c.setMtime, c.setListedAt, c.setValid = names, mtime, t0, true
	return claimSnap{names: names, dirMtime: mtime}, nil
}

// listClaimSet lists claims/: the messages that have claim files.
func (q *Queue) listClaimSet() (map[Entry]struct{}, error) {
	files, err := q.fsys.ReadDirNames(q.claimsDir)
	if err != nil {
		return nil, fmt.Errorf("fsqueue: list %s: %w", q.claimsDir, err)
	}
	names := make(map[Entry]struct{}, len(files))
	for _, f := range files {
		if name, ok := nameFromFile(f); ok {
			e, _ := parseName(name)
			names[e] = struct{}{}
		}
	}
	return names, nil
}

// dropClaimsWatchLocked closes the watch of claims/ after it failed; the
// next pass watches claims/ anew. The caller holds q.claims.mu.
func (q *Queue) dropClaimsWatchLocked() {
	c := &q.claims
	if err := c.watch.Close(); err != nil {
		q.log.Warn("fsqueue: closing a failed claims watch", "dir", q.claimsDir, "err", err)
	}
	c.watch, c.rewatch, c.setValid = nil, true, false
	c.gen++
	c.entries.reset()
	q.deferred.reset() // changes of claims may have gone unseen
}

// watchedClaimSnapshotLocked lists claims/ anew for a watched cache (after
// an overflow, an error or an Invalidate; claimSnapshot applies the events
// of a valid one). The caller holds q.claims.mu.
func (q *Queue) watchedClaimSnapshotLocked() (claimSnap, error) {
	c := &q.claims
	snap := claimSnap{watched: true}
	c.gen++
	c.setValid = false
	c.entries.reset()
	q.deferred.reset() // changes of claims may have gone unseen
	names, err := q.listClaimSet()
	if err != nil {
		return claimSnap{}, err
	}
	c.names = names
	// Changes made during the listing are applied now (idempotently).
	events, overflow, err := c.watch.Drain()
	if err != nil {
		q.dropClaimsWatchLocked()
	}
	if err != nil || overflow {
		return snap, nil // the listing stands for this pass; the next lists again
	}
	c.setValid = true
	q.applyClaimEventsLocked(events)
	return snap, nil
}

// applyClaimEventsLocked applies watched changes of claims/ to a watched
// cache: names follow the files, and a file added, removed or written drops
// its parsed entry. The caller holds q.claims.mu.
func (q *Queue) applyClaimEventsLocked(events []vfs.DirEvent) {
	c := &q.claims
	if len(events) == 0 {
		return
	}
	c.gen++
	for _, ev := range events {
		name, ok := nameFromFile(ev.Name)
		if !ok {
			continue // a temporary file
		}
		e, _ := parseName(name)
		c.entries.remove(e)
		q.deferred.drop(e) // learnt again from the claim if it still defers
		switch {
		case ev.Changed:
		case ev.Added:
			c.names[e] = struct{}{}
		default:
			delete(c.names, e)
		}
	}
}

// cachedClaim returns e's claim for the pre-filter: from the cache if
// claims/ has not changed since the entry was known correct, else after an
// Lstat (and a read if the file's identity changed); with a watch, from the
// cache unless the watch reported a change of the file since it was read.
// A corrupt claim is reported as absent. A claim abandoned with a delay
// that runs past nowMs defers its message (see deferrals): later passes
// skip it without a look until then.
func (q *Queue) cachedClaim(e Entry, snap claimSnap, nowMs int64) (Claim, bool, error) {
	c := &q.claims
	since := q.deferred.version() // before the entry or the file is read
	c.mu.Lock()
	ce, ok := c.entries.get(e)
	gen := c.gen
	if ok && snap.watched {
		// A change of the claim since it was read would have dropped the
		// entry (applyClaimEventsLocked, under c.mu).
		q.deferIfDelayed(e, ce, nowMs, since)
	}
	c.mu.Unlock()
	if snap.watched {
		if ok {
			return ce.claim, ce.exists && !ce.corrupt, nil
		}
		cl, exists, err := q.readClaim(e.Name())
		corrupt := errors.Is(err, errCorrupt)
		if err != nil && !corrupt {
			return Claim{}, false, err
		}
		ce = claimEntry{claim: cl, exists: exists || corrupt, corrupt: corrupt}
		if testHookClaimRead != nil {
			testHookClaimRead(e.Name())
		}
		c.mu.Lock()
		if c.gen == gen {
			c.entries.maxItems = claimCacheItems
			c.entries.put(e, ce)
			q.deferIfDelayed(e, ce, nowMs, since)
		}
		c.mu.Unlock()
		return ce.claim, ce.exists && !ce.corrupt, nil
	}
	if ok && ce.dirMtime.Equal(snap.dirMtime) && settled(ce.validAt, snap.dirMtime) {
		return ce.claim, ce.exists && !ce.corrupt, nil
	}
	v := time.Now()
	name := e.Name()
	path := q.claimPath(name)
	fi, err := q.fsys.Lstat(path)
	switch {
	case vfs.IsNotExist(err):
		ce = claimEntry{}
	case err != nil:
		return Claim{}, false, fmt.Errorf("fsqueue: stat claim %s: %w", name, err)
	case ok && ce.exists && ce.ino == fileIno(fi) && ce.size == fi.Size() && ce.mtime.Equal(fi.ModTime()) && ce.ctime.Equal(vfs.ChangeTime(fi)) &&
		settled(ce.readAt, ce.ctime):
		// Unchanged file: same inode, size and times, and the content was
		// read a margin after its last change, so a write since (in place,
		// same inode and size) would have moved its times past the
		// timestamp granularity.
	default:
		cl, exists, err := q.readClaim(name)
		corrupt := errors.Is(err, errCorrupt)
		if err != nil && !corrupt {
			return Claim{}, false, err
		}
		ce = claimEntry{claim: cl, exists: exists || corrupt, corrupt: corrupt,
			ino: fileIno(fi), size: fi.Size(), mtime: fi.ModTime(), ctime: vfs.ChangeTime(fi), readAt: v}
	}
	ce.dirMtime, ce.validAt = snap.dirMtime, v
	c.mu.Lock()
	c.entries.maxItems = claimCacheItems
	c.entries.put(e, ce)
	c.mu.Unlock()
	q.deferIfDelayed(e, ce, nowMs, since)
	return ce.claim, ce.exists && !ce.corrupt, nil
}

// deferIfDelayed defers e if its claim, as the pre-filter knows it, was
// abandoned with a delay that runs past nowMs - unless a claim was written
// or removed through this Queue since the count of changes was since,
// before the pre-filter read the claim (deferrals.learn): such a write may
// have replaced what was read. With a watch of claims/ the caller holds
// q.claims.mu and has checked that no drain ran since the claim was read,
// so that the event of a change by another process, which drops the
// deferral, cannot have been consumed before it is set.
func (q *Queue) deferIfDelayed(e Entry, ce claimEntry, nowMs int64, since uint64) {
	if ce.exists && !ce.corrupt && ce.claim.Token == "" && ce.claim.State == "" && ce.claim.VisibleAtMs > nowMs {
		q.deferred.learn(e, ce.claim.VisibleAtMs, nowMs, since)
	}
}

// readClaim reads claims/<name>.json. A missing file is (Claim{}, false, nil);
// an unparsable one, or one holding another message's token, is an error
// wrapping ErrCorrupt (and errCorrupt).
func (q *Queue) readClaim(name string) (Claim, bool, error) {
	data, err := q.fsys.ReadFile(q.claimPath(name))
	if err != nil {
		if vfs.IsNotExist(err) {
			return Claim{}, false, nil
		}
		if planted(err) {
			return Claim{}, true, fmt.Errorf("fsqueue: read claim %s: %w (%w): %w", name, ErrCorrupt, errCorrupt, err)
		}
		return Claim{}, false, fmt.Errorf("fsqueue: read claim %s: %w", name, err)
	}
	if q.gone(q.claimPath(name)) {
		return Claim{}, false, nil // removed while read, maybe recycled (see gone)
	}
	var c Claim
	if err := json.Unmarshal(data, &c); err != nil {
		return Claim{}, true, fmt.Errorf("fsqueue: read claim %s: %w (%w): %w", name, ErrCorrupt, errCorrupt, err)
	}
	if c.Token != "" {
		// A token of another message: the file is not this message's claim.
		if n, ok := NameFromToken(c.Token); !ok || n != name {
			return Claim{}, true, fmt.Errorf("fsqueue: read claim %s: %w (%w): token %q of another message", name, ErrCorrupt, errCorrupt, c.Token)
		}
	}
	return c, true, nil
}

// PeekClaim reads a message's claim without its lock (a snapshot that may be
// stale by the time it returns); exists is false if it has none.
func (q *Queue) PeekClaim(name string) (c Claim, exists bool, err error) {
	if err := checkName(name); err != nil {
		return Claim{}, false, err
	}
	return q.readClaim(name)
}

// writeClaim writes claims/<name>.json; callers hold the message's lock. A
// durable queue replaces it atomically and fsyncs it. A queue with
// VolatileClaims writes it in place when it fits ([vfs.Overwrite]) and then
// touches claims/, so that pre-filter caches keyed on the directory's mtime
// look again (a failed touch undoes the write); a new or outgrown claim is
// replaced atomically, unsynced, padded to a multiple of [vfs.InPlaceBlock]
// so that later versions fit (doc.go, "Claims written in place").
func (q *Queue) writeClaim(name string, c Claim) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("fsqueue: write claim %s: %w", name, err)
	}
	path := q.claimPath(name)
	if !q.opts.VolatileClaims {
		if err := vfs.WriteFile(q.fsys, path, data); err != nil {
			return fmt.Errorf("fsqueue: write claim %s: %w", name, err)
		}
		q.notedClaim(name, &c)
		return nil
	}
	done, err := vfs.Overwrite(q.fsys, path, data, func() error { return q.fsys.Touch(q.claimsDir) })
	if err == nil && !done {
		// Only this message's lock holder writes path (recycle.go, rule 3).
		if err = q.opts.Recycler.create(q.fsys, path, vfs.PadBlock(data)); errors.Is(err, errNoPooled) {
			err = vfs.WriteFile(vfs.NoSync(q.fsys), path, vfs.PadBlock(data))
		}
	}
	if err != nil {
		return fmt.Errorf("fsqueue: write claim %s: %w", name, err)
	}
	q.notedClaim(name, &c)
	return nil
}

// notedClaim is noteClaim of message name's claim c just written or
// removed (nil).
func (q *Queue) notedClaim(name string, c *Claim) {
	e, ok := parseName(name)
	switch {
	case !ok:
	case c == nil || c.Token != "" || c.State != "" || c.VisibleAtMs == 0:
		q.deferred.drop(e) // no clock read: ClaimNext's reads are counted
	default:
		q.noteClaim(e, c, clock.Ms(q.clock.Now()))
	}
}

// ClaimGuard gives access to one message's claim while its lock is held;
// it is valid only inside the [Queue.WithClaim] callback.
type ClaimGuard struct {
	q    *Queue
	name string
	// gone: the message did not exist, so no lock was taken (see WithClaim)
	gone bool
	done atomic.Bool
}

var errGuardDone = errors.New("fsqueue: ClaimGuard used after WithClaim returned")

// WithClaim runs fn while holding name's lock - an flock on the message
// file itself, waiting for it until ctx is done. Every read-check-write of a
// claim outside ClaimNext must happen inside fn.
//
// If the message does not exist - it was consumed or deleted, which only a
// holder of its lock does - there is nothing left to exclude anyone from:
// fn runs without a lock, [ClaimGuard.MessageExists] reports false and
// [ClaimGuard.Write] fails with [ErrNotFound]. A claim left behind is inert
// (Renew, Abandon and ClaimNext need the message), and fn may only remove
// it or finish work it records, idempotently.
func (q *Queue) WithClaim(ctx context.Context, name string, fn func(g *ClaimGuard) error) (err error) {
	if err := checkName(name); err != nil {
		return err
	}
	u, _, err := q.fsys.LockExisting(ctx, q.msgPath(name), true)
	if vfs.IsNotExist(err) {
		g := &ClaimGuard{q: q, name: name, gone: true}
		defer g.done.Store(true)
		return fn(g)
	}
	if err != nil {
		return fmt.Errorf("fsqueue: lock %s: %w", name, err)
	}
	g := &ClaimGuard{q: q, name: name}
	defer func() {
		g.done.Store(true)
		if uerr := u.Unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("fsqueue: unlock %s: %w", name, uerr)
		}
	}()
	return fn(g)
}

// Now reads the queue's clock (the lock is already held, so a lease computed
// from it is not born stale).
func (g *ClaimGuard) Now() time.Time { return g.q.clock.Now() }

// Read returns the message's claim; exists is false if it has none. A
// claim file that does not decode, or holds another message's token, gives
// an error wrapping [ErrCorrupt] (possible after a power loss with
// VolatileClaims; such a claim is no claim for ClaimNext).
func (g *ClaimGuard) Read() (c Claim, exists bool, err error) {
	if g.done.Load() {
		return Claim{}, false, errGuardDone
	}
	return g.q.readClaim(g.name)
}

// Write replaces the message's claim ([vfs.WriteFile]; durably unless the
// queue has VolatileClaims). A non-empty Token must be a token of this
// message (see [NameFromToken]).
func (g *ClaimGuard) Write(c Claim) error {
	if err := g.checkWrite(c); err != nil {
		return err
	}
	return g.q.writeClaim(g.name, c)
}

// Remove removes the message's claim, if any (ENOENT is success), without a
// directory fsync; it is allowed on the claim of a gone message too.
func (g *ClaimGuard) Remove() error {
	if g.done.Load() {
		return errGuardDone
	}
	return g.q.DeleteClaim(g.name)
}

func (g *ClaimGuard) checkWrite(c Claim) error {
	if g.done.Load() {
		return errGuardDone
	}
	if g.gone {
		return fmt.Errorf("fsqueue: write claim %s: %w (a claim of a gone message is only removed)", g.name, ErrNotFound)
	}
	if c.Token != "" {
		if n, ok := NameFromToken(c.Token); !ok || n != g.name {
			return fmt.Errorf("fsqueue: write claim %s: %w: token %q is not a token of this message", g.name, ErrInvalidName, c.Token)
		}
	}
	return nil
}

// MessageExists reports whether the message file exists on disk.
func (g *ClaimGuard) MessageExists() (bool, error) {
	if g.done.Load() {
		return false, errGuardDone
	}
	if g.gone {
		return false, nil
	}
	_, err := g.q.fsys.Lstat(g.q.msgPath(g.name))
	if err == nil {
		return true, nil
	}
	if vfs.IsNotExist(err) {
		return false, nil
	}
	return false, fmt.Errorf("fsqueue: stat %s: %w", g.name, err)
}

// holderClaim reads the claim under g and checks that token holds it.
func holderClaim(g *ClaimGuard, token string) (Claim, error) {
	c, exists, err := g.Read()
	if err != nil {
		if errors.Is(err, errCorrupt) {
			return Claim{}, fmt.Errorf("%w: %w", ErrNotHolder, err)
		}
		return Claim{}, err
	}
	if !exists || c.Token == "" || c.Token != token {
		return Claim{}, fmt.Errorf("%w: %s", ErrNotHolder, g.name)
	}
	if c.State != "" {
		// A claim in a caller-defined state (e.g. an acked item awaiting
		// cleanup) is no longer a peek-lock anyone may renew or abandon.
		return Claim{}, fmt.Errorf("%w: %s is in state %q", ErrNotHolder, g.name, c.State)
	}
	return c, nil
}

// Renew extends the lease of token to now+extend. It fails with
// [ErrNotHolder] if token does not hold the claim, [ErrExpired] if the lease
// has expired, and [ErrNotFound] if the message is gone.
func (q *Queue) Renew(ctx context.Context, token string, extend time.Duration) (Claim, error) {
	if extend < time.Millisecond {
		return Claim{}, fmt.Errorf("fsqueue: renew: extend %v is shorter than 1ms", extend)
	}
	name, ok := NameFromToken(token)
	if !ok {
		return Claim{}, fmt.Errorf("%w: malformed token %q", ErrNotHolder, token)
	}
	var out Claim
	err := q.WithClaim(ctx, name, func(g *ClaimGuard) error {
		c, err := holderClaim(g, token)
		if err != nil {
			return err
		}
		now := clock.Ms(g.Now())
		if c.LockedUntilMs <= now {
			return fmt.Errorf("%w: %s", ErrExpired, name)
		}
		ok, err := g.MessageExists()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		c.LockedUntilMs = now + extend.Milliseconds()
		if err := g.Write(c); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return Claim{}, fmt.Errorf("fsqueue: renew: %w", err)
	}
	return out, nil
}

// Abandon releases the lease of token (whether or not it has expired, as
// long as nobody else has claimed the message since; else [ErrNotHolder]).
// The message becomes visible again after delay (at once if delay <= 0).
// With ignoreAttempt the claim's Attempt is decremented (never below 0), so
// the abandoned delivery does not count.
func (q *Queue) Abandon(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	name, ok := NameFromToken(token)
	if !ok {
		return fmt.Errorf("fsqueue: abandon: %w: malformed token %q", ErrNotHolder, token)
	}
	err := q.WithClaim(ctx, name, func(g *ClaimGuard) error {
		c, err := holderClaim(g, token)
		if err != nil {
			return err
		}
		c.Token, c.LockedUntilMs, c.VisibleAtMs = "", 0, 0
		if delay > 0 {
			c.VisibleAtMs = clock.Ms(g.Now().Add(delay))
		}
		if ignoreAttempt && c.Attempt > 0 {
			c.Attempt--
		}
		return g.Write(c)
	})
	if err != nil {
		return fmt.Errorf("fsqueue: abandon: %w", err)
	}
	return nil
}

// Claims returns the sorted names that have claim files (for sweepers).
func (q *Queue) Claims() ([]string, error) {
	files, err := q.fsys.ReadDirNames(q.claimsDir)
	if err != nil {
		return nil, fmt.Errorf("fsqueue: list %s: %w", q.claimsDir, err)
	}
	var names []string
	for _, f := range files {
		if name, ok := nameFromFile(f); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Sweep removes temporary files older than tempOlderThan (by the queue's
// clock against their mtime) from the queue directory and claims/, and
// orphan claims: claims whose message and staged file are both gone and
// whose State is empty (an unparsable orphan claim is removed too). It does
// not touch staged files, nor claims with a non-empty State. Use an age of minutes: a younger temporary file may
// belong to a write in progress. Removals are not fsynced (a removal lost to
// a power loss is redone by the next sweep).
//
// The queue directory's temporary files come from the index when this
// Queue keeps one ([Queue.Indexed]), else from a listing of the directory,
// whose cost grows with the messages queued; [Queue.SweepClaims] leaves
// the directory out.
func (q *Queue) Sweep(ctx context.Context, tempOlderThan time.Duration) (SweepStats, error) {
	return q.sweep(ctx, tempOlderThan, []string{q.dir, q.claimsDir})
}

// SweepClaims is [Queue.Sweep] without the queue directory: it removes the
// old temporary files of claims/ and the orphan claims, and costs what
// claims/ holds (the messages in flight), not what the queue holds. A
// process that does not keep the queue's index (it does not consume the
// queue) sweeps so, and leaves the directory's temporary and staged files
// to the processes that keep it.
func (q *Queue) SweepClaims(ctx context.Context, tempOlderThan time.Duration) (SweepStats, error) {
	return q.sweep(ctx, tempOlderThan, []string{q.claimsDir})
}

func (q *Queue) sweep(ctx context.Context, tempOlderThan time.Duration, dirs []string) (SweepStats, error) {
	var st SweepStats
	now := q.clock.Now()
	for _, d := range dirs {
		var files []string
		var err error
		if d == q.dir {
			files, err = q.sideFiles()
		} else {
			files, err = scanDirPrefixed(q.fsys, d, vfs.TempPrefix)
		}
		if err != nil {
			return st, fmt.Errorf("fsqueue: sweep %s: %w", d, err)
		}
		for _, f := range files {
			if !vfs.IsTemp(f) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return st, err
			}
			p := filepath.Join(d, f)
			fi, err := q.fsys.Lstat(p)
			if err != nil {
				if vfs.IsNotExist(err) {
					continue
				}
				return st, fmt.Errorf("fsqueue: sweep: %w", err)
			}
			if now.Sub(fi.ModTime()) <= tempOlderThan {
				continue
			}
			if err := q.fsys.Remove(p); err != nil {
				if vfs.IsNotExist(err) {
					continue
				}
				return st, fmt.Errorf("fsqueue: sweep: %w", err)
			}
			st.TempRemoved++
		}
	}
	names, err := q.Claims()
	if err != nil {
		return st, fmt.Errorf("fsqueue: sweep: %w", err)
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		orphan, err := q.isOrphan(name)
		if err != nil {
			return st, fmt.Errorf("fsqueue: sweep: %w", err)
		}
		if !orphan {
			continue
		}
		// The message is gone, and only a holder of a message's lock removes
		// it, so nobody can make this claim live again: it is removed
		// without a lock (sweepers racing on it both succeed). A claim in a
		// caller's state (an acked item awaiting cleanup) is the caller's.
		removed := false
		c, exists, err := q.readClaim(name)
		if err != nil && !errors.Is(err, errCorrupt) {
			return st, fmt.Errorf("fsqueue: sweep: %w", err)
		}
		if exists && (err != nil || c.State == "") {
			if err := q.fsys.Remove(q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
				return st, fmt.Errorf("fsqueue: sweep: %w", err)
			}
			removed = true
		}
		if removed {
			st.OrphanClaimsRemoved++
		}
	}
	return st, nil
}

// isOrphan reports whether name has neither a staged nor a published message
// file. The staged file is checked first: Publish renames staged to
// published, so checking in this order cannot miss a message being published.
func (q *Queue) isOrphan(name string) (bool, error) {
	for _, p := range []string{q.stagedPath(name), q.msgPath(name)} {
		_, err := q.fsys.Lstat(p)
		if err == nil {
			return false, nil
		}
		if !vfs.IsNotExist(err) {
			return false, err
		}
	}
	return true, nil
}
