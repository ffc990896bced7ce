package sqliteref

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/provider"
)

// The worker queue (per-message peek-locks, tags, session affinity) and the
// session table (duroxide-contract §2.8–§2.14, §7.1).

const sqlWorkerInsert = `INSERT INTO worker_queue (work_item, visible_at, instance_id, execution_id, activity_id, session_id, tag)
VALUES (?, ?, ?, ?, ?, ?, ?)`

// insertWorker enqueues an ActivityExecute, visible at t.now, keeping its
// identity, session and tag in columns.
func insertWorker(t *wtx, w workerRow) error {
	if w.ae.ExecutionID > math.MaxInt64 || w.ae.ID > math.MaxInt64 {
		return provider.Permanentf("enqueue_for_worker", provider.ErrInvalidWorkItem, "activity identity out of range")
	}
	_, err := t.exec(sqlWorkerInsert, w.data, t.now, w.ae.Instance, int64(w.ae.ExecutionID), int64(w.ae.ID),
		nullString(w.ae.SessionID), nullString(w.ae.Tag))
	return err
}

// EnqueueForWorker implements provider.Provider.
func (p *Provider) EnqueueForWorker(ctx context.Context, item provider.WorkItem) error {
	const op = "enqueue_for_worker"
	v, _ := deref(item)
	ae, ok := v.(provider.ActivityExecute)
	if !ok {
		return provider.Permanentf(op, provider.ErrInvalidWorkItem, "Invalid work item type: %s", kindOf(item))
	}
	data, err := provider.MarshalWorkItem(ae)
	if err != nil {
		return provider.Permanentf(op, provider.ErrInvalidWorkItem, "encode work item: %v", err)
	}
	err = p.write(ctx, op, func(t *wtx) error { return insertWorker(t, workerRow{ae: ae, data: string(data)}) })
	if err == nil {
		p.notify()
	}
	return err
}

// workQuery builds the query for the oldest eligible worker item and its
// arguments: visible, unlocked or expired, tag filter, and the session rule
// (no session config: items without a session; a config: items without a
// session, or whose session has no row, an expired lease, or is owned by
// the caller). Items of sessions leased to others are skipped, not waited on.
func workQuery(nowMs int64, session *provider.SessionFetchConfig, tf provider.TagFilter) (string, []any) {
	var b strings.Builder
	args := []any{nowMs}
	b.WriteString("SELECT w.id, w.work_item, w.session_id, w.attempt_count FROM worker_queue w")
	if session != nil {
		b.WriteString(" LEFT JOIN sessions s ON s.session_id = w.session_id")
	}
	b.WriteString(" WHERE w.visible_at <= ?1 AND (w.lock_token IS NULL OR w.locked_until <= ?1)")
	if session == nil {
		b.WriteString(" AND w.session_id IS NULL")
	} else {
		args = append(args, session.OwnerID)
		b.WriteString(" AND (w.session_id IS NULL OR s.session_id IS NULL OR s.locked_until <= ?1 OR s.worker_id = ?2)")
	}
	in := func() string {
		marks := make([]string, len(tf.Set))
		for i, tag := range tf.Set {
			args = append(args, tag)
			marks[i] = "?" + strconv.Itoa(len(args))
		}
		return strings.Join(marks, ",")
	}
	switch tf.Mode {
	case provider.TagDefaultOnly:
		b.WriteString(" AND w.tag IS NULL")
	case provider.TagsOnly:
		b.WriteString(" AND w.tag IN (" + in() + ")")
	case provider.TagDefaultAnd:
		b.WriteString(" AND (w.tag IS NULL OR w.tag IN (" + in() + "))")
	case provider.TagAny:
	default:
		b.WriteString(" AND 0")
	}
	b.WriteString(" ORDER BY w.id LIMIT 1")
	return b.String(), args
}

// errNoWork rolls back a fetch transaction that found nothing to take.
var errNoWork = errors.New("no work")

// FetchWorkItem implements provider.Provider. It long-polls up to pollTimeout.
func (p *Provider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *provider.SessionFetchConfig, tagFilter provider.TagFilter) (*provider.LockedWorkItem, error) {
	const op = "fetch_work_item"
	if tagFilter.Mode == provider.TagNone {
		return nil, nil
	}
	return poll(ctx, p, op, pollTimeout, func() (*provider.LockedWorkItem, error) {
		return p.tryFetchWork(ctx, op, lockTimeout, session, tagFilter)
	})
}

func (p *Provider) tryFetchWork(ctx context.Context, op string, lockTimeout time.Duration, session *provider.SessionFetchConfig, tagFilter provider.TagFilter) (*provider.LockedWorkItem, error) {
	// A read first: the write lock is taken only when there is a candidate.
	q, args := workQuery(time.Now().UnixMilli(), session, tagFilter)
	var (
		id, attempts int64
		data         string
		sid          sql.NullString
	)
	switch err := p.reader(ctx).scan(q, args, &id, &data, &sid, &attempts); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, p.classify(op, err)
	}

	var out *provider.LockedWorkItem
	err := p.write(ctx, op, func(t *wtx) error {
		out = nil
		q, args := workQuery(t.now, session, tagFilter)
		switch err := t.scan(q, args, &id, &data, &sid, &attempts); {
		case errors.Is(err, sql.ErrNoRows):
			return errNoWork
		case err != nil:
			return err
		}
		w, err := provider.UnmarshalWorkItem([]byte(data))
		if err != nil {
			return provider.Permanentf(op, provider.ErrCorrupt, "work item %d cannot be decoded: %v", id, err)
		}
		token := uuid.NewString()
		if _, err := t.exec(`UPDATE worker_queue SET lock_token = ?, locked_until = ?, attempt_count = attempt_count + 1 WHERE id = ?`,
			token, t.now+durMs(lockTimeout), id); err != nil {
			return err
		}
		if sid.Valid && session != nil {
			// Claim or refresh the session: only if it is new, expired, or
			// already this owner's.
			n, err := t.execN(`INSERT INTO sessions (session_id, worker_id, locked_until, last_activity_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT(session_id) DO UPDATE SET worker_id = excluded.worker_id, locked_until = excluded.locked_until, last_activity_at = excluded.last_activity_at
WHERE sessions.locked_until <= ?4 OR sessions.worker_id = excluded.worker_id`,
				sid.String, session.OwnerID, t.now+durMs(session.LockTimeout), t.now)
			if err != nil {
				return err
			}
			if n == 0 {
				return errNoWork // lost the session (cannot happen under BEGIN IMMEDIATE)
			}
		}
		out = &provider.LockedWorkItem{Item: w, LockToken: token, AttemptCount: uint32(min(attempts+1, math.MaxUint32))}
		return nil
	})
	if errors.Is(err, errNoWork) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// touchSession bumps a session's last activity, only while its lease is
// live (so a former owner cannot refresh a session someone else owns).
func touchSession(t *wtx, sid sql.NullString) error {
	if !sid.Valid {
		return nil
	}
	_, err := t.exec(`UPDATE sessions SET last_activity_at = ?1 WHERE session_id = ?2 AND locked_until > ?1`, t.now, sid.String)
	return err
}

// AckWorkItem implements provider.Provider: it deletes the locked item and
// enqueues its completion (if any) in one transaction. It fails permanently
// if the item is gone (acked, cancelled, deleted) or its lock expired.
func (p *Provider) AckWorkItem(ctx context.Context, token string, completion provider.WorkItem) error {
	const op = "ack_work_item"
	var (
		compData     []byte
		compInstance string
	)
	if completion != nil {
		c, _ := deref(completion)
		switch c.(type) {
		case provider.ActivityCompleted, provider.ActivityFailed:
		default:
			return provider.Permanentf(op, provider.ErrInvalidWorkItem,
				"Invalid work item type: completion must be ActivityCompleted or ActivityFailed, not %s", kindOf(completion))
		}
		var err error
		if compData, err = provider.MarshalWorkItem(c); err != nil {
			return provider.Permanentf(op, provider.ErrInvalidWorkItem, "encode completion: %v", err)
		}
		compInstance = provider.TargetInstance(c)
	}
	err := p.write(ctx, op, func(t *wtx) error {
		var (
			id, lockedUntil int64
			sid             sql.NullString
		)
		switch err := t.scan(`SELECT id, locked_until, session_id FROM worker_queue WHERE lock_token = ?`, []any{token}, &id, &lockedUntil, &sid); {
		case errors.Is(err, sql.ErrNoRows):
			return provider.Permanentf(op, provider.ErrNotFound, "work item not found: lock token invalid, item cancelled, or already acked")
		case err != nil:
			return err
		}
		if lockedUntil <= t.now {
			return provider.Permanentf(op, provider.ErrLockExpired, "work item lock expired")
		}
		if _, err := t.exec(`DELETE FROM worker_queue WHERE id = ?`, id); err != nil {
			return err
		}
		if compData != nil {
			if _, err := t.exec(sqlOrchInsert, compInstance, string(compData), t.now); err != nil {
				return err
			}
		}
		return touchSession(t, sid)
	})
	if err == nil {
		p.notify()
	}
	return err
}

// RenewWorkItemLock implements provider.Provider. Renewal ignores the
// orchestration's status; a deleted (cancelled) item fails permanently.
func (p *Provider) RenewWorkItemLock(ctx context.Context, token string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	return p.write(ctx, op, func(t *wtx) error {
		var (
			id, lockedUntil int64
			sid             sql.NullString
		)
		switch err := t.scan(`SELECT id, locked_until, session_id FROM worker_queue WHERE lock_token = ?`, []any{token}, &id, &lockedUntil, &sid); {
		case errors.Is(err, sql.ErrNoRows):
			return provider.Permanentf(op, provider.ErrInvalidLockToken, "Invalid lock token: work item acked, cancelled or re-locked")
		case err != nil:
			return err
		}
		if lockedUntil <= t.now {
			return provider.Permanentf(op, provider.ErrLockExpired, "work item lock expired")
		}
		if _, err := t.exec(`UPDATE worker_queue SET locked_until = ? WHERE id = ?`, t.now+durMs(extendFor), id); err != nil {
			return err
		}
		return touchSession(t, sid)
	})
}

// AbandonWorkItem implements provider.Provider. Expiry is not checked.
func (p *Provider) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_work_item"
	err := p.write(ctx, op, func(t *wtx) error {
		n, err := t.execN(`UPDATE worker_queue SET lock_token = NULL, locked_until = NULL, visible_at = ?1,
  attempt_count = CASE WHEN ?2 THEN MAX(attempt_count - 1, 0) ELSE attempt_count END
WHERE lock_token = ?3`, t.now+durMs(delay), ignoreAttempt, token)
		if err != nil {
			return err
		}
		if n == 0 {
			return provider.Permanentf(op, provider.ErrInvalidLockToken, "Invalid lock token")
		}
		return nil
	})
	if err == nil {
		p.notify()
	}
	return err
}

// RenewSessionLock implements provider.Provider: it extends the live
// sessions of ownerIDs whose last activity is strictly within idleTimeout.
func (p *Provider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "renew_session_lock"
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	var n int64
	err := p.write(ctx, op, func(t *wtx) error {
		args := []any{t.now + durMs(extendFor), t.now, t.now - durMs(idleTimeout)}
		for _, o := range ownerIDs {
			args = append(args, o)
		}
		res, err := t.execRaw(`UPDATE sessions SET locked_until = ? WHERE locked_until > ? AND last_activity_at > ? AND worker_id IN (`+
			placeholders(len(ownerIDs))+`)`, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// CleanupOrphanedSessions implements provider.Provider: it deletes expired
// sessions that no worker item refers to. idleTimeout is not used (as in
// duroxide's SQLite provider).
func (p *Provider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	const op = "cleanup_orphaned_sessions"
	var n int64
	err := p.write(ctx, op, func(t *wtx) error {
		var err error
		n, err = t.execN(`DELETE FROM sessions WHERE locked_until < ?
  AND NOT EXISTS (SELECT 1 FROM worker_queue w WHERE w.session_id = sessions.session_id)`, t.now)
		return err
	})
	return int(n), err
}
