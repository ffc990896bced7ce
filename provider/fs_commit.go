package provider

// The atomic ack (design.md §5): see fs_wal.go for the commit protocol every
// commit follows. An orchestration ack validates under the instance flock,
// stages its outbound messages, marks the lease pending, appends its record
// to the write-ahead log (the commit point), and applies it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// commitRecord is one write-ahead log record: everything needed to apply a
// commit again from nothing but the log (replay rewrites every byte from it).
// CommitID is the first field, so a scan can match a record by its prefix.
type commitRecord struct {
	CommitID    string `json:"id"`
	Instance    string `json:"instance,omitempty"`
	Key         string `json:"key,omitempty"`
	LeaseToken  string `json:"lease_token,omitempty"`
	Fence       uint64 `json:"fence,omitempty"`
	ExecutionID uint64 `json:"execution_id,omitempty"`
	CommittedMs int64  `json:"committed_at_ms"`
	// HistoryBase is the number of records in the execution's history
	// before the delta; the delta is appended at that position.
	HistoryBase int `json:"history_base,omitempty"`
	// HistoryOffset is the byte offset of record HistoryBase in the
	// history file, as the ack read it (0: not known). The apply appends
	// there after reading only what follows it (history.Log.AppendAtMark);
	// a file that does not reach it is appended to by a whole read.
	HistoryOffset int64 `json:"history_offset,omitempty"`
	// History holds each event's exact bytes (base64 in JSON, so that
	// re-encoding never alters an event: unknown events round-trip verbatim).
	History    [][]byte `json:"history,omitempty"`
	HistoryIDs []uint64 `json:"history_ids,omitempty"`
	// Kind is "" for an orchestration ack (or an append), "prune" for
	// PruneExecutions, "delete" for a deletion of instances (Members) and
	// "work_ack" for AckWorkItem (Item, ItemToken).
	Kind string `json:"kind,omitempty"`
	// InstanceFile and ExecutionFile are the complete new contents (nil: not
	// written).
	InstanceFile  *instanceFile  `json:"instance_file,omitempty"`
	ExecutionFile *executionFile `json:"execution_file,omitempty"`
	// PruneExecutions are execution ids whose directories a prune removes.
	PruneExecutions []uint64 `json:"prune_executions,omitempty"`
	// Members are the instances a deletion removes, with their messages.
	Members []deleteMember `json:"members,omitempty"`
	// ChildOf is the parent an ack's new instance record names: the apply
	// adds the instance to that parent's children index (fs_reclaim.go).
	ChildOf *string `json:"child_of,omitempty"`
	// Item and ItemToken name the worker item a work ack consumes.
	Item      string `json:"item,omitempty"`
	ItemToken string `json:"item_token,omitempty"`
	// Publish are staged messages to publish (with their bytes, for a
	// replay); Delete are messages to delete.
	Publish []queueRef `json:"publish,omitempty"`
	Delete  []queueRef `json:"delete,omitempty"`
	// GW is the workflow part of kinds "gw" and "gw_act" (fs_gw.go).
	GW *gwRecord `json:"gw,omitempty"`
}

// queueRef names a message of a queue ("orchestrator" or "worker"); Data is
// the message file's content where the record publishes it.
type queueRef struct {
	Queue string `json:"queue"`
	Name  string `json:"name"`
	Data  []byte `json:"data,omitempty"`
}

// testHookAfterCommitPoint, when set (by tests only), runs right after a
// commit point (kind "ack", "work_ack", "prune", "delete") and before the
// commit is applied: multi-process tests kill the process there.
var testHookAfterCommitPoint func(kind string)

func afterCommitPoint(kind string) {
	if testHookAfterCommitPoint != nil {
		testHookAfterCommitPoint(kind)
	}
}

// testHookDeletionListed, when set (by tests only), runs when a deletion
// has listed a member's messages in one queue ("worker", "orchestrator"):
// a test applies a work ack there.
var testHookDeletionListed func(queue string)

// testHookTreeWalked, when set (by tests only), runs when DeleteInstance
// has walked the tree, before it locks anything: a test starts a child there.
var testHookTreeWalked func()

// testHookBeforeCommit, when set (by tests only), runs when a work ack has
// checked its item, under the item's claim lock, right before it marks the
// claim and appends its record: tests hold an ack there.
var testHookBeforeCommit func(kind string)

func (p *FSProvider) queue(name string) *fsqueue.Queue {
	if name == "worker" {
		return p.workQ
	}
	return p.orchQ
}

// AckOrchestrationItem implements Provider (see the protocol above).
func (p *FSProvider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []Event, workerItems, orchestratorItems []WorkItem, metadata ExecutionMetadata, cancelledActivities []ScheduledActivityIdentifier) error {
	const op = "ack_orchestration_item"
	workerItems, orchestratorItems = derefItems(workerItems), derefItems(orchestratorItems)
	historyDelta, err := normalizeEvents(op, historyDelta)
	if err != nil {
		return err // nothing written, the lock is kept
	}
	if err := metadata.validate(op); err != nil {
		return err // nothing written, the lock is kept
	}
	if err := p.checkAckLimits(op, historyDelta, workerItems, orchestratorItems, metadata); err != nil {
		return err // limits.go: nothing written, the lock is kept
	}
	key, lt, ok := parseOrchToken(lockToken)
	if !ok {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	wctx, cancel := p.endHeld(ctx, key, lt)
	g, _, err := p.lockExisting(wctx, key, true)
	cancel()
	if errors.Is(err, lease.ErrGone) {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token") // no instance, no lease
	}
	if err != nil {
		return p.leaseWaitErr(op, ctx, wctx, err, key, lt, "Invalid lock token", "Instance lock expired")
	}
	defer g.Unlock()
	if err := p.redoPending(ctx, g, key); err != nil {
		return Retryablef(op, err, "recover pending commit: %v", err)
	}

	// Step 0: validate. Nothing is written until the commit record.
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return Retryablef(op, err, "read lease: %v", err)
	}
	if cur.Token == "" || cur.Token != lt {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	now := g.Now()
	nowMs := now.UnixMilli()
	if !cur.HeldAt(nowMs) {
		return Permanentf(op, errTokenExpired, "Instance lock expired")
	}
	st := decodeOrchState(cur)
	rec, staged, err := p.buildCommit(key, cur, st, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelledActivities, nowMs)
	if err != nil {
		return err
	}

	// Step 1: stage outbound messages (unsynced; the record carries their
	// bytes). Crash here: staged orphans the sweep removes.
	failpoint.Hit("ack.before_stage")
	if err := p.stage(rec, staged); err != nil {
		p.unstage(staged)
		return Retryablef(op, err, "stage messages: %v", err)
	}

	// The lock must still be valid at the commit point (contract §2.5 step
	// 14). We hold the flock, so only time can have changed it.
	if !cur.HeldAt(g.Now().UnixMilli()) {
		p.unstage(staged)
		return Permanentf(op, errTokenExpired, "Instance lock expired")
	}

	// Steps 2 and 3: mark, append, sync (fs_wal.go). A failure before the
	// append leaves nothing; a sync failure poisons the log, and the record
	// is settled by the replay (the staged files are not needed for that).
	failpoint.Hit("ack.before_commit")
	if err := p.commitLocked(ctx, []*lease.Guard{g}, rec); err != nil {
		p.unstage(staged)
		return Retryablef(op, err, "commit: %v", err)
	}
	afterCommitPoint("ack")
	failpoint.Hit("ack.after_commit")

	// Step 4: apply. From here the ack is committed: an apply error is
	// logged and left to the next flock holder's redo, never reported as a
	// failed ack (the runtime would retry a turn that already happened).
	if err := p.apply(ctx, g, rec, false); err != nil {
		p.applyDeferredTo(ctx, "ack", key, rec.Instance, rec, err)
	}
	failpoint.Hit("ack.after_apply")
	// The instance's lease is free: its other messages can be fetched.
	p.notify(wakeOrch | wakeFor(rec.Publish))
	return nil
}

// stagedMsg is an outbound message staged before the commit point.
type stagedMsg struct {
	queue string
	msg   fsqueue.Message
}

// buildCommit validates an ack and computes its commit record in memory.
func (p *FSProvider) buildCommit(key string, cur lease.Lease, st orchState, executionID uint64, delta []Event, workerItems, orchItems []WorkItem, md ExecutionMetadata, cancelled []ScheduledActivityIdentifier, nowMs int64) (*commitRecord, []stagedMsg, error) {
	const op = "ack_orchestration_item"
	if executionID == 0 {
		return nil, nil, Permanentf(op, ErrInvalidEvent, "execution_id must be set by runtime")
	}
	inf, err := p.readInstanceFile(key)
	if err != nil {
		return nil, nil, storageErrf(op, err, "read instance: %v", err)
	}
	instance := ""
	if inf != nil {
		instance = inf.Instance
	} else {
		instance, err = p.instanceFromLease(key, st)
		if err != nil {
			return nil, nil, err
		}
	}

	// History: ids must be non-zero, unique in the delta and new to the
	// execution. Existing ids come from the record frames, so an ack works
	// even when the stored events themselves no longer decode (test 128),
	// or a record's frame fails its CRC (the poison ack over a damaged
	// record: historyEnd). A history that lost committed events is never
	// extended: the delta would land at the wrong position, after a hole.
	ids, end, err := p.historyEnd(key, executionID)
	if err != nil && !errors.Is(err, history.ErrCorrupt) {
		return nil, nil, Retryablef(op, err, "read history: %v", err)
	}
	if err != nil {
		return nil, nil, Permanentf(op, ErrCorrupt, "history of execution %d cannot be appended to: %v", executionID, err)
	}
	// Which of the delta's ids the history has already: one pass over the
	// history's ids, whatever the delta's size.
	existing := make(map[uint64]bool, len(delta))
	for _, ev := range delta {
		existing[ev.EventID] = false
	}
	for _, id := range ids {
		if _, ok := existing[id]; ok {
			existing[id] = true
		}
	}
	rec := &commitRecord{
		Instance: instance, Key: key, LeaseToken: cur.Token, Fence: cur.Fence,
		ExecutionID: executionID, CommittedMs: nowMs, HistoryBase: end.Records, HistoryOffset: end.Size,
	}
	seen := map[uint64]bool{}
	var lastCustom *CustomStatusUpdated
	var subs uint64
	for _, ev := range delta {
		if ev.EventID == 0 {
			return nil, nil, Permanentf(op, ErrInvalidEvent, "event_id must be set by runtime")
		}
		if seen[ev.EventID] || existing[ev.EventID] {
			return nil, nil, Permanentf(op, ErrDuplicateEvent, "duplicate event_id %d in execution %d (UNIQUE constraint)", ev.EventID, executionID)
		}
		seen[ev.EventID] = true
		raw, err := ev.MarshalJSON()
		if err != nil {
			return nil, nil, Permanentf(op, ErrInvalidEvent, "encode event %d: %v", ev.EventID, err)
		}
		rec.History = append(rec.History, compactJSON(raw))
		rec.HistoryIDs = append(rec.HistoryIDs, ev.EventID)
		switch k := ev.Kind.(type) {
		case CustomStatusUpdated:
			lastCustom = &k
		case SubOrchestrationScheduled:
			subs++
		}
	}

	// Instance file and record (contract §2.5 steps 3, 6, 9).
	nf := instanceFile{Instance: instance, CurrentExecutionID: executionID, LastFence: cur.Fence, UpdatedAtMs: nowMs}
	if inf != nil {
		nf = *inf
		nf.CurrentExecutionID = max(nf.CurrentExecutionID, executionID)
		nf.LastFence = max(nf.LastFence, cur.Fence)
		nf.UpdatedAtMs = nowMs
		if nf.Record != nil {
			r := *nf.Record
			nf.Record = &r
		}
	}
	if md.OrchestrationName != nil && md.OrchestrationVersion != nil {
		if nf.Record == nil {
			nf.Record = &instanceRecord{ParentInstanceID: md.ParentInstanceID, CreatedAtMs: nowMs}
			rec.ChildOf = md.ParentInstanceID
			// A new record's current execution is this ack's (§2.5 step 3).
			nf.CurrentExecutionID = max(executionID, nf.CurrentExecutionID)
		}
		nf.Record.OrchestrationName = *md.OrchestrationName
		v := *md.OrchestrationVersion
		nf.Record.OrchestrationVersion = &v
	}
	if nf.Record != nil {
		nf.Record.UpdatedAtMs = nowMs
		if lastCustom != nil {
			nf.Record.CustomStatus = lastCustom.Status
			nf.Record.CustomStatusVersion++
		}
	}
	// Execution record (steps 4, 5, 8).
	ef, err := p.readExecutionFile(key, executionID)
	if err != nil {
		return nil, nil, storageErrf(op, err, "read execution: %v", err)
	}
	ne := executionFile{ExecutionID: executionID, Status: "Running", StartedAtMs: nowMs}
	if ef != nil {
		ne = *ef
	}
	if ne.Generation == "" {
		ne.Generation = uuid.NewString()
	}
	if md.PinnedDuroxideVersion != nil {
		s := md.PinnedDuroxideVersion.String()
		ne.Pinned = &s
	}
	if md.Status != nil {
		ne.Status = *md.Status
		ne.Output = md.Output
		ne.CompletedAtMs = nil // contract §2.19: completed_at only once terminal
		if ne.Status != "Running" {
			c := nowMs
			ne.CompletedAtMs = &c
		}
	}
	ne.EventCount = uint64(end.Records + len(delta))
	rec.ExecutionFile = &ne

	// Summary counters of the instance file.
	nf.Executions.Add(executionID)
	if inf == nil {
		// The instance's first commit: count events appended before it
		// (AppendWithExecution), in any execution, from the record frames.
		total, err := p.countHistoryRecords(key)
		if err != nil {
			return nil, nil, Retryablef(op, err, "count history: %v", err)
		}
		nf.TotalEvents = total
	}
	nf.TotalEvents += uint64(len(delta))
	nf.SubOrchestrations += subs
	if executionID == nf.CurrentExecutionID {
		nf.Status, nf.CompletedAtMs = ne.Status, ne.CompletedAtMs
	} else if cf, err := p.readExecutionFile(key, nf.CurrentExecutionID); err == nil && cf != nil {
		nf.Status, nf.CompletedAtMs = cf.Status, cf.CompletedAtMs
	}
	rec.InstanceFile = &nf

	// Outbound messages. Worker items come first and cancellations are
	// applied after them (test 86): a worker item cancelled in the same ack
	// is never published.
	cancelSet := map[ScheduledActivityIdentifier]bool{}
	for _, c := range cancelled {
		cancelSet[c] = true
	}
	var staged []stagedMsg
	for _, w := range workerItems {
		ae, ok := w.(ActivityExecute)
		if !ok {
			return nil, nil, Permanentf(op, ErrInvalidWorkItem, "Invalid work item type: %s in worker_items", kindOf(w))
		}
		if cancelSet[ScheduledActivityIdentifier{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ActivityID: ae.ID}] {
			continue
		}
		m, err := p.workerMessage(ae, nowMs, key)
		if err != nil {
			return nil, nil, Permanentf(op, ErrInvalidWorkItem, "encode worker item: %v", err)
		}
		staged = append(staged, stagedMsg{"worker", m})
	}
	for _, w := range orchItems {
		if w == nil || QueueOf(w) != OrchestratorQueue {
			return nil, nil, Permanentf(op, ErrInvalidWorkItem, "Invalid work item type: %s in orchestrator_items", kindOf(w))
		}
		m, err := p.orchMessage(w, VisibleAtMs(w, nowMs), nowMs, key)
		if err != nil {
			return nil, nil, Permanentf(op, ErrInvalidWorkItem, "encode orchestrator item: %v", err)
		}
		staged = append(staged, stagedMsg{"orchestrator", m})
	}
	for i := range staged {
		s := &staged[i]
		// Encode names the message (its name carries its visibility time
		// and route), so the name is decided here, before the commit point.
		data, err := p.queue(s.queue).Encode(&s.msg)
		if err != nil {
			return nil, nil, Permanentf(op, ErrInvalidWorkItem, "encode message: %v", err)
		}
		rec.Publish = append(rec.Publish, queueRef{s.queue, s.msg.Name, data})
	}

	// Deletes: the fetched batch, then worker items of cancelled activities
	// (whatever their lock state).
	for _, n := range st.Batch {
		rec.Delete = append(rec.Delete, queueRef{Queue: "orchestrator", Name: n})
	}
	if len(cancelSet) > 0 {
		// The cancelled activities' items, found by their instances' routes.
		keys := map[string]bool{}
		for id := range cancelSet {
			keys[instanceKey(id.Instance)] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			items, err := queuedFor(p.workQ, k)
			if err != nil {
				return nil, nil, Retryablef(op, err, "list worker queue: %v", err)
			}
			for _, m := range items {
				id, ok := workerIdentity(m.Attrs)
				if ok && cancelSet[id] {
					rec.Delete = append(rec.Delete, queueRef{Queue: "worker", Name: m.Name})
				}
			}
		}
	}
	return rec, staged, nil
}

func kindOf(w WorkItem) string {
	if w == nil {
		return "nil"
	}
	return w.Kind()
}

// countHistoryRecords counts the history records of every execution of an
// instance (used once, when an instance without instance.json first commits).
func (p *FSProvider) countHistoryRecords(key string) (uint64, error) {
	execs, err := p.listExecutions(key)
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, e := range execs {
		n, _, err := history.Open(p.fs, p.historyPath(key, e)).Stat()
		if err != nil && !errors.Is(err, history.ErrCorrupt) {
			return 0, err
		}
		total += uint64(n)
	}
	return total, nil
}

// compactJSON removes insignificant whitespace (a history record is one
// line). Already-compact input, the normal case, is returned unchanged.
func compactJSON(raw []byte) []byte {
	if !slices.Contains(raw, '\n') && !slices.Contains(raw, '\r') {
		return raw
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err == nil {
		return buf.Bytes()
	}
	return raw
}

// instanceFromLease recovers the instance id for an instance without
// instance.json: from a message of its batch.
func (p *FSProvider) instanceFromLease(key string, st orchState) (string, error) {
	for _, n := range st.Batch {
		if m, err := p.orchQ.Get(n); err == nil {
			return m.Attrs[attrInstance], nil
		}
	}
	if id, err := decodeKey(key); err == nil {
		return id, nil
	}
	return "", Permanentf("ack_orchestration_item", ErrInvalidLockToken, "Invalid lock token: cannot resolve instance")
}

// appendHistory is the apply's append of recs at record base of h: at the
// byte offset the committer read (off > 0), reading only what follows it
// (history.Log.AppendAtMark); without one, or if the file does not agree
// with it, with a whole read (history.Log.AppendAt), which decides. The
// offset saves reading; it is never what makes the append right.
func appendHistory(h *history.Log, base int, off int64, recs []history.Record) error {
	if off > 0 {
		_, err := h.AppendAtMark(history.Mark{Size: off, Records: base}, recs)
		if !errors.Is(err, history.ErrMoved) && !errors.Is(err, history.ErrConflict) && !errors.Is(err, history.ErrInvalid) {
			return err
		}
	}
	_, err := h.AppendAt(base, recs)
	return err
}

// rewriteHistory is the replay's rewrite of recs at record base of h: at
// the byte offset the committer read (off > 0: history.Log.RewriteAtMark,
// which keeps the bytes before it as they are, a damaged line included, see
// historyEnd), else after base valid records (history.Log.RewriteAt).
func rewriteHistory(h *history.Log, base int, off int64, recs []history.Record) error {
	if off > 0 {
		return h.RewriteAtMark(history.Mark{Size: off, Records: base}, recs)
	}
	return h.RewriteAt(base, recs)
}

// stage writes the staged files of rec's publishes, unsynced: a staged file
// is read only through a committed record, which carries its bytes too.
func (p *FSProvider) stage(rec *commitRecord, staged []stagedMsg) error {
	for i := range staged {
		r := rec.Publish[i]
		if err := p.queue(r.Queue).StageData(r.Name, r.Data); err != nil {
			return err
		}
	}
	failpoint.Hit("ack.after_stage")
	return nil
}

func (p *FSProvider) unstage(staged []stagedMsg) {
	for _, s := range staged {
		_ = p.queue(s.queue).Unstage(s.msg.Name)
	}
}

// apply performs step 4 of the protocol for an orchestration ack or an
// append, without any sync (a checkpoint makes it durable). Every step is
// idempotent, so apply may run any number of times for one record,
// interrupted anywhere. With replay (a process that has the directory alone,
// after a power loss or a sync failure) every byte is written again instead
// of trusting what the files show: history lines are rewritten at their
// position and messages written from the record's bytes.
func (p *FSProvider) apply(ctx context.Context, g *lease.Guard, rec *commitRecord, replay bool) error {
	key := rec.Key
	afs := vfs.NoSync(p.fs)

	// a. History: the delta at its recorded position. A kill -9 mid-append
	// can leave a torn line; AppendAt truncates it and appends what is
	// missing.
	if len(rec.History) > 0 || rec.ExecutionFile != nil {
		if err := p.fs.MkdirAll(p.execDir(key, rec.ExecutionID), vfs.DirPerm); err != nil {
			return fmt.Errorf("create execution dir: %w", err)
		}
	}
	recs := make([]history.Record, len(rec.History))
	for i, raw := range rec.History {
		recs[i] = history.Record{ID: rec.HistoryIDs[i], Epoch: rec.Fence, Payload: raw}
	}
	if len(recs) > 0 {
		h := history.Open(afs, p.historyPath(key, rec.ExecutionID))
		var err error
		if replay {
			err = rewriteHistory(h, rec.HistoryBase, rec.HistoryOffset, recs)
			if _, serr := p.fs.Stat(h.Path()); errors.Is(err, history.ErrConflict) && (vfs.IsNotExist(serr) || removedLater(ctx, key, rec.ExecutionID)) {
				// Shorter than the base because it is gone: a later
				// record's prune or deletion removed the execution and
				// that reached the disk before a checkpoint did. That
				// record is replayed after this one. (Or it is a later
				// instance's of the same id, created again after a
				// deletion that a later record of the log is.)
				err = nil
			}
		} else {
			err = appendHistory(h, rec.HistoryBase, rec.HistoryOffset, recs)
		}
		if err != nil {
			return fmt.Errorf("append history: %w", err)
		}
	}
	failpoint.Hit("redo.after_history")

	// b. Execution and instance records: atomic replaces with the full new
	// contents (a reader sees the old or the new file, never a mix).
	if err := p.fs.MkdirAll(p.instDir(key), vfs.DirPerm); err != nil {
		return fmt.Errorf("create instance dir: %w", err)
	}
	if rec.ExecutionFile != nil {
		if err := p.writeJSONApply(p.execStatePath(key, rec.ExecutionID), rec.ExecutionFile); err != nil {
			return fmt.Errorf("write execution state: %w", err)
		}
	}
	failpoint.Hit("redo.after_state")
	if rec.ChildOf != nil {
		// Before instance.json: an instance record naming a parent always
		// has its index entry (fs_reclaim.go).
		if err := p.addChild(*rec.ChildOf, key); err != nil {
			return err
		}
		failpoint.Hit("redo.after_index")
	}
	if rec.InstanceFile != nil {
		if err := p.writeJSONApply(p.instFilePath(key), rec.InstanceFile); err != nil {
			return fmt.Errorf("write instance: %w", err)
		}
	}
	failpoint.Hit("redo.after_instance")

	// c. Publish staged messages. A missing staged file means it was
	// published before (and possibly consumed since): never recreate it -
	// except in a replay, where later records delete what was consumed.
	if err := p.publish(rec.Publish, replay); err != nil {
		return err
	}
	// d. Delete the consumed batch and cancelled worker items. ENOENT means
	// done. Worker items are deleted under their own lock so a concurrent
	// work ack or claim sees either the item or nothing.
	if err := p.deleteRefs(ctx, rec.Delete); err != nil {
		return err
	}

	// e. Release the lease if it still names the committing token, forget
	// the consumed messages' attempt counts, and clear the mark: the last
	// write, so a mark proves the apply may not have finished.
	if err := releaseMark(g, rec.CommitID, rec.LeaseToken, rec.Delete); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	failpoint.Hit("redo.after_lease_release")
	return nil
}

// publish makes staged messages visible (a rename each); a replay writes
// them from the record's bytes.
func (p *FSProvider) publish(refs []queueRef, replay bool) error {
	for _, r := range refs {
		q := p.queue(r.Queue)
		var err error
		if replay {
			err = q.Restore(r.Name, r.Data)
		} else {
			_, err = q.Publish(r.Name)
		}
		if err != nil {
			return fmt.Errorf("publish %s/%s: %w", r.Queue, r.Name, err)
		}
		failpoint.Hit("redo.after_publish")
	}
	return nil
}

// claimWaitMax bounds how long deleting a claimable queue item (a worker
// item, a go-workflows activity task) waits for the item's claim lock. Its
// holder keeps it for one short section - a claim, renew, abandon or work
// ack, which may include a group sync of the log - but a process stopped
// inside one (SIGSTOP, a frozen cgroup) keeps it until it resumes, and no
// other process may wait that long. Past the bound the delete fails with
// errClaimBusy: an ack's own apply leaves its record to the redo (the
// instance is retried after the stuck back-off, fs_stuck.go), and the
// checkpoint counts the record busy and tries again next round, without
// parking it (TestApplyDoesNotWaitForAStoppedClaimHolder).
const claimWaitMax = 200 * time.Millisecond

// errClaimBusy: a queue item's claim lock stayed held for claimWaitMax.
var errClaimBusy = errors.New("durofs: queue item's claim lock is held by another process")

// deleteClaimed deletes message name of q under its claim lock (so a
// concurrent claim or work ack sees the item or nothing), waiting at most
// claimWaitMax for the lock. ENOENT means done.
func deleteClaimed(ctx context.Context, q *fsqueue.Queue, name string) error {
	wctx, cancel := context.WithTimeout(ctx, claimWaitMax)
	defer cancel()
	err := q.WithClaim(wctx, name, func(*fsqueue.ClaimGuard) error { return q.Delete(name) })
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errClaimBusy, err)
	}
	return err
}

// deleteWorkItem deletes worker item name under its claim lock, taken
// waiting at most claimWaitMax (errClaimBusy), after finishing a work ack of
// it that is committed and not yet applied (its completion is published
// first: that ack comes before this deletion in the log). ENOENT means done.
func (p *FSProvider) deleteWorkItem(ctx context.Context, name string) error {
	wctx, cancel := context.WithTimeout(ctx, claimWaitMax)
	defer cancel()
	err := p.workQ.WithClaim(wctx, name, func(g *fsqueue.ClaimGuard) error {
		if p.wal.Err() == nil { // poisoned: a replay restores what the ack published
			if err := p.redoWorkAck(g); err != nil {
				return err
			}
		}
		return p.workQ.Delete(name)
	})
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errClaimBusy, err)
	}
	return err
}

// awaitClaimFree waits, holding nothing, until worker item name's claim
// lock is free (or the item is gone): what a deletion whose claim barrier
// found it busy (passClaims) does before it starts again.
func (p *FSProvider) awaitClaimFree(ctx context.Context, name string) error {
	return p.workQ.WithClaim(ctx, name, func(*fsqueue.ClaimGuard) error { return nil })
}

// deleteRefs deletes queue messages (and a worker item's claim, under the
// item's lock; messages of workflow queues as gwDelete does). ENOENT means
// done.
func (p *FSProvider) deleteRefs(ctx context.Context, refs []queueRef) error {
	for _, r := range refs {
		q := p.queue(r.Queue)
		var err error
		if _, gw := gwQueueKind(r.Queue); gw {
			err = p.gwDeleteOne(ctx, r)
		} else if r.Queue == "worker" {
			err = p.deleteWorkItem(ctx, r.Name)
		} else {
			err = q.Delete(r.Name)
		}
		if err != nil {
			return fmt.Errorf("delete %s/%s: %w", r.Queue, r.Name, err)
		}
		failpoint.Hit("redo.after_delete")
	}
	return nil
}
