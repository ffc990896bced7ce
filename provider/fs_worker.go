package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
)

// workerMessage builds the queue message for an ActivityExecute. Its
// identity (instance, execution, activity id), session and tag are
// attributes, so cancellation, deletion and tag/session filtering read the
// message's header, never decode its work item; its name carries the route
// of its instance (attrKey), so an instance's items are found without a
// scan of the queue.
func (p *FSProvider) workerMessage(ae ActivityExecute, nowMs int64, source string) (fsqueue.Message, error) {
	payload, err := MarshalWorkItem(ae)
	if err != nil {
		return fsqueue.Message{}, err
	}
	attrs := map[string]string{
		attrInstance: ae.Instance, attrKey: instanceKey(ae.Instance),
		attrExec: strconv.FormatUint(ae.ExecutionID, 10), attrActivity: strconv.FormatUint(ae.ID, 10),
	}
	if ae.SessionID != nil {
		attrs[attrSession] = *ae.SessionID
	}
	if ae.Tag != nil {
		attrs[attrTag] = *ae.Tag
	}
	if source != "" {
		attrs[attrSource] = source
	}
	return fsqueue.Message{VisibleAtMs: nowMs, EnqueuedAtMs: nowMs, Attrs: attrs, Payload: payload}, nil
}

// workerIdentity reads a worker message's activity identity from its attributes.
func workerIdentity(attrs map[string]string) (ScheduledActivityIdentifier, bool) {
	exec, err1 := strconv.ParseUint(attrs[attrExec], 10, 64)
	act, err2 := strconv.ParseUint(attrs[attrActivity], 10, 64)
	if err1 != nil || err2 != nil {
		return ScheduledActivityIdentifier{}, false
	}
	return ScheduledActivityIdentifier{Instance: attrs[attrInstance], ExecutionID: exec, ActivityID: act}, true
}

// EnqueueForWorker implements Provider with one durable create-exclusive.
func (p *FSProvider) EnqueueForWorker(ctx context.Context, item WorkItem) error {
	const op = "enqueue_for_worker"
	item = derefItem(item)
	ae, ok := item.(ActivityExecute)
	if !ok {
		return Permanentf(op, ErrInvalidWorkItem, "Invalid work item type: %s", kindOf(item))
	}
	if err := p.limits.checkWorkItem(op, "work item", item); err != nil {
		return err // limits.go: nothing written
	}
	if err := ctx.Err(); err != nil {
		return Retryablef(op, err, "%v", err)
	}
	m, err := p.workerMessage(ae, p.nowMs(), "")
	if err != nil {
		return Permanentf(op, ErrInvalidWorkItem, "encode work item: %v", err)
	}
	failpoint.Hit("enqueue.worker.before_publish")
	if _, err := p.workQ.Enqueue(m); err != nil {
		return Retryablef(op, err, "write message: %v", err)
	}
	failpoint.Hit("enqueue.worker.after_publish")
	p.notify(wakeWork)
	return nil
}

// FetchWorkItem implements Provider. It long-polls like FetchOrchestrationItem.
func (p *FSProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *SessionFetchConfig, tagFilter TagFilter) (*LockedWorkItem, error) {
	if err := checkIDs("fetch_work_item", "session config", sessionConfigIDs(session)); err != nil {
		return nil, err
	}
	if tagFilter.Mode == TagNone {
		return nil, nil
	}
	deadline := time.Now().Add(pollTimeout)
	var wait time.Duration
	for {
		wk := p.wakeupFor(wakeWork)
		item, err := p.tryFetchWork(ctx, lockTimeout, session, tagFilter)
		if item != nil {
			p.busyAgain(p.workQ)
		}
		if item != nil || err != nil {
			return item, err
		}
		var quiet bool
		wait, quiet = p.idleWait(wait, p.workQ)
		if !p.waitForWork(ctx, wk, deadline, wait, quiet) {
			return nil, nil
		}
	}
}

func (p *FSProvider) tryFetchWork(ctx context.Context, lockTimeout time.Duration, session *SessionFetchConfig, tagFilter TagFilter) (*LockedWorkItem, error) {
	const op = "fetch_work_item"
	busy := map[string]bool{} // sessions whose flock stayed busy: passed over by this call
	for {
		sessions := map[string]bool{} // session id → claimable by this caller, memoized per pass
		// The tag and session are in the item's body: read (through the
		// queue's cache) for each candidate the claim meets, before and
		// again under its lock; a damaged or vanished item is not eligible.
		eligible := func(e fsqueue.Entry, _ *fsqueue.Claim) bool {
			h, err := p.workQ.HeaderOf(e)
			if err != nil {
				return false
			}
			var tag *string
			if t, ok := h.Attrs[attrTag]; ok {
				tag = &t
			}
			if !tagFilter.Matches(tag) {
				return false
			}
			sid, hasSession := h.Attrs[attrSession]
			if !hasSession {
				return true
			}
			if session == nil {
				return false
			}
			ok, seen := sessions[sid]
			if !seen {
				ok = !busy[sid] && p.sessionClaimable(sid, session.OwnerID)
				sessions[sid] = ok
			}
			return ok
		}
		claimed, err := p.workQ.ClaimNext(ctx, p.owner, lockTimeout, eligible)
		if err != nil {
			return nil, Retryablef(op, err, "claim work item: %v", err)
		}
		if claimed == nil {
			return nil, nil
		}
		failpoint.Hit("fetchwork.after_claim")
		w, err := UnmarshalWorkItem(claimed.Message.Payload)
		if err != nil {
			// Undecodable: a permanent error (contract §2.9), and the item
			// goes to quarantine/ so that it cannot block the queue (every
			// later fetch would meet it first).
			p.quarantineWork(ctx, claimed.Message.Name, claimed.Claim.Token, fmt.Sprintf("undecodable work item: %v", err))
			return nil, Permanentf(op, ErrCorrupt, "work item %s cannot be decoded (moved to quarantine/): %v", claimed.Message.Name, err)
		}
		if sid, ok := claimed.Message.Attrs[attrSession]; ok && session != nil {
			won, err := p.claimSession(ctx, sid, session.OwnerID, session.LockTimeout)
			if err != nil || !won {
				// Lost the session to another owner between the check and the
				// claim: undo the item claim (attempt included) and retry.
				_ = p.workQ.Abandon(ctx, claimed.Claim.Token, 0, true)
				if errors.Is(err, errSessionBusy) {
					// Its flock's holder may be stopped: this call passes
					// the session over and looks for other items.
					busy[sid] = true
					continue
				}
				if err != nil {
					return nil, Retryablef(op, err, "claim session %q: %v", sid, err)
				}
				continue
			}
		}
		return &LockedWorkItem{Item: w, LockToken: workToken(claimed.Claim.Token), AttemptCount: claimed.Claim.Attempt}, nil
	}
}

// workAckData is the claim Data of a work item whose ack is committed or
// committing: the ack's pending mark (fs_wal.go) and its completion's name.
type workAckData struct {
	pendingMark
	Completion string `json:"completion,omitempty"`
}

// claimStateAcked marks a claim whose work ack may not be fully applied.
const claimStateAcked = "acked"

// workMark returns the commit id a claim marks pending, or "".
func workMark(c fsqueue.Claim) string {
	if c.State != claimStateAcked {
		return ""
	}
	var d workAckData
	if json.Unmarshal(c.Data, &d) != nil {
		return ""
	}
	return d.ID
}

// claimTakenFrom reports whether a claim read without its lock names a
// token other than token: the claim passed to another holder, for
// good. A token is replaced only under the item's lock, only once it has
// expired, and never written back, so even a read that a concurrent
// in-place write tears cannot show another token while token still holds
// the item (a torn read that mixes token with itself is token). An ack of
// such a claim is rejected without waiting for the item's lock, which the
// new holder may keep for as long as it is stopped (SIGSTOP inside its own
// ack: TestStaleAckDoesNotWaitForTheNewHolder). Anything else - no claim,
// an unreadable one, this token - is decided under the lock.
func claimTakenFrom(c fsqueue.Claim, token string) bool { return c.Token != "" && c.Token != token }

// peekClaim reads message name's claim without its lock; ok is false if
// it has none or it could not be read (invalid name, unreadable file).
func peekClaim(q *fsqueue.Queue, name string) (c fsqueue.Claim, ok bool) {
	c, exists, err := q.PeekClaim(name)
	return c, err == nil && exists
}

// AckWorkItem implements Provider. It is atomic across deleting the item and
// enqueuing the completion; the commit protocol is fs_wal.go's, with the
// item's claim (under the item's lock) holding the pending mark:
//
//  1. verify the token, expiry and that the item still exists (a cancelled
//     item is gone: permanent error);
//  2. stage the completion (unsynced);
//  3. mark the claim "acked" with the commit's id, append the record to the
//     log and wait for the group sync: the commit point;
//  4. publish the completion, delete the item and its claim, unsynced.
//
// A crash after 3 is finished by whoever next takes the claim's lock (the
// sweep visits acked claims; the checkpoint visits every logged record).
func (p *FSProvider) AckWorkItem(ctx context.Context, token string, completion WorkItem) error {
	const op = "ack_work_item"
	completion = derefItem(completion)
	ct, ok := parseWorkToken(token)
	name, ok2 := fsqueue.NameFromToken(ct)
	if !ok || !ok2 {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	if completion != nil {
		switch completion.(type) {
		case ActivityCompleted, ActivityFailed:
		default:
			return Permanentf(op, ErrInvalidWorkItem, "Invalid work item type: completion must be ActivityCompleted or ActivityFailed, not %s", completion.Kind())
		}
		if err := p.limits.checkWorkItem(op, "completion", completion); err != nil {
			return err // limits.go: nothing written, the claim is kept
		}
	}
	// One read of the claim without the lock serves both checks before it.
	peek, peeked := peekClaim(p.workQ, name)
	if peeked && claimTakenFrom(peek, ct) {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token: the work item is claimed under another token (its lock expired and was taken)")
	}
	var sessionID string
	var hasSession bool
	wctx, cancel := p.claimWaitCtx(ctx, ct, peek, peeked)
	defer cancel()
	settled := false // the instance's deletion marker was seen, and its flock is held (settleDeletion)
	ack := func(g *fsqueue.ClaimGuard) error {
		c, exists, err := p.settledClaim(g)
		if errors.Is(err, fsqueue.ErrCorrupt) {
			return Permanentf(op, ErrInvalidLockToken, "Invalid lock token: the work item's claim is unreadable (%v)", err)
		}
		if err != nil {
			return Retryablef(op, err, "read claim (finishing a pending work ack): %v", err)
		}
		itemExists, err := g.MessageExists()
		if err != nil {
			return Retryablef(op, err, "stat work item: %v", err)
		}
		now := g.Now().UnixMilli()
		switch {
		case !itemExists:
			return Permanentf(op, errTokenGone, "work item not found: acked, cancelled or deleted")
		case !exists || c.Token != ct || c.State != "":
			return Permanentf(op, ErrInvalidLockToken, "Invalid lock token: work item not found under this token (abandoned, or its lock expired and was taken, or already acked)")
		case c.LockedUntilMs <= now:
			return Permanentf(op, errTokenExpired, "work item lock expired")
		}
		m, err := p.workQ.Get(name)
		if vfs.IsNotExist(err) {
			return Permanentf(op, errTokenGone, "work item not found: acked, cancelled or deleted")
		} else if err != nil {
			return Retryablef(op, err, "read work item: %v", err)
		}
		sessionID, hasSession = m.Attrs[attrSession]
		if key := m.Attrs[attrKey]; key != "" && !settled {
			if marked, err := p.deletionMarked(key); err != nil {
				return Retryablef(op, err, "look for the deletion marker of the work item's instance: %v", err)
			} else if marked {
				return &errDeletionMarked{key: key} // fs_deleting.go
			}
		}
		rec := &commitRecord{Kind: kindWorkAck, Item: name, ItemToken: ct, CommittedMs: now,
			Delete: []queueRef{{Queue: "worker", Name: name}}}
		if completion != nil {
			m, err := p.orchMessage(completion, now, now, "w:"+name)
			if err != nil {
				return Permanentf(op, ErrInvalidWorkItem, "encode completion: %v", err)
			}
			data, err := p.orchQ.Encode(&m)
			if err != nil {
				return Permanentf(op, ErrInvalidWorkItem, "encode completion: %v", err)
			}
			if err := p.orchQ.StageData(m.Name, data); err != nil {
				_ = p.orchQ.Unstage(m.Name)
				return Retryablef(op, err, "stage completion: %v", err)
			}
			rec.Publish = []queueRef{{Queue: "orchestrator", Name: m.Name, Data: data}}
			failpoint.Hit("workack.after_stage")
		}
		if err := p.commitWorkAck(ctx, g, c, rec); err != nil {
			for _, r := range rec.Publish {
				_ = p.orchQ.Unstage(r.Name)
			}
			return Retryablef(op, err, "commit work ack: %v", err)
		}
		afterCommitPoint("work_ack")
		failpoint.Hit("workack.after_commit")
		if err := p.applyWorkAck(g, rec, false); err != nil {
			p.applyDeferredTo(ctx, "work ack", "w:"+name, "", rec, err)
		}
		return nil
	}
	err := p.workQ.WithClaim(wctx, name, ack)
	if marked := (*errDeletionMarked)(nil); errors.As(err, &marked) {
		// The claim lock is let go: the instance's flock comes first.
		g, deleted, serr := p.settleDeletion(ctx, wctx, marked.key, name)
		if deleted {
			return Permanentf(op, errTokenGone, "work item not found: its instance's deletion is committed")
		}
		if serr != nil {
			if errors.Is(serr, context.DeadlineExceeded) && ctx.Err() == nil {
				return Retryablef(op, serr, "the work item's instance was held by another process (stopped?) until past the claim's expiry")
			}
			return Retryablef(op, serr, "finish a deletion of the work item's instance: %v", serr)
		}
		if g != nil {
			defer g.Unlock()
		}
		settled = true
		err = p.workQ.WithClaim(wctx, name, ack)
	}
	if err != nil {
		var pe *ProviderError
		if errors.As(err, &pe) {
			return pe
		}
		return p.claimWaitErr(op, ctx, wctx, err)
	}
	if hasSession {
		p.touchSession(ctx, sessionID)
	}
	p.notify(wakeOrch) // the completion went to the orchestrator queue
	return nil
}

// commitWorkAck marks the claim held as c pending for rec, appends rec to
// the log and waits for the group sync (see commitLocked). An error before
// the append puts the claim back as it was.
func (p *FSProvider) commitWorkAck(ctx context.Context, g *fsqueue.ClaimGuard, c fsqueue.Claim, rec *commitRecord) error {
	if testHookBeforeCommit != nil {
		testHookBeforeCommit("work_ack")
	}
	d := workAckData{pendingMark: pendingMark{ID: uuid.NewString(), Hint: p.wal.End()}}
	for _, r := range rec.Publish {
		d.Completion = r.Name
	}
	rec.CommitID = d.ID
	payload, err := jsonMarshal(rec)
	if err != nil {
		return err
	}
	held := c
	c.State = claimStateAcked
	if c.Data, err = json.Marshal(d); err != nil {
		return err
	}
	if err := g.Write(c); err != nil {
		return fmt.Errorf("mark claim: %w", err)
	}
	failpoint.Hit("workack.after_mark")
	_, end, err := p.wal.Append(payload)
	if err != nil {
		_ = g.Write(held)
		return err
	}
	failpoint.Hit("workack.after_append")
	return p.logSync(ctx, end)
}

// applyWorkAck applies a committed work ack, unsynced and idempotently (the
// caller holds the item's lock, or the item is gone): publish the completion (a replay
// writes it from the record), delete the item, then the claim - which held
// the mark, so it goes last.
func (p *FSProvider) applyWorkAck(g *fsqueue.ClaimGuard, rec *commitRecord, replay bool) error {
	if err := p.publish(rec.Publish, replay); err != nil {
		return err
	}
	failpoint.Hit("workack.after_publish")
	if err := p.workQ.DeleteMessage(rec.Item); err != nil {
		return fmt.Errorf("delete work item: %w", err)
	}
	failpoint.Hit("workack.after_message_delete")
	// Outside a replay the caller holds the lock and read the claim marked
	// with rec's id under it (it wrote the mark, or redoWorkAck found it).
	if replay {
		c, exists, err := g.Read()
		if err == nil && exists && c.State != "" && workMark(c) != rec.CommitID {
			return nil // a later ack of a re-created item? not ours to remove
		}
	}
	if err := p.workQ.DeleteClaim(rec.Item); err != nil {
		return fmt.Errorf("delete claim: %w", err)
	}
	failpoint.Hit("workack.after_claim_delete")
	return nil
}

// redoWorkAck finishes the work ack a claim marks pending, if any: found in
// the log, it is made durable and applied; not found, it never committed,
// and the claim is put back to held (it expires like any lease) and the
// staged completion removed.
func (p *FSProvider) redoWorkAck(g *fsqueue.ClaimGuard) error {
	c, exists, err := g.Read()
	if errors.Is(err, fsqueue.ErrCorrupt) || !exists {
		return nil // an unreadable claim is volatile, never a mark we need
	}
	if err != nil || c.State != claimStateAcked {
		return err
	}
	return p.redoMarkedWorkAck(g, c)
}

// settledClaim reads the claim under g and, if it marks a work ack pending,
// finishes that ack first (redoWorkAck) and reads the claim again: the
// claim as it then stands. An unreadable claim is an error wrapping
// fsqueue.ErrCorrupt.
func (p *FSProvider) settledClaim(g *fsqueue.ClaimGuard) (fsqueue.Claim, bool, error) {
	c, exists, err := g.Read()
	if err != nil || !exists || c.State != claimStateAcked {
		return c, exists, err
	}
	if err := p.redoMarkedWorkAck(g, c); err != nil {
		return fsqueue.Claim{}, false, err
	}
	return g.Read()
}

// redoMarkedWorkAck is redoWorkAck on the claim c read under g, marked
// acked.
func (p *FSProvider) redoMarkedWorkAck(g *fsqueue.ClaimGuard, c fsqueue.Claim) error {
	var err error
	var d workAckData
	if json.Unmarshal(c.Data, &d) != nil {
		d = workAckData{}
	}
	var lr *loggedRecord
	if d.ID != "" {
		if err := p.wal.Err(); err != nil {
			return err
		}
		if lr, err = p.findRecord("", &d.pendingMark); err != nil {
			return err
		}
	}
	// A mark without an id (a damaged claim) names no record: like a record
	// that is not in the log, it never committed as far as anyone can tell.
	// Leaving the claim acked would strand the item (an acked claim is never
	// claimed again) and make every sweep "finish" it again.
	if lr == nil {
		failpoint.Hit("workack.redo_no_record")
		if d.Completion != "" {
			if err := p.orchQ.Unstage(d.Completion); err != nil {
				return err
			}
		}
		return unmarkClaim(g, c)
	}
	if err := p.wal.SyncThrough(lr.lsn, lr.end); err != nil {
		return err
	}
	failpoint.Hit("workack.redo_start")
	if err := p.applyWorkAck(g, lr.rec, false); err != nil {
		key := "w:" + lr.rec.Item
		p.noteStuck(key, "", lr.rec.CommitID, lr.lsn, err)
		return &applyError{key: key, id: lr.rec.CommitID, err: err}
	}
	p.noteApplied("w:" + lr.rec.Item)
	return nil
}

// unmarkClaim puts a claim marked acked whose record never committed back to
// held (it expires like any lease). If the item is gone meanwhile (a
// deletion cancelled it), the claim is inert and is removed instead.
func unmarkClaim(g *fsqueue.ClaimGuard, c fsqueue.Claim) error {
	ok, err := g.MessageExists()
	if err != nil {
		return err
	}
	if !ok {
		return g.Remove()
	}
	c.State, c.Data = "", nil
	return g.Write(c)
}

// finishAckedClaims settles every claim marked acked whose writer died:
// applied if its record is in the log, put back if not. A claim whose item's
// lock stays busy for claimBusyWait is skipped until the next pass: its
// writer is alive and inside it (or another process is settling it), and
// waiting would tie this pass to a holder that may be stopped.
func (p *FSProvider) finishAckedClaims(ctx context.Context) (int, error) {
	names, err := p.workQ.Claims()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		c, exists, err := p.workQ.PeekClaim(name)
		if err != nil || !exists || c.State != claimStateAcked {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, claimBusyWait)
		err = p.workQ.WithClaim(wctx, name, func(g *fsqueue.ClaimGuard) error { return p.redoWorkAck(g) })
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			continue // busy: next pass
		}
		if isStuck(err) {
			continue // cannot be applied yet (fs_stuck.go): logged, retried
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// claimBusyWait bounds how long recovery waits for the lock of one acked
// claim's item.
const claimBusyWait = 20 * time.Millisecond

// RenewWorkItemLock implements Provider. Renewal ignores the orchestration's
// status; a cancelled (deleted) item fails permanently, which the runtime
// takes as "activity cancelled".
func (p *FSProvider) RenewWorkItemLock(ctx context.Context, token string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	ct, ok := parseWorkToken(token)
	if _, ok2 := fsqueue.NameFromToken(ct); !ok || !ok2 {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	wctx, cancel := p.claimCtx(ctx, p.workQ, ct)
	defer cancel()
	c, err := p.workQ.Renew(wctx, ct, extendFor)
	if err != nil {
		return p.claimWaitErr(op, ctx, wctx, p.mapClaimErr(op, ct, err))
	}
	_ = c
	if name, ok := fsqueue.NameFromToken(ct); ok {
		if m, err := p.workQ.Get(name); err == nil {
			if sid, ok := m.Attrs[attrSession]; ok {
				p.touchSession(ctx, sid)
			}
		}
	}
	return nil
}

// AbandonWorkItem implements Provider. Expiry is not checked.
func (p *FSProvider) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_work_item"
	ct, ok := parseWorkToken(token)
	if _, ok2 := fsqueue.NameFromToken(ct); !ok || !ok2 {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	wctx, cancel := p.claimCtx(ctx, p.workQ, ct)
	defer cancel()
	if err := p.workQ.Abandon(wctx, ct, delay, ignoreAttempt); err != nil {
		return p.claimWaitErr(op, ctx, wctx, p.mapClaimErr(op, ct, err))
	}
	failpoint.Hit("abandonwork.after_claim_write")
	p.notify(wakeWork)
	return nil
}

// claimExpiryMargin is how long past its claim's expiry a call holding a
// work item's claim still waits for the item's claim lock (claimCtx).
const claimExpiryMargin = 50 * time.Millisecond

// claimCtx bounds how long a call holding the claim of token ct in queue q
// (a work item's ack, renewal or abandon; a go-workflows activity task's
// completion or extension) waits for the item's claim lock: until the claim
// expires, as its file read without the lock says, plus claimExpiryMargin.
// Other processes hold that lock only for short sections - a claim attempt
// that finds the item taken, the delete of a cancelled item - but one
// stopped inside such a section (SIGSTOP, a frozen cgroup) holds it until it
// resumes; past the claim's expiry a work item's call could not succeed
// anyway (a go-workflows completion still could while nobody took the task
// over, but a lock held then is almost always someone taking it over), so it
// waits no longer than the lock it holds lasts, not for the stopped process
// (TestWorkCallsDoNotWaitForAStoppedLockHolder,
// TestGWActivityCallsDoNotWaitForAStoppedLockHolder).
func (p *FSProvider) claimCtx(ctx context.Context, q *fsqueue.Queue, ct string) (context.Context, context.CancelFunc) {
	name, _ := fsqueue.NameFromToken(ct)
	c, ok := peekClaim(q, name)
	return p.claimWaitCtx(ctx, ct, c, ok)
}

// claimWaitCtx is claimCtx with the claim already read without the lock (ok:
// it was read and exists).
func (p *FSProvider) claimWaitCtx(ctx context.Context, ct string, c fsqueue.Claim, ok bool) (context.Context, context.CancelFunc) {
	wait := claimExpiryMargin
	if ok && c.Token == ct {
		wait += max(0, time.Duration(c.LockedUntilMs-p.nowMs())*time.Millisecond)
	}
	return context.WithTimeout(ctx, wait)
}

// claimWaitErr is the error of a call whose wait for a claim lock, bounded
// by wctx (claimCtx), ended with err: retryable, saying so, if the bound
// ran out while the caller's ctx had not; else err as it was mapped.
func (p *FSProvider) claimWaitErr(op string, ctx, wctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		return Retryablef(op, err, "the work item's claim lock was held by another process (stopped?) until past the claim's expiry")
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	return Retryablef(op, err, "lock work item: %v", err)
}

// mapClaimErr maps a claim operation's error for token ct (see
// ErrInvalidLockToken). A token that does not hold the claim of an item
// that is gone (its claim went with it) is a gone item's.
func (p *FSProvider) mapClaimErr(op, ct string, err error) error {
	switch {
	case errors.Is(err, fsqueue.ErrNotHolder):
		if name, ok := fsqueue.NameFromToken(ct); ok {
			if _, gerr := p.fs.Lstat(filepath.Join(p.workQ.Dir(), name+".json")); vfs.IsNotExist(gerr) {
				return Permanentf(op, errTokenGone, "work item not found: acked, cancelled or deleted")
			}
		}
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token: %v", err)
	case errors.Is(err, fsqueue.ErrExpired):
		return Permanentf(op, errTokenExpired, "work item lock expired")
	case errors.Is(err, fsqueue.ErrNotFound):
		return Permanentf(op, errTokenGone, "work item not found: acked, cancelled or deleted")
	}
	return Retryablef(op, err, "%v", err)
}
