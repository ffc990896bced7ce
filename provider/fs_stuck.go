package provider

// Commits that cannot be applied.
//
// A commit is done at its commit point (fs_wal.go); applying it afterwards
// can still fail for one instance - a history file that became immutable or
// read-only, a disk returning EIO for its blocks - and fail again on every
// retry until the cause goes away. Such an instance must not stop the
// others, and its commit must not be lost. What happens:
//
//   - The instance is isolated. Its lease keeps the commit's pending mark,
//     so every call on it (fetch, ack, abandon, renew, deletion) first tries
//     to finish the commit and fails with a retryable error wrapping an
//     *applyError. A fetch skips such an instance (RecoveryStats.StuckSkips)
//     and serves the others; after a failure it does not even try the
//     instance again for a back-off (stuckBackoff, doubling up to
//     stuckBackoffMax), so a stuck instance costs little. Every failure is
//     counted (RecoveryStats.ApplyFailures) and logged as an error, at most
//     once a minute per instance; StuckCommits lists them, and durofs fsck
//     names them.
//   - Recovery goes on. Open, the background sweep and the checkpoint log
//     the instance and finish every other commit; Open succeeds.
//   - It is retried: by the first fetch after the back-off, and by every
//     checkpoint. Once the cause is gone the commit is applied (exactly
//     once: every apply step is idempotent) and the instance is served.
//   - The log is not held back. The log is the only copy of a committed,
//     unapplied record, so the checkpoint cannot simply pass it: it first
//     PARKS it. Parking (parkRecord) makes the record's outbound messages
//     visible and durable (published from their staged files, or written
//     from the record's bytes if neither the staged nor the published file
//     exists and no later record in the log deleted it), then writes the
//     record without them, durably, to unapplied/<key>/<lsn>-<id>.json for
//     every instance whose part failed. Only then does the checkpoint move
//     past it and trim the log. The instance's mark still names the record;
//     findRecord finds it in unapplied/, and a redo applies it from there
//     (its messages are published already). A parked record is removed by
//     a later checkpoint once no lease marks it (settleParked), after the
//     files it changed were fsynced.
//
// Why a parked record can be applied out of log order: only its instance's
// part is parked, and the instance's mark names it, so no later commit of
// that instance can exist (every commit first finishes the instance's mark);
// its outbound messages, the only part others can see, were published in
// order, before the checkpoint passed it. A parked record is never applied
// after a later record of its instance that a checkpoint passed either:
// settleParked removes it (durably) in the checkpoint round that first sees
// its mark gone, before that round's checkpoint; a record committed after
// the mark was cleared is not yet in that round's scan of the log.
//
// After a power loss or a sync failure (the replay, fs_wal.go), marks may be
// lost: the replay applies the parked records first (they are older than
// everything in the log), then the log; an instance whose record fails to
// apply gets its mark set again, and every later record of it in the replay
// is not applied but queued behind it (orchState.Queued: applied in order
// after the mark's record), with its outbound messages restored in log
// order. A replay after a sync failure parks them all before it checkpoints
// and clears the poison mark.
//
// What is not parked, and keeps the checkpoint (not Open, nor fetches of
// other instances) from advancing until it can be applied: a work-item or
// workflow-activity ack (applying one only publishes a completion and
// removes the item, which fails only if a queue directory fails; its key in
// StuckCommits is "w:<item>" or "gwa:<queue>/<item>"), and a record of an
// instance whose lease cannot be read or locked (whether its part was
// applied is then unknown). The checkpoint logs it and lists it in
// StuckCommits (Parked false); the log grows until it can be applied.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
	"github.com/durofs/durofs/wal"
)

// applyError says a committed record could not be applied for one instance
// (or work item): its mark stays, and it is retried.
type applyError struct {
	key, id string
	err     error
}

func (e *applyError) Error() string {
	return fmt.Sprintf("committed change %s cannot be applied yet (retried later): %v", e.id, e.err)
}

func (e *applyError) Unwrap() error { return e.err }

// isStuck reports whether err says a committed record cannot be applied.
func isStuck(err error) bool {
	var ae *applyError
	return errors.As(err, &ae)
}

// StuckCommit is a committed change that could not be applied: its instance
// is not served until it is (see fs_stuck.go).
type StuckCommit struct {
	// Instance is the instance id (Key its directory name); a work item's
	// ack has Key "w:<item>" and no instance.
	Instance string `json:"instance,omitempty"`
	Key      string `json:"key"`
	// CommitID is the record's id; LSN its position in the log
	// ("segment:offset").
	CommitID string `json:"commit_id"`
	LSN      string `json:"lsn,omitempty"`
	// Parked: the record was moved out of the log into unapplied/, so the
	// log could be trimmed past it. False: it keeps the checkpoint back.
	Parked bool `json:"parked"`
	// Error is the last failure seen by this process ("" for a parked
	// record this process has not tried).
	Error string `json:"error,omitempty"`
	// Failures counts this process's failed attempts; the times are
	// milliseconds since the Unix epoch (0: none in this process).
	Failures        int64 `json:"failures"`
	FirstFailedAtMs int64 `json:"first_failed_at_ms,omitempty"`
	LastFailedAtMs  int64 `json:"last_failed_at_ms,omitempty"`
}

// stuckEntry is this process's record of a commit that failed to apply.
type stuckEntry struct {
	StuckCommit
	retryAt, warnedAt time.Time
}

// stuckSet holds the stuck commits this process saw, by instance key.
type stuckSet struct {
	mu sync.Mutex
	m  map[string]*stuckEntry
}

// Back-off of a fetch's retries of a stuck instance.
const (
	stuckBackoff    = 100 * time.Millisecond
	stuckBackoffMax = 5 * time.Second
)

// noteStuck records that applying record id (at lsn) for key failed.
func (p *FSProvider) noteStuck(key, instance, id string, lsn wal.LSN, cause error) {
	now := p.clk.Now()
	p.stats.applyFailures.Add(1)
	s := &p.stuck
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*stuckEntry{}
	}
	e := s.m[key]
	if e == nil || e.CommitID != id {
		e = &stuckEntry{StuckCommit: StuckCommit{Instance: instance, Key: key, CommitID: id, FirstFailedAtMs: now.UnixMilli()}}
		s.m[key] = e
	}
	if lsn != 0 {
		e.LSN = lsn.String()
	}
	e.Failures++
	e.Error, e.LastFailedAtMs = cause.Error(), now.UnixMilli()
	e.retryAt = now.Add(min(stuckBackoff<<min(e.Failures-1, 16), stuckBackoffMax))
	warn := e.warnedAt.IsZero() || now.Sub(e.warnedAt) >= time.Minute
	if warn {
		e.warnedAt = now
	}
	failures := e.Failures
	s.mu.Unlock()
	switch {
	case !warn:
	case errors.Is(cause, errClaimBusy):
		// Not a failure of the disk: another process holds a queue item's
		// claim lock (stopped inside a claim section, fs_commit.go).
		p.log.Info("durofs: a committed change waits for a queue item's claim lock held by another process (retried)",
			"instance", instance, "key", key, "commit", id, "failures", failures, "err", cause)
	default:
		p.log.Error("durofs: a committed change cannot be applied; its instance is not served until it can be (retried; run durofs fsck)",
			"instance", instance, "key", key, "commit", id, "failures", failures, "err", cause)
	}
}

// applyDeferredTo handles a commit whose own apply failed right after its
// commit point (what names the operation): counted, and, unless ctx ended,
// recorded as stuck for key (the next flock holder, a fetch after the
// back-off or the checkpoint, retries it).
func (p *FSProvider) applyDeferredTo(ctx context.Context, what, key, instance string, rec *commitRecord, err error) {
	p.stats.applyDeferred.Add(1)
	if ctx.Err() != nil {
		p.log.Warn("durofs: "+what+" committed, apply deferred to recovery", "instance", instance, "key", key, "err", err)
		return
	}
	p.noteStuck(key, instance, rec.CommitID, 0, err)
}

// noteParked records that the record stuck for key was parked.
func (p *FSProvider) noteParked(key, id string) {
	p.stuck.mu.Lock()
	defer p.stuck.mu.Unlock()
	if e := p.stuck.m[key]; e != nil && e.CommitID == id {
		e.Parked = true
	}
}

// noteApplied forgets key's stuck commit: nothing is pending for it now.
func (p *FSProvider) noteApplied(key string) {
	s := &p.stuck
	s.mu.Lock()
	e := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	if e != nil {
		p.log.Info("durofs: a committed change that could not be applied is applied now", "instance", e.Instance, "key", key, "commit", e.CommitID, "failures", e.Failures)
	}
}

// skipStuck reports whether a fetch should pass over key without trying it:
// its commit failed to apply and the back-off since has not passed.
func (p *FSProvider) skipStuck(key string) bool {
	s := &p.stuck
	s.mu.Lock()
	e := s.m[key]
	skip := e != nil && p.clk.Now().Before(e.retryAt)
	s.mu.Unlock()
	if skip {
		p.stats.stuckSkips.Add(1)
	}
	return skip
}

// stuckCount returns how many stuck commits this process knows of.
func (p *FSProvider) stuckCount() int {
	p.stuck.mu.Lock()
	defer p.stuck.mu.Unlock()
	return len(p.stuck.m)
}

// StuckCommits lists the committed changes that cannot be applied (yet):
// those this process failed to apply, and every parked one (unapplied/,
// seen by every process). Sorted by instance key.
func (p *FSProvider) StuckCommits(ctx context.Context) ([]StuckCommit, error) {
	byID := map[string]*StuckCommit{}
	var out []*StuckCommit
	p.stuck.mu.Lock()
	for _, e := range p.stuck.m {
		sc := e.StuckCommit
		out = append(out, &sc)
		byID[sc.Key+"\x00"+sc.CommitID] = &sc
	}
	p.stuck.mu.Unlock()
	parked, err := p.listParked()
	if err != nil {
		return nil, fmt.Errorf("durofs: list unapplied/: %w", err)
	}
	for _, e := range parked {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if sc := byID[e.key+"\x00"+e.lr.rec.CommitID]; sc != nil {
			sc.Parked, sc.LSN = true, e.lr.lsn.String()
			continue
		}
		// Applied since (by another process) if no lease marks it.
		if cur, _, err := p.leases.Inspect(ctx, p.lockPath(e.key), p.leasePath(e.key)); err == nil && !marks(decodeOrchState(cur), e.lr.rec.CommitID) {
			continue
		}
		out = append(out, &StuckCommit{Instance: instanceIDOf(e.key), Key: e.key, CommitID: e.lr.rec.CommitID, LSN: e.lr.lsn.String(), Parked: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	res := make([]StuckCommit, len(out))
	for i, sc := range out {
		res[i] = *sc
	}
	return res, nil
}

// marks reports whether an instance's queue state marks record id pending.
func marks(st orchState, id string) bool {
	if st.Pending != nil && st.Pending.ID == id {
		return true
	}
	for _, m := range st.Queued {
		if m.ID == id {
			return true
		}
	}
	return false
}

// advanceMark takes record id off the state's marks: if it is the pending
// one, the next queued record (if any) becomes pending. It reports whether
// anything changed.
func advanceMark(st *orchState, id string) bool {
	if st.Pending == nil || st.Pending.ID != id {
		return false
	}
	st.Pending = nil
	if len(st.Queued) > 0 {
		next := st.Queued[0]
		st.Pending, st.Queued = &next, st.Queued[1:]
	}
	return true
}

// ---------------------------------------------------------------------------
// Parked records: unapplied/<key>/<lsn>-<id>.json

// parkedEntry is a parked record and the instance it is parked for.
type parkedEntry struct {
	key, path string
	lr        loggedRecord
}

func (p *FSProvider) unappliedDir() string        { return filepath.Join(p.dir, "unapplied") }
func (p *FSProvider) parkedDir(key string) string { return filepath.Join(p.unappliedDir(), key) }
func parkedName(lsn wal.LSN, id string) string    { return fmt.Sprintf("%016x-%s.json", uint64(lsn), id) }
func parkedKind(kind string) bool {
	return kind == "" || kind == kindPrune || kind == kindDelete || kind == kindGW
}
func (p *FSProvider) parkedPath(key string, lsn wal.LSN, id string) string {
	return filepath.Join(p.parkedDir(key), parkedName(lsn, id))
}

// readParked reads one parked record file.
func (p *FSProvider) readParked(key, name string) (*parkedEntry, error) {
	hex, id, ok := strings.Cut(strings.TrimSuffix(name, ".json"), "-")
	lsn, err := strconv.ParseUint(hex, 16, 64)
	if !ok || err != nil || !strings.HasSuffix(name, ".json") {
		return nil, nil // not a parked record (a temporary file, say)
	}
	path := filepath.Join(p.parkedDir(key), name)
	data, err := p.fs.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec commitRecord
	if err := jsonUnmarshal(data, &rec); err != nil || rec.CommitID != id {
		return nil, fmt.Errorf("%w: parked record %s does not decode (%v)", ErrCorrupt, path, err)
	}
	l := wal.LSN(lsn)
	return &parkedEntry{key: key, path: path, lr: loggedRecord{lsn: l, end: l, rec: &rec, parked: true}}, nil
}

// findParked returns record id parked for key, or nil.
func (p *FSProvider) findParked(key, id string) (*loggedRecord, error) {
	names, err := p.fs.ReadDirNames(p.parkedDir(key))
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	for _, n := range names {
		if strings.HasSuffix(n, "-"+id+".json") {
			e, err := p.readParked(key, n)
			if err != nil || e == nil {
				return nil, err
			}
			return &e.lr, nil
		}
	}
	return nil, nil
}

// listParked returns every parked record, oldest (lowest LSN) first.
func (p *FSProvider) listParked() ([]parkedEntry, error) {
	keys, err := p.fs.ReadDirNames(p.unappliedDir())
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []parkedEntry
	for _, k := range keys {
		names, err := p.fs.ReadDirNames(p.parkedDir(k))
		if err != nil {
			if vfs.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		for _, n := range names {
			e, err := p.readParked(k, n)
			if err != nil {
				return nil, err
			}
			if e != nil {
				out = append(out, *e)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].lr.lsn < out[j].lr.lsn })
	return out, nil
}

// pubRef is a message a record publishes, with its queue.
type pubRef struct {
	q   *fsqueue.Queue
	ref queueRef
}

// publishRefs returns the messages rec publishes (every part's).
func (p *FSProvider) publishRefs(rec *commitRecord) ([]pubRef, error) {
	var out []pubRef
	if rec.Kind != kindGW {
		for _, r := range rec.Publish {
			out = append(out, pubRef{p.queue(r.Queue), r})
		}
		return out, nil
	}
	if rec.GW == nil {
		return nil, nil
	}
	for _, pt := range rec.GW.Parts {
		for _, r := range pt.Publish {
			q, err := p.gwQueue(r.Queue)
			if err != nil {
				return nil, err
			}
			out = append(out, pubRef{q, r})
		}
	}
	return out, nil
}

// withoutPublishes returns a copy of rec that publishes nothing.
func withoutPublishes(rec *commitRecord) *commitRecord {
	c := *rec
	c.Publish = nil
	if rec.GW != nil {
		gw := *rec.GW
		gw.Parts = make([]gwPart, len(rec.GW.Parts))
		for i, pt := range rec.GW.Parts {
			pt.Publish = nil
			gw.Parts[i] = pt
		}
		c.GW = &gw
	}
	return &c
}

// deletedAfter returns the queue messages ("queue/name") that records in the
// log from lsn on delete.
func (p *FSProvider) deletedAfter(from wal.LSN) (map[string]bool, error) {
	out := map[string]bool{}
	add := func(refs []queueRef) {
		for _, r := range refs {
			out[r.Queue+"/"+r.Name] = true
		}
	}
	_, err := p.wal.ScanAll(from, func(lsn wal.LSN, payload []byte) error {
		var rec commitRecord
		if err := jsonUnmarshal(payload, &rec); err != nil {
			return fmt.Errorf("log record at %v does not decode: %w", lsn, err)
		}
		add(rec.Delete)
		for _, m := range rec.Members {
			add(m.Delete)
		}
		if rec.GW != nil {
			for _, pt := range rec.GW.Parts {
				add(pt.Delete)
			}
		}
		return nil
	})
	return out, err
}

// parkRecord moves record lr's parts for keys out of the log (see the top
// of this file): its messages published and durable, then the record
// without them written durably to unapplied/<key>/ for each key. In a
// replay (restored) its messages were written from the record already, in
// log order; they are made durable.
func (p *FSProvider) parkRecord(lr loggedRecord, keys []string, restored bool) error {
	refs, err := p.publishRefs(lr.rec)
	if err != nil {
		return err
	}
	if !restored {
		var missing []pubRef
		for _, r := range refs {
			published, err := r.q.Publish(r.ref.Name)
			if err != nil {
				return err
			}
			if published {
				continue
			}
			if _, err := p.fs.Lstat(filepath.Join(r.q.Dir(), r.ref.Name+".json")); err == nil {
				continue // published before
			} else if !vfs.IsNotExist(err) {
				return err
			}
			missing = append(missing, r)
		}
		if len(missing) > 0 {
			// Neither staged nor published: consumed - by a record after
			// this one (its file is unlinked only after its record is in
			// the log, and this scan starts after the check above) - or
			// lost (a staged file removed by a sweep, or lost with the page
			// cache). A lost one is written from the record.
			consumed, err := p.deletedAfter(lr.end)
			if err != nil {
				return err
			}
			for _, r := range missing {
				if consumed[r.ref.Queue+"/"+r.ref.Name] {
					continue
				}
				if err := r.q.Restore(r.ref.Name, r.ref.Data); err != nil {
					return err
				}
			}
		}
	}
	files, dirs := map[string]bool{}, map[string]bool{}
	for _, r := range refs {
		files[filepath.Join(r.q.Dir(), r.ref.Name+".json")] = true
		dirs[r.q.Dir()] = true
	}
	if err := p.syncPaths(files, dirs); err != nil {
		return err
	}
	data, err := jsonMarshal(withoutPublishes(lr.rec))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := p.mkdirDurable(p.parkedDir(k)); err != nil {
			return err
		}
		if err := p.writeFile(p.parkedPath(k, lr.lsn, lr.rec.CommitID), data); err != nil {
			return err
		}
		p.noteParked(k, lr.rec.CommitID)
	}
	p.stats.parked.Add(1)
	p.log.Warn("durofs: moved a committed change that cannot be applied out of the write-ahead log (unapplied/)", "commit", lr.rec.CommitID, "lsn", lr.lsn, "keys", keys)
	return nil
}

// settleParked visits every parked record (the checkpoint, before it looks
// at the log): one still marked is redone (and stays if that fails); one no
// lease marks any more was applied. With sync, the applied ones' files are
// fsynced and then their parked copies removed, durably. Without, nothing is
// removed.
func (p *FSProvider) settleParked(ctx context.Context, sync bool) error {
	parked, err := p.listParked()
	if err != nil || len(parked) == 0 {
		return err
	}
	var done []parkedEntry
	for _, e := range parked {
		applied, err := p.settleOne(ctx, e)
		if err != nil {
			return err
		}
		if applied {
			done = append(done, e)
		}
	}
	if !sync || len(done) == 0 {
		return nil
	}
	recs := make([]loggedRecord, len(done))
	for i, e := range done {
		recs[i] = e.lr
	}
	if err := p.syncTouched(recs, nil); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, e := range done {
		if err := p.fs.Remove(e.path); err != nil && !vfs.IsNotExist(err) {
			return err
		}
		dirs[filepath.Dir(e.path)] = true
	}
	for d := range dirs {
		if err := p.fs.SyncDir(d); err != nil {
			return p.wal.Poison(fmt.Errorf("checkpoint: sync %s: %w", d, err))
		}
		if p.fs.Remove(d) == nil { // empty now
			p.durableDirs.Delete(filepath.Clean(d))
		}
	}
	return p.fs.SyncDir(p.unappliedDir())
}

// settleOne redoes a parked record still marked for its instance, and
// reports whether it is applied (no lease marks it any more). A busy or
// unreadable lease, or a failed apply, leaves it parked.
func (p *FSProvider) settleOne(ctx context.Context, e parkedEntry) (applied bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	cur, _, err := p.leases.Inspect(lctx, p.lockPath(e.key), p.leasePath(e.key))
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return false, nil
	}
	// An unreadable lease has lost its marks (only a power loss tears one,
	// and the replay that follows sets the marks of unapplied records).
	if err != nil || !marks(decodeOrchState(cur), e.lr.rec.CommitID) {
		return true, nil
	}
	g, _, err := p.lockExisting(lctx, e.key, true)
	if errors.Is(err, lease.ErrGone) {
		return true, nil // no lease marks it any more
	}
	if err != nil {
		return false, nil
	}
	err = p.redoPending(ctx, g, e.key)
	g.Unlock()
	if isStuck(err) {
		return false, nil
	}
	return err == nil, err
}

// syncPaths fsyncs files, then directories (Durable mode only). A failed
// fsync poisons the log (see syncTouched): the kernel may have marked the
// pages clean without writing them, and only a replay rewrites them. A
// file or directory that could not be opened (EMFILE, ENOMEM) poisons
// nothing: no fsync reported anything, its pages are still dirty, and the
// checkpoint just stays where it is until a later one syncs them.
func (p *FSProvider) syncPaths(files, dirs map[string]bool) error {
	if p.durability != Durable {
		return nil
	}
	p.stats.checkpointSyncs.Add(int64(len(files) + len(dirs)))
	errs := parallelSync(sortedKeys(files), p.syncFile)
	if len(errs) == 0 {
		errs = parallelSync(sortedKeys(dirs), p.fs.SyncDir)
	}
	if len(errs) == 0 {
		return nil
	}
	return p.syncFailed(errs)
}

// syncFailed is syncPaths's error: the log poisoned if any fsync failed,
// else - only opens failed (a *fs.PathError with Op "open", as every FS
// gives for the open of File.Sync's file or SyncDir's directory) - an
// error that leaves the checkpoint where it is.
func (p *FSProvider) syncFailed(errs []error) error {
	err := errors.Join(errs...)
	for _, e := range errs {
		var pe *fs.PathError
		if !errors.As(e, &pe) || pe.Op != "open" {
			return p.wal.Poison(fmt.Errorf("checkpoint: %w", err))
		}
	}
	return fmt.Errorf("checkpoint (stays where it is; a later one retries): %w", err)
}
