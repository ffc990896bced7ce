package memref

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/durofs/durofs/provider"
)

// The management capability (duroxide-contract.md §2.19): listings and
// inspection, the instance hierarchy, atomic and bulk deletion, and pruning.
// Every call runs under the provider's mutex, so each is atomic; the
// composite DeleteInstance is built from GetParentID, GetInstanceTree and
// DeleteInstancesAtomic as duroxide's default implementation is, and relies
// on the orphan check of DeleteInstancesAtomic for races.

// Admin implements provider.Provider.
func (m *Provider) Admin() (provider.Admin, bool) { return admin{m}, true }

// admin is the Admin view of a memref provider.
type admin struct{ m *Provider }

var _ provider.Admin = admin{}

func msOf(t time.Time) uint64 { return uint64(t.UnixMilli()) }

func errNotFound(op, format string, args ...any) error {
	return provider.Permanentf(op, provider.ErrNotFound, format, args...)
}

// ---- helpers (callers hold m.mu) ----

// currentExecution returns the instance's current execution record, if any.
func (m *Provider) currentExecution(instance string) *execution {
	id, ok := m.currentExec(instance)
	if !ok {
		return nil
	}
	return m.execution(instance, id)
}

// statusOf is the current execution's status, or "Unknown" without one.
func (m *Provider) statusOf(instance string) string {
	if e := m.currentExecution(instance); e != nil {
		return e.status
	}
	return "Unknown"
}

func isTerminal(status string) bool {
	switch status {
	case "Completed", "Failed", "ContinuedAsNew":
		return true
	}
	return false
}

// childrenLocked lists the instances whose parent is instance, sorted.
func (m *Provider) childrenLocked(instance string) []string {
	out := []string{}
	for id, rec := range m.records {
		if rec.parent != nil && *rec.parent == instance {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// treeLocked is instance and all its descendants, breadth first.
func (m *Provider) treeLocked(instance string) provider.InstanceTree {
	all := []string{instance}
	seen := map[string]bool{instance: true}
	for i := 0; i < len(all); i++ {
		for _, c := range m.childrenLocked(all[i]) {
			if !seen[c] {
				seen[c] = true
				all = append(all, c)
			}
		}
	}
	return provider.InstanceTree{RootID: instance, AllIDs: all}
}

// deleteLocked is DeleteInstancesAtomic: it checks everything first and
// then deletes all of ids, or nothing.
func (m *Provider) deleteLocked(op string, ids []string, force bool) (provider.DeleteInstanceResult, error) {
	var res provider.DeleteInstanceResult
	set := map[string]bool{}
	var unique []string
	for _, id := range ids {
		if !set[id] {
			set[id] = true
			unique = append(unique, id)
		}
	}
	if len(unique) == 0 {
		return res, nil
	}
	if !force {
		for _, id := range unique {
			if e := m.currentExecution(id); e != nil && e.status == "Running" {
				return res, provider.Permanentf(op, provider.ErrInstanceRunning,
					"instance %q is still running; cancel it first or delete with force", id)
			}
		}
	}
	var others []string
	for id := range m.records {
		others = append(others, id)
	}
	slices.Sort(others)
	for _, id := range others {
		if rec := m.records[id]; !set[id] && rec.parent != nil && set[*rec.parent] {
			return res, provider.Permanentf(op, provider.ErrNotAllowed, "instance %s has a child %s that is not being deleted (it was created after tree traversal); delete the whole tree", *rec.parent, id)
		}
	}

	for _, id := range unique {
		if m.records[id] != nil || len(m.execs[id]) > 0 {
			res.InstancesDeleted++
		}
		for _, e := range m.execs[id] {
			res.ExecutionsDeleted++
			res.EventsDeleted += uint64(len(e.history))
		}
		delete(m.execs, id)
		delete(m.records, id)
		delete(m.locks, id) // outstanding tokens can no longer ack
	}
	before := len(m.orch)
	m.orch = slices.DeleteFunc(m.orch, func(msg *orchMsg) bool { return set[msg.instance] })
	res.QueueMessagesDeleted += uint64(before - len(m.orch))
	before = len(m.work)
	// Locked rows too: a stale worker's ack must fail.
	m.work = slices.DeleteFunc(m.work, func(w *workMsg) bool { return set[w.item.Instance] })
	res.QueueMessagesDeleted += uint64(before - len(m.work))
	m.notify()
	return res, nil
}

// pruneLocked prunes one instance's executions.
func (m *Provider) pruneLocked(op, instance string, opts provider.PruneOptions) (provider.PruneResult, error) {
	current, ok := m.currentExec(instance)
	if !ok {
		return provider.PruneResult{}, errNotFound(op, "Instance %q not found", instance)
	}
	ids := make([]uint64, 0, len(m.execs[instance]))
	for id := range m.execs[instance] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Reverse(ids) // newest first
	keep := map[uint64]bool{current: true}
	if opts.KeepLast != nil {
		for _, id := range ids[:min(int(*opts.KeepLast), len(ids))] {
			keep[id] = true
		}
	}
	res := provider.PruneResult{InstancesProcessed: 1}
	for _, id := range ids {
		e := m.execs[instance][id]
		if keep[id] || e.status == "Running" {
			continue
		}
		if opts.CompletedBeforeMs != nil && (e.completedAtMs == nil || *e.completedAtMs >= *opts.CompletedBeforeMs) {
			continue
		}
		res.ExecutionsDeleted++
		res.EventsDeleted += uint64(len(e.history))
		delete(m.execs[instance], id)
	}
	return res, nil
}

// bulkCandidates applies an InstanceFilter to the instance records that
// pass keep, oldest completion first, and caps them at the limit.
func (m *Provider) bulkCandidates(filter provider.InstanceFilter, keep func(id string, rec *instanceRecord) bool) []string {
	if filter.InstanceIDs != nil && len(filter.InstanceIDs) == 0 {
		return nil
	}
	type cand struct {
		id          string
		completedAt uint64
	}
	var cands []cand
	for id, rec := range m.records {
		if filter.InstanceIDs != nil && !slices.Contains(filter.InstanceIDs, id) {
			continue
		}
		if !keep(id, rec) {
			continue
		}
		var completedAt uint64
		if e := m.currentExecution(id); e != nil && e.completedAtMs != nil {
			completedAt = *e.completedAtMs
		}
		if filter.CompletedBeforeMs != nil {
			e := m.currentExecution(id)
			if e == nil || e.completedAtMs == nil || *e.completedAtMs >= *filter.CompletedBeforeMs {
				continue
			}
		}
		cands = append(cands, cand{id, completedAt})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.completedAt, b.completedAt), cmp.Compare(a.id, b.id))
	})
	limit := provider.DefaultBulkLimit
	if filter.Limit != nil {
		limit = int(*filter.Limit)
	}
	out := make([]string, 0, min(limit, len(cands)))
	for _, c := range cands[:min(limit, len(cands))] {
		out = append(out, c.id)
	}
	return out
}

// ---- listings and inspection ----

// ListInstances implements provider.Admin: newest first.
func (a admin) ListInstances(ctx context.Context) ([]string, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.records))
	for id := range m.records {
		out = append(out, id)
	}
	slices.SortFunc(out, func(x, y string) int {
		return cmp.Or(cmp.Compare(m.records[y].createdAtMs, m.records[x].createdAtMs), cmp.Compare(x, y))
	})
	return out, nil
}

// ListInstancesByStatus implements provider.Admin.
func (a admin) ListInstancesByStatus(ctx context.Context, status string) ([]string, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []string{}
	for id := range m.records {
		if m.statusOf(id) == status {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ListExecutions implements provider.Admin.
func (a admin) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []uint64{}
	for id := range m.execs[instance] {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// ReadHistoryWithExecutionID implements provider.Admin.
func (a admin) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]provider.Event, error) {
	return a.m.ReadWithExecution(ctx, instance, executionID)
}

// ReadHistory implements provider.Admin.
func (a admin) ReadHistory(ctx context.Context, instance string) ([]provider.Event, error) {
	return a.m.Read(ctx, instance)
}

// LatestExecutionID implements provider.Admin.
func (a admin) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, ok := m.latestExec(instance); ok {
		return id, nil
	}
	return provider.InitialExecutionID, nil
}

// GetInstanceInfo implements provider.Admin.
func (a admin) GetInstanceInfo(ctx context.Context, instance string) (provider.InstanceInfo, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.records[instance]
	if rec == nil {
		return provider.InstanceInfo{}, errNotFound("get_instance_info", "Instance %q not found", instance)
	}
	info := provider.InstanceInfo{
		InstanceID:           instance,
		OrchestrationName:    rec.name,
		OrchestrationVersion: deref(rec.version, "unknown"),
		CurrentExecutionID:   rec.currentExec,
		Status:               "Unknown",
		CreatedAtMs:          rec.createdAtMs,
		UpdatedAtMs:          rec.updatedAtMs,
	}
	if e := m.execution(instance, rec.currentExec); e != nil {
		info.Status = e.status
		if e.output != nil {
			info.Output = ptr(*e.output)
		}
	}
	if rec.parent != nil {
		info.ParentInstanceID = ptr(*rec.parent)
	}
	return info, nil
}

// GetExecutionInfo implements provider.Admin.
func (a admin) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (provider.ExecutionInfo, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.execution(instance, executionID)
	if e == nil {
		return provider.ExecutionInfo{}, errNotFound("get_execution_info", "Execution %d of instance %q not found", executionID, instance)
	}
	info := provider.ExecutionInfo{
		ExecutionID: executionID,
		Status:      e.status,
		StartedAtMs: e.startedAtMs,
		EventCount:  uint64(len(e.history)),
	}
	if e.output != nil {
		info.Output = ptr(*e.output)
	}
	if e.completedAtMs != nil {
		info.CompletedAtMs = ptr(*e.completedAtMs)
	}
	return info, nil
}

// GetSystemMetrics implements provider.Admin.
func (a admin) GetSystemMetrics(ctx context.Context) (provider.SystemMetrics, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var s provider.SystemMetrics
	for id := range m.records {
		s.TotalInstances++
		switch m.statusOf(id) {
		case "Running":
			s.RunningInstances++
		case "Completed":
			s.CompletedInstances++
		case "Failed":
			s.FailedInstances++
		}
	}
	for _, execs := range m.execs {
		for _, e := range execs {
			s.TotalExecutions++
			s.TotalEvents += uint64(len(e.history))
		}
	}
	return s, nil
}

// GetQueueDepths implements provider.Admin: unlocked messages, whatever
// their visibility.
func (a admin) GetQueueDepths(ctx context.Context) (provider.QueueDepths, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var d provider.QueueDepths
	for _, msg := range m.orch {
		l := m.locks[msg.instance]
		if msg.token == "" || l == nil || l.token != msg.token || !l.lockedTil.After(now) {
			d.OrchestratorQueue++
		}
	}
	for _, w := range m.work {
		if w.token == "" || !w.lockedTil.After(now) {
			d.WorkerQueue++
		}
	}
	return d, nil
}

// ---- hierarchy ----

// ListChildren implements provider.Admin.
func (a admin) ListChildren(ctx context.Context, instance string) ([]string, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.childrenLocked(instance), nil
}

// GetParentID implements provider.Admin.
func (a admin) GetParentID(ctx context.Context, instance string) (string, bool, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.records[instance]
	if rec == nil {
		return "", false, errNotFound("get_parent_id", "Instance %q not found", instance)
	}
	if rec.parent == nil {
		return "", false, nil
	}
	return *rec.parent, true, nil
}

// GetInstanceTree implements provider.Admin.
func (a admin) GetInstanceTree(ctx context.Context, instance string) (provider.InstanceTree, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.treeLocked(instance), nil
}

// ---- deletion ----

// DeleteInstancesAtomic implements provider.Admin.
func (a admin) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (provider.DeleteInstanceResult, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteLocked("delete_instances_atomic", ids, force)
}

// DeleteInstance implements provider.Admin the way duroxide's default does:
// only a root can be deleted, with its whole tree.
func (a admin) DeleteInstance(ctx context.Context, instance string, force bool) (provider.DeleteInstanceResult, error) {
	const op = "delete_instance"
	parent, hasParent, err := a.GetParentID(ctx, instance)
	if err != nil {
		return provider.DeleteInstanceResult{}, errNotFound(op, "Instance %q not found", instance)
	}
	if hasParent {
		return provider.DeleteInstanceResult{}, provider.Permanentf(op, provider.ErrNotAllowed, "Cannot delete sub-orchestration %s directly (its parent is %s). Delete root instance instead.", instance, parent)
	}
	tree, err := a.GetInstanceTree(ctx, instance)
	if err != nil {
		return provider.DeleteInstanceResult{}, err
	}
	return a.DeleteInstancesAtomic(ctx, tree.AllIDs, force)
}

// DeleteInstanceBulk implements provider.Admin: terminal root instances
// matching filter, each with its tree, forced.
func (a admin) DeleteInstanceBulk(ctx context.Context, filter provider.InstanceFilter) (provider.DeleteInstanceResult, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	roots := m.bulkCandidates(filter, func(id string, rec *instanceRecord) bool {
		return rec.parent == nil && isTerminal(m.statusOf(id))
	})
	var total provider.DeleteInstanceResult
	for _, root := range roots {
		res, err := m.deleteLocked("delete_instance_bulk", m.treeLocked(root).AllIDs, true)
		if err != nil {
			return total, err
		}
		total = total.Add(res)
	}
	return total, nil
}

// ---- pruning ----

// PruneExecutions implements provider.Admin.
func (a admin) PruneExecutions(ctx context.Context, instance string, options provider.PruneOptions) (provider.PruneResult, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pruneLocked("prune_executions", instance, options)
}

// PruneExecutionsBulk implements provider.Admin: instances of any status.
func (a admin) PruneExecutionsBulk(ctx context.Context, filter provider.InstanceFilter, options provider.PruneOptions) (provider.PruneResult, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var total provider.PruneResult
	for _, id := range m.bulkCandidates(filter, func(string, *instanceRecord) bool { return true }) {
		res, err := m.pruneLocked("prune_executions_bulk", id, options)
		if err != nil {
			return total, err
		}
		total.InstancesProcessed += res.InstancesProcessed
		total.ExecutionsDeleted += res.ExecutionsDeleted
		total.EventsDeleted += res.EventsDeleted
	}
	return total, nil
}
