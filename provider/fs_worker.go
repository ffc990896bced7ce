package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
)

// workerMessage builds the queue message for an ActivityExecute. Its
// identity (instance, execution, activity id), session and tag are attributes
// so cancellation, deletion and tag/session filtering never open the file.
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
	return fsqueue.Message{Name: p.workQ.NewName(), VisibleAtMs: nowMs, EnqueuedAtMs: nowMs, Attrs: attrs, Payload: payload}, nil
}

// workerIdentity reads a worker message's activity identity from its attributes.
func workerIdentity(e fsqueue.Entry) (ScheduledActivityIdentifier, bool) {
	exec, err1 := strconv.ParseUint(e.Attrs[attrExec], 10, 64)
	act, err2 := strconv.ParseUint(e.Attrs[attrActivity], 10, 64)
	if err1 != nil || err2 != nil {
		return ScheduledActivityIdentifier{}, false
	}
	return ScheduledActivityIdentifier{Instance: e.Attrs[attrInstance], ExecutionID: exec, ActivityID: act}, true
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
	p.notify()
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
	for {
		ch := p.notifyChan()
		item, err := p.tryFetchWork(ctx, lockTimeout, session, tagFilter)
		if item != nil || err != nil {
			return item, err
		}
		if !p.waitForWork(ctx, ch, deadline) {
			return nil, nil
		}
	}
}

func (p *FSProvider) tryFetchWork(ctx context.Context, lockTimeout time.Duration, session *SessionFetchConfig, tagFilter TagFilter) (*LockedWorkItem, error) {
	const op = "fetch_work_item"
	for {
		sessions := map[string]bool{} // session id → claimable by this caller, memoized per pass
		eligible := func(e fsqueue.Entry, _ *fsqueue.Claim) bool {
			var tag *string
			if t, ok := e.Attrs[attrTag]; ok {
				tag = &t
			}
			if !tagFilter.Matches(tag) {
				return false
			}
			sid, hasSession := e.Attrs[attrSession]
			if !hasSession {
				return true
			}
			if session == nil {
				return false
			}
			ok, seen := sessions[sid]
			if !seen {
				ok = p.sessionClaimable(sid, session.OwnerID)
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
			// Undecodable: roll the claim back and report (contract §2.9).
			_ = p.workQ.Abandon(ctx, claimed.Claim.Token, 0, true)
			return nil, Permanentf(op, ErrCorrupt, "work item %s cannot be decoded: %v", claimed.Message.Name, err)
		}
		if sid, ok := claimed.Message.Attrs[attrSession]; ok && session != nil {
			won, err := p.claimSession(ctx, sid, session.OwnerID, session.LockTimeout)
			if err != nil || !won {
				// Lost the session to another owner between the check and the
				// claim: undo the item claim (attempt included) and retry.
				_ = p.workQ.Abandon(ctx, claimed.Claim.Token, 0, true)
				if err != nil {
					return nil, Retryablef(op, err, "claim session %q: %v", sid, err)
				}
				continue
			}
		}
		return &LockedWorkItem{Item: w, LockToken: workToken(claimed.Claim.Token), AttemptCount: claimed.Claim.Attempt}, nil
	}
}

// workAckData is the claim Data of an acked work item: the commit record of
// ack_work_item.
type workAckData struct {
	Completion string `json:"completion,omitempty"`
}

// claimStateAcked marks a claim whose work item was acked but not yet
// fully cleaned up.
const claimStateAcked = "acked"

// AckWorkItem implements Provider. It is atomic across deleting the item and
// enqueuing the completion:
//
//  1. under the item's claim flock, verify the token, expiry and that the
//     item still exists (a cancelled item is gone: permanent error);
//  2. stage the completion in the orchestrator queue (fsynced, hidden);
//     crash here: a staged orphan the sweeper removes; the item is still
//     claimed and is redelivered after expiry;
//  3. COMMIT: rewrite the claim with state "acked" naming the completion
//     (atomic replace + fsync + directory fsync); from here the ack happened;
//  4. publish the completion, delete the item, delete the claim (see
//     finishWorkAck). A crash anywhere in 4 is finished by the sweeper or by
//     anyone who finds the acked claim.
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
	var sessionID string
	var hasSession bool
	err := p.workQ.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
		c, exists, err := g.Read()
		if errors.Is(err, fsqueue.ErrCorrupt) {
			return Permanentf(op, ErrNotFound, "work item not found: its claim is unreadable (%v)", err)
		}
		if err != nil {
			return Retryablef(op, err, "read claim: %v", err)
		}
		if !exists || c.Token != ct || c.State != "" {
			return Permanentf(op, ErrNotFound, "work item not found: lock token invalid, item cancelled, or already acked")
		}
		now := g.Now().UnixMilli()
		if c.LockedUntilMs <= now {
			return Permanentf(op, ErrLockExpired, "work item lock expired")
		}
		if ok, err := g.MessageExists(); err != nil {
			return Retryablef(op, err, "stat work item: %v", err)
		} else if !ok {
			return Permanentf(op, ErrNotFound, "work item not found: cancelled or deleted")
		}
		if m, err := p.workQ.Get(name); err == nil {
			sessionID, hasSession = m.Attrs[attrSession]
		}
		var data workAckData
		if completion != nil {
			m, err := p.orchMessage(completion, now, now, "w:"+name)
			if err != nil {
				return Permanentf(op, ErrInvalidWorkItem, "encode completion: %v", err)
			}
			if err := p.stageCompletion(m); err != nil {
				_ = p.orchQ.Unstage(m.Name)
				return Retryablef(op, err, "stage completion: %v", err)
			}
			data.Completion = m.Name
			failpoint.Hit("workack.after_stage")
		}
		raw, _ := json.Marshal(data)
		held := c
		c.State, c.Data = claimStateAcked, raw
		if err := p.commitClaim(g, c); err != nil {
			// The claim write is the commit point. If only its directory
			// fsync failed, the acked claim is visible with unknown
			// durability: put the held claim back so that no recovery
			// finishes an ack we report as failed. Unstage the completion
			// only once that worked (else a surviving acked claim still
			// finds its completion to publish).
			if g.Write(held) == nil && data.Completion != "" {
				_ = p.orchQ.Unstage(data.Completion)
			}
			return Retryablef(op, err, "commit work ack: %v", err)
		}
		afterCommitPoint("work_ack")
		failpoint.Hit("workack.after_claim_commit")
		if err := p.finishWorkAck(name, c.Token, data); err != nil {
			p.log.Warn("durofs: work ack committed, cleanup deferred to recovery", "item", name, "err", err)
			p.stats.applyDeferred.Add(1)
		}
		return nil
	})
	if err != nil {
		var pe *ProviderError
		if errors.As(err, &pe) {
			return pe
		}
		return Retryablef(op, err, "lock work item: %v", err)
	}
	if hasSession {
		p.touchSession(ctx, sessionID)
	}
	p.notify()
	return nil
}

// stageCompletion stages a work ack's completion: fsynced with its
// directory in per-file mode, unsynced in barrier mode (the commit's
// barrier covers it).
func (p *FSProvider) stageCompletion(m fsqueue.Message) error {
	if p.barrier != nil {
		return p.orchQ.StageDeferred(m)
	}
	if err := p.orchQ.Stage(m); err != nil {
		return err
	}
	return p.orchQ.SyncDir()
}

// commitClaim writes the acked claim, the work ack's commit point: a
// durable replace in per-file mode; in barrier mode one barrier (covering
// the staged completion too) and a claims-directory fsync.
func (p *FSProvider) commitClaim(g *fsqueue.ClaimGuard, c fsqueue.Claim) error {
	if p.barrier != nil {
		return g.Commit(c, p.barrier.Sync, p.claimsSync.Sync)
	}
	return g.Write(c)
}

// finishWorkAck applies a committed work ack (idempotent; the caller holds
// the claim's shard flock). Order matters for power loss: the completion is
// published and its directory synced; then the item is deleted and the
// worker directory synced; only then the acked claim (the commit record)
// goes. A claim that reappears after a power loss is applied again: Publish
// finds nothing staged, Delete finds nothing. In barrier mode nothing is
// synced and the acked claim stays until a later barrier covers this
// apply; then the cleaner removes it (fs_barrier.go).
func (p *FSProvider) finishWorkAck(name, token string, data workAckData) error {
	if data.Completion != "" {
		if _, err := p.orchQ.Publish(data.Completion); err != nil {
			return fmt.Errorf("publish completion: %w", err)
		}
		failpoint.Hit("workack.after_publish")
		if p.barrier == nil {
			if err := p.orchQ.SyncDir(); err != nil {
				return fmt.Errorf("sync orchestrator queue: %w", err)
			}
		}
		failpoint.Hit("workack.after_publish_sync")
	}
	if err := p.workQ.DeleteMessage(name); err != nil {
		return fmt.Errorf("delete work item: %w", err)
	}
	if p.barrier != nil {
		failpoint.Hit("workack.after_message_delete")
		p.scheduleCleanup(true, name, token)
		return nil
	}
	if err := p.workQ.SyncDir(); err != nil {
		return fmt.Errorf("sync worker queue: %w", err)
	}
	failpoint.Hit("workack.after_message_delete")
	if err := p.workQ.DeleteClaim(name); err != nil {
		return fmt.Errorf("delete claim: %w", err)
	}
	failpoint.Hit("workack.after_claim_delete")
	if err := p.workQ.SyncClaimsDir(); err != nil {
		return fmt.Errorf("sync claims: %w", err)
	}
	return nil
}

// workAckApplied reports whether an acked claim's apply has finished: its
// work item is gone and its completion is no longer staged. (Barrier mode
// keeps such claims until a later barrier covers the apply.)
func (p *FSProvider) workAckApplied(name string, c fsqueue.Claim) bool {
	if c.State != claimStateAcked {
		return false
	}
	if _, err := p.fs.Lstat(filepath.Join(p.workQ.Dir(), name+".json")); !vfs.IsNotExist(err) {
		return false
	}
	var data workAckData
	if err := json.Unmarshal(c.Data, &data); err != nil {
		return false
	}
	if data.Completion == "" {
		return true
	}
	_, err := p.fs.Lstat(filepath.Join(p.orchQ.Dir(), ".staged-"+data.Completion+".json"))
	return vfs.IsNotExist(err)
}

// finishAckedClaims completes work acks whose cleanup was interrupted.
func (p *FSProvider) finishAckedClaims(ctx context.Context) (int, error) {
	names, err := p.workQ.Claims()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		err := p.workQ.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
			c, exists, err := g.Read()
			if errors.Is(err, fsqueue.ErrCorrupt) {
				// A volatile claim a power loss left unreadable: never an
				// acked one (those are durable), so nothing to finish.
				return nil
			}
			if err != nil || !exists || c.State != claimStateAcked {
				return err
			}
			if p.barrier != nil && p.workAckApplied(name, c) {
				p.scheduleCleanup(true, name, c.Token) // done; only the claim is left
				return nil
			}
			var data workAckData
			_ = json.Unmarshal(c.Data, &data)
			n++
			failpoint.Hit("workack.redo_start")
			return p.finishWorkAck(name, c.Token, data)
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// RenewWorkItemLock implements Provider. Renewal ignores the orchestration's
// status; a cancelled (deleted) item fails permanently, which the runtime
// takes as "activity cancelled".
func (p *FSProvider) RenewWorkItemLock(ctx context.Context, token string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	ct, ok := parseWorkToken(token)
	if _, ok2 := fsqueue.NameFromToken(ct); !ok || !ok2 {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	c, err := p.workQ.Renew(ctx, ct, extendFor)
	if err != nil {
		return mapClaimErr(op, err)
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
	if err := p.workQ.Abandon(ctx, ct, delay, ignoreAttempt); err != nil {
		return mapClaimErr(op, err)
	}
	failpoint.Hit("abandonwork.after_claim_write")
	p.notify()
	return nil
}

func mapClaimErr(op string, err error) error {
	switch {
	case errors.Is(err, fsqueue.ErrNotHolder):
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token: %v", err)
	case errors.Is(err, fsqueue.ErrExpired):
		return Permanentf(op, ErrLockExpired, "work item lock expired")
	case errors.Is(err, fsqueue.ErrNotFound):
		return Permanentf(op, ErrNotFound, "work item not found: cancelled or deleted")
	}
	return Retryablef(op, err, "%v", err)
}
