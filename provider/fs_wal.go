package provider

// The commit protocol: one write-ahead log shared by every process.
//
// Every change that must be all-or-nothing - an orchestration ack, a work
// ack, an append, a prune, a deletion - is ONE record (commitRecord, JSON)
// appended to the directory's write-ahead log (package wal, in <dir>/wal).
// The append plus one group fdatasync is the commit point. The files a user
// sees (history lines, state.json, instance.json, queue messages, leases) are
// applied after it without any sync, and made durable later by a checkpoint.
//
// An operation, under the flocks of what it changes (instance flocks; a work
// item's claim lock):
//
//  0. VALIDATE and compute the record in memory. Any failure returns having
//     written nothing.
//  1. STAGE outbound messages as hidden .staged-<name>.json files (unsynced;
//     the record carries their bytes too).
//  2. MARK the commit pending in each lease (or claim) it changes: its id and
//     the log's end as a hint of where to look for it (unsynced).
//  3. COMMIT: append the record to the log and wait for a group fdatasync.
//     Before the sync returns the operation did not happen (as far as anyone
//     was told); after, it did.
//  4. APPLY, unsynced, every step idempotent: history lines at their
//     position, state.json and instance.json (atomic replaces), publish the
//     staged messages (rename), delete consumed messages, release the lease
//     and clear the mark.
//
// What a crash leaves, and who finishes it:
//
//   - kill -9 before 3: marks naming a record that is not in the log, and
//     staged orphans. Whoever next holds the flock finds no record after the
//     hint, clears the mark; the sweep removes the orphans.
//   - kill -9 after 3 (the record may be unsynced): the page cache outlives
//     the process, so the next flock holder - a fetch, an ack, the sweep, or
//     the checkpoint, which visits every record since the last checkpoint -
//     sees the mark, finds the record, makes it durable (wal's SyncThrough:
//     its frame written again, then an fdatasync, so that a writeback error
//     another process was told of cannot pass unseen) and applies it. A
//     staged file is published by rename, so once published and consumed
//     there is nothing left to publish again.
//   - power loss, or a sync failure (below): the page cache is gone or
//     cannot be trusted. The next process to open the directory while no
//     other process has it open - and finds the boot id in wal/boot changed
//     (a reboot since the log was last used), or the log poisoned - replays
//     every record since the checkpoint,
//     in log order, rewriting every byte (history lines rewritten at their
//     position, messages written from the record's bytes, consumed messages
//     deleted again by the later records that consumed them), then
//     checkpoints. The log is one global order, and a record is applied only
//     after it is durable, so a record that depends on another (an ack that
//     consumed a message another ack published) always comes after it in the
//     log: redo in log order cannot resurrect a consumed message.
//
// Checkpoints. A checkpoint (any process, one at a time, in the background)
// takes every record between the last checkpoint and the log's end, makes
// sure each is applied (a record still marked pending is finished under its
// flock; one whose flock cannot be had within a timeout ends the checkpoint
// there), fsyncs every file and directory those records touched, and then
// records the new checkpoint LSN; segments below it are removed. In
// ProcessCrashSafe mode nothing is fsynced anywhere and the checkpoint only
// trims the log.
//
// Failures stop, never lie. A failed fdatasync of the log or fsync of a
// checkpoint poisons the log (wal.ErrPoisoned, which ErrSyncFailed is): a
// mark every process checks after each sync, so from then on no process
// acknowledges anything. Recovery needs every process to close the
// directory; the first to reopen it alone replays the log from the last
// checkpoint by rewriting bytes, never trusting the page cache's view of
// what was applied, checkpoints, and clears the mark.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/calltime"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
	"github.com/durofs/durofs/wal"
)

// ErrSyncFailed means a sync of the write-ahead log or of a checkpoint failed
// in this process or another one using the directory: nothing is
// acknowledged until every process has closed the directory and one reopens
// it alone, which replays the log. It is wal.ErrPoisoned.
var ErrSyncFailed = wal.ErrPoisoned

// pendingMark names a committed-or-committing record in a lease or claim:
// its id, and a log position at or before it.
type pendingMark struct {
	ID   string  `json:"id"`
	Hint wal.LSN `json:"hint"`
	// Kind is the record's kind (markKind), so that a deletion's mark is
	// known without reading its record (dropDeleting, setMarks). Empty in
	// a claim's mark, and in an instance mark written before it existed,
	// which is then taken for a deletion's (deletionMark).
	Kind string `json:"kind,omitempty"`
}

// markKind is the Kind of an instance's mark for rec.
func markKind(rec *commitRecord) string {
	if rec.Kind == "" {
		return "orchestration"
	}
	return rec.Kind
}

// loggedRecord is a record read back from the log, or from unapplied/
// (parked: see fs_stuck.go).
type loggedRecord struct {
	lsn, end wal.LSN
	rec      *commitRecord
	parked   bool
}

// errFound stops a log scan.
var errFound = errors.New("found")

// commitLocked makes rec the commit point: it marks it pending in every
// guard's lease (steps 2 and 3 of the protocol), appends it and waits for the
// group sync. A deletion's guards are its members', in order; before its
// append it creates the deletion markers of the members that list worker
// items and passes their claim locks (beforeDeletionAppend, fs_deleting.go). On an error before the append, the marks are cleared and
// nothing happened. On a sync error the record's fate is unknown (the log is
// poisoned) and the marks stay, for the replay to settle.
func (p *FSProvider) commitLocked(ctx context.Context, guards []*lease.Guard, rec *commitRecord) error {
	mark := &pendingMark{ID: uuid.NewString(), Hint: p.wal.End(), Kind: markKind(rec)}
	rec.CommitID = mark.ID
	data, err := jsonMarshal(rec)
	if err != nil {
		return err
	}
	for i, g := range guards {
		if err := setMark(g, mark); err != nil {
			clearMarks(guards[:i], mark.ID)
			return fmt.Errorf("mark pending: %w", err)
		}
	}
	if err := p.beforeDeletionAppend(ctx, rec); err != nil {
		clearMarks(guards, mark.ID)
		p.dropDeletingOf(guards, rec)
		return err
	}
	failpoint.Hit("commit.after_mark")
	_, end, err := p.wal.Append(data)
	if err != nil {
		clearMarks(guards, mark.ID)
		p.dropDeletingOf(guards, rec)
		return err
	}
	failpoint.Hit("commit.after_append")
	if testSkipSync == "log" {
		return nil // test only: see testSkipSync
	}
	return p.logSync(ctx, end)
}

// logSync waits until the log is durable through end, the commit point of
// a record just appended. It does not stop when ctx is cancelled: the
// record is in the log, and whether it commits must be settled before the
// caller hears anything. The wait is added to the call's timing if ctx
// carries one (internal/calltime): it is time on the disk - this process's
// fdatasync or the leading one's it waits for, which a stopped leader
// delays by at most the log's lead bound (wal package doc).
func (p *FSProvider) logSync(ctx context.Context, end wal.LSN) error {
	start := time.Now()
	err := p.wal.Sync(context.Background(), end)
	calltime.AddLogSync(ctx, time.Since(start))
	return err
}

// testSkipSync weakens the commit path for the power-loss test that proves
// its sweep can fail (TestPowerLossSweepCatchesMissingSync): "log" skips the
// group fdatasync of an orchestration ack's commit (commitLocked),
// "checkpoint" skips a checkpoint's fsyncs of what its records touched
// (checkpointOnce). It is never set outside that test.
var testSkipSync string

// setMark writes mark into the lease's queue state (unsynced).
func setMark(g *lease.Guard, mark *pendingMark) error {
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return err
	}
	st := decodeOrchState(cur)
	st.Pending = mark
	cur.Data = st.encode()
	return g.Write(cur)
}

// clearMarks takes back marks of a commit that did not happen (best effort:
// a mark left behind names no record and is cleared by the next holder).
func clearMarks(guards []*lease.Guard, id string) {
	for _, g := range guards {
		_ = clearMark(g, id)
	}
}

// clearMark takes record id off the lease's marks (the next queued record,
// if any, becomes pending).
func clearMark(g *lease.Guard, id string) error {
	cur, _, err := g.Read()
	if err != nil {
		return err
	}
	if st := decodeOrchState(cur); advanceMark(&st, id) {
		cur.Data = st.encode()
		return g.Write(cur)
	}
	return nil
}

// findRecord looks for the record a mark names, from the mark's hint (or
// the checkpoint, if later) to the end of the log, then among the records
// parked for instance key (fs_stuck.go; key "" for a work item's claim). A
// record that is not there never committed - its writer died before the append (or the append
// was torn) - or is settled: below the checkpoint, it was applied and made
// durable by the checkpoint or replay that passed it. Either way the mark
// names nothing to redo.
//
// The checkpoint bound matters after a power loss: lease files and claims
// are never synced, so one can come back as written while its mark was set,
// long after the record was applied and checkpointed. Redoing such a record
// appends its history delta at its old position, which conflicts with later
// appends (ErrConflict on every fetch and ack of the instance, until the
// record's segment is removed), or, had no later commit appended events,
// rewrites instance.json and state.json as they were before later commits.
// Found by TestPowerLossSweep (writeback crash model, a second power loss
// after recovery; reduced to TestPowerLossStaleMark). It relies on the
// checkpoint never passing a record it has not seen applied (ensureApplied).
func (p *FSProvider) findRecord(key string, mark *pendingMark) (*loggedRecord, error) {
	ckpt, err := p.wal.Checkpoint()
	if err != nil {
		return nil, err
	}
	prefix := []byte(`{"id":"` + mark.ID + `"`)
	var found *loggedRecord
	var derr error
	// To the tail (ScanAll): the record's writer is done with it (dead, or
	// it would still hold the flock the caller holds), but a reservation of
	// another process still being written may lie below it.
	_, err = p.wal.ScanAll(max(mark.Hint, ckpt), func(lsn wal.LSN, payload []byte) error {
		if !bytes.HasPrefix(payload, prefix) {
			return nil
		}
		var rec commitRecord
		if derr = json.Unmarshal(payload, &rec); derr != nil {
			return errFound
		}
		found = &loggedRecord{lsn: lsn, end: lsn + wal.LSN(len(payload)) + 16, rec: &rec}
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("log record %s does not decode: %w", mark.ID, derr)
	}
	if found == nil && key != "" {
		return p.findParked(key, mark.ID)
	}
	return found, nil
}

// redoPending finishes the commits marked pending in an instance's lease,
// if any: a commit whose writer died (or whose apply failed) before clearing
// its mark, then those queued behind it (by a replay, fs_stuck.go), in
// order. The caller holds the instance flock. A record that cannot be
// applied gives an *applyError (the mark stays; see fs_stuck.go).
func (p *FSProvider) redoPending(ctx context.Context, g *lease.Guard, key string) error {
	last := ""
	for {
		cur, _, err := g.Read()
		if err != nil && !errors.Is(err, lease.ErrCorrupt) {
			return fmt.Errorf("read lease: %w", err)
		}
		st := decodeOrchState(cur)
		if st.Pending == nil || st.Pending.ID == last {
			// Nothing (more) pending; or an apply that did not take its
			// mark off (a deletion record not naming this key): done as
			// far as this key goes.
			p.noteApplied(key)
			return nil
		}
		if err := p.wal.Err(); err != nil {
			return err // the record's durability cannot be known: replay decides
		}
		lr, err := p.findRecord(key, st.Pending)
		if err != nil {
			return err
		}
		if lr == nil {
			failpoint.Hit("redo.no_record")
			if err := clearMark(g, st.Pending.ID); err != nil {
				return fmt.Errorf("clear mark: %w", err)
			}
			if deletionMark(*st.Pending) {
				if err := p.dropDeleting(g, key); err != nil {
					return fmt.Errorf("remove deletion marker: %w", err)
				}
			}
			continue
		}
		// Applied effects must never precede durability: another process
		// could consume what this apply publishes. (A parked record was
		// durable before the checkpoint passed it.)
		if !lr.parked {
			if err := p.wal.SyncThrough(lr.lsn, lr.end); err != nil {
				return err
			}
		}
		p.stats.redone.Add(1)
		failpoint.Hit("redo.start")
		if err := p.applyKey(ctx, g, key, lr.rec, false); err != nil {
			if ctx.Err() != nil {
				return err
			}
			p.noteStuck(key, instanceOf(key, lr.rec), lr.rec.CommitID, lr.lsn, err)
			return &applyError{key: key, id: lr.rec.CommitID, err: err}
		}
		last = lr.rec.CommitID
	}
}

// instanceOf names the instance of key in rec.
func instanceOf(key string, rec *commitRecord) string {
	if rec.Instance != "" && rec.Key == key {
		return rec.Instance
	}
	return instanceIDOf(key)
}

// applyKey applies the part of rec that belongs to instance key (all of it,
// except for a deletion of several instances).
func (p *FSProvider) applyKey(ctx context.Context, g *lease.Guard, key string, rec *commitRecord, replay bool) error {
	switch rec.Kind {
	case "":
		return p.apply(ctx, g, rec, replay)
	case kindPrune:
		return p.applyPrune(g, rec)
	case kindDelete:
		for _, m := range rec.Members {
			if m.Key == key {
				return p.applyDeleteMember(ctx, g, rec.CommitID, m)
			}
		}
		return nil
	case kindWorkAck, kindGWAct:
		return fmt.Errorf("work ack record %s under an instance lock", rec.CommitID)
	case kindGW:
		return p.gwApply(ctx, g, key, rec, replay)
	}
	return fmt.Errorf("log record %s has unknown kind %q", rec.CommitID, rec.Kind)
}

// releaseMark clears the lease's mark if it names id (the last write of an
// apply), and with release also frees the lease if token still holds it.
func releaseMark(g *lease.Guard, id, token string, forget []queueRef) error {
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return fmt.Errorf("read lease: %w", err)
	}
	st := decodeOrchState(cur)
	changed := advanceMark(&st, id)
	if token != "" && cur.Token == token {
		for _, r := range forget {
			delete(st.Attempts, r.Name)
			delete(st.Delayed, r.Name)
		}
		st.Batch = nil
		cur.Token, cur.Owner, cur.ExpiresAtMs = "", "", 0
		changed = true
	}
	if !changed {
		return nil
	}
	cur.Data = st.encode()
	return g.Write(cur)
}

// keysOf returns the instance keys whose leases mark rec.
func keysOf(rec *commitRecord) []string {
	switch rec.Kind {
	case kindDelete:
		keys := make([]string, len(rec.Members))
		for i, m := range rec.Members {
			keys[i] = m.Key
		}
		return keys
	case kindWorkAck, kindGWAct:
		return nil
	case kindGW:
		return gwKeys(rec)
	}
	return []string{rec.Key}
}

// scanLog decodes every record from the checkpoint to the end of the log.
func (p *FSProvider) scanLog() (recs []loggedRecord, from, end wal.LSN, err error) {
	from, err = p.wal.Checkpoint()
	if err != nil {
		return nil, 0, 0, err
	}
	end, err = p.wal.Scan(from, func(lsn wal.LSN, payload []byte) error {
		var rec commitRecord
		if err := json.Unmarshal(payload, &rec); err != nil {
			// CRC-valid but not ours: written by a newer version? Refuse
			// to guess what it meant.
			return fmt.Errorf("log record at %v does not decode: %w", lsn, err)
		}
		recs = append(recs, loggedRecord{lsn: lsn, end: lsn + wal.LSN(len(payload)) + 16, rec: &rec})
		return nil
	})
	return recs, from, end, err
}

// replayAll is recovery by a process that has the directory alone (no other
// process has it open, so nobody reads or writes meanwhile): every record
// parked out of the log (fs_stuck.go), then every record since the
// checkpoint, is applied again in log order, rewriting its bytes. After a
// sync failure a checkpoint then makes the result durable before the
// poison mark is cleared; otherwise the background checkpoint does. It is
// what runs after a power loss, after a sync failure (then it also clears
// the poison mark), and whenever the last process of a directory died.
//
// A record that cannot be applied for an instance (a damaged history, an
// unwritable file) must not keep the others from being served: it is
// logged, its outbound messages are restored (in log order, like every
// publish of a replay), the instance's mark is set to it, and every later
// record of that instance is queued behind it unapplied (orchState.Queued):
// they are applied, in order, by whoever next finishes the instance's marks
// once the cause is gone. After a sync failure they are parked before the
// checkpoint passes them.
func (p *FSProvider) replayAll(ctx context.Context) error {
	recs, _, end, err := p.scanLog()
	if err != nil {
		return err
	}
	parked, err := p.listParked()
	if err != nil {
		return err
	}
	failpoint.Hit("replay.start")
	rs := replayState{p: p, blocked: map[string][]pendingMark{}}
	inLog := map[string]bool{}
	for _, lr := range recs {
		inLog[lr.rec.CommitID] = true
	}
	removals := replayRemovals(recs)
	// Parked records are older than every record in the log. One the
	// checkpoint did not pass after all is replayed from the log, in order.
	for _, e := range parked {
		if !inLog[e.lr.rec.CommitID] {
			rs.replayKey(context.WithValue(ctx, replayPosKey{}, replayPos{removals: removals, at: -1}), e.key, e.lr)
		}
	}
	stop := len(recs) // the first record the checkpoint cannot pass
	unapplied := map[int][]string{}
	for i, lr := range recs {
		ctx := context.WithValue(ctx, replayPosKey{}, replayPos{removals: removals, at: i})
		keys := keysOf(lr.rec)
		if len(keys) == 0 { // a work item's or workflow activity's ack
			if err := p.replayOne(ctx, lr.rec); err != nil {
				p.log.Error("durofs: replay of a log record failed; the checkpoint stays before it until it can be applied", "record", lr.rec.CommitID, "lsn", lr.lsn, "err", err)
				stop = min(stop, i)
				continue
			}
			p.stats.replayed.Add(1)
			continue
		}
		var failed []string
		for _, k := range keys {
			if !rs.replayKey(ctx, k, lr) {
				failed = append(failed, k)
			}
		}
		if len(failed) == 0 {
			p.stats.replayed.Add(1)
			continue
		}
		unapplied[i] = failed
		if err := p.restorePublishes(lr.rec); err != nil {
			p.log.Error("durofs: replay could not restore the messages of a log record; the checkpoint stays before it", "record", lr.rec.CommitID, "lsn", lr.lsn, "err", err)
			stop = min(stop, i)
		}
	}
	failpoint.Hit("replay.after_apply")
	rs.setMarks(ctx)
	if p.wal.Err() == nil {
		// Nothing needs to be durable before serving: until a checkpoint
		// covers them, the records stay in the log and a power loss replays
		// them again. The background checkpoint makes them durable (and
		// parks those that could not be applied).
		return nil
	}
	// Poisoned: prove the rewritten bytes reach the disk before anything
	// is acknowledged again; park what could not be applied first.
	stuck := map[string][]string{}
	for i := 0; i < stop; i++ {
		keys := unapplied[i]
		if len(keys) == 0 {
			continue
		}
		if err := p.parkRecord(recs[i], keys, true); err != nil {
			if errors.Is(err, wal.ErrPoisoned) {
				return err
			}
			p.log.Error("durofs: replay could not park a log record that cannot be applied; the checkpoint stays before it", "record", recs[i].rec.CommitID, "err", err)
			stop = i
			break
		}
		stuck[recs[i].rec.CommitID] = keys
	}
	if stop < len(recs) {
		end = recs[stop].lsn
	}
	if err := p.syncTouched(recs[:stop], stuck); err != nil {
		return err
	}
	if err := p.wal.SetCheckpoint(end); err != nil {
		return err
	}
	if stop == len(recs) {
		return p.wal.ClearPoison()
	}
	return nil
}

// replayPos is where a replay is in the log (a context value of the
// applies it runs): the index of the record being applied, and for every
// instance key and execution the index of the last record that removes it.
type replayPos struct {
	removals map[string]int
	at       int
}

type replayPosKey struct{}

// replayRemovals indexes the records of a replay that remove executions: by
// "<key>/<execution number>" a go-workflows part's removal of an execution,
// by "<key>/" a deletion of the whole instance; the value is the index of
// the last such record.
func replayRemovals(recs []loggedRecord) map[string]int {
	out := map[string]int{}
	for i, lr := range recs {
		switch lr.rec.Kind {
		case kindDelete:
			for _, m := range lr.rec.Members {
				out[m.Key+"/"] = i
			}
		case kindGW:
			if lr.rec.GW == nil {
				continue
			}
			for _, pt := range lr.rec.GW.Parts {
				for _, n := range pt.RemoveExecs {
					out[fmt.Sprintf("%s/%d", pt.Key, n)] = i
				}
				if pt.DeleteInstanceFile {
					out[pt.Key+"/"] = i
				}
			}
		}
	}
	return out
}

// removedLater reports whether, in the replay ctx belongs to, a record
// after the one being applied removes execution n of instance key: what
// the file system shows of that execution may then be a later execution's
// that reused its number (an instance id removed and created again), and
// the record applied now cannot conflict with anything that lasts.
func removedLater(ctx context.Context, key string, n uint64) bool {
	pos, ok := ctx.Value(replayPosKey{}).(replayPos)
	if !ok {
		return false
	}
	if j, ok := pos.removals[key+"/"]; ok && j > pos.at {
		return true
	}
	j, ok := pos.removals[fmt.Sprintf("%s/%d", key, n)]
	return ok && j > pos.at
}

// replayState is what a replay learns about instances whose records fail.
type replayState struct {
	p *FSProvider
	// blocked are the instances with a record that failed: the marks to
	// set, the failed record's first.
	blocked map[string][]pendingMark
}

// replayKey applies lr's part for instance key in replay mode, under its
// flock, and reports whether it did; if not (it failed, or an earlier
// record of key did), the record is queued for key.
func (rs *replayState) replayKey(ctx context.Context, key string, lr loggedRecord) bool {
	p := rs.p
	mark := pendingMark{ID: lr.rec.CommitID, Hint: lr.lsn, Kind: markKind(lr.rec)}
	if marks, ok := rs.blocked[key]; ok {
		rs.blocked[key] = append(marks, mark)
		return false
	}
	g, err := p.lockInstance(ctx, key)
	if err == nil {
		err = p.applyKey(ctx, g, key, lr.rec, true)
		g.Unlock()
	}
	if err == nil {
		return true
	}
	rs.blocked[key] = []pendingMark{mark}
	p.noteStuck(key, instanceOf(key, lr.rec), lr.rec.CommitID, lr.lsn, err)
	return false
}

// setMarks marks every blocked instance's records pending, in order.
func (rs *replayState) setMarks(ctx context.Context) {
	p := rs.p
	for key, marks := range rs.blocked {
		g, err := p.lockInstance(ctx, key)
		if err == nil {
			cur, _, rerr := g.Read()
			if rerr != nil && !errors.Is(rerr, lease.ErrCorrupt) {
				err = rerr
			} else if rerr = p.markDeletingFor(key, marks); rerr != nil {
				err = rerr
			} else {
				st := decodeOrchState(cur)
				st.Pending, st.Queued = &marks[0], marks[1:]
				cur.Data = st.encode()
				err = g.Write(cur)
			}
			g.Unlock()
		}
		if err != nil {
			p.log.Error("durofs: replay could not mark an instance's unapplied commits pending", "key", key, "commits", len(marks), "err", err)
		}
	}
}

// restorePublishes writes the messages rec publishes from its bytes (a
// replay's publish), whatever part of it was applied.
func (p *FSProvider) restorePublishes(rec *commitRecord) error {
	refs, err := p.publishRefs(rec)
	if err != nil {
		return err
	}
	for _, r := range refs {
		if err := r.q.Restore(r.ref.Name, r.ref.Data); err != nil {
			return err
		}
	}
	return nil
}

// replayOne applies one record in replay mode, under the flocks it names.
func (p *FSProvider) replayOne(ctx context.Context, rec *commitRecord) error {
	if rec.Kind == kindGWAct {
		return p.gwReplayAct(ctx, rec)
	}
	if rec.Kind == kindWorkAck {
		return p.workQ.WithClaim(ctx, rec.Item, func(g *fsqueue.ClaimGuard) error {
			return p.applyWorkAck(g, rec, true)
		})
	}
	for _, k := range keysOf(rec) {
		g, err := p.lockInstance(ctx, k)
		if err != nil {
			return err
		}
		err = p.applyKey(ctx, g, k, rec, true)
		g.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// checkpointTimeout bounds how long a checkpoint waits for one flock.
const checkpointTimeout = 2 * time.Second

// checkpointOnce finishes every record since the last checkpoint that is
// still marked pending (its writer died, or is applying it right now), and,
// if sync, fsyncs what they touched and advances the checkpoint. One process
// at a time (wal/checkpoint.lock). With wait it waits for the lock, but at
// most checkpointTimeout (Recover, so that Open finishes what the dead left
// when nobody else is at it); without, a busy lock skips the round at once
// (background passes). Either way a busy lock is not an error: its holder is
// doing the same work, and if it is stopped (SIGSTOP, a frozen cgroup) the
// work waits for no one that needs it: a fetch finishes its instance's
// pending commit under the instance flock before serving it (redoPending),
// a work item's finished ack is completed by finishAckedClaims, which takes
// no checkpoint lock, and the background passes try again. What a stopped
// holder delays is the checkpoint itself (log truncation) and the
// publication of a dead writer's messages to instances nobody fetches.
//
// A record that cannot be applied (fs_stuck.go) does not end the pass: the
// records after it are finished too. With sync it is parked, and the
// checkpoint goes past it; one that cannot be parked (a work item's ack, an
// instance whose lease cannot be read) keeps the checkpoint before it, and
// is logged and listed by StuckCommits.
func (p *FSProvider) checkpointOnce(ctx context.Context, sync, wait bool) error {
	path := filepath.Join(p.dir, "wal", "checkpoint.lock")
	var u vfs.Unlocker
	var err error
	if wait {
		lctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
		u, err = p.fs.Lock(lctx, path)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			p.log.Info("durofs: another process holds the checkpoint lock; leaving the log's pending records to it and to the fetches", "waited", checkpointTimeout)
			return nil
		}
	} else {
		var ok bool
		u, ok, err = p.fs.TryLock(path)
		if err == nil && !ok {
			return nil
		}
	}
	if err != nil {
		return err
	}
	defer u.Unlock()
	// Another process's poisoning too, not only ours: a checkpoint whose
	// file fsync failed marks the log before it lets the lock go, and the
	// pages that fsync lost are marked clean, so this checkpoint's own
	// fsyncs of the same files would succeed and move the checkpoint past
	// records whose bytes never reached the disk.
	if err := p.wal.CheckShared(); err != nil {
		return err
	}
	// Holding the checkpoint lock, a checkpoint file's temporary is a dead
	// checkpointer's.
	if err := p.wal.RemoveCheckpointTemps(); err != nil {
		return err
	}
	recs, from, end, err := p.scanLog()
	if err != nil {
		return err
	}
	// Parked records, after the scan of the log (see fs_stuck.go: one
	// whose mark is gone is removed before this round's checkpoint).
	if err := p.settleParked(ctx, sync); err != nil {
		return err
	}
	stop := len(recs)
	parked := map[string][]string{} // commit id → the keys it was parked for
visit:
	for i, lr := range recs {
		res, stuck, err := p.ensureApplied(ctx, lr)
		if err != nil {
			return err
		}
		switch res {
		case ensureBusy:
			stop = min(stop, i)
			break visit
		case ensureStuck:
			if i < stop && sync && parkedKind(lr.rec.Kind) {
				err := p.parkRecord(lr, stuck, false)
				if err == nil {
					parked[lr.rec.CommitID] = stuck
					continue
				}
				if errors.Is(err, wal.ErrPoisoned) {
					return err
				}
				p.log.Error("durofs: checkpoint could not park a record that cannot be applied; the checkpoint stays before it", "record", lr.rec.CommitID, "lsn", lr.lsn, "err", err)
			}
			fallthrough
		case ensureBlocked:
			stop = min(stop, i)
		}
	}
	if stop < len(recs) {
		end, recs = recs[stop].lsn, recs[:stop]
	}
	if !sync || end <= from {
		return nil
	}
	if testSkipSync != "checkpoint" { // test only: see testSkipSync
		if err := p.syncTouched(recs, parked); err != nil {
			return err
		}
	}
	failpoint.Hit("checkpoint.before_set")
	// And again after the fsyncs: a process that found a failed sync of
	// its own meanwhile (a work file's, say) marked the log.
	if err := p.wal.CheckShared(); err != nil {
		return err
	}
	if err := p.wal.SetCheckpoint(end); err != nil {
		return err
	}
	p.stats.checkpoints.Add(1)
	return nil
}

// Checkpoint runs one checkpoint now (the background loop runs one every
// Options.CheckpointInterval): it finishes every logged commit still marked
// pending, fsyncs what the records since the last checkpoint touched
// (Durable mode) and advances the checkpoint, removing log segments wholly
// below it. It returns nil without doing anything if another process is
// checkpointing; a record whose flock stays busy for checkpointTimeout ends
// the checkpoint before it, and one that cannot be applied is parked
// (fs_stuck.go). Like a background round, it also lets the queue files
// this process recycled be reused (they wait for a directory fsync).
func (p *FSProvider) Checkpoint(ctx context.Context) error {
	return p.backgroundPass(ctx, false)
}

// ensureResult is what ensureApplied found.
type ensureResult int

const (
	ensureDone    ensureResult = iota // applied
	ensureBusy                        // a flock was not had in time: the checkpoint stops visiting
	ensureStuck                       // applying failed for the returned keys: parkable
	ensureBlocked                     // cannot be known applied nor parked: the checkpoint stays before it
)

// ensureApplied makes sure a record's apply finished: a lease (or claim)
// still marking it is redone under its flock. Keys whose redo fails (the
// lease marks the record, so no later record of theirs exists: fs_stuck.go)
// are returned with ensureStuck.
func (p *FSProvider) ensureApplied(ctx context.Context, lr loggedRecord) (ensureResult, []string, error) {
	rec := lr.rec
	lctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	if rec.Kind == kindGWAct {
		done, err := p.gwEnsureAct(ctx, lctx, rec)
		key := "gwa:"
		if rec.GW != nil {
			key += rec.GW.ActQueue + "/" + rec.Item
		}
		if err != nil && p.wal.Err() == nil && ctx.Err() == nil {
			p.noteStuck(key, "", rec.CommitID, lr.lsn, err)
			return ensureBlocked, nil, nil
		}
		if done {
			p.noteApplied(key)
		}
		return ensureDoneOrBusy(done), nil, err
	}
	if rec.Kind == kindWorkAck {
		c, exists, err := p.workQ.PeekClaim(rec.Item)
		if err != nil && !errors.Is(err, fsqueue.ErrCorrupt) {
			// Not known to be applied: a checkpoint past it would make
			// findRecord drop its mark unapplied.
			return ensureBusy, nil, err
		}
		if err != nil || !exists || workMark(c) != rec.CommitID {
			p.noteApplied("w:" + rec.Item)
			return ensureDone, nil, nil // unreadable claims are volatile, never a commit's mark
		}
		err = p.workQ.WithClaim(lctx, rec.Item, func(g *fsqueue.ClaimGuard) error {
			return p.redoWorkAck(g)
		})
		if isStuck(err) {
			return ensureBlocked, nil, nil
		}
		return ensureDoneOrBusy(err == nil), nil, ignoreTimeout(err)
	}
	res := ensureDone
	var stuck []string
	for _, k := range keysOf(rec) {
		cur, _, err := p.leases.Inspect(lctx, p.lockPath(k), p.leasePath(k))
		if err != nil && !errors.Is(err, lease.ErrCorrupt) {
			if errors.Is(err, context.DeadlineExceeded) {
				return ensureBusy, nil, nil
			}
			// Not known to be applied (see findRecord).
			p.noteStuck(k, instanceOf(k, rec), rec.CommitID, lr.lsn, fmt.Errorf("read lease: %w", err))
			res = ensureBlocked
			continue
		}
		if err != nil {
			continue // unreadable: the holder of its flock rewrites it
		}
		if !marks(decodeOrchState(cur), rec.CommitID) {
			continue
		}
		g, _, err := p.lockExisting(lctx, k, true)
		if errors.Is(err, lease.ErrGone) {
			continue // reclaimed since: no lease marks it
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return ensureBusy, nil, nil
			}
			p.noteStuck(k, instanceOf(k, rec), rec.CommitID, lr.lsn, fmt.Errorf("lock: %w", err))
			res = ensureBlocked
			continue
		}
		err = p.redoPending(ctx, g, k)
		g.Unlock()
		if errors.Is(err, errClaimBusy) {
			return ensureBusy, nil, nil // a stopped claim holder: next round, never parked
		}
		if isStuck(err) {
			stuck = append(stuck, k)
			continue
		}
		if err != nil {
			return ensureBusy, nil, err
		}
		p.stats.acksFinished.Add(1)
	}
	if res == ensureDone && len(stuck) > 0 {
		res = ensureStuck
	}
	return res, stuck, nil
}

func ensureDoneOrBusy(done bool) ensureResult {
	if done {
		return ensureDone
	}
	return ensureBusy
}

func ignoreTimeout(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// syncTouched fsyncs every file and directory the records changed (Durable
// mode only), but those of the instances each was parked for (stuck: by
// commit id; they are synced once applied). A file or directory that no
// longer exists needs nothing: its removal is covered by its parent's
// fsync. A failed fsync poisons the log (syncPaths).
func (p *FSProvider) syncTouched(recs []loggedRecord, stuck map[string][]string) error {
	if p.durability != Durable {
		return nil
	}
	files, dirs := map[string]bool{}, map[string]bool{}
	for _, lr := range recs {
		keys := stuck[lr.rec.CommitID]
		if len(keys) == 0 {
			p.touched(lr.rec, files, dirs)
			continue
		}
		f, d := map[string]bool{}, map[string]bool{}
		p.touched(lr.rec, f, d)
		for _, set := range []struct{ from, to map[string]bool }{{f, files}, {d, dirs}} {
			for path := range set.from {
				if !p.underAny(path, keys) {
					set.to[path] = true
				}
			}
		}
	}
	// Files first, then directories (a new file's entry is durable only
	// once its directory is synced), each batch by several goroutines: the
	// file system can share one journal commit or device flush among
	// concurrent fsyncs.
	return p.syncPaths(files, dirs)
}

// underAny reports whether path is the directory of one of the instance
// keys, or inside it.
func (p *FSProvider) underAny(path string, keys []string) bool {
	for _, k := range keys {
		d := p.instDir(k)
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// checkpointSyncers is how many fsyncs a checkpoint runs at once.
const checkpointSyncers = 8

// parallelSync calls syncOne on every path with up to checkpointSyncers
// goroutines and returns every error (all of them: one failed fsync among
// failed opens must not go unseen, see syncFailed) but those of a path
// that is gone (syncGone).
func parallelSync(paths []string, syncOne func(string) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan string)
	)
	for range min(checkpointSyncers, len(paths)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for path := range next {
				if err := syncOne(path); err != nil && !syncGone(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("sync %s: %w", path, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, path := range paths {
		next <- path
	}
	close(next)
	wg.Wait()
	return errs
}

// syncGone reports whether a checkpoint's sync of a path failed because
// the path no longer names what was written there: removed since (does not
// exist), or replaced by something planted (a link, FIFO or directory in a
// file's place, or a file in a directory's: ENOTDIR). Its parent's sync
// makes the removal or replacement durable, and fsck reports what was
// planted.
func syncGone(err error) bool {
	return vfs.IsNotExist(err) || vfs.IsPlanted(err) || errors.Is(err, syscall.ENOTDIR)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (p *FSProvider) syncFile(path string) error {
	f, err := p.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// touched adds the files and directories a record's apply changes.
func (p *FSProvider) touched(rec *commitRecord, files, dirs map[string]bool) {
	if p.gwTouched(rec, files, dirs) {
		return
	}
	qdir := p.queueDir
	for _, r := range rec.Publish {
		files[filepath.Join(qdir(r.Queue), r.Name+".json")] = true
		dirs[qdir(r.Queue)] = true
	}
	for _, r := range rec.Delete {
		dirs[qdir(r.Queue)] = true
		if r.Queue == "worker" {
			dirs[filepath.Join(p.workQ.Dir(), "claims")] = true
		}
	}
	switch rec.Kind {
	case kindWorkAck:
		dirs[p.workQ.Dir()] = true
		dirs[filepath.Join(p.workQ.Dir(), "claims")] = true
		return
	case kindDelete:
		// The reclaimed directories' removal is made durable by their
		// parent's sync; the index entries' by their directory's (or its
		// parent's, if it went too).
		dirs[filepath.Join(p.dir, "instances")] = true
		// Completions of the members' worker items (deleteCompletions).
		dirs[qdir("orchestrator")] = true
		for _, m := range rec.Members {
			dirs[p.instDir(m.Key)] = true
			if m.Parent != nil {
				dirs[p.childrenDir(*m.Parent)] = true
				dirs[filepath.Join(p.dir, "children")] = true
			}
			for _, r := range m.Delete {
				dirs[qdir(r.Queue)] = true
				if activity, gw := gwQueueKind(r.Queue); gw && activity {
					dirs[filepath.Join(qdir(r.Queue), "claims")] = true
				}
			}
		}
		dirs[filepath.Join(p.workQ.Dir(), "claims")] = true
		return
	}
	key := rec.Key
	dirs[filepath.Join(p.dir, "instances")] = true
	dirs[p.instDir(key)] = true
	dirs[filepath.Join(p.instDir(key), "executions")] = true
	if rec.InstanceFile != nil {
		files[p.instFilePath(key)] = true
	}
	if rec.ChildOf != nil {
		files[filepath.Join(p.childrenDir(*rec.ChildOf), key)] = true
		dirs[filepath.Join(p.dir, "children")] = true
		dirs[p.childrenDir(*rec.ChildOf)] = true
	}
	if rec.Kind == kindPrune {
		return
	}
	dirs[p.execDir(key, rec.ExecutionID)] = true
	if len(rec.History) > 0 {
		files[p.historyPath(key, rec.ExecutionID)] = true
	}
	if rec.ExecutionFile != nil {
		files[p.execStatePath(key, rec.ExecutionID)] = true
	}
}

// LogStats are this process's counts of write-ahead log work.
type LogStats struct {
	// Appends counts records appended (commits, and records whose sync then
	// failed); Syncs the log's fdatasyncs (group commit: under concurrency
	// fewer than Appends).
	Appends, Syncs int64
	// Checkpoints counts checkpoints this process made; CheckpointSyncs the
	// fsyncs of files and directories they ran.
	Checkpoints, CheckpointSyncs int64
	// Grows counts the log's segment grows (zeros appended and synced ahead
	// of the frames, in the background); GrowWaits those an append waited
	// for (wal.Stats).
	Grows, GrowWaits int64
	// RecycleSyncs counts the directory fsyncs that let this process's
	// recycled queue files be reused (fsqueue.Recycler.Promote, in the
	// background).
	RecycleSyncs int64
}

// LogStats returns this process's write-ahead log counters.
func (p *FSProvider) LogStats() LogStats {
	ws := p.wal.Stats()
	return LogStats{Appends: ws.Appends, Syncs: ws.Syncs, Checkpoints: p.stats.checkpoints.Load(), CheckpointSyncs: p.stats.checkpointSyncs.Load(), Grows: ws.Grows, GrowWaits: ws.GrowWaits, RecycleSyncs: p.recycler.Syncs()}
}

// backgroundPass is one round of the checkpoint loop: a checkpoint
// (checkpointOnce; with wait, waiting for another process's to end), then
// the promotion of the queue files this process recycled since the last
// round (promoteRecycled), whether or not this process got to checkpoint.
func (p *FSProvider) backgroundPass(ctx context.Context, wait bool) error {
	err := p.checkpointOnce(ctx, true, wait)
	return errors.Join(err, p.promoteRecycled())
}

// promoteRecycled lets the queue files this process recycled be reused
// (fsqueue.Recycler.Promote): it fsyncs the queue directories they were
// removed from, so that no power loss can bring a consumed message's name
// back over a reused file. A failed fsync poisons the log, as a
// checkpoint's does (syncFailed: the directory's other changes may be
// lost too, and a later fsync would not say so); a directory that could
// not be opened poisons nothing, and its files are just not reused.
// Poisoned, nothing is promoted.
func (p *FSProvider) promoteRecycled() error {
	if p.recycler == nil || p.wal == nil || p.wal.Err() != nil {
		return nil
	}
	err := p.recycler.Promote()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	return p.syncFailed(errs)
}

// promoteInterval is how often a process promotes the queue files it
// recycled (promoteRecycled) between checkpoints: a file waits for it before
// it can be reused, and a busy process removes a few hundred a second.
const promoteInterval = 100 * time.Millisecond

// promoteRound promotes this process's recycled files, if any wait (every
// promoteInterval): a few directory fsyncs, off every ack's path.
func (p *FSProvider) promoteRound() {
	if p.recycler.Waiting() == 0 {
		return
	}
	if err := p.promoteRecycled(); err != nil && !errors.Is(err, ErrSyncFailed) {
		p.log.Warn("durofs: promote recycled queue files", "err", err)
	}
}

// checkpointRound is one round of the background checkpoint (every
// interval): backgroundPass.
func (p *FSProvider) checkpointRound(interval time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*interval+checkpointTimeout)
	defer cancel()
	if err := p.backgroundPass(ctx, false); err != nil && !errors.Is(err, ErrSyncFailed) {
		p.log.Warn("durofs: checkpoint", "err", err)
	}
}

// readOnlyLog reports whether the provider reads the log without writing it
// (OpenReadOnly, Fsck without repair).
func (p *FSProvider) readOnlyLog() bool { return p.wal.ReadOnly() }
