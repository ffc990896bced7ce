package provider

// Workflow instances and workflow tasks (see fs_gw.go): create-if-absent,
// events to executions (signals, cancellations), state and history reads,
// and the workflow task - fetch (a lease on the instance with the batch of
// its visible pending events), extend, and complete (one log record).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// WorkflowTask is a fetched workflow task: the execution, locked by a lease
// on its instance until completed, extended or expired, and its new events
// (pending events visible at the fetch, oldest first).
type WorkflowTask struct {
	Token     string
	Execution WorkflowExecution
	NewEvents []WorkflowEvent
}

// WorkflowSend delivers events to an execution of any instance: an existing
// active one (events to an execution that is gone or no longer active are
// dropped: nothing would ever consume them), or with Start a new one.
type WorkflowSend struct {
	Target WorkflowRef
	// Start creates Target's execution, Events being its first pending
	// events, unless the instance has an active execution (or an execution
	// with Target's id): then OnExists, if set, is delivered to the
	// completing task's execution instead.
	Start    *WorkflowStart
	Events   []WorkflowEvent
	OnExists *WorkflowEvent
}

// WorkflowTaskResult is what completing a workflow task commits.
type WorkflowTaskResult struct {
	// State is the execution's new state; Failed marks a finished one that
	// ended in an error (durofs status "Failed" instead of "Completed").
	State  WorkflowState
	Failed bool
	// Executed are appended to the history, in order (SequenceID set).
	// Pending events of the task whose IDs are among them are consumed.
	Executed []WorkflowEvent
	// CanceledTimers are schedule event ids whose future events are removed.
	CanceledTimers []int64
	// Activities are scheduled (Queue "" is the execution's queue).
	Activities []WorkflowActivity
	// Timers are future events of this execution.
	Timers []WorkflowEvent
	// Sends deliver events to other executions, or create them.
	Sends []WorkflowSend
	// RemoveExecution removes the execution at once (with State
	// ContinuedAsNew or Finished): its history and record are gone.
	RemoveExecution bool
	// Worker keeps the instance sticky to the completing worker for Sticky:
	// only Worker fetches its next task meanwhile.
	Worker string
	Sticky time.Duration
}

// gwBuild accumulates one part of a "gw" record.
type gwBuild struct {
	key, instance string
	inf           *gwInstanceFile // working copy; nil: no instance.json
	parent        *string         // the parent instance.json named (children index)
	changed       bool
	states        map[uint64]bool
	part          gwPart
}

func (p *FSProvider) newGWBuild(key, instance string) (*gwBuild, error) {
	inf, err := p.readGWInstance(key)
	if err != nil {
		return nil, err
	}
	b := &gwBuild{key: key, instance: instance, states: map[uint64]bool{}, part: gwPart{Key: key, Instance: instance}}
	if inf != nil {
		b.inf = inf.clone()
		if inf.Record != nil {
			b.parent = inf.Record.ParentInstanceID
		}
		if b.inf.Instance != "" {
			b.instance, b.part.Instance = b.inf.Instance, b.inf.Instance
		}
	}
	return b, nil
}

// gwTaken reports whether a new execution id of b's instance cannot be
// created: it has an active execution, an execution with that id, or is an
// orchestration instance. The active execution is the latest, which
// instance.json lists; an older execution with that id has a by-id entry:
// a continue-as-new reads one entry (that does not exist), never the
// instance's past.
func (p *FSProvider) gwTaken(b *gwBuild, execID string) (bool, error) {
	if b.inf == nil {
		return false, nil
	}
	if b.inf.GW == nil || b.inf.active() != nil || b.inf.exec(execID) != nil {
		return true, nil
	}
	e, err := p.gwFind(b.key, b.inf, execID)
	return e != nil, err
}

// newExec adds a new active execution.
func (p *FSProvider) gwNewExec(b *gwBuild, ref WorkflowRef, s WorkflowStart, nowNs int64) (*gwExec, error) {
	if b.inf == nil {
		b.inf = &gwInstanceFile{instanceFile: instanceFile{Instance: ref.InstanceID}, GW: &gwInstance{Next: 1}}
		// Directories left by earlier executions of a removed instance are
		// never reused.
		ids, err := p.listExecutions(b.key)
		if err != nil {
			return nil, err
		}
		if len(ids) > 0 {
			b.inf.GW.Next = ids[len(ids)-1] + 1
		}
	}
	q := s.Queue
	if q == "" {
		q = "default"
	}
	n := max(b.inf.GW.Next, 1, b.inf.Executions.Last()+1)
	b.inf.GW.Next = n + 1
	b.inf.Executions.Add(n)
	b.inf.GW.Executions = append(b.inf.GW.Executions, gwExec{
		ID: ref.ExecutionID, N: n, Queue: q, Name: s.Name, State: WorkflowActive, Parent: s.Parent,
		Metadata: s.Metadata, CreatedNs: nowNs,
	})
	b.changed = true
	b.states[n] = true
	return &b.inf.GW.Executions[len(b.inf.GW.Executions)-1], nil
}

// gwMoveOutMax bounds the executions one part moves out of instance.json: a
// format-7 file that lists thousands is emptied over several commits, none
// of which logs more than this many records besides the file itself (which
// format 7 logged whole anyway). A variable for tests.
var gwMoveOutMax = 256

// gwFinish completes the part's instance file and state files. instance.json
// keeps only the latest execution: any other it lists (the one a
// continue-as-new ended, the older ones of a format-7 file, gwMoveOutMax at
// a time) is moved out in this part - its state.json written with its
// record, and its by-id entry. If the latest was removed, the one before it
// is listed again (read from its state.json).
func (p *FSProvider) gwFinish(b *gwBuild, nowMs int64, fence uint64) error {
	if !b.changed || b.inf == nil {
		return nil
	}
	latest := b.inf.Executions.Last()
	if latest == 0 {
		b.inf.GW.Executions = nil
		b.part.DeleteInstanceFile = true
		b.part.UnchildOf = b.parent
		return nil
	}
	if b.inf.listed(latest) == nil {
		e, err := p.gwReadExecN(b.key, latest)
		if err != nil {
			return err
		}
		if e == nil {
			return fmt.Errorf("%w: instance %s: the record of its latest execution, %d, is in neither instance.json nor its state.json", ErrCorrupt, b.instance, latest)
		}
		b.inf.GW.Executions = append(b.inf.GW.Executions, *e)
		// Listed again: by-id entries are those of the executions
		// instance.json does not list.
		b.part.RemoveIDs = append(b.part.RemoveIDs, e.ID)
	}
	moved := map[uint64]gwExec{}
	var kept []gwExec
	for _, e := range b.inf.GW.Executions {
		if e.N == latest || len(moved) >= gwMoveOutMax {
			kept = append(kept, e)
			continue
		}
		if e.State == WorkflowActive {
			return fmt.Errorf("%w: instance %s: execution %d is active and not the latest (%d)", ErrCorrupt, b.instance, e.N, latest)
		}
		moved[e.N] = e
		b.states[e.N] = true
		b.part.IDs = append(b.part.IDs, gwIDEntry{ID: e.ID, N: e.N})
	}
	b.inf.GW.Executions = kept
	b.inf.summarize(nowMs)
	if np := b.inf.Record.ParentInstanceID; !samePtr(np, b.parent) {
		// The current execution's parent changed (or is new): the
		// children index follows instance.json (fs_reclaim.go).
		b.part.ChildOf, b.part.UnchildOf = np, b.parent
	}
	b.inf.LastFence = max(b.inf.LastFence, fence)
	b.part.InstanceFile = b.inf
	ns := make([]uint64, 0, len(b.states))
	for n := range b.states {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	for _, n := range ns {
		if e := b.inf.listed(n); e != nil {
			b.part.States = append(b.part.States, gwStateWrite{N: n, File: execFileOf(e, false)})
		} else if e, ok := moved[n]; ok {
			b.part.States = append(b.part.States, gwStateWrite{N: n, File: execFileOf(&e, true)})
		}
	}
	return nil
}

// samePtr reports whether a and b are both nil or point to equal strings.
func samePtr(a, b *string) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// stage stages an event message for execution ex of the build's instance
// into the given part.
func (p *FSProvider) gwStageEvent(into *gwPart, src string, instance string, ex *gwExec, ev WorkflowEvent, nowMs int64) error {
	dir, q, err := p.gwQueueOf(ex.Queue, false)
	if err != nil {
		return err
	}
	ref, err := p.gwStage(dir, p.gwEventMessage(q, instance, ex.ID, ev, nowMs, src))
	if err != nil {
		return err
	}
	into.Publish = append(into.Publish, ref)
	return nil
}

// gwLock takes the flocks of keys in sorted order (so that two callers never
// deadlock) and finishes their pending commits. It never waits long for one
// while it holds others (lockNext).
//
// Locking creates the directory of an instance that does not exist (a
// creation, or events to an instance that turns out to be gone); unlock
// takes such a directory away again if the operation left nothing in it.
func (p *FSProvider) gwLock(ctx context.Context, keys []string) (map[string]*lease.Guard, func(), error) {
	return p.gwLockWithin(ctx, ctx, keys)
}

// gwLockWithin is gwLock for a call that holds a workflow task's lease: it
// waits for flocks only while wctx lasts (leaseWaitCtx: the lease's time
// left, plus a margin), so that a process stopped while holding one holds
// the call up no longer than the lease it holds lasts.
func (p *FSProvider) gwLockWithin(ctx, wctx context.Context, keys []string) (map[string]*lease.Guard, func(), error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for {
		guards, unlock, again, busy, err := p.gwLockOnce(ctx, wctx, keys)
		if busy != "" {
			if err := p.awaitFree(wctx, busy); err != nil {
				return nil, nil, gwLockErr(ctx, wctx, err)
			}
			continue
		}
		if !again {
			return guards, unlock, err
		}
	}
}

// gwLockOnce is one try of gwLock: again is true (with everything
// unlocked) when a pending commit finished under a key's flock was its
// removal, which reclaimed its directory: its successor, if any, is locked
// anew. busy names a key whose flock stayed busy while the try held others
// (everything unlocked): the caller waits for it alone and tries again.
func (p *FSProvider) gwLockOnce(ctx, wctx context.Context, keys []string) (guards map[string]*lease.Guard, unlock func(), again bool, busy string, err error) {
	guards = map[string]*lease.Guard{}
	fresh := map[string]bool{} // keys without a lease when locked
	unlock = func() {
		for k, g := range guards {
			if fresh[k] {
				if err := p.reclaimIfEmpty(g, k); err != nil {
					p.log.Warn("durofs: an empty instance directory stays", "key", k, "err", err)
				}
			}
			g.Unlock()
		}
	}
	for _, k := range keys {
		g, isBusy, err := p.lockNext(wctx, k, len(guards))
		if isBusy {
			unlock()
			return nil, nil, false, k, nil
		}
		if err != nil {
			unlock()
			return nil, nil, false, "", gwLockErr(ctx, wctx, err)
		}
		guards[k] = g
		if err := p.redoPending(ctx, g, k); err != nil {
			unlock()
			return nil, nil, false, "", fmt.Errorf("recover pending commit: %w", err)
		}
		if g.Reclaimed() {
			unlock()
			return nil, nil, true, "", nil
		}
		if _, ok, err := g.Read(); err == nil && !ok {
			fresh[k] = true
		}
	}
	return guards, unlock, false, "", nil
}

// gwLockErr is the error of gwLockWithin's wait for a flock, bounded by
// wctx, that ended with err.
func gwLockErr(ctx, wctx context.Context, err error) error {
	if ctx.Err() == nil && wctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("lock instance: the instance's flock was held by another process (stopped?) until past the task's lease expiry: %w", err)
	}
	return fmt.Errorf("lock instance: %w", err)
}

// gwCommit commits a "gw" record of builds (marked in each part's lease) and
// applies it; staged are unstaged if the commit fails.
func (p *FSProvider) gwCommit(ctx context.Context, op string, guards map[string]*lease.Guard, builds []*gwBuild, staged []queueRef) error {
	rec := &commitRecord{Kind: kindGW, CommittedMs: p.nowMs(), GW: &gwRecord{Op: op}}
	gs := make([]*lease.Guard, 0, len(builds))
	for _, b := range builds {
		rec.GW.Parts = append(rec.GW.Parts, b.part)
		gs = append(gs, guards[b.key])
	}
	failpoint.Hit("gw.before_commit")
	if err := p.commitLocked(ctx, gs, rec); err != nil {
		p.gwUnstage(staged)
		return fmt.Errorf("commit: %w", err)
	}
	afterCommitPoint("gw")
	failpoint.Hit("gw.after_commit")
	// The first part (a task's own instance) goes last: its messages may
	// name executions the other parts create (a signal activity for a
	// sub-workflow started in the same task).
	for i := len(rec.GW.Parts) - 1; i >= 0; i-- {
		pt := &rec.GW.Parts[i]
		if err := p.gwApplyPart(ctx, guards[pt.Key], rec.CommitID, pt, false); err != nil {
			p.applyDeferredTo(ctx, "workflow commit", pt.Key, pt.Instance, rec, err)
		}
		failpoint.Hit("gw.after_part")
	}
	// The instances' leases are free: their other events can be fetched.
	w := wakeOrch
	for i := range rec.GW.Parts {
		w |= wakeFor(rec.GW.Parts[i].Publish)
	}
	p.notify(w)
	return nil
}

// gwMayExist reports whether instance key may exist: it has an
// instance.json, or at least a lease (a creation may be committed and not
// yet applied; the caller locks it, which finishes that). Looking first
// never creates the directory of an instance that does not exist.
func (p *FSProvider) gwMayExist(key string) (bool, error) {
	for _, path := range []string{p.instFilePath(key), p.leasePath(key)} {
		if _, err := p.fs.Stat(path); err == nil {
			return true, nil
		} else if !vfs.IsNotExist(err) {
			return false, err
		}
	}
	return false, nil
}

// CreateWorkflow creates execution ref of an instance, with ev as its first
// pending event, unless the instance has an active execution (or one with
// ref's execution id, or is an orchestration instance): ErrWorkflowExists.
// One log record.
func (p *FSProvider) CreateWorkflow(ctx context.Context, ref WorkflowRef, s WorkflowStart, ev WorkflowEvent) error {
	key := instanceKey(ref.InstanceID)
	guards, unlock, err := p.gwLock(ctx, []string{key})
	if err != nil {
		return err
	}
	defer unlock()
	b, err := p.newGWBuild(key, ref.InstanceID)
	if err != nil {
		return err
	}
	if taken, err := p.gwTaken(b, ref.ExecutionID); err != nil {
		return err
	} else if taken {
		return ErrWorkflowExists
	}
	now := guards[key].Now()
	ex, err := p.gwNewExec(b, ref, s, now.UnixNano())
	if err != nil {
		return err
	}
	if err := p.gwStageEvent(&b.part, key, ref.InstanceID, ex, ev, now.UnixMilli()); err != nil {
		p.gwUnstage(b.part.Publish)
		return err
	}
	if err := p.gwFinish(b, now.UnixMilli(), 0); err != nil {
		p.gwUnstage(b.part.Publish)
		return err
	}
	return p.gwCommit(ctx, "create", guards, []*gwBuild{b}, b.part.Publish)
}

// SendWorkflowEvent delivers ev to an execution of instance: the active
// one if execID is "" (none: ErrWorkflowNotFound), else execution execID
// (unknown: ErrWorkflowNotFound; known but no longer active: nothing is
// delivered, nothing would consume it). One log record.
func (p *FSProvider) SendWorkflowEvent(ctx context.Context, instance, execID string, ev WorkflowEvent) error {
	key := instanceKey(instance)
	if ok, err := p.gwMayExist(key); err != nil || !ok {
		if err == nil {
			err = ErrWorkflowNotFound
		}
		return err
	}
	guards, unlock, err := p.gwLock(ctx, []string{key})
	if err != nil {
		return err
	}
	defer unlock()
	b, err := p.newGWBuild(key, instance)
	if err != nil {
		return err
	}
	if b.inf == nil || b.inf.GW == nil {
		return ErrWorkflowNotFound
	}
	var ex *gwExec
	if execID == "" {
		if ex = b.inf.active(); ex == nil {
			return ErrWorkflowNotFound
		}
	} else if ex, err = p.gwFind(key, b.inf, execID); err != nil {
		return err
	} else if ex == nil {
		return ErrWorkflowNotFound
	} else if ex.State != WorkflowActive {
		return nil
	}
	if err := p.gwStageEvent(&b.part, key, b.instance, ex, ev, guards[key].Now().UnixMilli()); err != nil {
		p.gwUnstage(b.part.Publish)
		return err
	}
	return p.gwCommit(ctx, "send", guards, []*gwBuild{b}, b.part.Publish)
}

// WorkflowExecutionInfo returns one execution (ErrWorkflowNotFound if
// unknown).
func (p *FSProvider) WorkflowExecutionInfo(ctx context.Context, ref WorkflowRef) (WorkflowExecution, error) {
	key := instanceKey(ref.InstanceID)
	inf, err := p.readGWInstance(key)
	if err != nil {
		return WorkflowExecution{}, err
	}
	ex, err := p.gwFind(key, inf, ref.ExecutionID)
	if err != nil {
		return WorkflowExecution{}, err
	}
	if ex == nil {
		return WorkflowExecution{}, ErrWorkflowNotFound
	}
	return ex.public(inf.Instance), nil
}

// WorkflowHistory returns an execution's executed events, those with a
// sequence id after *after if after is set (ErrWorkflowNotFound if unknown).
func (p *FSProvider) WorkflowHistory(ctx context.Context, ref WorkflowRef, after *int64) ([]WorkflowEvent, error) {
	key := instanceKey(ref.InstanceID)
	inf, err := p.readGWInstance(key)
	if err != nil {
		return nil, err
	}
	ex, err := p.gwFind(key, inf, ref.ExecutionID)
	if err != nil {
		return nil, err
	}
	if ex == nil {
		return nil, ErrWorkflowNotFound
	}
	evs, err := p.gwReadHistory(key, ex.N, after)
	if errors.Is(err, history.ErrTruncated) {
		// Perhaps mid-change by another process (see readExec): look
		// again under the instance flock.
		err = p.settled(ctx, key, func() error {
			evs, err = p.gwReadHistory(key, ex.N, after)
			return err
		})
	}
	return evs, err
}

// FetchWorkflowTask locks the instance of the oldest visible pending event
// in queues whose active execution it belongs to (and that is not locked,
// nor sticky to another worker), for lockFor, and returns its visible
// pending events as a task. It long-polls up to pollTimeout (or until ctx
// ends); (nil, nil) means no task.
func (p *FSProvider) FetchWorkflowTask(ctx context.Context, queues []string, worker string, lockFor, pollTimeout time.Duration) (*WorkflowTask, error) {
	deadline := time.Now().Add(pollTimeout)
	qs, err := p.gwQueues(queues, false)
	if err != nil {
		return nil, err
	}
	var wait time.Duration
	for {
		wk := p.wakeupFor(wakeOrch)
		t, err := p.tryFetchWorkflowTask(ctx, queues, worker, lockFor)
		if t != nil {
			p.busyAgain(qs...)
		}
		if t != nil || err != nil {
			return t, err
		}
		var quiet bool
		wait, quiet = p.idleWait(wait, qs...)
		if !p.waitForWork(ctx, wk, deadline, wait, quiet) {
			return nil, nil
		}
	}
}

func (p *FSProvider) tryFetchWorkflowTask(ctx context.Context, queues []string, worker string, lockFor time.Duration) (*WorkflowTask, error) {
	type cand struct{ key, dir, oldest string }
	var qs []namedQueue
	for _, qn := range queues {
		dir, q, err := p.gwQueueOf(qn, false)
		if err != nil {
			return nil, err
		}
		qs = append(qs, namedQueue{dir, q})
	}
	tried := map[string]bool{}
	var busy []cand
	// The visible events of every queue, oldest first; which instance one
	// is for is in its body (read through the queue's cache).
	for v, err := range visibleMerged(qs, p.nowMs()) {
		if err != nil {
			return nil, fmt.Errorf("durofs: list workflow queue %s: %w", v.dir, err)
		}
		m, ok, err := readQueued(v.q, v.e)
		if err != nil {
			return nil, fmt.Errorf("durofs: read workflow event %s/%s: %w", v.dir, v.e.Name(), err)
		}
		c := cand{m.Attrs[attrKey], v.dir, v.e.Name()}
		if !ok || c.key == "" || tried[c.key+"/"+c.dir] {
			continue
		}
		tried[c.key+"/"+c.dir] = true
		if ctx.Err() != nil {
			return nil, nil
		}
		if p.skipStuck(c.key) {
			continue // its commit cannot be applied (fs_stuck.go)
		}
		if p.held.held(c.key, p.nowMs()) {
			continue // this process's task is in flight (fs_held.go)
		}
		if p.peers.skip(c.key, c.dir, c.oldest, worker, p.nowMs()) {
			continue // another process's task is in flight (fs_held.go)
		}
		// A pending event's instance exists (its creation published it);
		// one that was removed since has nothing to fetch. Its event is
		// dropped, as a fetch drops the events of any execution that is
		// gone: an activity completion (or a deletion's concurrent one)
		// can publish it after the removal, and left there it would stay
		// visible for good, keeping every poller of the queue looking.
		// It was listed before the instance's lock file was seen missing,
		// and a creator makes the lock file before it publishes anything,
		// so it is an event of an instance removed since.
		g, ok, err := p.lockExisting(ctx, c.key, false)
		if errors.Is(err, lease.ErrGone) {
			if err := v.q.Delete(c.oldest); err != nil && !errors.Is(err, fsqueue.ErrNotFound) {
				p.log.Warn("durofs: delete an event of a removed workflow instance", "queue", c.dir, "message", c.oldest, "err", err)
			}
			delete(tried, c.key+"/"+c.dir) // its next event, if any, is looked at too
			continue
		}
		if err != nil {
			if unusableInstance(err) {
				p.warnUnusable(c.key, c.key, err)
				continue
			}
			return nil, fmt.Errorf("durofs: lock instance: %w", err)
		}
		if !ok {
			busy = append(busy, c)
			continue
		}
		t, err := p.gwFetchLocked(ctx, g, c.key, c.dir, c.oldest, worker, lockFor)
		g.Unlock()
		if isStuck(err) {
			p.stats.stuckSkips.Add(1)
			continue
		}
		if t != nil || err != nil {
			return t, err
		}
	}
	deadline := time.Now().Add(busyWait)
	for _, c := range busy {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		g, _, err := p.lockExisting(wctx, c.key, true)
		cancel()
		if err != nil {
			continue
		}
		t, err := p.gwFetchLocked(ctx, g, c.key, c.dir, c.oldest, worker, lockFor)
		g.Unlock()
		if isStuck(err) {
			continue
		}
		if t != nil || err != nil {
			return t, err
		}
	}
	return nil, nil
}

// gwFetchLocked runs under the instance flock: everything that can fail is
// read before the lease is written. oldest is the instance's oldest visible
// event in dir as the pass saw it.
func (p *FSProvider) gwFetchLocked(ctx context.Context, g *lease.Guard, key, dir, oldest, worker string, lockFor time.Duration) (*WorkflowTask, error) {
	if err := p.redoPending(ctx, g, key); err != nil {
		return nil, fmt.Errorf("durofs: recover pending commit: %w", err)
	}
	if g.Reclaimed() {
		return nil, nil // that was its removal
	}
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return nil, fmt.Errorf("durofs: read lease: %w", err)
	}
	nowMs := g.Now().UnixMilli()
	if cur.HeldAt(nowMs) {
		p.peers.note(key, dir, oldest, "", cur.ExpiresAtMs, nowMs)
		return nil, nil
	}
	if cur.Token == "" && cur.Owner != "" && cur.Owner != worker && cur.ExpiresAtMs > nowMs {
		p.peers.note(key, dir, oldest, cur.Owner, cur.ExpiresAtMs, nowMs)
		return nil, nil // sticky to another worker
	}
	inf, err := p.readGWInstance(key)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			p.warnUnusable(key, key, err)
			return nil, nil
		}
		return nil, err
	}
	q, err := p.gwQueue(dir)
	if err != nil {
		return nil, err
	}
	msgs, err := queuedFor(q, key)
	if err != nil {
		return nil, err
	}
	act := inf.active()
	var visible []queued
	for _, m := range msgs {
		if act == nil || m.Attrs[attrExec] != act.ID {
			// For an execution that is gone or no longer active: nothing
			// will ever consume it. (Every message of an execution is
			// published with or after the execution's record.)
			if err := q.Delete(m.Name); err != nil {
				p.log.Warn("durofs: delete stale workflow event", "queue", dir, "message", m.Name, "err", err)
			}
			continue
		}
		if m.Entry.VisibleAtMs <= nowMs {
			visible = append(visible, m)
		}
	}
	if len(visible) == 0 || gwWorkflowQueue(act.Queue) != dir {
		return nil, nil
	}
	batch := gwBatchOrder(visible)
	t := &WorkflowTask{Execution: act.public(inf.Instance)}
	kept := batch[:0:0]
	for _, name := range batch {
		m, err := q.Get(name)
		if err != nil {
			if errors.Is(err, fsqueue.ErrNotFound) {
				continue
			}
			return nil, err
		}
		kept = append(kept, name)
		t.NewEvents = append(t.NewEvents, eventOfMessage(m))
	}
	if len(kept) == 0 {
		return nil, nil
	}
	st := decodeOrchState(cur)
	st.Batch = kept
	next := lease.Lease{
		Token: uuid.NewString(), Owner: worker, Fence: max(cur.Fence, inf.LastFence) + 1,
		AcquiredAtMs: nowMs, ExpiresAtMs: nowMs + lockFor.Milliseconds(), Data: st.encode(),
	}
	if err := g.Write(next); err != nil {
		return nil, fmt.Errorf("durofs: write lease: %w", err)
	}
	p.held.hold(key, next.ExpiresAtMs, nowMs)
	t.Token = orchToken(key, next.Token)
	return t, nil
}

// gwBatchOrder returns the names of a task's pending events in the order
// they became visible, as go-workflows' own backends deliver them (SQLite
// reads them by visible_at, redis moves a timer into the pending events
// only once it is due): by gwVisibleSince, then by name. A timer scheduled
// before an activity result arrived but due after it comes after it, so a
// workflow waiting for "the activity or a timeout" sees the result first.
// Events that are not timers keep their enqueue (name) order, which is
// causal across processes (fsqueue.Options.Order): the execution's start
// event, published with its record before any other event of it, stays
// first. The order is a function of the names alone, so a batch fetched
// again after its lock expired is in the same order, the events that
// arrived meanwhile placed by the same rule (as SQLite's batch would be).
// The duroxide side (fs_orch.go) keeps name order: its contract requires
// it.
func gwBatchOrder(ms []queued) []string {
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b queued) int {
		if c := cmp.Compare(gwVisibleSince(a), gwVisibleSince(b)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := make([]string, len(sorted))
	for i, m := range sorted {
		out[i] = m.Name
	}
	return out
}

// gwVisibleSince is when a pending event became visible (ms): a timer's
// due time, but not before it was enqueued (a timer due in the past); any
// other event's enqueue time as its name has it, the ULID's time from the
// shared order clock (its visible_at, its writer's clock reading, is never
// later and can be earlier after a clock step back: it would reorder events
// that are not timers).
func gwVisibleSince(m queued) int64 {
	enq := int64(m.Entry.ID.Time())
	if m.Attrs[attrTimer] == "1" {
		return max(m.Entry.VisibleAtMs, enq)
	}
	return enq
}

// ExtendWorkflowTask extends a task's lock to now+lockFor (ErrWorkflowTaskLost
// if its token no longer holds the instance).
func (p *FSProvider) ExtendWorkflowTask(ctx context.Context, token string, lockFor time.Duration) error {
	key, lt, ok := parseOrchToken(token)
	if !ok {
		return ErrWorkflowTaskLost
	}
	wctx, cancel := p.endHeld(ctx, key, lt)
	defer cancel()
	guards, unlock, err := p.gwLockWithin(ctx, wctx, []string{key})
	if err != nil {
		return err
	}
	defer unlock()
	g := guards[key]
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return err
	}
	if cur.Token == "" || cur.Token != lt {
		return ErrWorkflowTaskLost
	}
	nowMs := g.Now().UnixMilli()
	cur.ExpiresAtMs = nowMs + lockFor.Milliseconds()
	if err := g.Write(cur); err != nil {
		return err
	}
	p.held.hold(key, cur.ExpiresAtMs, nowMs)
	return nil
}

// CompleteWorkflowTask commits a task's result in ONE log record: the
// executed events appended to the history, the execution's new state,
// consumed and cancelled pending events deleted (all of the execution's if
// it is no longer active), activity tasks, timers and events to other
// executions published, new executions (sub-workflows, continue-as-new)
// created, and the lease released (sticky to res.Worker for res.Sticky).
// Every instance whose files change is a part of the record, marked in its
// lease; the flocks of every instance involved are taken in sorted order.
// A token that no longer holds the instance fails with ErrWorkflowTaskLost,
// writing nothing.
func (p *FSProvider) CompleteWorkflowTask(ctx context.Context, task *WorkflowTask, res WorkflowTaskResult) error {
	key, lt, ok := parseOrchToken(task.Token)
	if !ok {
		return ErrWorkflowTaskLost
	}
	wctx, cancel := p.endHeld(ctx, key, lt)
	defer cancel()
	keys := []string{key}
	for _, s := range res.Sends {
		tk := instanceKey(s.Target.InstanceID)
		if tk == key {
			continue
		}
		if s.Start == nil {
			if ok, err := p.gwMayExist(tk); err != nil {
				return err
			} else if !ok {
				continue // no such instance: its events are dropped
			}
		}
		keys = append(keys, tk)
	}
	guards, unlock, err := p.gwLockWithin(ctx, wctx, keys)
	if err != nil {
		return err
	}
	defer unlock()
	g := guards[key]
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return err
	}
	if cur.Token == "" || cur.Token != lt {
		return ErrWorkflowTaskLost
	}
	own, err := p.newGWBuild(key, task.Execution.InstanceID)
	if err != nil {
		return err
	}
	ex := own.inf.exec(task.Execution.ExecutionID)
	if ex == nil || ex.State != WorkflowActive {
		return ErrWorkflowTaskLost
	}
	now := g.Now()
	nowMs, nowNs := now.UnixMilli(), now.UnixNano()
	instance := own.instance
	n := ex.N
	ownDir, ownQ, err := p.gwQueueOf(ex.Queue, false)
	if err != nil {
		return err
	}
	pt := &own.part
	var staged []queueRef
	fail := func(err error) error {
		p.gwUnstage(staged)
		return err
	}

	// History and the execution's record.
	pt.Exec, pt.Fence, pt.HistoryBase = n, cur.Fence, ex.Events
	known := ex.Events == 0 || ex.HistoryBytes > 0 // the file's size
	if known {
		pt.HistoryOffset = ex.HistoryBytes
	}
	var added []history.Record
	for _, ev := range res.Executed {
		raw, err := gwHistoryPayload(instance, n, ev)
		if err != nil {
			return err
		}
		pt.History = append(pt.History, raw)
		pt.HistoryIDs = append(pt.HistoryIDs, gwRecordID(ev.SequenceID))
		added = append(added, history.Record{ID: gwRecordID(ev.SequenceID), Epoch: pt.Fence, Payload: raw})
	}
	if known {
		ex.HistoryBytes += history.EncodedSize(added)
	}
	ex.Events += len(res.Executed)
	own.inf.TotalEvents += uint64(len(res.Executed))
	if len(res.Executed) > 0 {
		ex.LastSeq = res.Executed[len(res.Executed)-1].SequenceID
	}
	ex.State, ex.Failed = res.State, res.Failed
	if res.State != WorkflowActive {
		c := nowNs
		ex.CompletedNs = &c
	}
	own.changed, own.states[n] = true, true
	active := res.State == WorkflowActive
	self := *ex // ex points into own.inf, which later appends may move

	// Consumed, cancelled and stale pending events.
	msgs, err := queuedFor(ownQ, key)
	if err != nil {
		return err
	}
	executed := map[string]bool{}
	for _, ev := range res.Executed {
		executed[ev.ID] = true
	}
	canceled := map[string]bool{}
	for _, id := range res.CanceledTimers {
		canceled[fmt.Sprint(id)] = true
	}
	batch := map[string]bool{}
	for _, name := range decodeOrchState(cur).Batch {
		batch[name] = true
	}
	for _, m := range msgs {
		if m.Attrs[attrExec] != self.ID {
			continue
		}
		drop := !active ||
			(batch[m.Name] && executed[m.Attrs[attrEventID]]) ||
			(m.Attrs[attrTimer] == "1" && canceled[m.Attrs[attrSchedule]])
		if drop {
			pt.Delete = append(pt.Delete, queueRef{Queue: ownDir, Name: m.Name})
		}
	}

	// Activities and timers.
	for _, a := range res.Activities {
		aq := a.Queue
		if aq == "" {
			aq = self.Queue
		}
		dir, q, err := p.gwQueueOf(aq, true)
		if err != nil {
			return fail(err)
		}
		ref, err := p.gwStage(dir, p.gwActivityMessage(q, instance, self.ID, ownDir, a, nowMs, key))
		if err != nil {
			return fail(err)
		}
		staged = append(staged, ref)
		pt.Publish = append(pt.Publish, ref)
	}
	if active {
		for _, t := range res.Timers {
			if err := p.gwStageEvent(pt, key, instance, &self, t, nowMs); err != nil {
				return fail(err)
			}
			staged = append(staged, pt.Publish[len(pt.Publish)-1])
		}
	}

	// Events to other executions, and new executions.
	builds := map[string]*gwBuild{key: own}
	order := []*gwBuild{own}
	for _, s := range res.Sends {
		tk := instanceKey(s.Target.InstanceID)
		tb := builds[tk]
		if tb == nil {
			if guards[tk] == nil {
				continue // the instance does not exist
			}
			if tb, err = p.newGWBuild(tk, s.Target.InstanceID); err != nil {
				return fail(err)
			}
			builds[tk] = tb
			order = append(order, tb)
		}
		if s.Start != nil {
			taken, err := p.gwTaken(tb, s.Target.ExecutionID)
			if err != nil {
				return fail(err)
			}
			if taken {
				if s.OnExists != nil && active {
					if err := p.gwStageEvent(pt, key, instance, &self, *s.OnExists, nowMs); err != nil {
						return fail(err)
					}
					staged = append(staged, pt.Publish[len(pt.Publish)-1])
				}
				continue
			}
			nx, err := p.gwNewExec(tb, s.Target, *s.Start, nowNs)
			if err != nil {
				return fail(err)
			}
			target := *nx
			for _, ev := range s.Events {
				if err := p.gwStageEvent(&tb.part, tk, s.Target.InstanceID, &target, ev, nowMs); err != nil {
					return fail(err)
				}
				staged = append(staged, tb.part.Publish[len(tb.part.Publish)-1])
			}
			continue
		}
		if tb.inf == nil {
			continue
		}
		// Only the latest execution, which instance.json lists, can be
		// active: one it does not list is not looked up.
		tx := tb.inf.exec(s.Target.ExecutionID)
		if tx == nil || tx.State != WorkflowActive {
			continue // gone or no longer active: nothing would consume it
		}
		target := *tx
		for _, ev := range s.Events {
			// Published by this instance's part: the target instance's
			// files do not change.
			if err := p.gwStageEvent(pt, key, s.Target.InstanceID, &target, ev, nowMs); err != nil {
				return fail(err)
			}
			staged = append(staged, pt.Publish[len(pt.Publish)-1])
		}
	}

	if res.RemoveExecution && !active {
		pt.History, pt.HistoryIDs = nil, nil
		pt.RemoveExecs = append(pt.RemoveExecs, n)
		pt.RemoveIDs = append(pt.RemoveIDs, self.ID)
		own.inf.GW.Executions = slices.DeleteFunc(own.inf.GW.Executions, func(e gwExec) bool { return e.ID == self.ID })
		own.inf.Executions.Remove(n)
		own.inf.TotalEvents -= min(own.inf.TotalEvents, uint64(self.Events))
		delete(own.states, n)
	}

	// The lease: released, sticky to the worker.
	pt.LeaseToken = lt
	if res.Sticky > 0 && res.Worker != "" {
		pt.Sticky, pt.StickyUntilMs = res.Worker, nowMs+res.Sticky.Milliseconds()
	}
	var parts []*gwBuild
	for _, b := range order {
		if b != own && !b.changed {
			continue
		}
		if err := p.gwFinish(b, nowMs, cur.Fence); err != nil {
			return fail(err)
		}
		parts = append(parts, b)
	}
	return p.gwCommit(ctx, "complete", guards, parts, staged)
}
