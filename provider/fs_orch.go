package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/lease"
)

// orchState is the orchestrator-queue state of one instance, kept in the
// Data of its lease file and changed only under the instance flock:
//
//   - Batch: the messages locked by the current (or last) fetch; an ack
//     deletes exactly these, so late arrivals stay queued;
//   - Attempts: per message, how many fetches included it;
//   - Delayed: per message, a visible-at pushed back by an abandon with delay.
//
// Like the lease itself it is not fsynced (see leases.go): after a power loss
// it may revert, which only lowers attempt counts or cancels a delay.
type orchState struct {
	Batch    []string          `json:"batch,omitempty"`
	Attempts map[string]uint32 `json:"attempts,omitempty"`
	Delayed  map[string]int64  `json:"delayed,omitempty"`
	// Pending marks a commit of this instance whose apply may not have
	// finished (fs_wal.go): set before its record is appended to the log,
	// cleared by the apply's last write.
	Pending *pendingMark `json:"pending,omitempty"`
	// Queued are commits to apply after Pending, in order: set only by a
	// replay for an instance whose record failed to apply (fs_stuck.go).
	Queued []pendingMark `json:"queued,omitempty"`
}

func decodeOrchState(l lease.Lease) orchState {
	var st orchState
	if len(l.Data) > 0 {
		if err := json.Unmarshal(l.Data, &st); err != nil {
			// An unreadable queue state loses attempt counts and delays only.
			st = orchState{}
		}
	}
	if st.Attempts == nil {
		st.Attempts = map[string]uint32{}
	}
	if st.Delayed == nil {
		st.Delayed = map[string]int64{}
	}
	return st
}

func (st orchState) encode() json.RawMessage {
	if len(st.Batch) == 0 && len(st.Attempts) == 0 && len(st.Delayed) == 0 && st.Pending == nil && len(st.Queued) == 0 {
		return nil
	}
	b, _ := jsonMarshal(st)
	return b
}

// prune forgets state of messages that no longer exist.
func (st *orchState) prune(exists map[string]bool) {
	for n := range st.Attempts {
		if !exists[n] {
			delete(st.Attempts, n)
		}
	}
	for n := range st.Delayed {
		if !exists[n] {
			delete(st.Delayed, n)
		}
	}
}

// Attribute keys of orchestrator and worker messages.
const (
	attrInstance = "instance"
	attrKey      = "ikey"
	attrKind     = "kind"
	attrExec     = "exec"
	attrActivity = "act"
	attrSession  = "session"
	attrTag      = "tag"
	attrSource   = "src" // key of the instance (or "w:"+worker message) whose commit staged it
)

// orchMessage builds the queue message for an orchestrator-bound item.
func (p *FSProvider) orchMessage(item WorkItem, visibleAtMs, nowMs int64, source string) (fsqueue.Message, error) {
	payload, err := MarshalWorkItem(item)
	if err != nil {
		return fsqueue.Message{}, err
	}
	inst := TargetInstance(item)
	attrs := map[string]string{attrInstance: inst, attrKey: instanceKey(inst), attrKind: item.Kind()}
	if source != "" {
		attrs[attrSource] = source
	}
	// The queue names it (Encode, Enqueue): the name carries visibleAtMs and
	// the route of attrKey.
	return fsqueue.Message{VisibleAtMs: visibleAtMs, EnqueuedAtMs: nowMs, Attrs: attrs, Payload: payload}, nil
}

// EnqueueForOrchestrator implements Provider. The message is published with
// one durable create-exclusive (temp file + fsync + link + directory fsync):
// a crash before the link leaves nothing visible, after it the message is
// complete.
func (p *FSProvider) EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	item = derefItem(item)
	if item == nil {
		return Permanentf(op, ErrInvalidWorkItem, "Invalid work item type: nil")
	}
	if QueueOf(item) != OrchestratorQueue {
		return Permanentf(op, ErrInvalidWorkItem, "Invalid work item type: %s belongs to the worker queue", item.Kind())
	}
	if err := p.limits.checkWorkItem(op, "work item", item); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return Retryablef(op, err, "%v", err)
	}
	now := p.nowMs()
	m, err := p.orchMessage(item, now+delay.Milliseconds(), now, "")
	if err != nil {
		return Permanentf(op, ErrInvalidWorkItem, "encode work item: %v", err)
	}
	failpoint.Hit("enqueue.orch.before_publish")
	if _, err := p.orchQ.Enqueue(m); err != nil {
		return Retryablef(op, err, "write message: %v", err)
	}
	failpoint.Hit("enqueue.orch.after_publish")
	p.notify(wakeOrch)
	return nil
}

// FetchOrchestrationItem implements Provider. It long-polls: with no work it
// waits up to pollTimeout, waking at once for a new message and looking
// again as Options.PollInterval says.
func (p *FSProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *DispatcherCapabilityFilter) (*LockedOrchestrationItem, error) {
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, nil
	}
	deadline := time.Now().Add(pollTimeout)
	var wait time.Duration
	for {
		wk := p.wakeupFor(wakeOrch)
		item, err := p.tryFetchOrchestration(ctx, lockTimeout, filter)
		if item != nil {
			p.busyAgain(p.orchQ)
		}
		if item != nil || err != nil {
			return item, err
		}
		var quiet bool
		wait, quiet = p.idleWait(wait, p.orchQ)
		if !p.waitForWork(ctx, wk, deadline, wait, quiet) {
			return nil, nil
		}
	}
}

// orchQueueName is the orchestrator queue's directory under queues/.
const orchQueueName = "orchestrator"

// tryFetchOrchestration makes one pass over the orchestrator queue, oldest
// message first, and locks the first instance it can.
func (p *FSProvider) tryFetchOrchestration(ctx context.Context, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (*LockedOrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	// Only messages visible by their name are candidates: an abandon may
	// delay a message further (lease state), never make it visible earlier.
	// The queue's index skips not-yet-due messages (timers) block by block,
	// so the cost of this walk does not grow with them; and messages that an
	// abandon delayed, which this process deferred (deferDelayed), are
	// passed over without a read until their time. Which instance a
	// message is for is in its body: read through the queue's cache for
	// each message the walk meets (usually the first one).
	tried := map[string]bool{}
	var busy []queued // instances whose flock was held when tried
	// failed is the first instance's error: returned only if no other
	// instance can be served (one failing instance never blocks the queue).
	var failed error
	for e, err := range p.orchQ.Due(p.nowMs()) {
		if err != nil {
			return nil, Retryablef(op, err, "list orchestrator queue: %v", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, Retryablef(op, err, "%v", err)
		}
		m, ok, err := readQueued(p.orchQ, e)
		if err != nil {
			if failed == nil {
				failed = Retryablef(op, err, "read orchestrator message %s: %v", e.Name(), err)
			}
			continue
		}
		key := m.Attrs[attrKey]
		if !ok || key == "" || tried[key] {
			continue
		}
		tried[key] = true
		instance := m.Attrs[attrInstance]
		// The capability filter is applied before locking (and before any
		// history is read), on the current execution's pinned version.
		if filter != nil {
			ok, err := p.filterAllowsCached(key, filter)
			if err != nil {
				p.log.Warn("durofs: capability filter check failed", "instance", instance, "err", err)
				continue
			}
			if !ok {
				continue
			}
		}
		if p.skipStuck(key) {
			continue // its commit cannot be applied (fs_stuck.go): retried after a back-off
		}
		if p.held.held(key, p.nowMs()) {
			continue // this process's turn is in flight (fs_held.go)
		}
		if p.peers.skip(key, orchQueueName, e.Name(), "", p.nowMs()) {
			continue // another process's turn is in flight (fs_held.go)
		}
		g, ok, gone, err := p.lockToFetch(ctx, key, false)
		if gone {
			continue
		}
		if err != nil {
			if unusableInstance(err) {
				p.warnUnusable(key, instance, err)
				continue // one damaged instance never blocks the queue
			}
			if failed == nil {
				failed = Retryablef(op, err, "lock instance %q: %v", instance, err)
			}
			continue
		}
		if !ok {
			busy = append(busy, m) // another fetch, ack or cleanup is inside it right now
			continue
		}
		item, err := p.fetchLocked(ctx, g, key, instance, e.Name(), lockTimeout, filter)
		g.Unlock()
		if err != nil {
			if unusableInstance(err) {
				p.warnUnusable(key, instance, err)
				continue
			}
			if isStuck(err) {
				p.stats.stuckSkips.Add(1) // logged by noteStuck
				continue
			}
			if failed == nil {
				failed = err
			}
			continue
		}
		if item != nil {
			return item, nil
		}
	}
	// Nothing else was available. A flock is only ever held for a short
	// critical section (never across fetch→ack: that is the lease), so an
	// instance that was merely busy - e.g. the cleaner removing its applied
	// commit record - is worth a short wait rather than reporting no work.
	deadline := time.Now().Add(busyWait) // for all of them together
	for _, e := range busy {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		item, err := p.fetchBusy(ctx, e, wait, lockTimeout, filter)
		if item != nil || err != nil {
			return item, err
		}
	}
	return nil, failed
}

// mayStart reports whether a fetch of instance key, which has no directory,
// may do anything: its visible messages include a start, or are all
// QueueMessages (which a fetch deletes, contract test 50). The messages are
// read without a lock (published messages never change); the fetch that
// follows decides again under the flock.
func (p *FSProvider) mayStart(key string) (bool, error) {
	entries, err := p.orchQ.ListRoute(key)
	if err != nil {
		return false, err
	}
	nowMs := p.nowMs()
	seen, queueOnly := false, true
	for _, e := range entries {
		if e.VisibleAtMs > nowMs {
			continue
		}
		m, err := p.orchQ.Get(e.Name())
		if errors.Is(err, fsqueue.ErrNotFound) || errors.Is(err, fsqueue.ErrCorrupt) {
			continue // consumed meanwhile; or damaged (the fetch under the flock decides)
		}
		if err != nil {
			return false, err
		}
		if m.Attrs[attrKey] != key {
			continue // another instance's, whose key has the same route
		}
		w, err := UnmarshalWorkItem(m.Payload)
		if err != nil {
			return true, nil // the fetch quarantines it
		}
		switch w.(type) {
		case StartOrchestration, ContinueAsNew:
			return true, nil
		case QueueMessage:
		default:
			queueOnly = false
		}
		seen = true
	}
	return seen && queueOnly, nil
}

// busyWait bounds how long a fetch that found nothing else waits in all for
// the flocks of instances that were busy when first tried.
const busyWait = 20 * time.Millisecond

// lockToFetch takes instance key's flock for a fetch, waiting for it with
// wait (ok is false if it is held and wait is not set). An instance without
// a directory is created only by a fetch of its start: gone is true (and
// nothing is locked or created) when key has no directory and no start is
// queued for it - messages that cannot start it, such as a completion that
// arrived after its instance was deleted, are looked at without creating a
// directory (and its fsync) on every pass. The same holds after a wait: the
// holder waited for may have been the instance's deletion, and a directory
// made again for its stale messages would stay behind if the fetch were
// killed before it took it away
// (TestFetchBusyCreatesNoDirectoryForADeletedInstance).
func (p *FSProvider) lockToFetch(ctx context.Context, key string, wait bool) (g *lease.Guard, ok, gone bool, err error) {
	g, ok, err = p.lockExisting(ctx, key, wait)
	if !errors.Is(err, lease.ErrGone) {
		return g, ok, false, err
	}
	if start, perr := p.mayStart(key); perr != nil || !start {
		return nil, false, true, nil
	}
	if !wait {
		g, ok, err = p.tryLockInstance(key)
		return g, ok, false, err
	}
	g, err = p.lockInstance(ctx, key)
	return g, err == nil, false, err
}

// testHookBusyWait, when set by a test, runs when a fetch starts waiting
// for a busy instance's flock.
var testHookBusyWait func(key string)

// fetchBusy waits up to wait for m's instance flock and fetches it.
func (p *FSProvider) fetchBusy(ctx context.Context, m queued, wait, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (*LockedOrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	key := m.Attrs[attrKey]
	if testHookBusyWait != nil {
		testHookBusyWait(key)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	g, _, gone, err := p.lockToFetch(wctx, key, true)
	cancel()
	if gone {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, Retryablef(op, ctx.Err(), "%v", ctx.Err())
		}
		return nil, nil // still busy, or unusable (reported on the first try)
	}
	defer g.Unlock()
	item, err := p.fetchLocked(ctx, g, key, m.Attrs[attrInstance], m.Entry.Name(), lockTimeout, filter)
	if err != nil && (unusableInstance(err) || isStuck(err)) {
		return nil, nil
	}
	return item, err
}

// filterAllows reports whether the instance's current execution is
// compatible with filter, as its files say now. No instance, no execution
// or no pin: compatible.
func (p *FSProvider) filterAllows(key string, filter *DispatcherCapabilityFilter) (bool, error) {
	v, pinned, err := p.currentPin(key)
	if err != nil || !pinned {
		return true, err
	}
	return filter.IsCompatible(v), nil
}

// currentPin reads the pinned duroxide version of instance key's current
// execution; pinned is false if it has none (no instance, no execution, no
// pin, or one that does not parse).
func (p *FSProvider) currentPin(key string) (v SemVer, pinned bool, err error) {
	exec, err := p.latestExecution(key)
	if err != nil || exec == 0 {
		return SemVer{}, false, err
	}
	ef, err := p.readExecutionFile(key, exec)
	if err != nil || ef == nil || ef.Pinned == nil {
		return SemVer{}, false, err
	}
	v, err = ParseSemVer(*ef.Pinned)
	if err != nil {
		return SemVer{}, false, nil
	}
	return v, true, nil
}

// filterAllowsCached is filterAllows for a fetch pass, which decides on it
// only which instances to look at (fetchLocked checks again, under the
// flock, on the files): a pin that rejected the instance is kept
// (rejectedPins) for as long as none of the instance's messages left the
// orchestrator queue, so that a dispatcher whose filter rejects many
// queued instances does not read each one's files on every pass.
func (p *FSProvider) filterAllowsCached(key string, filter *DispatcherCapabilityFilter) (bool, error) {
	gen, err := p.orchQ.RemovalGen(key)
	if err != nil {
		return p.filterAllows(key, filter)
	}
	if v, ok := p.rejected.get(key, gen); ok {
		return filter.IsCompatible(v), nil
	}
	v, pinned, err := p.currentPin(key)
	if err != nil || !pinned {
		return true, err
	}
	if filter.IsCompatible(v) {
		return true, nil
	}
	p.rejected.put(key, gen, v)
	return false, nil
}

// fetchLocked runs under the instance flock. Everything that can fail is
// read before the lease is written, so an error never leaves a lock behind.
// oldest is the instance's oldest visible message as the pass saw it.
func (p *FSProvider) fetchLocked(ctx context.Context, g *lease.Guard, key, instance, oldest string, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (locked *LockedOrchestrationItem, err error) {
	const op = "fetch_orchestration_item"
	// Whoever next touches an instance first finishes a commit its last
	// holder left half-applied.
	if err := p.redoPending(ctx, g, key); err != nil {
		return nil, Retryablef(op, err, "recover pending commit of %q: %v", instance, err)
	}
	if g.Reclaimed() {
		return nil, nil // that was its deletion: its messages since are for a new instance, fetched next time
	}
	cur, leaseExists, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return nil, Retryablef(op, err, "read lease of %q: %v", instance, err)
	}
	if !leaseExists {
		// Locking created the directory if it was missing (the instance's
		// start is fetched below): if nothing is fetched, take it away
		// again (a completion racing ahead of its start, messages for an
		// instance that was never started or was deleted).
		defer func() {
			if locked == nil && err == nil {
				if rerr := p.reclaimIfEmpty(g, key); rerr != nil {
					p.log.Warn("durofs: an empty instance directory stays", "instance", instance, "err", rerr)
				}
			}
		}()
	}
	// The clock is read after the flock is held (duroxide issue #46).
	now := g.Now()
	nowMs := now.UnixMilli()
	if cur.HeldAt(nowMs) {
		p.peers.note(key, orchQueueName, oldest, "", cur.ExpiresAtMs, nowMs)
		return nil, nil
	}
	st := decodeOrchState(cur)

	// The instance's messages: its route's (exists: names the lease state
	// may keep, a colliding instance's included, which is harmless), of
	// which the visible ones whose body names this instance form the batch.
	entries, err := p.orchQ.ListRoute(key)
	if err != nil {
		return nil, Retryablef(op, err, "list orchestrator queue: %v", err)
	}
	exists := map[string]bool{}
	var batch []string
	for _, e := range entries {
		name := e.Name()
		exists[name] = true
		vis := e.VisibleAtMs
		if d, ok := st.Delayed[name]; ok && d > vis {
			vis = d
		}
		if vis <= nowMs {
			batch = append(batch, name)
		}
	}
	// Messages an abandon delayed (this process's or another's): later
	// passes skip them until then without a look.
	p.deferDelayed(key, entries, st.Delayed, nowMs)
	if len(batch) == 0 {
		return nil, nil
	}
	msgs := make([]WorkItem, 0, len(batch))
	kept := batch[:0:0]
	for _, name := range batch {
		m, err := p.orchQ.Get(name)
		if err != nil {
			if errors.Is(err, fsqueue.ErrNotFound) || errors.Is(err, fsqueue.ErrCorrupt) {
				continue // consumed meanwhile by a redo; or a damaged file (fsck reports it)
			}
			return nil, Retryablef(op, err, "read message %s: %v", name, err)
		}
		if m.Attrs[attrKey] != key {
			continue // another instance's, whose key has the same route
		}
		w, err := UnmarshalWorkItem(m.Payload)
		if err != nil {
			p.quarantineOrch(name, fmt.Sprintf("undecodable work item: %v", err))
			continue
		}
		kept = append(kept, name)
		msgs = append(msgs, w)
	}
	batch = kept
	if len(batch) == 0 {
		return nil, nil
	}

	// Resolve the instance context (contract §2.4 step 4).
	inf, err := p.readInstanceFile(key)
	if err != nil {
		return nil, storageErrf(op, err, "read instance %q: %v", instance, err)
	}
	exec, err := p.latestExecution(key)
	if err != nil {
		return nil, storageErrf(op, err, "list executions of %q: %v", instance, err)
	}
	item := OrchestrationItem{Instance: instance, Messages: msgs, KVSnapshot: map[string]KVEntry{}}
	var history []Event
	var historyErr *string
	if exec > 0 {
		history, historyErr, err = p.readHistory(key, exec)
		if err != nil {
			return nil, Retryablef(op, err, "read history of %q: %v", instance, err)
		}
	}
	switch {
	case inf != nil && inf.Record != nil:
		item.OrchestrationName = inf.Record.OrchestrationName
		item.Version = "unknown"
		if inf.Record.OrchestrationVersion != nil {
			item.Version = *inf.Record.OrchestrationVersion
		}
		item.ExecutionID = exec
	case exec > 0 && startedIn(history) != nil:
		s := startedIn(history)
		item.OrchestrationName, item.Version, item.ExecutionID = s.Name, s.Version, exec
	default:
		name, version, found := startFromBatch(msgs)
		if found {
			item.OrchestrationName, item.Version = name, version
			item.ExecutionID = exec
			if item.ExecutionID == 0 {
				item.ExecutionID = InitialExecutionID
			}
		} else if exec > 0 && historyErr != nil {
			item.OrchestrationName, item.Version, item.ExecutionID = "unknown", "unknown", exec
		} else if allQueueMessages(msgs) && exec == 0 && inf == nil {
			// Messages for an instance that was never started: delete them
			// (contract test 50), so they do not pile up.
			p.deleteOrphans(ctx, g, key, instance, batch, nowMs)
			return nil, nil
		} else {
			// A completion or cancel racing ahead of its start: leave it queued
			// and unlocked, and let the caller try the next instance.
			return nil, nil
		}
	}
	// Re-check the filter under the flock, on what the files say now (not
	// the pass's cache): the pin may have changed since.
	if filter != nil {
		if ok, err := p.filterAllows(key, filter); err != nil || !ok {
			return nil, nil
		}
	}
	if historyErr != nil {
		item.History, item.HistoryError = []Event{}, historyErr
	} else {
		item.History = history
	}

	// Take the lease: fence above both the old lease's and the last committed
	// turn's (lease.json is not durable; instance.json is).
	var minFence uint64
	if inf != nil {
		minFence = inf.LastFence
	}
	st.prune(exists)
	var attempt uint32
	for _, n := range batch {
		st.Attempts[n]++
		delete(st.Delayed, n)
		attempt = max(attempt, st.Attempts[n])
	}
	st.Batch = batch
	next := lease.Lease{
		Token:        uuid.NewString(),
		Owner:        p.owner,
		Fence:        max(cur.Fence, minFence) + 1,
		AcquiredAtMs: nowMs,
		ExpiresAtMs:  nowMs + lockTimeout.Milliseconds(),
		Data:         st.encode(),
	}
	failpoint.Hit("fetch.before_lease_write")
	if err := g.Write(next); err != nil {
		return nil, Retryablef(op, err, "write lease of %q: %v", instance, err)
	}
	failpoint.Hit("fetch.after_lease_write")
	p.held.hold(key, next.ExpiresAtMs, nowMs)
	return &LockedOrchestrationItem{Item: item, LockToken: orchToken(key, next.Token), AttemptCount: attempt}, nil
}

func startedIn(h []Event) *OrchestrationStarted {
	for _, e := range h {
		if s, ok := e.Kind.(OrchestrationStarted); ok {
			return &s
		}
	}
	return nil
}

func startFromBatch(msgs []WorkItem) (name, version string, ok bool) {
	for _, m := range msgs {
		switch v := m.(type) {
		case StartOrchestration:
			return v.Orchestration, derefOr(v.Version, "unknown"), true
		case ContinueAsNew:
			return v.Orchestration, derefOr(v.Version, "unknown"), true
		}
	}
	return "", "", false
}

func allQueueMessages(msgs []WorkItem) bool {
	for _, m := range msgs {
		if _, ok := m.(QueueMessage); !ok {
			return false
		}
	}
	return len(msgs) > 0
}

func derefOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// deleteOrphans deletes messages for an instance that was never started
// (the caller holds its flock), by a commit record like an ack's that only
// deletes them. Not a delete outside the log: a replay after a power loss
// or a sync failure restores every message a record since the checkpoint
// published unless a later record deletes it, and a message dropped here
// would come back - to be delivered if the instance has been started since
// (TestReplayDoesNotResurrectDroppedOrphan). A failure leaves them queued,
// for the next fetch.
func (p *FSProvider) deleteOrphans(ctx context.Context, g *lease.Guard, key, instance string, batch []string, nowMs int64) {
	rec := &commitRecord{Instance: instance, Key: key, CommittedMs: nowMs}
	for _, n := range batch {
		rec.Delete = append(rec.Delete, queueRef{Queue: "orchestrator", Name: n})
	}
	if err := p.commitLocked(ctx, []*lease.Guard{g}, rec); err != nil {
		p.log.Warn("durofs: delete orphan messages", "instance", instance, "messages", len(batch), "err", err)
		return
	}
	if err := p.apply(ctx, g, rec, false); err != nil {
		p.applyDeferredTo(ctx, "orphan messages' deletion", key, instance, rec, err)
	}
}

// readHistory reads one execution's history, under the instance flock and
// after the commit its lease marks pending was finished (redoPending). A
// record that fails its CRC, an event that does not decode, or a history
// shorter than what was committed to it (readCommittedHistory) gives
// historyErr (the fetch still returns the item, lock held); err is an I/O
// failure.
func (p *FSProvider) readHistory(key string, exec uint64) (events []Event, historyErr *string, err error) {
	events, herr, err := p.loadHistory(key, exec, true)
	if herr != nil {
		msg := fmt.Sprintf("Failed to deserialize history: %v", herr)
		return nil, &msg, nil
	}
	return events, nil, err
}

// loadHistory reads and decodes one execution's history. herr says why the
// stored history cannot be used (corrupt, truncated, an undecodable event);
// err is an I/O failure.
// A caller holding the instance flock (locked), after redoPending, reads
// through the process's history cache (histcache.go), which decodes only
// the events appended since the process last read the history; an unlocked
// reader reads the file whole.
func (p *FSProvider) loadHistory(key string, exec uint64, locked bool) (events []Event, herr, err error) {
	committed, gen, err := p.committedCount(key, exec)
	if err != nil {
		return nil, nil, err
	}
	if locked {
		if events, ok := p.loadHistoryCached(key, exec, gen, committed); ok {
			return events, nil, nil
		}
	}
	// Read again, to say what is wrong (or to find that it no longer is).
	scan, err := history.Open(p.fs, p.historyPath(key, exec)).ReadCommitted(committed)
	if err != nil {
		if errors.Is(err, history.ErrCorrupt) {
			return nil, err, nil
		}
		return nil, nil, err
	}
	events = make([]Event, 0, len(scan.Records))
	for _, r := range scan.Records {
		var ev Event
		if err := ev.UnmarshalJSON(r.Payload); err != nil {
			return nil, fmt.Errorf("event %d: %w", r.ID, err), nil
		}
		events = append(events, ev)
	}
	return events, nil, nil
}

// readCommittedHistory reads an execution's history records and checks
// that none that was committed is missing: a history with fewer records
// than its state.json's event_count lost committed events (it was cut,
// emptied, removed or replaced), and yields a *history.TruncatedError
// (history.ErrCorrupt): it is never served and never extended. Without a
// readable state.json nothing is known, and nothing is checked.
//
// Why a shorter history is never a crash's doing: every apply (fs_commit.go,
// fs_gw.go) writes the history lines of a commit before the state.json that
// counts them; a commit a dead process left half-applied is finished under
// the instance flock before its history is read (redoPending, which the
// callers under the flock run first); after a power loss the replay at Open
// rewrites every record since the checkpoint before anything is served, and
// the checkpoint fsyncs a record's history before it passes the record.
// state.json is read before the history, so an unlocked reader racing with
// an apply sees the history at least as long as the count it read (see
// readExec for the rest of that race).
func (p *FSProvider) readCommittedHistory(key string, exec uint64) (history.Scan, error) {
	committed, _, err := p.committedCount(key, exec)
	if err != nil {
		return history.Scan{}, err
	}
	return history.Open(p.fs, p.historyPath(key, exec)).ReadCommitted(committed)
}

// committedCount is the number of events state.json says were committed to
// an execution's history (0 when there is no readable state.json: then
// nothing is known, and nothing is checked), and the execution's
// generation ("" if it has none).
func (p *FSProvider) committedCount(key string, exec uint64) (int, string, error) {
	ef, err := p.readExecutionFile(key, exec)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return 0, "", err
	}
	if err == nil && ef != nil {
		return int(min(ef.EventCount, uint64(math.MaxInt32))), ef.Generation, nil
	}
	return 0, "", nil
}

// AbandonOrchestrationItem implements Provider. Expiry is not checked (as in
// the SQLite reference): a lock that expired but was not taken over can still
// be abandoned.
func (p *FSProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	key, lt, err := p.orchTokenInstance(op, lockToken, "Invalid lock token")
	if err != nil {
		return err
	}
	wctx, cancel := p.endHeld(ctx, key, lt)
	g, _, err := p.lockExisting(wctx, key, true)
	cancel()
	if errors.Is(err, lease.ErrGone) {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	if err != nil {
		return p.leaseWaitErr(op, ctx, wctx, err, key, lt, "Invalid lock token", "")
	}
	defer g.Unlock()
	if err := p.redoPending(ctx, g, key); err != nil {
		return Retryablef(op, err, "recover pending commit: %v", err)
	}
	cur, _, err := g.Read()
	if err != nil {
		if errors.Is(err, lease.ErrCorrupt) {
			return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
		}
		return Retryablef(op, err, "read lease: %v", err)
	}
	if cur.Token == "" || cur.Token != lt {
		return Permanentf(op, ErrInvalidLockToken, "Invalid lock token")
	}
	nowMs := g.Now().UnixMilli()
	st := decodeOrchState(cur)
	// The route's messages, unchecked: a colliding instance's names in this
	// instance's lease state are never in its batch (fetchLocked checks
	// the bodies) and go when they do.
	var entries []fsqueue.Entry
	if delay > 0 || ignoreAttempt {
		if entries, err = p.orchQ.ListRoute(key); err != nil {
			return Retryablef(op, err, "list orchestrator queue: %v", err)
		}
	}
	if delay > 0 {
		// Every message of the instance visible now - the batch and any
		// that arrived while it was locked - becomes visible at now+delay
		// (contract §2.6); future-dated timers keep their time.
		until := nowMs + delay.Milliseconds()
		for _, n := range st.Batch {
			st.Delayed[n] = max(st.Delayed[n], until)
		}
		for _, e := range entries {
			if name := e.Name(); max(e.VisibleAtMs, st.Delayed[name]) <= nowMs {
				st.Delayed[name] = until
			}
		}
	}
	if ignoreAttempt {
		for _, e := range entries {
			if name := e.Name(); st.Attempts[name] > 0 {
				st.Attempts[name]--
			}
		}
	}
	st.Batch = nil
	cur.Token, cur.Owner, cur.ExpiresAtMs, cur.Data = "", "", 0, st.encode()
	failpoint.Hit("abandon.before_lease_write")
	if err := g.Write(cur); err != nil {
		return Retryablef(op, err, "write lease: %v", err)
	}
	failpoint.Hit("abandon.after_lease_write")
	if delay > 0 {
		p.deferDelayed(key, entries, st.Delayed, nowMs)
	}
	p.notify(wakeOrch)
	return nil
}

// deferDelayed tells the orchestrator queue of the messages of instance key
// among entries (its route's) that are visible by their names but that
// delayed (the Delayed of its lease state, read or written under its
// flock at nowMs) holds back, so that fetch passes of this process skip
// them without a look until then (fsqueue.Queue.Defer). Only a fetch of a
// batch clears a message's delay, and a message is fetched only once it is
// due, so the deferral never outlasts the delay; after a power loss the
// lease state may lose the delay, and then other processes deliver the
// message early, this one in time. A message of another instance that
// shares the route is left alone: its own lease says when it is due.
func (p *FSProvider) deferDelayed(key string, entries []fsqueue.Entry, delayed map[string]int64, nowMs int64) {
	if len(delayed) == 0 {
		return
	}
	for _, e := range entries {
		if e.VisibleAtMs > nowMs {
			continue
		}
		name := e.Name()
		at, ok := delayed[name]
		if !ok || at <= nowMs {
			continue
		}
		if m, ok, err := readQueued(p.orchQ, e); err != nil || !ok || m.Attrs[attrKey] != key {
			continue
		}
		p.orchQ.Defer(name, at)
	}
}

// RenewOrchestrationItemLock implements Provider.
func (p *FSProvider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	key, lt, err := p.orchTokenInstance(op, lockToken, "Lock token invalid, expired, or already acked")
	if err != nil {
		return err
	}
	wctx, cancel := p.endHeld(ctx, key, lt)
	g, _, err := p.lockExisting(wctx, key, true)
	cancel()
	if errors.Is(err, lease.ErrGone) {
		return Permanentf(op, ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
	}
	if err != nil {
		return p.leaseWaitErr(op, ctx, wctx, err, key, lt, "Lock token invalid, expired, or already acked", "Lock token invalid, expired, or already acked")
	}
	defer g.Unlock()
	if err := p.redoPending(ctx, g, key); err != nil { // a committed ack's token renews nothing
		return Retryablef(op, err, "recover pending commit: %v", err)
	}
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return Retryablef(op, err, "read lease: %v", err)
	}
	nowMs := g.Now().UnixMilli()
	if cur.Token == "" || cur.Token != lt {
		return Permanentf(op, ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
	}
	if !cur.HeldAt(nowMs) {
		return Permanentf(op, errTokenExpired, "Lock token invalid, expired, or already acked")
	}
	cur.ExpiresAtMs = nowMs + extendFor.Milliseconds()
	if err := g.Write(cur); err != nil {
		return Retryablef(op, err, "write lease: %v", err)
	}
	p.held.hold(key, cur.ExpiresAtMs, nowMs)
	return nil
}
