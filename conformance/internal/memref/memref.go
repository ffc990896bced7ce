// Package memref is an in-memory reference implementation of
// provider.Provider. It is a test fixture for the conformance suite: it lets
// the suite be validated without the filesystem provider, and nothing else
// should use it.
//
// memref implements the semantics of duroxide-contract.md §2.3–§2.15 that the
// conformance suite's categories need: the orchestrator queue with instance
// locks, batches, attempt counts and delayed visibility; acks as one atomic
// unit; per-execution history; the worker queue with peek-locks and tag
// filters; custom status; and the first-range capability filter. Fetches
// long-poll: with a poll timeout they wait, woken by every change, until work
// is available or the timeout passes.
//
// Sessions (§7.1: claim, affinity, lease expiry, last activity,
// RenewSessionLock, CleanupOrphanedSessions) are in sessions.go. The
// management capability (§2.19) is in admin.go.
// The KV store is not implemented; snapshots are always empty.
//
// All state lives in maps and slices guarded by one mutex; times are the
// real wall clock.
package memref

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/provider"
)

// pollStep bounds one long-poll wait, so that visibility times and lock
// expiries passing without any change are noticed.
const pollStep = 10 * time.Millisecond

// storeSeq numbers stores so tokens are unique across providers.
var storeSeq atomic.Uint64

// Provider is the in-memory provider. Create it with New.
type Provider struct {
	mu      sync.Mutex
	id      uint64
	seq     uint64 // enqueue order of both queues
	tokens  uint64
	orch    []*orchMsg
	work    []*workMsg
	locks   map[string]*instanceLock
	records map[string]*instanceRecord
	execs   map[string]map[uint64]*execution
	// sessions are the session rows by session id (sessions.go).
	sessions map[string]*session
	changed  chan struct{} // closed and replaced on every change
}

type orchMsg struct {
	seq       uint64
	instance  string
	item      provider.WorkItem
	visibleAt time.Time
	token     string // the fetch that batched it; "" when not batched
	attempts  uint32
}

type workMsg struct {
	seq       uint64
	item      provider.ActivityExecute
	visibleAt time.Time
	token     string
	lockedTil time.Time
	attempts  uint32
}

type instanceLock struct {
	token     string
	lockedTil time.Time
}

type instanceRecord struct {
	name          string
	version       *string
	currentExec   uint64
	parent        *string
	customStatus  *string
	statusVersion uint64
	// createdAtMs and updatedAtMs are the acks that created and last touched it.
	createdAtMs, updatedAtMs uint64
}

type execution struct {
	status  string
	output  *string
	pinned  *provider.SemVer
	history []provider.Event
	// corrupt makes the stored history undecodable (the CorruptHistory hook).
	corrupt bool
	// startedAtMs is when the record was created; completedAtMs is set by
	// the ack that writes a status other than Running.
	startedAtMs   uint64
	completedAtMs *uint64
}

// New returns an empty in-memory provider.
func New() provider.Provider {
	return &Provider{
		id:      storeSeq.Add(1),
		locks:   map[string]*instanceLock{},
		records: map[string]*instanceRecord{},
		execs:   map[string]map[uint64]*execution{},
		changed: make(chan struct{}),
	}
}

// CorruptHistory makes every stored history event of instance undecodable:
// fetches report a history error and reads fail. It panics if p is not a
// memref provider.
func CorruptHistory(p provider.Provider, instance string) {
	m := p.(*Provider)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.execs[instance] {
		if len(e.history) > 0 {
			e.corrupt = true
		}
	}
}

// MaxAttemptCount returns the maximum attempt count over the instance's
// orchestrator messages, locked or not (0 if it has none). It panics if p is
// not a memref provider.
func MaxAttemptCount(p provider.Provider, instance string) uint32 {
	m := p.(*Provider)
	m.mu.Lock()
	defer m.mu.Unlock()
	var max uint32
	for _, msg := range m.orch {
		if msg.instance == instance {
			max = maxU32(max, msg.attempts)
		}
	}
	return max
}

// Name implements provider.Provider.
func (m *Provider) Name() string { return "memref" }

// Version implements provider.Provider.
func (m *Provider) Version() string { return "0.1.0" }

// ---- helpers (callers hold m.mu) ----

func (m *Provider) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Provider) newToken() string {
	m.tokens++
	return fmt.Sprintf("memref-%d-%d", m.id, m.tokens)
}

func (m *Provider) nextSeq() uint64 {
	m.seq++
	return m.seq
}

func (m *Provider) execution(instance string, id uint64) *execution {
	return m.execs[instance][id]
}

// latestExec returns the highest execution id of instance with a record.
func (m *Provider) latestExec(instance string) (uint64, bool) {
	var latest uint64
	for id := range m.execs[instance] {
		latest = max(latest, id)
	}
	return latest, latest > 0
}

// currentExec is the record's current execution, or the latest one.
func (m *Provider) currentExec(instance string) (uint64, bool) {
	if rec := m.records[instance]; rec != nil {
		return rec.currentExec, true
	}
	return m.latestExec(instance)
}

func maxU32(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}

func semverLess(a, b provider.SemVer) bool {
	if a.Major != b.Major {
		return a.Major < b.Major
	}
	if a.Minor != b.Minor {
		return a.Minor < b.Minor
	}
	return a.Patch < b.Patch
}

// compatible applies the capability filter's first range to the pinned
// version of the instance's current execution. No record or no pin is
// compatible.
func (m *Provider) compatible(instance string, r provider.SemverRange) bool {
	id, ok := m.currentExec(instance)
	if !ok {
		return true
	}
	e := m.execution(instance, id)
	if e == nil || e.pinned == nil {
		return true
	}
	v := *e.pinned
	return !semverLess(v, r.Min) && !semverLess(r.Max, v)
}

func errPerm(op string, kind error, format string, args ...any) error {
	return provider.Permanentf(op, kind, format, args...)
}

// wait blocks until ch is closed, step passes, or ctx ends.
func wait(ctx context.Context, ch <-chan struct{}, step time.Duration) error {
	t := time.NewTimer(step)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// poll runs try until it returns a result or an error, waiting for changes
// up to pollTimeout.
func poll[T any](ctx context.Context, m *Provider, op string, pollTimeout time.Duration, try func(now time.Time) (*T, error)) (*T, error) {
	deadline := time.Now().Add(pollTimeout)
	for {
		if err := ctx.Err(); err != nil {
			return nil, provider.Retryablef(op, err, "context done")
		}
		m.mu.Lock()
		res, err := try(time.Now())
		changed := m.changed
		m.mu.Unlock()
		if err != nil || res != nil {
			return res, err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, nil
		}
		if err := wait(ctx, changed, min(remaining, pollStep)); err != nil {
			return nil, provider.Retryablef(op, err, "context done")
		}
	}
}

// ---- orchestrator queue ----

// EnqueueForOrchestrator implements provider.Provider.
func (m *Provider) EnqueueForOrchestrator(ctx context.Context, item provider.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	if item == nil {
		return errPerm(op, provider.ErrInvalidWorkItem, "nil work item")
	}
	if provider.QueueOf(item) != provider.OrchestratorQueue {
		return errPerm(op, provider.ErrInvalidWorkItem, "Invalid work item type %s for the orchestrator queue", item.Kind())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.orch = append(m.orch, &orchMsg{
		seq:       m.nextSeq(),
		instance:  provider.TargetInstance(item),
		item:      item,
		visibleAt: time.Now().Add(max(delay, 0)),
	})
	m.notify()
	return nil
}

// FetchOrchestrationItem implements provider.Provider.
func (m *Provider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*provider.LockedOrchestrationItem, error) {
	return poll(ctx, m, "fetch_orchestration_item", pollTimeout, func(now time.Time) (*provider.LockedOrchestrationItem, error) {
		return m.tryFetchOrchestration(now, lockTimeout, filter), nil
	})
}

func (m *Provider) tryFetchOrchestration(now time.Time, lockTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) *provider.LockedOrchestrationItem {
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil
	}
	skipped := map[string]bool{}
	for _, cand := range m.orch {
		inst := cand.instance
		if cand.visibleAt.After(now) || skipped[inst] {
			continue
		}
		skipped[inst] = true // whatever happens below, this instance is done
		if l := m.locks[inst]; l != nil && l.lockedTil.After(now) {
			continue
		}
		if filter != nil && !m.compatible(inst, filter.SupportedDuroxideVersions[0]) {
			continue
		}

		var batch []*orchMsg
		for _, msg := range m.orch {
			if msg.instance == inst && !msg.visibleAt.After(now) {
				batch = append(batch, msg)
			}
		}
		item, ok := m.resolve(inst, batch)
		if !ok {
			if allQueueMessages(batch) {
				m.orch = slices.DeleteFunc(m.orch, func(msg *orchMsg) bool { return slices.Contains(batch, msg) })
				m.notify()
				return m.tryFetchOrchestration(now, lockTimeout, filter) // the slice changed under the loop
			}
			continue // an orphaned completion or cancel: leave it and try the next instance
		}

		token := m.newToken()
		m.locks[inst] = &instanceLock{token: token, lockedTil: time.Now().Add(lockTimeout)}
		var attempts uint32
		for _, msg := range batch {
			msg.token = token
			msg.attempts++
			attempts = maxU32(attempts, msg.attempts)
			item.Messages = append(item.Messages, msg.item)
		}
		return &provider.LockedOrchestrationItem{Item: item, LockToken: token, AttemptCount: attempts}
	}
	return nil
}

func allQueueMessages(batch []*orchMsg) bool {
	for _, msg := range batch {
		if _, ok := msg.item.(provider.QueueMessage); !ok {
			return false
		}
	}
	return len(batch) > 0
}

// resolve finds the instance context of a batch (contract §2.4 step 4). It
// reports false when there is none: no record, no started history and no
// start message in the batch.
func (m *Provider) resolve(inst string, batch []*orchMsg) (provider.OrchestrationItem, bool) {
	item := provider.OrchestrationItem{Instance: inst, KVSnapshot: map[string]provider.KVEntry{}}
	latest, hasExec := m.latestExec(inst)

	switch rec := m.records[inst]; {
	case rec != nil:
		item.OrchestrationName = rec.name
		item.Version = "unknown"
		if rec.version != nil {
			item.Version = *rec.version
		}
		item.ExecutionID = rec.currentExec
	case hasExec && m.startedOf(inst, latest) != nil:
		s := m.startedOf(inst, latest)
		item.OrchestrationName, item.Version, item.ExecutionID = s.Name, s.Version, latest
	default:
		found := false
		for _, msg := range batch {
			switch w := msg.item.(type) {
			case provider.StartOrchestration:
				item.OrchestrationName, item.Version, found = w.Orchestration, deref(w.Version, "unknown"), true
			case provider.ContinueAsNew:
				item.OrchestrationName, item.Version, found = w.Orchestration, deref(w.Version, "unknown"), true
			}
			if found {
				break
			}
		}
		if !found {
			return item, false
		}
		item.ExecutionID = provider.InitialExecutionID
		if hasExec {
			item.ExecutionID = latest
		}
	}

	if e := m.execution(inst, item.ExecutionID); e != nil {
		if e.corrupt {
			msg := fmt.Sprintf("history deserialization failed for instance %q execution %d: corrupt event data", inst, item.ExecutionID)
			item.HistoryError = &msg
		} else {
			item.History = sortedCopy(e.history)
		}
	}
	return item, true
}

// startedOf returns the OrchestrationStarted of an execution, if readable.
func (m *Provider) startedOf(inst string, exec uint64) *provider.OrchestrationStarted {
	e := m.execution(inst, exec)
	if e == nil || e.corrupt {
		return nil
	}
	for _, ev := range e.history {
		if s, ok := ev.Kind.(provider.OrchestrationStarted); ok {
			return &s
		}
	}
	return nil
}

func deref(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

func sortedCopy(events []provider.Event) []provider.Event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b provider.Event) int {
		switch {
		case a.EventID < b.EventID:
			return -1
		case a.EventID > b.EventID:
			return 1
		}
		return 0
	})
	if out == nil {
		out = []provider.Event{}
	}
	return out
}

// lockOf returns the instance whose lock has token.
func (m *Provider) lockOf(token string) (string, *instanceLock) {
	for inst, l := range m.locks {
		if l.token == token {
			return inst, l
		}
	}
	return "", nil
}

// validateEvents checks event ids: non-zero, unique within the delta and new
// in the execution.
func validateEvents(op string, existing, delta []provider.Event) error {
	seen := map[uint64]bool{}
	for _, ev := range existing {
		seen[ev.EventID] = true
	}
	for _, ev := range delta {
		if ev.EventID == 0 {
			return errPerm(op, provider.ErrInvalidEvent, "event_id must be set by runtime")
		}
		if seen[ev.EventID] {
			return errPerm(op, provider.ErrDuplicateEvent, "duplicate event_id %d", ev.EventID)
		}
		seen[ev.EventID] = true
	}
	return nil
}

// AckOrchestrationItem implements provider.Provider.
func (m *Provider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []provider.Event, workerItems, orchestratorItems []provider.WorkItem, metadata provider.ExecutionMetadata, cancelledActivities []provider.ScheduledActivityIdentifier) error {
	const op = "ack_orchestration_item"
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()

	// Validate everything first; nothing changes on error and the lock stays.
	inst, lock := m.lockOf(lockToken)
	if lock == nil {
		return errPerm(op, provider.ErrInvalidLockToken, "Invalid lock token")
	}
	if !lock.lockedTil.After(now) {
		return errPerm(op, provider.ErrLockExpired, "Instance lock expired")
	}
	var existing []provider.Event
	if e := m.execution(inst, executionID); e != nil {
		existing = e.history
	}
	if err := validateEvents(op, existing, historyDelta); err != nil {
		return err
	}
	var workers []provider.ActivityExecute
	for _, w := range workerItems {
		ae, ok := w.(provider.ActivityExecute)
		if !ok {
			return errPerm(op, provider.ErrInvalidWorkItem, "Invalid work item type %s for the worker queue", kindOf(w))
		}
		workers = append(workers, ae)
	}
	for _, w := range orchestratorItems {
		if w == nil || provider.QueueOf(w) != provider.OrchestratorQueue {
			return errPerm(op, provider.ErrInvalidWorkItem, "Invalid work item type %s for the orchestrator queue", kindOf(w))
		}
	}

	// Apply.
	m.orch = slices.DeleteFunc(m.orch, func(msg *orchMsg) bool { return msg.instance == inst && msg.token == lockToken })

	rec := m.records[inst]
	if metadata.OrchestrationName != nil && metadata.OrchestrationVersion != nil {
		if rec == nil {
			rec = &instanceRecord{currentExec: executionID, parent: metadata.ParentInstanceID, createdAtMs: msOf(now)}
			m.records[inst] = rec
		}
		rec.name = *metadata.OrchestrationName
		rec.version = ptr(*metadata.OrchestrationVersion)
	}
	if m.execs[inst] == nil {
		m.execs[inst] = map[uint64]*execution{}
	}
	e := m.execs[inst][executionID]
	if e == nil {
		e = &execution{status: "Running", startedAtMs: msOf(now)}
		m.execs[inst][executionID] = e
	}
	if metadata.PinnedDuroxideVersion != nil {
		e.pinned = ptr(*metadata.PinnedDuroxideVersion)
	}
	if rec != nil {
		rec.currentExec = max(rec.currentExec, executionID)
		rec.updatedAtMs = msOf(now)
	}
	e.history = append(e.history, historyDelta...)
	if metadata.Status != nil {
		e.status = *metadata.Status
		e.output = metadata.Output
		e.completedAtMs = nil
		if e.status != "Running" {
			e.completedAtMs = ptr(msOf(now))
		}
	}
	if rec != nil {
		for i := len(historyDelta) - 1; i >= 0; i-- {
			if cs, ok := historyDelta[i].Kind.(provider.CustomStatusUpdated); ok {
				rec.customStatus = cs.Status
				rec.statusVersion++
				break
			}
		}
	}
	for _, ae := range workers {
		m.work = append(m.work, &workMsg{seq: m.nextSeq(), item: ae, visibleAt: now})
	}
	for _, c := range cancelledActivities {
		m.work = slices.DeleteFunc(m.work, func(w *workMsg) bool {
			return w.item.Instance == c.Instance && w.item.ExecutionID == c.ExecutionID && w.item.ID == c.ActivityID
		})
	}
	for _, w := range orchestratorItems {
		m.orch = append(m.orch, &orchMsg{
			seq:       m.nextSeq(),
			instance:  provider.TargetInstance(w),
			item:      w,
			visibleAt: time.UnixMilli(provider.VisibleAtMs(w, now.UnixMilli())),
		})
	}
	delete(m.locks, inst)
	m.notify()
	return nil
}

func kindOf(w provider.WorkItem) string {
	if w == nil {
		return "<nil>"
	}
	return w.Kind()
}

func ptr[T any](v T) *T { return &v }

// AbandonOrchestrationItem implements provider.Provider. Expiry is not
// checked: a token nobody else has re-locked can still abandon.
func (m *Provider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	m.mu.Lock()
	defer m.mu.Unlock()
	inst, lock := m.lockOf(lockToken)
	if lock == nil {
		return errPerm(op, provider.ErrInvalidLockToken, "Invalid lock token")
	}
	now := time.Now()
	for _, msg := range m.orch {
		if msg.instance != inst {
			continue
		}
		if msg.token == lockToken {
			msg.token = ""
		}
		if ignoreAttempt && msg.attempts > 0 {
			msg.attempts--
		}
		if delay > 0 && !msg.visibleAt.After(now) {
			msg.visibleAt = now.Add(delay)
		}
	}
	delete(m.locks, inst)
	m.notify()
	return nil
}

// RenewOrchestrationItemLock implements provider.Provider.
func (m *Provider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	_, lock := m.lockOf(lockToken)
	if lock == nil || !lock.lockedTil.After(now) {
		return errPerm(op, provider.ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
	}
	lock.lockedTil = now.Add(extendFor)
	return nil
}

// ---- history ----

// Read implements provider.Provider.
func (m *Provider) Read(ctx context.Context, instance string) ([]provider.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	latest, ok := m.latestExec(instance)
	if !ok {
		return []provider.Event{}, nil
	}
	return m.readLocked("read", instance, latest)
}

// ReadWithExecution implements provider.Provider.
func (m *Provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readLocked("read_with_execution", instance, executionID)
}

func (m *Provider) readLocked(op, instance string, executionID uint64) ([]provider.Event, error) {
	e := m.execution(instance, executionID)
	if e == nil {
		return []provider.Event{}, nil
	}
	if e.corrupt {
		return nil, errPerm(op, provider.ErrCorrupt, "history of %q execution %d cannot be decoded", instance, executionID)
	}
	return sortedCopy(e.history), nil
}

// AppendWithExecution implements provider.Provider.
func (m *Provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []provider.Event) error {
	const op = "append_with_execution"
	m.mu.Lock()
	defer m.mu.Unlock()
	var existing []provider.Event
	if e := m.execution(instance, executionID); e != nil {
		existing = e.history
	}
	if err := validateEvents(op, existing, events); err != nil {
		return err
	}
	if m.execs[instance] == nil {
		m.execs[instance] = map[uint64]*execution{}
	}
	e := m.execs[instance][executionID]
	if e == nil {
		e = &execution{status: "Running", startedAtMs: msOf(time.Now())}
		m.execs[instance][executionID] = e
	}
	e.history = append(e.history, events...)
	return nil
}

// ---- worker queue ----

// EnqueueForWorker implements provider.Provider.
func (m *Provider) EnqueueForWorker(ctx context.Context, item provider.WorkItem) error {
	ae, ok := item.(provider.ActivityExecute)
	if !ok {
		return errPerm("enqueue_for_worker", provider.ErrInvalidWorkItem, "Invalid work item type %s for the worker queue", kindOf(item))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.work = append(m.work, &workMsg{seq: m.nextSeq(), item: ae, visibleAt: time.Now()})
	m.notify()
	return nil
}

func tagMatches(f provider.TagFilter, tag *string) bool {
	switch f.Mode {
	case provider.TagDefaultOnly:
		return tag == nil
	case provider.TagsOnly:
		return tag != nil && slices.Contains(f.Set, *tag)
	case provider.TagDefaultAnd:
		return tag == nil || slices.Contains(f.Set, *tag)
	case provider.TagAny:
		return true
	}
	return false
}

// FetchWorkItem implements provider.Provider.
func (m *Provider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *provider.SessionFetchConfig, tagFilter provider.TagFilter) (*provider.LockedWorkItem, error) {
	const op = "fetch_work_item"
	if tagFilter.Mode == provider.TagNone {
		return nil, nil
	}
	return poll(ctx, m, op, pollTimeout, func(now time.Time) (*provider.LockedWorkItem, error) {
		for _, w := range m.work {
			if w.visibleAt.After(now) || (w.token != "" && w.lockedTil.After(now)) {
				continue
			}
			if !m.sessionEligible(w, session, now) || !tagMatches(tagFilter, w.item.Tag) {
				continue
			}
			w.token = m.newToken()
			w.lockedTil = time.Now().Add(lockTimeout)
			w.attempts++
			m.claimSession(w, session, time.Now())
			return &provider.LockedWorkItem{Item: w.item, LockToken: w.token, AttemptCount: w.attempts}, nil
		}
		return nil, nil
	})
}

// liveWork returns the work item locked by token with an unexpired lock.
func (m *Provider) liveWork(token string, now time.Time) (int, *workMsg) {
	for i, w := range m.work {
		if w.token == token && w.lockedTil.After(now) {
			return i, w
		}
	}
	return -1, nil
}

// AckWorkItem implements provider.Provider.
func (m *Provider) AckWorkItem(ctx context.Context, token string, completion provider.WorkItem) error {
	const op = "ack_work_item"
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	i, w := m.liveWork(token, now)
	if i < 0 {
		return errPerm(op, provider.ErrNotFound, "work item not found: lock expired, cancelled, or already acked")
	}
	if completion != nil {
		switch completion.(type) {
		case provider.ActivityCompleted, provider.ActivityFailed:
		default:
			return errPerm(op, provider.ErrInvalidWorkItem, "Invalid completion type %s", completion.Kind())
		}
	}
	m.touchSession(w, now)
	m.work = slices.Delete(m.work, i, i+1)
	if completion != nil {
		m.orch = append(m.orch, &orchMsg{
			seq:       m.nextSeq(),
			instance:  provider.TargetInstance(completion),
			item:      completion,
			visibleAt: now,
		})
	}
	m.notify()
	return nil
}

// RenewWorkItemLock implements provider.Provider.
func (m *Provider) RenewWorkItemLock(ctx context.Context, token string, extendFor time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	_, w := m.liveWork(token, now)
	if w == nil {
		return errPerm("renew_work_item_lock", provider.ErrInvalidLockToken, "work item lock invalid, expired, or already acked")
	}
	w.lockedTil = now.Add(extendFor)
	m.touchSession(w, now)
	return nil
}

// AbandonWorkItem implements provider.Provider. Expiry is not checked.
func (m *Provider) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.work {
		if w.token != token {
			continue
		}
		w.token = ""
		w.lockedTil = time.Time{}
		w.visibleAt = time.Now().Add(max(delay, 0))
		if ignoreAttempt && w.attempts > 0 {
			w.attempts--
		}
		m.notify()
		return nil
	}
	return errPerm("abandon_work_item", provider.ErrInvalidLockToken, "Invalid lock token")
}

// ---- custom status ----

// GetCustomStatus implements provider.Provider.
func (m *Provider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*provider.CustomStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.records[instance]
	if rec == nil || rec.statusVersion <= lastSeenVersion {
		return nil, nil
	}
	cs := &provider.CustomStatus{Version: rec.statusVersion}
	if rec.customStatus != nil {
		cs.Status = ptr(*rec.customStatus)
	}
	return cs, nil
}

var _ provider.Provider = (*Provider)(nil)
