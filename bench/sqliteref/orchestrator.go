package sqliteref

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/provider"
)

// The orchestrator queue: enqueue, fetch (instance lock + batch), ack (one
// transaction), abandon and renew. See the package documentation.

const (
	// sqlOrchAny is the long poll's cheap check: is there a visible message
	// of an unlocked instance?
	sqlOrchAny = `SELECT 1 FROM orchestrator_queue q
WHERE q.visible_at <= ?1
  AND NOT EXISTS (SELECT 1 FROM instance_locks il WHERE il.instance_id = q.instance_id AND il.locked_until > ?1)
LIMIT 1`
	// sqlOrchCandidates pages through visible messages of unlocked
	// instances in FIFO order (the oldest message decides an instance's turn).
	sqlOrchCandidates = `SELECT q.id, q.instance_id FROM orchestrator_queue q
WHERE q.visible_at <= ?1 AND q.id > ?2
  AND NOT EXISTS (SELECT 1 FROM instance_locks il WHERE il.instance_id = q.instance_id AND il.locked_until > ?1)
ORDER BY q.id LIMIT 64`
	candidatePage = 64

	sqlInstanceRecord = `SELECT orchestration_name, orchestration_version, current_execution_id FROM instances WHERE instance_id = ?`
	// sqlLatestExecution is the highest execution id with a record or history.
	sqlLatestExecution = `SELECT MAX(x) FROM (
  SELECT MAX(execution_id) AS x FROM executions WHERE instance_id = ?1
  UNION ALL SELECT MAX(execution_id) FROM history WHERE instance_id = ?1)`
	sqlPinned   = `SELECT pinned_major, pinned_minor, pinned_patch FROM executions WHERE instance_id = ? AND execution_id = ?`
	sqlBatch    = `SELECT id, work_item, attempt_count FROM orchestrator_queue WHERE instance_id = ? AND visible_at <= ? ORDER BY id`
	sqlStarted  = `SELECT event_data FROM history WHERE instance_id = ? AND execution_id = ? AND event_type = 'OrchestrationStarted' ORDER BY event_id LIMIT 1`
	sqlOrchDel  = `DELETE FROM orchestrator_queue WHERE id = ?`
	sqlLockTake = `INSERT INTO instance_locks (instance_id, lock_token, locked_until, locked_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT(instance_id) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until, locked_at = excluded.locked_at
WHERE instance_locks.locked_until <= ?4`
	sqlBatchStamp = `UPDATE orchestrator_queue SET lock_token = ?1, attempt_count = attempt_count + 1 WHERE instance_id = ?2 AND visible_at <= ?3`
	sqlOrchInsert = `INSERT INTO orchestrator_queue (instance_id, work_item, visible_at) VALUES (?, ?, ?)`
	sqlLockOf     = `SELECT instance_id, locked_until FROM instance_locks WHERE lock_token = ?`
)

// EnqueueForOrchestrator implements provider.Provider. The item is visible
// at now+delay; the instance record is not created.
func (p *Provider) EnqueueForOrchestrator(ctx context.Context, item provider.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	w, ok := deref(item)
	if !ok {
		return provider.Permanentf(op, provider.ErrInvalidWorkItem, "Invalid work item type: nil")
	}
	if provider.QueueOf(w) != provider.OrchestratorQueue {
		return provider.Permanentf(op, provider.ErrInvalidWorkItem, "Invalid work item type: %s belongs to the worker queue", w.Kind())
	}
	data, err := provider.MarshalWorkItem(w)
	if err != nil {
		return provider.Permanentf(op, provider.ErrInvalidWorkItem, "encode work item: %v", err)
	}
	err = p.write(ctx, op, func(t *wtx) error {
		_, err := t.exec(sqlOrchInsert, provider.TargetInstance(w), string(data), t.now+durMs(delay))
		return err
	})
	if err == nil {
		p.notify()
	}
	return err
}

// fetched is what the fetch transaction locked.
type fetched struct {
	instance, name, version, token string
	execID                         uint64
	attempts                       uint32
	messages                       []provider.WorkItem
}

// FetchOrchestrationItem implements provider.Provider. It long-polls up to
// pollTimeout.
func (p *Provider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*provider.LockedOrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, nil
	}
	return poll(ctx, p, op, pollTimeout, func() (*provider.LockedOrchestrationItem, error) {
		return p.tryFetchOrchestration(ctx, op, lockTimeout, filter)
	})
}

func (p *Provider) tryFetchOrchestration(ctx context.Context, op string, lockTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*provider.LockedOrchestrationItem, error) {
	// A read first: the write lock is taken only when there is a candidate.
	var one int
	switch err := p.reader(ctx).scan(sqlOrchAny, []any{time.Now().UnixMilli()}, &one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, p.classify(op, err)
	}

	var f *fetched
	err := p.write(ctx, op, func(t *wtx) error {
		var err error
		f, err = p.fetchTx(t, lockTimeout, filter)
		return err
	})
	if err != nil || f == nil {
		return nil, err
	}

	// The lock is committed; the history of the locked execution cannot
	// change under it (only this lock's ack appends to it), so it is read
	// outside the write transaction.
	history, historyErr, err := readHistory(p.reader(ctx), f.instance, f.execID)
	if err != nil {
		p.releaseFetch(f.token)
		return nil, p.classify(op, err)
	}
	item := provider.OrchestrationItem{
		Instance:          f.instance,
		OrchestrationName: f.name,
		ExecutionID:       f.execID,
		Version:           f.version,
		History:           history,
		Messages:          f.messages,
		KVSnapshot:        map[string]provider.KVEntry{},
	}
	if historyErr != nil {
		item.History, item.HistoryError = []provider.Event{}, historyErr
	}
	return &provider.LockedOrchestrationItem{Item: item, LockToken: f.token, AttemptCount: f.attempts}, nil
}

// releaseFetch undoes a committed fetch whose history could not be read:
// the lock goes and the attempt is not counted.
func (p *Provider) releaseFetch(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.write(ctx, "fetch_orchestration_item", func(t *wtx) error {
		if _, err := t.exec(`UPDATE orchestrator_queue SET lock_token = NULL, attempt_count = MAX(attempt_count - 1, 0) WHERE lock_token = ?`, token); err != nil {
			return err
		}
		_, err := t.exec(`DELETE FROM instance_locks WHERE lock_token = ?`, token)
		return err
	})
	if err != nil {
		p.log.Warn("sqliteref: release a fetch lock; it expires on its own", "err", err)
	}
	p.notify()
}

// fetchTx finds the first instance it can lock, in FIFO order of its oldest
// visible message, and locks it (duroxide-contract §2.4).
func (p *Provider) fetchTx(t *wtx, lockTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*fetched, error) {
	tried := map[string]bool{}
	var after int64
	for {
		type cand struct {
			id       int64
			instance string
		}
		rows, err := t.query(sqlOrchCandidates, t.now, after)
		if err != nil {
			return nil, err
		}
		var page []cand
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.id, &c.instance); err != nil {
				rows.Close()
				return nil, err
			}
			page = append(page, c)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		for _, c := range page {
			after = c.id
			if tried[c.instance] {
				continue
			}
			tried[c.instance] = true
			f, err := p.tryLock(t, c.instance, lockTimeout, filter)
			if f != nil || err != nil {
				return f, err
			}
		}
		if len(page) < candidatePage {
			return nil, nil
		}
	}
}

// tryLock locks instance and stamps its visible messages, or returns nil if
// it must be skipped: incompatible with the filter, or no instance context
// (messages racing ahead of their start; QueueMessages for an instance that
// never existed are deleted).
func (p *Provider) tryLock(t *wtx, instance string, lockTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*fetched, error) {
	var (
		name, version sql.NullString
		recExec       int64
		hasRecord     = true
	)
	if err := t.scan(sqlInstanceRecord, []any{instance}, &name, &version, &recExec); errors.Is(err, sql.ErrNoRows) {
		hasRecord = false
	} else if err != nil {
		return nil, err
	}
	// The current execution: the record's, else the latest one.
	var latest sql.NullInt64
	current := recExec
	if !hasRecord {
		if err := t.scan(sqlLatestExecution, []any{instance}, &latest); err != nil {
			return nil, err
		}
		current = latest.Int64
	}

	// The capability filter, before locking and before any history is read.
	if filter != nil && current > 0 {
		ok, err := compatible(&t.runner, instance, current, filter)
		if err != nil || !ok {
			return nil, err
		}
	}

	// The batch: every visible message of the instance.
	rows, err := t.query(sqlBatch, instance, t.now)
	if err != nil {
		return nil, err
	}
	var (
		msgs        []provider.WorkItem
		maxAttempts uint32
		undecodable []int64
	)
	for rows.Next() {
		var (
			id       int64
			data     string
			attempts int64
		)
		if err := rows.Scan(&id, &data, &attempts); err != nil {
			rows.Close()
			return nil, err
		}
		w, err := provider.UnmarshalWorkItem([]byte(data))
		if err != nil {
			undecodable = append(undecodable, id)
			p.log.Warn("sqliteref: dropping an undecodable orchestrator message", "instance", instance, "id", id, "err", err)
			continue
		}
		msgs = append(msgs, w)
		maxAttempts = max(maxAttempts, uint32(min(attempts, math.MaxUint32-1)))
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	for _, id := range undecodable {
		if _, err := t.exec(sqlOrchDel, id); err != nil {
			return nil, err
		}
	}
	if len(msgs) == 0 {
		return nil, nil
	}

	// The instance context (contract §2.4 step 4).
	f := &fetched{instance: instance, messages: msgs, attempts: maxAttempts + 1}
	switch {
	case hasRecord:
		f.name, f.version, f.execID = name.String, "unknown", uint64(recExec)
		if version.Valid {
			f.version = version.String
		}
	default:
		var started *provider.OrchestrationStarted
		corrupt := false
		if latest.Valid {
			var data string
			switch err := t.scan(sqlStarted, []any{instance, latest.Int64}, &data); {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return nil, err
			default:
				var ev provider.Event
				if err := ev.UnmarshalJSON([]byte(data)); err != nil {
					corrupt = true
				} else if s, ok := kindAs[provider.OrchestrationStarted](ev.Kind); ok {
					started = &s
				}
			}
		}
		if started != nil {
			f.name, f.version, f.execID = started.Name, started.Version, uint64(latest.Int64)
			break
		}
		if n, v, ok := startFromBatch(msgs); ok {
			f.name, f.version, f.execID = n, v, provider.InitialExecutionID
			if latest.Valid && latest.Int64 > 0 {
				f.execID = uint64(latest.Int64)
			}
			break
		}
		if latest.Valid && corrupt {
			f.name, f.version, f.execID = "unknown", "unknown", uint64(latest.Int64)
			break
		}
		if allQueueMessages(msgs) && !latest.Valid {
			// Mailbox messages for an instance that never existed (test 50).
			_, err := t.exec(`DELETE FROM orchestrator_queue WHERE instance_id = ? AND visible_at <= ?`, instance, t.now)
			return nil, err
		}
		return nil, nil // a completion or cancel ahead of its start: leave it, try the next instance
	}

	// Take the instance lock (or steal an expired one) and stamp the batch.
	f.token = uuid.NewString()
	n, err := t.execN(sqlLockTake, instance, f.token, t.now+durMs(lockTimeout), t.now)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil // locked meanwhile (cannot happen under BEGIN IMMEDIATE)
	}
	if _, err := t.exec(sqlBatchStamp, f.token, instance, t.now); err != nil {
		return nil, err
	}
	return f, nil
}

// compatible applies the filter's first range to the pinned version of an
// execution; no record or no pin is compatible.
func compatible(r *runner, instance string, exec int64, filter *provider.DispatcherCapabilityFilter) (bool, error) {
	var maj, mnr, pat sql.NullInt64
	switch err := r.scan(sqlPinned, []any{instance, exec}, &maj, &mnr, &pat); {
	case errors.Is(err, sql.ErrNoRows):
		return true, nil
	case err != nil:
		return false, err
	}
	if !maj.Valid || !mnr.Valid || !pat.Valid {
		return true, nil
	}
	v := provider.SemVer{Major: uint64(maj.Int64), Minor: uint64(mnr.Int64), Patch: uint64(pat.Int64)}
	return filter.IsCompatible(v), nil
}

func startFromBatch(msgs []provider.WorkItem) (name, version string, ok bool) {
	for _, m := range msgs {
		switch v := m.(type) {
		case provider.StartOrchestration:
			return v.Orchestration, derefOr(v.Version, "unknown"), true
		case provider.ContinueAsNew:
			return v.Orchestration, derefOr(v.Version, "unknown"), true
		}
	}
	return "", "", false
}

func allQueueMessages(msgs []provider.WorkItem) bool {
	for _, m := range msgs {
		if _, ok := m.(provider.QueueMessage); !ok {
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

// kindAs returns an event kind as T, accepting T or *T.
func kindAs[T provider.EventKind](k provider.EventKind) (T, bool) {
	switch v := any(k).(type) {
	case T:
		return v, true
	case *T:
		if v != nil {
			return *v, true
		}
	}
	var zero T
	return zero, false
}

// encodedEvent is a history row ready to insert.
type encodedEvent struct {
	id   int64
	typ  string
	data string
}

// encodeEvents validates and encodes a history delta: ids set, unique
// within the delta, representable.
func encodeEvents(op string, events []provider.Event) ([]encodedEvent, error) {
	out := make([]encodedEvent, 0, len(events))
	seen := make(map[uint64]bool, len(events))
	for _, ev := range events {
		if ev.EventID == 0 {
			return nil, provider.Permanentf(op, provider.ErrInvalidEvent, "event_id must be set by runtime")
		}
		if ev.EventID > math.MaxInt64 {
			return nil, provider.Permanentf(op, provider.ErrInvalidEvent, "event_id %d is out of range", ev.EventID)
		}
		if seen[ev.EventID] {
			return nil, provider.Permanentf(op, provider.ErrDuplicateEvent, "duplicate event_id %d in the history delta (UNIQUE constraint)", ev.EventID)
		}
		seen[ev.EventID] = true
		raw, err := ev.MarshalJSON()
		if err != nil {
			return nil, provider.Permanentf(op, provider.ErrInvalidEvent, "encode event %d: %v", ev.EventID, err)
		}
		typ := "Unknown"
		if k, ok := deref(ev.Kind); ok {
			typ = k.Type()
		}
		out = append(out, encodedEvent{id: int64(ev.EventID), typ: typ, data: string(raw)})
	}
	return out, nil
}

// insertEvents appends encoded events to an execution; a duplicate event id
// fails with ErrDuplicateEvent (the primary key; existing rows are never
// read or rewritten).
func insertEvents(t *wtx, op, instance string, execID int64, events []encodedEvent) error {
	for _, e := range events {
		if _, err := t.exec(`INSERT INTO history (instance_id, execution_id, event_id, event_type, event_data) VALUES (?, ?, ?, ?, ?)`,
			instance, execID, e.id, e.typ, e.data); err != nil {
			if isConstraint(err) {
				return provider.Permanentf(op, provider.ErrDuplicateEvent, "duplicate event_id %d in execution %d (UNIQUE constraint)", e.id, execID)
			}
			return err
		}
	}
	return nil
}

// workerRow is an ActivityExecute ready to insert.
type workerRow struct {
	ae   provider.ActivityExecute
	data string
}

// orchRow is an orchestrator message ready to insert.
type orchRow struct {
	instance string
	data     string
	// visibleAt is a TimerFired's fire time; -1 means "at the ack's now".
	visibleAt int64
}

// ackPlan is an ack's input, validated and encoded before its transaction.
type ackPlan struct {
	events  []encodedEvent
	custom  *provider.CustomStatusUpdated
	workers []workerRow
	orch    []orchRow
}

func planAck(op string, executionID uint64, delta []provider.Event, workerItems, orchestratorItems []provider.WorkItem) (*ackPlan, error) {
	if executionID == 0 || executionID > math.MaxInt64 {
		return nil, provider.Permanentf(op, provider.ErrInvalidEvent, "execution_id must be set by runtime")
	}
	events, err := encodeEvents(op, delta)
	if err != nil {
		return nil, err
	}
	pl := &ackPlan{events: events}
	for i := len(delta) - 1; i >= 0; i-- {
		if cs, ok := kindAs[provider.CustomStatusUpdated](delta[i].Kind); ok {
			pl.custom = &cs
			break
		}
	}
	for _, w := range workerItems {
		v, _ := deref(w)
		ae, ok := v.(provider.ActivityExecute)
		if !ok {
			return nil, provider.Permanentf(op, provider.ErrInvalidWorkItem, "Invalid work item type: %s in worker_items", kindOf(w))
		}
		data, err := provider.MarshalWorkItem(ae)
		if err != nil {
			return nil, provider.Permanentf(op, provider.ErrInvalidWorkItem, "encode worker item: %v", err)
		}
		pl.workers = append(pl.workers, workerRow{ae: ae, data: string(data)})
	}
	for _, w := range orchestratorItems {
		v, ok := deref(w)
		if !ok || provider.QueueOf(v) != provider.OrchestratorQueue {
			return nil, provider.Permanentf(op, provider.ErrInvalidWorkItem, "Invalid work item type: %s in orchestrator_items", kindOf(w))
		}
		data, err := provider.MarshalWorkItem(v)
		if err != nil {
			return nil, provider.Permanentf(op, provider.ErrInvalidWorkItem, "encode orchestrator item: %v", err)
		}
		row := orchRow{instance: provider.TargetInstance(v), data: string(data), visibleAt: -1}
		if tf, ok := v.(provider.TimerFired); ok {
			row.visibleAt = int64(min(tf.FireAtMs, math.MaxInt64)) // a timer fires at its fire time
		}
		pl.orch = append(pl.orch, row)
	}
	return pl, nil
}

func kindOf(w provider.WorkItem) string {
	if v, ok := deref(w); ok {
		return v.Kind()
	}
	return "nil"
}

// AckOrchestrationItem implements provider.Provider: one transaction that
// validates the lock, applies the turn and releases the lock, or changes
// nothing (the lock stays held).
func (p *Provider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []provider.Event, workerItems, orchestratorItems []provider.WorkItem, metadata provider.ExecutionMetadata, cancelledActivities []provider.ScheduledActivityIdentifier) error {
	const op = "ack_orchestration_item"
	// Validation and encoding happen before the write lock is taken.
	plan, planErr := planAck(op, executionID, historyDelta, workerItems, orchestratorItems)
	err := p.write(ctx, op, func(t *wtx) error {
		var (
			instance    string
			lockedUntil int64
		)
		switch err := t.scan(sqlLockOf, []any{lockToken}, &instance, &lockedUntil); {
		case errors.Is(err, sql.ErrNoRows):
			return provider.Permanentf(op, provider.ErrInvalidLockToken, "Invalid lock token")
		case err != nil:
			return err
		}
		if lockedUntil <= t.now {
			return provider.Permanentf(op, provider.ErrLockExpired, "Instance lock expired")
		}
		if planErr != nil {
			return planErr
		}
		exec := int64(executionID)
		now := t.now

		// The fetched batch (late arrivals carry no token and stay).
		if _, err := t.exec(`DELETE FROM orchestrator_queue WHERE lock_token = ?`, lockToken); err != nil {
			return err
		}
		// Instance record: created with name and version (parent set only
		// then); name and version updated on every ack that carries them.
		if metadata.OrchestrationName != nil && metadata.OrchestrationVersion != nil {
			if _, err := t.exec(`INSERT INTO instances (instance_id, orchestration_name, orchestration_version, current_execution_id, parent_instance_id, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
ON CONFLICT(instance_id) DO UPDATE SET orchestration_name = excluded.orchestration_name, orchestration_version = excluded.orchestration_version`,
				instance, *metadata.OrchestrationName, *metadata.OrchestrationVersion, exec, nullString(metadata.ParentInstanceID), now); err != nil {
				return err
			}
		}
		// Execution record, created even without an instance record.
		if _, err := t.exec(`INSERT INTO executions (instance_id, execution_id, status, started_at) VALUES (?, ?, 'Running', ?) ON CONFLICT DO NOTHING`,
			instance, exec, now); err != nil {
			return err
		}
		if v := metadata.PinnedDuroxideVersion; v != nil {
			if v.Major > math.MaxInt64 || v.Minor > math.MaxInt64 || v.Patch > math.MaxInt64 {
				return provider.Permanentf(op, provider.ErrInvalidEvent, "pinned version %s is out of range", v)
			}
			if _, err := t.exec(`UPDATE executions SET pinned_major = ?, pinned_minor = ?, pinned_patch = ? WHERE instance_id = ? AND execution_id = ?`,
				int64(v.Major), int64(v.Minor), int64(v.Patch), instance, exec); err != nil {
				return err
			}
		}
		if _, err := t.exec(`UPDATE instances SET current_execution_id = MAX(current_execution_id, ?2), updated_at = ?3 WHERE instance_id = ?1`,
			instance, exec, now); err != nil {
			return err
		}
		if err := insertEvents(t, op, instance, exec, plan.events); err != nil {
			return err
		}
		if metadata.Status != nil {
			var completed sql.NullInt64
			if *metadata.Status != "Running" {
				completed = sql.NullInt64{Int64: now, Valid: true}
			}
			if _, err := t.exec(`UPDATE executions SET status = ?, output = ?, completed_at = ? WHERE instance_id = ? AND execution_id = ?`,
				*metadata.Status, nullString(metadata.Output), completed, instance, exec); err != nil {
				return err
			}
		}
		if plan.custom != nil {
			if _, err := t.exec(`UPDATE instances SET custom_status = ?, custom_status_version = custom_status_version + 1 WHERE instance_id = ?`,
				nullString(plan.custom.Status), instance); err != nil {
				return err
			}
		}
		// Worker items first, then cancellations (test 86).
		for _, w := range plan.workers {
			if err := insertWorker(t, w); err != nil {
				return err
			}
		}
		for _, c := range cancelledActivities {
			if c.ExecutionID > math.MaxInt64 || c.ActivityID > math.MaxInt64 {
				continue // no such row can exist
			}
			if _, err := t.exec(`DELETE FROM worker_queue WHERE instance_id = ? AND execution_id = ? AND activity_id = ?`,
				c.Instance, int64(c.ExecutionID), int64(c.ActivityID)); err != nil {
				return err
			}
		}
		for _, o := range plan.orch {
			vis := o.visibleAt
			if vis < 0 {
				vis = now
			}
			if _, err := t.exec(sqlOrchInsert, o.instance, o.data, vis); err != nil {
				return err
			}
		}
		// The lock must still be valid at the commit point (§2.5 step 14).
		if time.Now().UnixMilli() >= lockedUntil {
			return provider.Permanentf(op, provider.ErrLockExpired, "Instance lock expired")
		}
		_, err := t.exec(`DELETE FROM instance_locks WHERE lock_token = ?`, lockToken)
		return err
	})
	if err == nil {
		p.notify()
	}
	return err
}

// AbandonOrchestrationItem implements provider.Provider. Expiry is not
// checked: a lock that expired but was not taken over can still be
// abandoned. The instance's visible messages are delayed by delay (so the
// batch keeps its order); with ignoreAttempt the batch's attempt increment
// is undone.
func (p *Provider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	err := p.write(ctx, op, func(t *wtx) error {
		var (
			instance    string
			lockedUntil int64
		)
		switch err := t.scan(sqlLockOf, []any{lockToken}, &instance, &lockedUntil); {
		case errors.Is(err, sql.ErrNoRows):
			return provider.Permanentf(op, provider.ErrInvalidLockToken, "Invalid lock token")
		case err != nil:
			return err
		}
		if ignoreAttempt {
			if _, err := t.exec(`UPDATE orchestrator_queue SET attempt_count = MAX(attempt_count - 1, 0) WHERE lock_token = ?`, lockToken); err != nil {
				return err
			}
		}
		if d := durMs(delay); d > 0 {
			if _, err := t.exec(`UPDATE orchestrator_queue SET visible_at = ?2 WHERE instance_id = ?1 AND visible_at <= ?3`,
				instance, t.now+d, t.now); err != nil {
				return err
			}
		}
		if _, err := t.exec(`UPDATE orchestrator_queue SET lock_token = NULL WHERE lock_token = ?`, lockToken); err != nil {
			return err
		}
		_, err := t.exec(`DELETE FROM instance_locks WHERE lock_token = ?`, lockToken)
		return err
	})
	if err == nil {
		p.notify()
	}
	return err
}

// RenewOrchestrationItemLock implements provider.Provider.
func (p *Provider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	return p.write(ctx, op, func(t *wtx) error {
		n, err := t.execN(`UPDATE instance_locks SET locked_until = ?1 WHERE lock_token = ?2 AND locked_until > ?3`,
			t.now+durMs(extendFor), lockToken, t.now)
		if err != nil {
			return err
		}
		if n == 0 {
			return provider.Permanentf(op, provider.ErrInvalidLockToken, "Lock token invalid, expired, or already acked")
		}
		return nil
	})
}

var errCorruptHistory = errors.New("history cannot be decoded")

// readHistory reads one execution's history, ordered by event id. An event
// that does not decode gives historyErr (err is a database failure).
func readHistory(r *runner, instance string, exec uint64) (events []provider.Event, historyErr *string, err error) {
	events = []provider.Event{}
	if exec > math.MaxInt64 {
		return events, nil, nil
	}
	rows, err := r.query(`SELECT event_id, event_data FROM history WHERE instance_id = ? AND execution_id = ? ORDER BY event_id`, instance, int64(exec))
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   int64
			data []byte
		)
		if err := rows.Scan(&id, &data); err != nil {
			return nil, nil, err
		}
		var ev provider.Event
		if err := ev.UnmarshalJSON(data); err != nil {
			msg := fmt.Sprintf("Failed to deserialize history: %v: event %d: %v", errCorruptHistory, id, err)
			return nil, &msg, nil
		}
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return events, nil, nil
}
