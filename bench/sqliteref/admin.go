package sqliteref

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"slices"

	"github.com/durofs/durofs/provider"
)

// The management capability (duroxide's ProviderAdmin, contract §2.19).
// Every deletion and prune is one write transaction, so each is atomic;
// DeleteInstance looks up the tree inside its transaction, so no child can
// be created between the walk and the deletion.

var _ provider.Admin = (*Provider)(nil)

// Admin implements provider.Provider: the SQLite provider has the
// management capability.
func (p *Provider) Admin() (provider.Admin, bool) { return p, true }

// ListInstances implements provider.Admin: instances with a record, newest first.
func (p *Provider) ListInstances(ctx context.Context) ([]string, error) {
	var out []string
	err := p.read(ctx, "list_instances", func(r *runner) error {
		var err error
		out, err = collectStrings(r.query(`SELECT instance_id FROM instances ORDER BY created_at DESC, instance_id`))
		return err
	})
	return out, err
}

// ListInstancesByStatus implements provider.Admin: instances whose current
// execution has status ("Unknown" for a record without one).
func (p *Provider) ListInstancesByStatus(ctx context.Context, status string) ([]string, error) {
	var out []string
	err := p.read(ctx, "list_instances_by_status", func(r *runner) error {
		var err error
		out, err = collectStrings(r.query(`SELECT i.instance_id FROM instances i
LEFT JOIN executions e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id
WHERE COALESCE(e.status, 'Unknown') = ? ORDER BY i.created_at DESC, i.instance_id`, status))
		return err
	})
	return out, err
}

// ListExecutions implements provider.Admin: execution ids with a record, ascending.
func (p *Provider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	out := []uint64{}
	err := p.read(ctx, "list_executions", func(r *runner) error {
		rows, err := r.query(`SELECT execution_id FROM executions WHERE instance_id = ? ORDER BY execution_id`, instance)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			out = append(out, uint64(id))
		}
		return rows.Err()
	})
	return out, err
}

// ReadHistoryWithExecutionID implements provider.Admin.
func (p *Provider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	return p.ReadWithExecution(ctx, instance, executionID)
}

// ReadHistory implements provider.Admin.
func (p *Provider) ReadHistory(ctx context.Context, instance string) ([]provider.Event, error) {
	return p.Read(ctx, instance)
}

// LatestExecutionID implements provider.Admin (1 when the instance has no
// execution record).
func (p *Provider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	const op = "latest_execution_id"
	if err := p.check(ctx, op); err != nil {
		return 0, err
	}
	var id sql.NullInt64
	if err := p.reader(ctx).scan(`SELECT MAX(execution_id) FROM executions WHERE instance_id = ?`, []any{instance}, &id); err != nil {
		return 0, p.classify(op, err)
	}
	if !id.Valid {
		return provider.InitialExecutionID, nil
	}
	return uint64(id.Int64), nil
}

// GetInstanceInfo implements provider.Admin; an instance without a record
// is a permanent ErrNotFound.
func (p *Provider) GetInstanceInfo(ctx context.Context, instance string) (provider.InstanceInfo, error) {
	const op = "get_instance_info"
	if err := p.check(ctx, op); err != nil {
		return provider.InstanceInfo{}, err
	}
	var (
		info                      provider.InstanceInfo
		version, status, output   sql.NullString
		parent                    sql.NullString
		exec, createdAt, updateAt int64
	)
	err := p.reader(ctx).scan(`SELECT i.orchestration_name, i.orchestration_version, i.current_execution_id, i.parent_instance_id,
  i.created_at, i.updated_at, e.status, e.output
FROM instances i LEFT JOIN executions e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id
WHERE i.instance_id = ?`, []any{instance},
		&info.OrchestrationName, &version, &exec, &parent, &createdAt, &updateAt, &status, &output)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return provider.InstanceInfo{}, provider.Permanentf(op, provider.ErrNotFound, "Instance %s not found", instance)
	case err != nil:
		return provider.InstanceInfo{}, p.classify(op, err)
	}
	info.InstanceID = instance
	info.OrchestrationVersion = derefOr(strPtr(version), "unknown")
	info.CurrentExecutionID = uint64(exec)
	info.Status = derefOr(strPtr(status), "Unknown")
	info.Output = strPtr(output)
	info.CreatedAtMs, info.UpdatedAtMs = uint64(createdAt), uint64(updateAt)
	info.ParentInstanceID = strPtr(parent)
	return info, nil
}

// GetExecutionInfo implements provider.Admin; a missing execution record is
// a permanent ErrNotFound.
func (p *Provider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (provider.ExecutionInfo, error) {
	const op = "get_execution_info"
	if err := p.check(ctx, op); err != nil {
		return provider.ExecutionInfo{}, err
	}
	notFound := provider.Permanentf(op, provider.ErrNotFound, "Execution %d of instance %s not found", executionID, instance)
	if executionID > math.MaxInt64 {
		return provider.ExecutionInfo{}, notFound
	}
	var (
		status         string
		output         sql.NullString
		started, count int64
		completed      sql.NullInt64
	)
	err := p.reader(ctx).scan(`SELECT e.status, e.output, e.started_at, e.completed_at,
  (SELECT COUNT(*) FROM history h WHERE h.instance_id = e.instance_id AND h.execution_id = e.execution_id)
FROM executions e WHERE e.instance_id = ? AND e.execution_id = ?`, []any{instance, int64(executionID)},
		&status, &output, &started, &completed, &count)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return provider.ExecutionInfo{}, notFound
	case err != nil:
		return provider.ExecutionInfo{}, p.classify(op, err)
	}
	info := provider.ExecutionInfo{ExecutionID: executionID, Status: status, Output: strPtr(output),
		StartedAtMs: uint64(started), EventCount: uint64(count)}
	if completed.Valid {
		c := uint64(completed.Int64)
		info.CompletedAtMs = &c
	}
	return info, nil
}

// GetSystemMetrics implements provider.Admin.
func (p *Provider) GetSystemMetrics(ctx context.Context) (provider.SystemMetrics, error) {
	var m provider.SystemMetrics
	err := p.read(ctx, "get_system_metrics", func(r *runner) error {
		var total, running, completed, failed, execs, events int64
		if err := r.scan(`SELECT COUNT(*),
  COALESCE(SUM(e.status = 'Running'), 0), COALESCE(SUM(e.status = 'Completed'), 0), COALESCE(SUM(e.status = 'Failed'), 0)
FROM instances i LEFT JOIN executions e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id`, nil,
			&total, &running, &completed, &failed); err != nil {
			return err
		}
		if err := r.scan(`SELECT COUNT(*) FROM executions`, nil, &execs); err != nil {
			return err
		}
		if err := r.scan(`SELECT COUNT(*) FROM history`, nil, &events); err != nil {
			return err
		}
		m = provider.SystemMetrics{TotalInstances: uint64(total), TotalExecutions: uint64(execs),
			RunningInstances: uint64(running), CompletedInstances: uint64(completed), FailedInstances: uint64(failed),
			TotalEvents: uint64(events)}
		return nil
	})
	return m, err
}

// GetQueueDepths implements provider.Admin: messages not held by a live
// lock, whatever their visibility. TimerQueue is always 0.
func (p *Provider) GetQueueDepths(ctx context.Context) (provider.QueueDepths, error) {
	var d provider.QueueDepths
	err := p.read(ctx, "get_queue_depths", func(r *runner) error {
		now := nowMs()
		var orch, work int64
		if err := r.scan(`SELECT COUNT(*) FROM orchestrator_queue q WHERE q.lock_token IS NULL
  OR NOT EXISTS (SELECT 1 FROM instance_locks il WHERE il.lock_token = q.lock_token AND il.locked_until > ?)`, []any{now}, &orch); err != nil {
			return err
		}
		if err := r.scan(`SELECT COUNT(*) FROM worker_queue WHERE lock_token IS NULL OR locked_until <= ?`, []any{now}, &work); err != nil {
			return err
		}
		d.OrchestratorQueue, d.WorkerQueue = uint64(orch), uint64(work)
		return nil
	})
	return d, err
}

// ListChildren implements provider.Admin (empty for an unknown instance).
func (p *Provider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	var out []string
	err := p.read(ctx, "list_children", func(r *runner) error {
		var err error
		out, err = collectStrings(r.query(`SELECT instance_id FROM instances WHERE parent_instance_id = ? ORDER BY instance_id`, instance))
		return err
	})
	return out, err
}

// GetParentID implements provider.Admin; an unknown instance is a permanent
// ErrNotFound.
func (p *Provider) GetParentID(ctx context.Context, instance string) (string, bool, error) {
	const op = "get_parent_id"
	var parent sql.NullString
	err := p.read(ctx, op, func(r *runner) error {
		var err error
		parent, err = parentOf(r, op, instance)
		return err
	})
	return parent.String, parent.Valid, err
}

func parentOf(r *runner, op, instance string) (sql.NullString, error) {
	var parent sql.NullString
	err := r.scan(`SELECT parent_instance_id FROM instances WHERE instance_id = ?`, []any{instance}, &parent)
	if errors.Is(err, sql.ErrNoRows) {
		return parent, provider.Permanentf(op, provider.ErrNotFound, "Instance %s not found", instance)
	}
	return parent, err
}

// GetInstanceTree implements provider.Admin: the instance and all its
// descendants, root first.
func (p *Provider) GetInstanceTree(ctx context.Context, instance string) (provider.InstanceTree, error) {
	var tree provider.InstanceTree
	err := p.read(ctx, "get_instance_tree", func(r *runner) error {
		var err error
		tree, err = treeOf(r, instance)
		return err
	})
	return tree, err
}

func treeOf(r *runner, root string) (provider.InstanceTree, error) {
	ids, err := collectStrings(r.query(`WITH RECURSIVE tree(id) AS (
  SELECT ?1 UNION SELECT i.instance_id FROM instances i JOIN tree ON i.parent_instance_id = tree.id)
SELECT id FROM tree`, root))
	if err != nil {
		return provider.InstanceTree{}, err
	}
	ids = slices.DeleteFunc(ids, func(s string) bool { return s == root })
	return provider.InstanceTree{RootID: root, AllIDs: append([]string{root}, ids...)}, nil
}

// DeleteInstance implements provider.Admin: a root instance and its whole
// tree, in one transaction. A sub-orchestration cannot be deleted directly.
func (p *Provider) DeleteInstance(ctx context.Context, instance string, force bool) (provider.DeleteInstanceResult, error) {
	const op = "delete_instance"
	var res provider.DeleteInstanceResult
	err := p.write(ctx, op, func(t *wtx) error {
		res = provider.DeleteInstanceResult{}
		parent, err := parentOf(&t.runner, op, instance)
		if err != nil {
			return err
		}
		if parent.Valid {
			return provider.Permanentf(op, provider.ErrNotAllowed,
				"Cannot delete sub-orchestration %s directly (its parent is %s). Delete root instance instead.", instance, parent.String)
		}
		tree, err := treeOf(&t.runner, instance)
		if err != nil {
			return err
		}
		res, err = deleteTx(t, op, tree.AllIDs, force)
		return err
	})
	if err == nil {
		p.notify()
	}
	return res, err
}

// DeleteInstancesAtomic implements provider.Admin: all of ids, or nothing.
func (p *Provider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (provider.DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	var res provider.DeleteInstanceResult
	if len(ids) == 0 {
		return res, p.check(ctx, op)
	}
	err := p.write(ctx, op, func(t *wtx) error {
		var err error
		res, err = deleteTx(t, op, ids, force)
		return err
	})
	if err == nil {
		p.notify()
	}
	return res, err
}

// deleteTx deletes instances: everything about them (history, executions,
// records, their queue messages, worker items even while locked, and their
// instance locks, so outstanding tokens fail). Without force a running
// instance fails the whole call, and so does a child of a deleted instance
// that is not itself deleted. Session rows are kept.
func deleteTx(t *wtx, op string, ids []string, force bool) (provider.DeleteInstanceResult, error) {
	var res provider.DeleteInstanceResult
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	if len(ids) == 0 {
		return res, nil
	}
	if !force {
		for _, id := range ids {
			var status string
			err := t.scan(`SELECT e.status FROM executions e WHERE e.instance_id = ?1 AND e.execution_id = COALESCE(
  (SELECT current_execution_id FROM instances WHERE instance_id = ?1),
  (SELECT MAX(execution_id) FROM executions WHERE instance_id = ?1))`, []any{id}, &status)
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return res, err
			case status == "Running":
				return res, provider.Permanentf(op, provider.ErrInstanceRunning, "Instance %s is still running; use force to delete it", id)
			}
		}
	}
	args := make([]any, 0, 2*len(ids))
	for range 2 {
		for _, id := range ids {
			args = append(args, id)
		}
	}
	in := placeholders(len(ids))
	var child, parent string
	err := t.tx.QueryRowContext(t.ctx, `SELECT instance_id, parent_instance_id FROM instances
WHERE parent_instance_id IN (`+in+`) AND instance_id NOT IN (`+in+`) ORDER BY instance_id LIMIT 1`, args...).Scan(&child, &parent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return res, err
	default:
		return res, provider.Permanentf(op, provider.ErrNotAllowed,
			"child instance %s of %s was created after tree traversal; deleting would orphan it (delete the whole tree)", child, parent)
	}

	for _, id := range ids {
		n, err := t.execN(`DELETE FROM instances WHERE instance_id = ?`, id)
		if err != nil {
			return res, err
		}
		res.InstancesDeleted += uint64(n)
		if n, err = t.execN(`DELETE FROM executions WHERE instance_id = ?`, id); err != nil {
			return res, err
		}
		res.ExecutionsDeleted += uint64(n)
		if n, err = t.execN(`DELETE FROM history WHERE instance_id = ?`, id); err != nil {
			return res, err
		}
		res.EventsDeleted += uint64(n)
		if n, err = t.execN(`DELETE FROM orchestrator_queue WHERE instance_id = ?`, id); err != nil {
			return res, err
		}
		res.QueueMessagesDeleted += uint64(n)
		if n, err = t.execN(`DELETE FROM worker_queue WHERE instance_id = ?`, id); err != nil {
			return res, err
		}
		res.QueueMessagesDeleted += uint64(n)
		if _, err = t.exec(`DELETE FROM instance_locks WHERE instance_id = ?`, id); err != nil {
			return res, err
		}
	}
	return res, nil
}

// bulkCandidates selects instance records for the bulk operations: the
// filter's ids, completed_before on the current execution, and its limit
// (default 1000), with extra conditions in where.
func bulkCandidates(t *wtx, filter provider.InstanceFilter, where string) ([]string, error) {
	if filter.InstanceIDs != nil && len(filter.InstanceIDs) == 0 {
		return nil, nil
	}
	q := `SELECT i.instance_id FROM instances i
LEFT JOIN executions e ON e.instance_id = i.instance_id AND e.execution_id = i.current_execution_id
WHERE ` + where
	var args []any
	if filter.InstanceIDs != nil {
		q += ` AND i.instance_id IN (` + placeholders(len(filter.InstanceIDs)) + `)`
		for _, id := range filter.InstanceIDs {
			args = append(args, id)
		}
	}
	if filter.CompletedBeforeMs != nil {
		q += ` AND e.completed_at IS NOT NULL AND e.completed_at < ?`
		args = append(args, int64(min(*filter.CompletedBeforeMs, math.MaxInt64)))
	}
	limit := int64(provider.DefaultBulkLimit)
	if filter.Limit != nil {
		limit = int64(*filter.Limit)
	}
	q += ` ORDER BY e.completed_at, i.instance_id LIMIT ?`
	args = append(args, limit)
	return collectStrings(t.queryRaw(q, args...))
}

// DeleteInstanceBulk implements provider.Admin: terminal root instances
// matching filter, each with its whole tree (forced), in one transaction.
func (p *Provider) DeleteInstanceBulk(ctx context.Context, filter provider.InstanceFilter) (provider.DeleteInstanceResult, error) {
	const op = "delete_instance_bulk"
	var res provider.DeleteInstanceResult
	err := p.write(ctx, op, func(t *wtx) error {
		res = provider.DeleteInstanceResult{}
		roots, err := bulkCandidates(t, filter, `i.parent_instance_id IS NULL AND e.status IN ('Completed', 'Failed', 'ContinuedAsNew')`)
		if err != nil {
			return err
		}
		for _, root := range roots {
			tree, err := treeOf(&t.runner, root)
			if err != nil {
				return err
			}
			r, err := deleteTx(t, op, tree.AllIDs, true)
			if err != nil {
				return err
			}
			res = res.Add(r)
		}
		return nil
	})
	if err == nil {
		p.notify()
	}
	return res, err
}

// PruneExecutions implements provider.Admin: it deletes old executions (and
// their history) of one instance. The current execution and Running
// executions are always kept.
func (p *Provider) PruneExecutions(ctx context.Context, instance string, options provider.PruneOptions) (provider.PruneResult, error) {
	const op = "prune_executions"
	var res provider.PruneResult
	err := p.write(ctx, op, func(t *wtx) error {
		var err error
		res, err = pruneTx(t, op, instance, options)
		return err
	})
	return res, err
}

func pruneTx(t *wtx, op, instance string, opts provider.PruneOptions) (provider.PruneResult, error) {
	var current int64
	switch err := t.scan(`SELECT current_execution_id FROM instances WHERE instance_id = ?`, []any{instance}, &current); {
	case errors.Is(err, sql.ErrNoRows):
		return provider.PruneResult{}, provider.Permanentf(op, provider.ErrNotFound, "Instance %s not found", instance)
	case err != nil:
		return provider.PruneResult{}, err
	}
	type execRow struct {
		id        int64
		status    string
		completed sql.NullInt64
	}
	rows, err := t.query(`SELECT execution_id, status, completed_at FROM executions WHERE instance_id = ? ORDER BY execution_id DESC`, instance)
	if err != nil {
		return provider.PruneResult{}, err
	}
	var execs []execRow
	for rows.Next() {
		var e execRow
		if err := rows.Scan(&e.id, &e.status, &e.completed); err != nil {
			rows.Close()
			return provider.PruneResult{}, err
		}
		execs = append(execs, e)
	}
	if err := rows.Close(); err != nil {
		return provider.PruneResult{}, err
	}
	keepTop := 0
	if opts.KeepLast != nil {
		keepTop = int(*opts.KeepLast)
	}
	res := provider.PruneResult{InstancesProcessed: 1}
	for i, e := range execs { // newest first
		if e.id == current || e.status == "Running" || i < keepTop {
			continue
		}
		if opts.CompletedBeforeMs != nil && (!e.completed.Valid || e.completed.Int64 >= int64(min(*opts.CompletedBeforeMs, math.MaxInt64))) {
			continue
		}
		n, err := t.execN(`DELETE FROM history WHERE instance_id = ? AND execution_id = ?`, instance, e.id)
		if err != nil {
			return provider.PruneResult{}, err
		}
		if _, err := t.exec(`DELETE FROM executions WHERE instance_id = ? AND execution_id = ?`, instance, e.id); err != nil {
			return provider.PruneResult{}, err
		}
		res.ExecutionsDeleted++
		res.EventsDeleted += uint64(n)
	}
	return res, nil
}

// PruneExecutionsBulk implements provider.Admin: every instance (of any
// status) matching filter, in one transaction.
func (p *Provider) PruneExecutionsBulk(ctx context.Context, filter provider.InstanceFilter, options provider.PruneOptions) (provider.PruneResult, error) {
	const op = "prune_executions_bulk"
	var res provider.PruneResult
	err := p.write(ctx, op, func(t *wtx) error {
		res = provider.PruneResult{}
		ids, err := bulkCandidates(t, filter, `1`)
		if err != nil {
			return err
		}
		for _, id := range ids {
			r, err := pruneTx(t, op, id, options)
			if err != nil {
				return err
			}
			res.InstancesProcessed += r.InstancesProcessed
			res.ExecutionsDeleted += r.ExecutionsDeleted
			res.EventsDeleted += r.EventsDeleted
		}
		return nil
	})
	return res, err
}
