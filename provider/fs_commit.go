package provider

// The atomic ack (design.md §5).
//
// ack_orchestration_item must be all-or-nothing across: the history append,
// the execution and instance records, custom status, worker and orchestrator
// enqueues (to any instance; timers with visible_at), deleting the consumed
// batch and the cancelled activities, and releasing the lock. Files cannot do
// that in one operation, so an ack is write-ahead intent logging with ONE
// durable commit point:
//
//	0. VALIDATE under the instance flock: the token holds an unexpired lease;
//	   event ids are non-zero, unique, and new to the execution; work items
//	   are of the right kinds. Everything is computed in memory. Any failure
//	   returns an error having written nothing: the lock stays held.
//	1. STAGE every outbound message as a hidden ".staged-<name>.json" file in
//	   its queue directory (fsynced; one directory fsync per queue). Barrier
//	   mode writes it under that name unsynced (fsqueue.StageDeferred): a
//	   kill -9 or power loss before the barrier may leave it partial, but
//	   then no record names it and the staged sweep removes it.
//	2. COMMIT: write commits/<instance key>.json (temp + fsync + rename +
//	   directory fsync). This is the commit point: before it the ack did not
//	   happen, after it the ack happened, whatever crashes next.
//	3. APPLY (redo) the record, every step idempotent:
//	   a. history: append the delta at its recorded position (history.AppendAt);
//	   b. execution state.json and instance.json (atomic replaces);
//	   c. publish each staged message by a rename within its directory;
//	   d. delete the consumed batch and the cancelled worker items;
//	   e. release the lease (if it still names the committing token);
//	   f. delete the commit record.
//
// Whoever next takes the instance flock (a fetch, ack, abandon, or the
// startup/periodic sweep, which also covers instances nobody fetches again)
// redoes a pending record before anything else. Crash analysis per step is
// written beside the code below.
//
// Why staging and a same-directory rename: a redo must never resurrect a
// message that its consumer already took. A staged file is published by
// rename(2), which moves it; once published (and maybe consumed and deleted)
// there is nothing left to publish again, so Publish reports false. After a
// power loss an un-fsynced rename could be undone, but the consumer's own
// commit fsyncs the queue directory after deleting the message, which makes
// the directory's current state durable - the staged entry is not in it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// commitRecord is the durable intent of one ack. Everything needed to finish
// the ack is in it or in staged files it names.
type commitRecord struct {
	Format int `json:"format"`
	// CommitID is unique per commit; BootID is the boot it was committed in
	// (barrier mode only; see fs_barrier.go for the "applied" marker).
	CommitID    string `json:"commit_id,omitempty"`
	BootID      string `json:"boot_id,omitempty"`
	Instance    string `json:"instance"`
	Key         string `json:"key"`
	LeaseToken  string `json:"lease_token"`
	Fence       uint64 `json:"fence"`
	ExecutionID uint64 `json:"execution_id"`
	CommittedMs int64  `json:"committed_at_ms"`
	// HistoryBase is the number of records in the execution's history
	// before the delta; the delta is appended at that position.
	HistoryBase int `json:"history_base"`
	// History holds each event's exact bytes (base64 in JSON, so that
	// re-encoding never alters an event: unknown events round-trip verbatim).
	History    [][]byte `json:"history"`
	HistoryIDs []uint64 `json:"history_ids"`
	// Kind is "" for an orchestration ack (or an append), "prune" for
	// PruneExecutions, "delete-intent" for one instance of a deletion group
	// and "delete" for the group record itself (see fs_admin.go).
	Kind string `json:"kind,omitempty"`
	// InstanceFile and ExecutionFile are the complete new contents (nil: not
	// written).
	InstanceFile  *instanceFile  `json:"instance_file,omitempty"`
	ExecutionFile *executionFile `json:"execution_file,omitempty"`
	// PruneExecutions are execution ids whose directories a prune removes.
	PruneExecutions []uint64 `json:"prune_executions,omitempty"`
	// Group names a deletion group record (Kind "delete-intent").
	Group string `json:"group,omitempty"`
	// Keys are the instance keys of a deletion group (Kind "delete").
	Keys []string `json:"keys,omitempty"`
	// Publish are staged messages to publish; Delete are messages to delete.
	Publish []queueRef `json:"publish"`
	Delete  []queueRef `json:"delete"`
}

// queueRef names a message of a queue ("orchestrator" or "worker").
type queueRef struct {
	Queue string `json:"queue"`
	Name  string `json:"name"`
}

const commitFormat = 1

// testHookAfterCommitPoint, when set (by tests only), runs right after a
// commit point (kind "ack", "work_ack", "prune", "delete") and before the
// commit is applied: multi-process tests kill the process there.
var testHookAfterCommitPoint func(kind string)

func afterCommitPoint(kind string) {
	if testHookAfterCommitPoint != nil {
		testHookAfterCommitPoint(kind)
	}
}

// testSkipSyncDir, when set by a test, names one sync site to skip, so the
// power-loss simulation can prove that it notices a missing fsync: "stage"
// skips the queue-directory fsync after staging (per-file mode), "barrier"
// the barrier before an ack's commit point (barrier mode). "" (the default)
// skips nothing.
var testSkipSyncDir string

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
	if err := p.checkAckLimits(op, historyDelta, workerItems, orchestratorItems, metadata); err != nil {
		return err // limits.go: nothing written, the lock is kept
	}
	key, lt, ok := parseOrchToken(lockToken)
	if !ok {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	if _, err := p.fs.Stat(p.instDir(key)); err != nil {
		if vfs.IsNotExist(err) {
			return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
		}
		return Retryablef(op, err, "stat instance: %v", err)
	}
	g, err := p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
	if err != nil {
		return Retryablef(op, err, "lock instance: %v", err)
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
		return Permanentf(op, ErrLockExpired, "Instance lock expired")
	}
	st := decodeOrchState(cur)
	rec, staged, err := p.buildCommit(key, cur, st, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelledActivities, nowMs)
	if err != nil {
		return err
	}

	rec.CommitID, rec.BootID = uuid.NewString(), p.bootID

	// Step 1: stage outbound messages.
	// Crash here: staged files with no commit record. They are invisible to
	// consumers (hidden names) and the sweeper removes them once it holds
	// this instance's flock and sees no record naming them. In barrier mode
	// they are not synced here: the barrier of step 2 does that.
	failpoint.Hit("ack.before_stage")
	if err := p.stage(staged); err != nil {
		p.unstage(staged)
		return Retryablef(op, err, "stage messages: %v", err)
	}

	// The lock must still be valid at the commit point (contract §2.5 step
	// 14). We hold the flock, so only time can have changed it.
	if !cur.HeldAt(g.Now().UnixMilli()) {
		p.unstage(staged)
		return Permanentf(op, ErrLockExpired, "Instance lock expired")
	}

	// Step 2: the commit point (writeCommit).
	// Crash before the rename: no record, the ack did not happen, the lease
	// is unchanged (held until it expires), staged files are garbage.
	// Crash after the rename (kill -9) or after the directory fsync (power
	// loss): the record exists and the next flock holder applies it. In
	// barrier mode a power loss before the barrier returned loses the staged
	// files and the record's temporary file alike: no record, no ack. An
	// fsync or barrier error fails the ack (rolled back below).
	data, err := jsonMarshal(rec)
	if err != nil {
		p.unstage(staged)
		return Permanentf(op, ErrInvalidEvent, "encode commit: %v", err)
	}
	failpoint.Hit("ack.before_commit_record")
	if err := p.writeCommit(key, data); err != nil {
		// The commit point failed. If the rename happened but the directory
		// fsync failed, the record is visible although its durability is
		// unknown (fsync errors are fatal to the commit): take it back, so
		// that no later flock holder applies a turn we report as failed.
		p.rollbackCommit(key, rec.CommitID, staged)
		return Retryablef(op, err, "write commit record: %v", err)
	}

	afterCommitPoint("ack")
	failpoint.Hit("ack.after_commit_record")

	// Step 3: apply. From here the ack is committed: an apply error is
	// logged and left to the next flock holder's redo, never reported as a
	// failed ack (the runtime would retry a turn that already happened).
	if err := p.apply(ctx, g, rec); err != nil {
		p.log.Warn("durofs: ack committed, apply deferred to recovery", "instance", rec.Instance, "err", err)
		p.stats.applyDeferred.Add(1)
	}
	failpoint.Hit("ack.after_apply")
	p.notify()
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
		return nil, nil, Retryablef(op, err, "read instance: %v", err)
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
	// even when the stored events themselves no longer decode (test 128).
	log := history.Open(p.fs, p.historyPath(key, executionID))
	scan, err := log.Read()
	var ce *history.CorruptError
	if err != nil && !errors.As(err, &ce) {
		return nil, nil, Retryablef(op, err, "read history: %v", err)
	}
	if err != nil {
		return nil, nil, Permanentf(op, ErrCorrupt, "history of execution %d is corrupt and cannot be appended to: %v", executionID, err)
	}
	existing := make(map[uint64]bool, len(scan.Records))
	for _, r := range scan.Records {
		existing[r.ID] = true
	}
	rec := &commitRecord{
		Format: commitFormat, Instance: instance, Key: key, LeaseToken: cur.Token, Fence: cur.Fence,
		ExecutionID: executionID, CommittedMs: nowMs, HistoryBase: len(scan.Records),
	}
	seen := map[uint64]bool{}
	var lastCustom *CustomStatusUpdated
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
		if cs, ok := ev.Kind.(CustomStatusUpdated); ok {
			c := cs
			lastCustom = &c
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
		return nil, nil, Retryablef(op, err, "read execution: %v", err)
	}
	ne := executionFile{ExecutionID: executionID, Status: "Running", StartedAtMs: nowMs}
	if ef != nil {
		ne = *ef
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
	ne.EventCount = uint64(len(scan.Records) + len(delta))
	rec.ExecutionFile = &ne

	// Summary counters of the instance file.
	if !slices.Contains(nf.Executions, executionID) {
		nf.Executions = append(nf.Executions, executionID)
		slices.Sort(nf.Executions)
	}
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
	for _, s := range staged {
		rec.Publish = append(rec.Publish, queueRef{s.queue, s.msg.Name})
	}

	// Deletes: the fetched batch, then worker items of cancelled activities
	// (whatever their lock state).
	for _, n := range st.Batch {
		rec.Delete = append(rec.Delete, queueRef{"orchestrator", n})
	}
	if len(cancelSet) > 0 {
		entries, err := p.workQ.List()
		if err != nil {
			return nil, nil, Retryablef(op, err, "list worker queue: %v", err)
		}
		for _, e := range entries {
			id, ok := workerIdentity(e)
			if ok && cancelSet[id] {
				rec.Delete = append(rec.Delete, queueRef{"worker", e.Name})
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

// stage writes staged files and fsyncs each queue directory once. In
// barrier mode it syncs nothing: the commit's barrier makes them durable.
func (p *FSProvider) stage(staged []stagedMsg) error {
	used := map[string]bool{}
	for _, s := range staged {
		q := p.queue(s.queue)
		stage := q.Stage
		if p.barrier != nil {
			stage = q.StageDeferred
		}
		if err := stage(s.msg); err != nil {
			return err
		}
		used[s.queue] = true
	}
	failpoint.Hit("ack.after_stage")
	if p.barrier != nil {
		return nil
	}
	for q := range used {
		if testSkipSyncDir == "stage" {
			break
		}
		if err := p.queue(q).SyncDir(); err != nil {
			return err
		}
	}
	failpoint.Hit("ack.after_stage_sync")
	return nil
}

// writeCommit writes an instance's commit record, sealed: the commit point
// of an ack. Per-file mode: a spare file (fs_spares.go; without a spare pool
// a temporary file in tmp/) fsynced, exchanged with the record, commits/
// fsynced. Barrier mode: the spare written unsynced, one barrier (covering
// it, the ack's staged messages and every earlier unsynced apply), the
// exchange, commits/ fsynced. Either way the record becomes visible under
// its name only once its content is durable, and the spare goes back to the
// pool only after the fsync of commits/.
func (p *FSProvider) writeCommit(key string, data []byte) error {
	if p.barrier == nil {
		return p.replaceSealed(p.fs, p.commitPath(key), data, nil, nil)
	}
	barrier := p.barrier.Sync
	if testSkipSyncDir == "barrier" {
		barrier = func() error { return nil }
	}
	return p.replaceSealed(p.fs, p.commitPath(key), data, barrier, p.commitsSync.Sync)
}

// slotBarrier is called before a commit that replaces an instance's commit
// record by other means than writeCommit (deletion intents): in barrier mode
// the replaced record's apply must be durable before the record goes.
func (p *FSProvider) slotBarrier() error {
	if p.barrier == nil {
		return nil
	}
	return p.barrier.Sync()
}

// rollbackCommit undoes a commit whose commit point failed: the record (if
// it got its name) and the staged messages are removed, best effort. If a
// power loss later brings the record back, recovery applies it - as a
// database whose commit fsync failed may still commit after a crash.
//
// Only our own record goes: if the failure came before the rename, the
// slot may still hold the instance's previous record, which in barrier
// mode waits for a barrier to cover its apply and must stay.
func (p *FSProvider) rollbackCommit(key, commitID string, staged []stagedMsg) {
	if id, exists, err := p.recordCommitID(key); err == nil && exists && id == commitID {
		if err := p.fs.Remove(p.commitPath(key)); err == nil {
			_ = p.fs.SyncDir(filepath.Join(p.dir, "commits"))
		}
	}
	p.unstage(staged)
}

func (p *FSProvider) unstage(staged []stagedMsg) {
	for _, s := range staged {
		_ = p.queue(s.queue).Unstage(s.msg.Name)
	}
}

// redoPending finishes a commit left by a dead process (or by an apply that
// failed), if this instance has one. The caller holds the instance flock.
// In barrier mode a record stays after its apply until a later barrier
// covers it; one whose apply provably finished in this boot is skipped (see
// fs_barrier.go) and handed to the cleaner.
func (p *FSProvider) redoPending(ctx context.Context, g *lease.Guard, key string) error {
	data, err := p.readSealed(p.commitPath(key))
	if vfs.IsNotExist(err) {
		return nil
	}
	if errors.Is(err, ErrCorrupt) {
		// Written by exchange after a barrier or fsync, a record is whole
		// or absent, and only this flock holder writes it: a seal that does
		// not match means damage from outside.
		raw, _ := p.fs.ReadFile(p.commitPath(key))
		return p.quarantineCommit(key, raw, err)
	}
	if moved, qerr := p.quarantineIfLink(p.commitPath(key), err, "commit record"); moved || qerr != nil {
		return qerr // a planted link, not a record of ours (symlinks.go)
	}
	if err != nil {
		return err
	}
	var rec commitRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		// The record is written by rename after an fsync, so it is complete
		// or absent; an unparseable one was damaged from outside.
		return p.quarantineCommit(key, data, err)
	}
	if applied, err := p.appliedInThisBoot(g, &rec); err != nil {
		return err
	} else if applied {
		p.scheduleCleanup(false, key, rec.CommitID)
		return nil
	}
	p.stats.redone.Add(1)
	failpoint.Hit("redo.start")
	return p.apply(ctx, g, &rec)
}

// appliedInThisBoot reports whether rec's apply ran to its end in the
// current boot: barrier mode, the record has a commit id and this boot's id,
// and the lease names the commit id as applied (the last step of apply).
func (p *FSProvider) appliedInThisBoot(g *lease.Guard, rec *commitRecord) (bool, error) {
	if p.barrier == nil || rec.CommitID == "" || rec.BootID != p.bootID || rec.Kind != "" {
		return false, nil
	}
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return false, fmt.Errorf("read lease: %w", err)
	}
	return decodeOrchState(cur).Applied == rec.CommitID, nil
}

// appliedRecordOnDisk is appliedInThisBoot for readers that do not hold
// the instance flock and may run in per-file mode (fsck, inspection): the
// record is an instance commit of the current boot whose commit id the
// lease marks applied.
func (p *FSProvider) appliedRecordOnDisk(ctx context.Context, key string, rec *commitRecord) bool {
	if rec.CommitID == "" || rec.Kind != "" {
		return false
	}
	boot, err := vfs.BootID(p.fs)
	if err != nil || boot != rec.BootID {
		return false
	}
	cur, _, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key))
	return err == nil && decodeOrchState(cur).Applied == rec.CommitID
}

// recordCommitID reads the commit id of an instance's commit record.
func (p *FSProvider) recordCommitID(key string) (id string, exists bool, err error) {
	var head struct {
		CommitID string `json:"commit_id"`
	}
	exists, err = p.readJSON(p.commitPath(key), &head)
	return head.CommitID, exists, err
}

// applyFS is the file system an apply writes through: in barrier mode its
// syncs are no-ops (a later barrier makes the apply durable before its
// record goes).
func (p *FSProvider) applyFS() vfs.FS {
	if p.barrier != nil {
		return vfs.NoSync(p.fs)
	}
	return p.fs
}

// apply performs step 3 of the protocol. Every step is idempotent, so apply
// may run any number of times for one record, interrupted anywhere. In
// barrier mode nothing is synced and the record stays for the cleaner.
func (p *FSProvider) apply(ctx context.Context, g *lease.Guard, rec *commitRecord) error {
	switch rec.Kind {
	case "":
	case kindPrune:
		return p.applyPrune(rec)
	case kindDeleteIntent:
		return p.applyDeleteIntent(ctx, g, rec)
	default:
		return fmt.Errorf("commit record of %s has unknown kind %q", rec.Key, rec.Kind)
	}
	key := rec.Key
	afs := p.applyFS()

	// 3a. History. Crash (kill -9) mid-append can leave a torn final line;
	// AppendAt truncates it and appends what is missing, by position. A
	// power loss before its fsync can lose the appended bytes; the record is
	// still there and this step runs again.
	if len(rec.History) > 0 || rec.ExecutionFile != nil {
		if err := p.mkdirApply(p.execDir(key, rec.ExecutionID)); err != nil {
			return fmt.Errorf("create execution dir: %w", err)
		}
	}
	recs := make([]history.Record, len(rec.History))
	for i, raw := range rec.History {
		recs[i] = history.Record{ID: rec.HistoryIDs[i], Epoch: rec.Fence, Payload: raw}
	}
	if len(recs) > 0 {
		if _, err := history.Open(afs, p.historyPath(key, rec.ExecutionID)).AppendAt(rec.HistoryBase, recs); err != nil {
			return fmt.Errorf("append history: %w", err)
		}
	}
	failpoint.Hit("redo.after_history")

	// 3b. Execution and instance records: atomic replaces with the full new
	// contents, sealed, recycling inodes (fs_spares.go: in barrier mode the
	// spare an exchange frees may be overwritten before a barrier covers
	// the exchange, which is safe because this record outlives it). Crash
	// between them: both are rewritten on redo. The
	// instance directory's own entry is made durable first (it may have been
	// created by the non-durable lease store).
	if err := p.mkdirApply(p.instDir(key)); err != nil {
		return fmt.Errorf("create instance dir: %w", err)
	}
	if rec.ExecutionFile != nil {
		ed, _ := jsonMarshal(rec.ExecutionFile)
		if err := p.replaceSealed(afs, p.execStatePath(key, rec.ExecutionID), ed, nil, nil); err != nil {
			return fmt.Errorf("write execution state: %w", err)
		}
	}
	failpoint.Hit("redo.after_state")
	if rec.InstanceFile != nil {
		id, _ := jsonMarshal(rec.InstanceFile)
		if err := p.replaceSealed(afs, p.instFilePath(key), id, nil, nil); err != nil {
			return fmt.Errorf("write instance: %w", err)
		}
	}
	failpoint.Hit("redo.after_instance")

	// 3c. Publish staged messages. A missing staged file means it was
	// published before (and possibly consumed since): never recreate it.
	// Crash after some renames: the rest are published on redo. The queue
	// directory fsync makes the renames durable before the record goes.
	used := map[string]bool{}
	for _, r := range rec.Publish {
		if _, err := p.queue(r.Queue).Publish(r.Name); err != nil {
			return fmt.Errorf("publish %s/%s: %w", r.Queue, r.Name, err)
		}
		used[r.Queue] = true
		failpoint.Hit("redo.after_publish")
	}
	// 3d. Delete the consumed batch and cancelled worker items. ENOENT means
	// done. Worker items are deleted under their claim's shard flock so a
	// concurrent work ack or claim sees either the item or nothing.
	for _, r := range rec.Delete {
		q := p.queue(r.Queue)
		var err error
		if r.Queue == "worker" {
			err = q.WithClaim(ctx, r.Name, func(*fsqueue.ClaimGuard) error { return q.Delete(r.Name) })
		} else {
			err = q.Delete(r.Name)
		}
		if err != nil {
			return fmt.Errorf("delete %s/%s: %w", r.Queue, r.Name, err)
		}
		used[r.Queue] = true
		failpoint.Hit("redo.after_delete")
	}
	for _, qn := range []string{"worker", "orchestrator"} {
		if !used[qn] || p.barrier != nil {
			continue
		}
		if err := p.queue(qn).SyncDir(); err != nil {
			return fmt.Errorf("sync %s queue: %w", qn, err)
		}
		if qn == "worker" {
			if err := p.workQ.SyncClaimsDir(); err != nil {
				return fmt.Errorf("sync worker claims: %w", err)
			}
		}
		failpoint.Hit("redo.after_queue_sync")
	}

	// 3e. Release the lease if it still names the committing token, and
	// forget the consumed messages' attempt counts. (A lease that moved on
	// was taken over after the record was committed and redone by the new
	// holder before it acquired; then there is nothing to release.) Mark
	// the record applied in the lease either way: this is apply's last
	// write, so the mark proves every step above completed (within this
	// boot; see fs_barrier.go).
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return fmt.Errorf("read lease: %w", err)
	}
	st := decodeOrchState(cur)
	changed := st.Applied != rec.CommitID
	st.Applied = rec.CommitID
	if cur.Token == rec.LeaseToken && cur.Token != "" {
		for _, r := range rec.Delete {
			delete(st.Attempts, r.Name)
			delete(st.Delayed, r.Name)
		}
		st.Batch = nil
		cur.Token, cur.Owner, cur.ExpiresAtMs = "", "", 0
		changed = true
	}
	if changed {
		cur.Data = st.encode()
		if err := g.Write(cur); err != nil {
			return fmt.Errorf("release lease: %w", err)
		}
	}
	failpoint.Hit("redo.after_lease_release")

	// 3f. Forget the record. Per-file mode: now, with a directory fsync
	// (crash before it: after a power loss the record may reappear and is
	// applied again - harmlessly, as every step above is idempotent).
	// Barrier mode: the cleaner removes it once a later barrier has made
	// this apply durable.
	if p.barrier != nil {
		p.scheduleCleanup(false, key, rec.CommitID)
		return nil
	}
	return p.removeCommit(key)
}

// mkdirApply creates a directory an apply writes into: made durable at once
// in per-file mode, by the next barrier in barrier mode.
func (p *FSProvider) mkdirApply(dir string) error {
	if p.barrier != nil {
		return p.fs.MkdirAll(dir, vfs.DirPerm)
	}
	return p.mkdirDurable(dir)
}

// removeCommit deletes a commit record (the last step of every apply; in
// ProcessCrashSafe mode the record becomes a spare, fs_spares.go).
func (p *FSProvider) removeCommit(name string) error {
	if err := fsqueue.RemoveVia(p.fs, p.recyclerOrNil(), p.commitPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("remove commit record: %w", err)
	}
	failpoint.Hit("commit.after_record_remove")
	if err := p.fs.SyncDir(filepath.Join(p.dir, "commits")); err != nil {
		return fmt.Errorf("sync commits dir: %w", err)
	}
	return nil
}

// quarantineCommit moves an unparseable commit record aside with a reason.
func (p *FSProvider) quarantineCommit(key string, data []byte, cause error) error {
	name := "commit-" + key + "-" + strconv.FormatInt(time.Now().UnixNano(), 10) + ".json"
	if err := p.quarantine(name, fmt.Sprintf("unparseable commit record: %v", cause), data); err != nil {
		return err
	}
	if err := p.fs.Remove(p.commitPath(key)); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	return p.fs.SyncDir(filepath.Join(p.dir, "commits"))
}
