package provider

// Activity tasks of workflow instances (see fs_gw.go). An activity task is a
// message of queues/gw-activity-<q>/, published by the workflow task that
// scheduled it; fetching one is an fsqueue claim (a peek-lock with expiry);
// completing it is one "gw_act" log record that deletes the task and
// publishes its result as a pending event of the execution, committed the
// way AckWorkItem commits (fs_worker.go): the claim, under the task's lock,
// holds the pending mark.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/lease"
)

// WorkflowActivity is an activity task to schedule: its queue, the event
// that scheduled it (its ID names the task) and the task's payload (opaque:
// go-workflows' adapter stores the event and the instance there).
type WorkflowActivity struct {
	Queue   string
	EventID string
	Payload json.RawMessage
}

// WorkflowActivityTask is a fetched activity task.
type WorkflowActivityTask struct {
	// Token identifies the fetch; pass it to ExtendWorkflowActivity and
	// CompleteWorkflowActivity. It names the queue and the message.
	Token    string
	Queue    string
	EventID  string
	Instance WorkflowRef
	Payload  json.RawMessage
	// Attempt counts the fetches of this task (1 the first time).
	Attempt uint32
}

// activity token: "<queue dir>/<claim token>"
func gwActToken(dir, claim string) string { return dir + "/" + claim }

func parseGWActToken(tok string) (dir, claim, name string, ok bool) {
	dir, claim, found := strings.Cut(tok, "/")
	if !found {
		return "", "", "", false
	}
	if act, valid := gwQueueKind(dir); !valid || !act {
		return "", "", "", false
	}
	name, ok = fsqueue.NameFromToken(claim)
	return dir, claim, name, ok
}

// gwActivityMessage builds the activity task message of a for an execution
// whose workflow queue is wq.
func (p *FSProvider) gwActivityMessage(q *fsqueue.Queue, instance, execID, wq string, a WorkflowActivity, nowMs int64, source string) fsqueue.Message {
	// Named by Encode: the name carries the route of attrKey.
	return fsqueue.Message{VisibleAtMs: nowMs, EnqueuedAtMs: nowMs, Payload: a.Payload, Attrs: map[string]string{
		attrInstance: instance, attrKey: instanceKey(instance), attrExec: execID, attrWFQueue: wq,
		attrEventID: a.EventID, attrSource: source,
	}}
}

// FetchWorkflowActivity claims the oldest activity task of the first of
// queues that has one, for lockFor. It long-polls up to pollTimeout (or
// until ctx ends); (nil, nil) means none.
func (p *FSProvider) FetchWorkflowActivity(ctx context.Context, queues []string, worker string, lockFor, pollTimeout time.Duration) (*WorkflowActivityTask, error) {
	deadline := time.Now().Add(pollTimeout)
	qs, err := p.gwQueues(queues, true)
	if err != nil {
		return nil, err
	}
	var wait time.Duration
	for {
		wk := p.wakeupFor(wakeWork)
		for i, q := range qs {
			if ctx.Err() != nil {
				return nil, nil
			}
			c, err := q.ClaimNext(ctx, worker, lockFor, nil)
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil
				}
				return nil, fmt.Errorf("durofs: claim activity task: %w", err)
			}
			if c == nil {
				continue
			}
			p.busyAgain(qs...)
			m := c.Message
			return &WorkflowActivityTask{
				Token: gwActToken(gwActivityQueue(queues[i]), c.Claim.Token), Queue: queues[i], EventID: m.Attrs[attrEventID],
				Instance: WorkflowRef{InstanceID: m.Attrs[attrInstance], ExecutionID: m.Attrs[attrExec]},
				Payload:  m.Payload, Attempt: c.Claim.Attempt,
			}, nil
		}
		var quiet bool
		wait, quiet = p.idleWait(wait, qs...)
		if !p.waitForWork(ctx, wk, deadline, wait, quiet) {
			return nil, nil
		}
	}
}

// ExtendWorkflowActivity extends a fetched activity task's lock to now+lockFor.
func (p *FSProvider) ExtendWorkflowActivity(ctx context.Context, token string, lockFor time.Duration) error {
	dir, claim, _, ok := parseGWActToken(token)
	if !ok {
		return ErrWorkflowTaskLost
	}
	q, err := p.gwQueue(dir)
	if err != nil {
		return err
	}
	wctx, cancel := p.claimCtx(ctx, q, claim)
	defer cancel()
	if _, err := q.Renew(wctx, claim, lockFor); err != nil {
		if errors.Is(err, fsqueue.ErrNotHolder) || errors.Is(err, fsqueue.ErrExpired) || errors.Is(err, fsqueue.ErrNotFound) {
			return fmt.Errorf("%w: %v", ErrWorkflowTaskLost, err)
		}
		return gwClaimWaitErr(ctx, wctx, err)
	}
	return nil
}

// gwClaimWaitErr is the error of an activity call whose wait for the claim
// lock, bounded by wctx (claimCtx), ended with err.
func gwClaimWaitErr(ctx, wctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("durofs: the activity task's claim lock was held by another process (stopped?) until past the claim's expiry: %w", err)
	}
	return err
}

// gwActAckData is the claim Data of a committed or committing completion.
type gwActAckData struct {
	pendingMark
	Completion      string `json:"completion,omitempty"`
	CompletionQueue string `json:"completion_queue,omitempty"`
}

// CompleteWorkflowActivity completes a fetched activity task: in one log
// record it deletes the task and delivers result as a pending event of the
// execution that scheduled it. A token that no longer holds the task fails
// with ErrWorkflowTaskLost, writing nothing. An expired claim nobody took
// over still completes. The wait for the task's claim lock is bounded by
// the claim's expiry (claimCtx): past it the call fails, writing nothing,
// and the task is delivered again.
func (p *FSProvider) CompleteWorkflowActivity(ctx context.Context, token string, result WorkflowEvent) error {
	dir, claim, name, ok := parseGWActToken(token)
	if !ok {
		return ErrWorkflowTaskLost
	}
	q, err := p.gwQueue(dir)
	if err != nil {
		return err
	}
	peek, peeked := peekClaim(q, name)
	if peeked && claimTakenFrom(peek, claim) {
		return ErrWorkflowTaskLost
	}
	wctx, cancel := p.claimWaitCtx(ctx, claim, peek, peeked)
	defer cancel()
	err = q.WithClaim(wctx, name, func(g *fsqueue.ClaimGuard) error {
		if err := p.gwRedoAct(q, g); err != nil {
			return fmt.Errorf("recover pending activity completion: %w", err)
		}
		c, exists, err := g.Read()
		if errors.Is(err, fsqueue.ErrCorrupt) || (err == nil && (!exists || c.Token != claim || c.State != "")) {
			return ErrWorkflowTaskLost
		}
		if err != nil {
			return err
		}
		if ok, err := g.MessageExists(); err != nil {
			return err
		} else if !ok {
			return ErrWorkflowTaskLost
		}
		m, err := q.Get(name)
		if err != nil {
			return err
		}
		now := g.Now().UnixMilli()
		rec := &commitRecord{Kind: kindGWAct, Item: name, ItemToken: claim, CommittedMs: now,
			Delete: []queueRef{{Queue: dir, Name: name}}, GW: &gwRecord{Op: "complete_activity", ActQueue: dir}}
		wq := m.Attrs[attrWFQueue]
		if _, valid := gwQueueKind(wq); valid {
			wqq, err := p.gwQueue(wq)
			if err != nil {
				return err
			}
			msg := p.gwEventMessage(wqq, m.Attrs[attrInstance], m.Attrs[attrExec], result, now, "gwa:"+dir+"/"+name)
			ref, err := p.gwStage(wq, msg)
			if err != nil {
				return fmt.Errorf("stage completion: %w", err)
			}
			rec.Publish = []queueRef{ref}
			failpoint.Hit("gwact.after_stage")
		}
		if err := p.gwCommitAct(ctx, g, c, rec); err != nil {
			p.gwUnstage(rec.Publish)
			return fmt.Errorf("commit activity completion: %w", err)
		}
		afterCommitPoint("gw_act")
		failpoint.Hit("gwact.after_commit")
		if err := p.gwApplyAct(q, g, rec, false); err != nil {
			p.log.Warn("durofs: activity completion committed, apply deferred to recovery", "item", name, "err", err)
			p.stats.applyDeferred.Add(1)
		}
		return nil
	})
	if err != nil {
		return gwClaimWaitErr(ctx, wctx, err)
	}
	p.notify(wakeOrch) // the completion went to a workflow queue
	return nil
}

// gwCommitAct marks the claim pending for rec, appends rec and waits for the
// group sync (see commitWorkAck).
func (p *FSProvider) gwCommitAct(ctx context.Context, g *fsqueue.ClaimGuard, c fsqueue.Claim, rec *commitRecord) error {
	d := gwActAckData{pendingMark: pendingMark{ID: uuid.NewString(), Hint: p.wal.End()}}
	for _, r := range rec.Publish {
		d.Completion, d.CompletionQueue = r.Name, r.Queue
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
	failpoint.Hit("gwact.after_mark")
	_, end, err := p.wal.Append(payload)
	if err != nil {
		_ = g.Write(held)
		return err
	}
	return p.logSync(ctx, end)
}

// gwApplyAct applies a committed activity completion (the caller holds the
// task's lock, or the task is gone): publish the result, delete the task, then its claim,
// which held the mark.
func (p *FSProvider) gwApplyAct(q *fsqueue.Queue, g *fsqueue.ClaimGuard, rec *commitRecord, replay bool) error {
	if err := p.gwPublish(rec.Publish, replay); err != nil {
		return err
	}
	failpoint.Hit("gwact.after_publish")
	if err := q.DeleteMessage(rec.Item); err != nil {
		return fmt.Errorf("delete activity task: %w", err)
	}
	failpoint.Hit("gwact.after_message_delete")
	c, exists, err := g.Read()
	if err == nil && exists && c.State != "" && workMark(c) != rec.CommitID {
		return nil
	}
	if err := q.DeleteClaim(rec.Item); err != nil {
		return fmt.Errorf("delete claim: %w", err)
	}
	return nil
}

// gwRedoAct finishes the completion a claim marks pending, if any (see
// redoWorkAck).
func (p *FSProvider) gwRedoAct(q *fsqueue.Queue, g *fsqueue.ClaimGuard) error {
	c, exists, err := g.Read()
	if errors.Is(err, fsqueue.ErrCorrupt) || !exists {
		return nil
	}
	if err != nil || c.State != claimStateAcked {
		return err
	}
	var d gwActAckData
	if json.Unmarshal(c.Data, &d) != nil || d.ID == "" {
		return nil
	}
	if err := p.wal.Err(); err != nil {
		return err
	}
	lr, err := p.findRecord("", &d.pendingMark)
	if err != nil {
		return err
	}
	if lr == nil {
		if d.Completion != "" {
			if cq, err := p.gwQueue(d.CompletionQueue); err == nil {
				if err := cq.Unstage(d.Completion); err != nil {
					return err
				}
			}
		}
		return unmarkClaim(g, c)
	}
	if err := p.wal.SyncThrough(lr.lsn, lr.end); err != nil {
		return err
	}
	p.stats.redone.Add(1)
	return p.gwApplyAct(q, g, lr.rec, false)
}

// gwReplayAct replays a "gw_act" record under its task's lock.
func (p *FSProvider) gwReplayAct(ctx context.Context, rec *commitRecord) error {
	if rec.GW == nil {
		return fmt.Errorf("log record %s has no activity queue", rec.CommitID)
	}
	q, err := p.gwQueue(rec.GW.ActQueue)
	if err != nil {
		return err
	}
	return q.WithClaim(ctx, rec.Item, func(g *fsqueue.ClaimGuard) error { return p.gwApplyAct(q, g, rec, true) })
}

// gwEnsureAct finishes a "gw_act" record whose claim still marks it (the
// checkpoint's ensureApplied); done is false if the lock was not had in time.
func (p *FSProvider) gwEnsureAct(ctx, lctx context.Context, rec *commitRecord) (done bool, err error) {
	if rec.GW == nil {
		return true, nil
	}
	q, err := p.gwQueue(rec.GW.ActQueue)
	if err != nil {
		return false, err
	}
	c, exists, err := q.PeekClaim(rec.Item)
	if err != nil && !errors.Is(err, fsqueue.ErrCorrupt) {
		// Not known to be applied: a checkpoint past it would make the
		// redo take its mark for settled and drop the completion (see
		// ensureApplied's work-item ack).
		return false, err
	}
	if err != nil || !exists || workMark(c) != rec.CommitID {
		return true, nil // unreadable claims are volatile, never a commit's mark
	}
	err = q.WithClaim(lctx, rec.Item, func(g *fsqueue.ClaimGuard) error { return p.gwRedoAct(q, g) })
	if err == nil {
		p.stats.acksFinished.Add(1)
	}
	return err == nil, ignoreTimeout(err)
}

// gwSweep is the recovery pass over the workflow queues: completions whose
// writer died are finished, staged messages whose commit never happened
// removed, old temporary files and orphan claims removed. Staged and
// temporary files are looked for in every queue directory with all, else
// in those this process keeps the index of (sweepsDir).
func (p *FSProvider) gwSweep(ctx context.Context, stagedAge, tempAge time.Duration, all bool) error {
	dirs, err := p.gwQueueDirs(true)
	if err != nil {
		return err
	}
	wdirs, err := p.gwQueueDirs(false)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		q, err := p.gwQueue(dir)
		if err != nil {
			return err
		}
		claims, err := q.Claims()
		if err != nil {
			return err
		}
		for _, name := range claims {
			c, exists, err := q.PeekClaim(name)
			if err != nil || !exists || c.State != claimStateAcked {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, claimBusyWait)
			err = q.WithClaim(wctx, name, func(g *fsqueue.ClaimGuard) error { return p.gwRedoAct(q, g) })
			cancel()
			if claimLockBusy(ctx, err) {
				continue // its holder is at it (or stopped in it): next pass
			}
			if err != nil {
				if p.wal.Err() != nil || ctx.Err() != nil {
					return err
				}
				// Cannot be applied now (fs_stuck.go): the others go on.
				p.noteStuck("gwa:"+dir+"/"+name, "", "", 0, err)
				continue
			}
			p.noteApplied("gwa:" + dir + "/" + name)
			p.stats.acksFinished.Add(1)
		}
	}
	for _, dir := range append(dirs, wdirs...) {
		q, err := p.gwQueue(dir)
		if err != nil {
			return err
		}
		sweep := q.SweepClaims
		if sweepsDir(q, all) {
			if err := p.gwSweepStaged(ctx, q, stagedAge); err != nil {
				return err
			}
			sweep = q.Sweep
		}
		st, err := sweep(ctx, tempAge)
		if err != nil {
			return err
		}
		p.stats.tempsSwept.Add(int64(st.TempRemoved))
	}
	return nil
}

// gwSweepStaged removes the staged messages of q whose commit never
// happened, deciding under the lock their writer held (see sweepStaged):
// the source instance's flock, or for "gwa:<dir>/<item>" the activity
// task's claim lock.
func (p *FSProvider) gwSweepStaged(ctx context.Context, q *fsqueue.Queue, minAge time.Duration) error {
	staged, err := q.Staged()
	if err != nil {
		return err
	}
	for _, sf := range staged {
		if time.Since(sf.ModTime) < minAge {
			continue
		}
		m, err := q.ReadStaged(sf.Name)
		if errors.Is(err, fsqueue.ErrCorrupt) {
			if !p.tornStaged(q, sf.Name, minAge) {
				continue // maybe a live writer's (see tornStaged)
			}
			m = fsqueue.Message{}
		} else if err != nil {
			continue
		}
		src := m.Attrs[attrSource]
		if rest, ok := strings.CutPrefix(src, "gwa:"); ok {
			adir, item, _ := strings.Cut(rest, "/")
			aq, err := p.gwQueue(adir)
			if err != nil {
				continue
			}
			// Its writer holds the task's lock from staging to apply: a
			// writer stopped there must not hold up the pass (see
			// sweepStaged).
			wctx, cancel := context.WithTimeout(ctx, claimBusyWait)
			err = aq.WithClaim(wctx, item, func(g *fsqueue.ClaimGuard) error {
				if err := p.gwRedoAct(aq, g); err != nil {
					return err
				}
				return p.removeStaged(q, sf.Name)
			})
			cancel()
			if claimLockBusy(ctx, err) {
				continue // its writer is at it: it may still commit this file
			}
			if err != nil {
				return err
			}
			continue
		}
		if src == "" {
			if err := p.removeStaged(q, sf.Name); err != nil {
				return err
			}
			continue
		}
		g, ok, err := p.lockExisting(ctx, src, false)
		if errors.Is(err, lease.ErrGone) {
			// No instance, no commit of it to publish this file.
			if err := p.removeStaged(q, sf.Name); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		err = p.redoPending(ctx, g, src)
		if err == nil {
			err = p.removeStaged(q, sf.Name)
		}
		g.Unlock()
		if isStuck(err) {
			continue // its commit cannot be applied yet: it may publish this file
		}
		if err != nil {
			return err
		}
	}
	return nil
}
