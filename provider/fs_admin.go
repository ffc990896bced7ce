package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// The management capability (duroxide's ProviderAdmin).
//
// Listings and metrics read instance.json files only (their summary
// counters are kept by every commit), never history files. Deletions and
// prunes change several files, so they are commits like acks (fs_wal.go):
//
//   - PruneExecutions commits one record (kind "prune") under the instance
//     flock; applying it removes the execution directories and rewrites
//     instance.json.
//   - DeleteInstancesAtomic takes the flocks of every instance (sorted, so
//     two deleters cannot deadlock), validates, and commits ONE record (kind
//     "delete") naming every member and its queue messages, marked in every
//     member's lease. Applying a member's part removes its queue messages
//     (worker items included, locked or not; for a go-workflows instance
//     its pending events and activity tasks, fs_gw_admin.go), instance.json,
//     its entry in its parent's children index, and executions, and then
//     reclaims its directory: lease (so old tokens fail), lock file,
//     directory (fs_reclaim.go). Whoever next holds a member's flock
//     finishes its part if the mark is still there. Children the members
//     scheduled that have not started (no record yet: a queued start, or a
//     first turn in flight) are members too (unstartedChildren).
//
// Tree queries and the orphan check read the parent -> children index
// (fs_reclaim.go): their cost is the tree's, not the directory's.

const (
	kindPrune   = "prune"
	kindDelete  = "delete"
	kindWorkAck = "work_ack"
)

var _ Admin = (*FSProvider)(nil)

// Admin implements Provider: the filesystem provider has the management
// capability.
func (p *FSProvider) Admin() (Admin, bool) { return p, true }

// scannedInstance is an instance with its key and record file.
type scannedInstance struct {
	key string
	f   *instanceFile
}

// scanInstances reads every instance.json (not history). Instances without
// one (only messages or locks) are skipped.
func (p *FSProvider) scanInstances() ([]scannedInstance, error) {
	names, err := p.fs.ReadDirNames(filepath.Join(p.dir, "instances"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return p.readInstances(names)
}

// readInstances reads the instance.json of each key, in order, skipping
// keys without one and (with a warning) keys whose file does not decode.
func (p *FSProvider) readInstances(keys []string) ([]scannedInstance, error) {
	out := make([]scannedInstance, 0, len(keys))
	for _, k := range keys {
		f, err := p.readInstanceFile(k)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				p.log.Warn("durofs: unreadable instance file skipped", "key", k, "err", err)
				continue
			}
			return nil, err
		}
		if f != nil {
			out = append(out, scannedInstance{k, f})
		}
	}
	return out, nil
}

func (p *FSProvider) recordOf(op, instance string) (string, *instanceFile, error) {
	key := instanceKey(instance)
	f, err := p.readInstanceFile(key)
	if err != nil {
		return key, nil, storageErrf(op, err, "%v", err)
	}
	if f == nil || f.Record == nil {
		return key, nil, Permanentf(op, ErrNotFound, "Instance %s not found", instance)
	}
	return key, f, nil
}

// ListInstances implements Admin: instances with a record, newest first.
func (p *FSProvider) ListInstances(ctx context.Context) ([]string, error) {
	return p.listWhere("list_instances", func(*instanceFile) bool { return true })
}

// ListInstancesByStatus implements Admin.
func (p *FSProvider) ListInstancesByStatus(ctx context.Context, status string) ([]string, error) {
	return p.listWhere("list_instances_by_status", func(f *instanceFile) bool { return f.Status == status })
}

func (p *FSProvider) listWhere(op string, keep func(*instanceFile) bool) ([]string, error) {
	all, err := p.scanInstances()
	if err != nil {
		return nil, Retryablef(op, err, "%v", err)
	}
	var sel []scannedInstance
	for _, s := range all {
		if s.f.Record != nil && keep(s.f) {
			sel = append(sel, s)
		}
	}
	sort.SliceStable(sel, func(i, j int) bool { return sel[i].f.Record.CreatedAtMs > sel[j].f.Record.CreatedAtMs })
	out := make([]string, len(sel))
	for i, s := range sel {
		out[i] = s.f.Instance
	}
	return out, nil
}

// ListExecutions implements Admin: execution ids with a record, ascending.
func (p *FSProvider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	const op = "list_executions"
	key := instanceKey(instance)
	ids, err := p.listExecutions(key)
	if err != nil {
		return nil, Retryablef(op, err, "%v", err)
	}
	out := []uint64{}
	for _, id := range ids {
		if _, err := p.fs.Stat(p.execStatePath(key, id)); err == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// ReadHistoryWithExecutionID implements Admin.
func (p *FSProvider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]Event, error) {
	return p.ReadWithExecution(ctx, instance, executionID)
}

// ReadHistory implements Admin.
func (p *FSProvider) ReadHistory(ctx context.Context, instance string) ([]Event, error) {
	return p.Read(ctx, instance)
}

// LatestExecutionID implements Admin (1 when the instance has none).
func (p *FSProvider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	ids, err := p.ListExecutions(ctx, instance)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return InitialExecutionID, nil
	}
	return ids[len(ids)-1], nil
}

// GetInstanceInfo implements Admin.
func (p *FSProvider) GetInstanceInfo(ctx context.Context, instance string) (InstanceInfo, error) {
	const op = "get_instance_info"
	key, f, err := p.recordOf(op, instance)
	if err != nil {
		return InstanceInfo{}, err
	}
	info := InstanceInfo{
		InstanceID: instance, OrchestrationName: f.Record.OrchestrationName,
		OrchestrationVersion: derefOr(f.Record.OrchestrationVersion, "unknown"),
		CurrentExecutionID:   f.CurrentExecutionID, Status: "Unknown",
		CreatedAtMs: uint64(f.Record.CreatedAtMs), UpdatedAtMs: uint64(f.UpdatedAtMs),
		ParentInstanceID: f.Record.ParentInstanceID,
	}
	ef, err := p.readExecutionFile(key, f.CurrentExecutionID)
	if err != nil {
		return InstanceInfo{}, storageErrf(op, err, "%v", err)
	}
	if ef != nil {
		info.Status, info.Output = ef.Status, ef.Output
	}
	return info, nil
}

// GetExecutionInfo implements Admin.
func (p *FSProvider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (ExecutionInfo, error) {
	const op = "get_execution_info"
	ef, err := p.readExecutionFile(instanceKey(instance), executionID)
	if err != nil {
		return ExecutionInfo{}, storageErrf(op, err, "%v", err)
	}
	if ef == nil {
		return ExecutionInfo{}, Permanentf(op, ErrNotFound, "Execution %d of instance %s not found", executionID, instance)
	}
	info := ExecutionInfo{ExecutionID: executionID, Status: ef.Status, Output: ef.Output, StartedAtMs: uint64(ef.StartedAtMs), EventCount: ef.EventCount}
	if ef.CompletedAtMs != nil {
		c := uint64(*ef.CompletedAtMs)
		info.CompletedAtMs = &c
	}
	return info, nil
}

// GetSystemMetrics implements Admin, from instance.json summaries.
func (p *FSProvider) GetSystemMetrics(ctx context.Context) (SystemMetrics, error) {
	all, err := p.scanInstances()
	if err != nil {
		return SystemMetrics{}, Retryablef("get_system_metrics", err, "%v", err)
	}
	var m SystemMetrics
	for _, s := range all {
		m.TotalExecutions += s.f.Executions.Len()
		m.TotalEvents += s.f.TotalEvents
		if s.f.Record == nil {
			continue
		}
		m.TotalInstances++
		switch s.f.Status {
		case "Running":
			m.RunningInstances++
		case "Completed":
			m.CompletedInstances++
		case "Failed":
			m.FailedInstances++
		}
	}
	return m, nil
}

// GetQueueDepths implements Admin: unlocked messages of each queue. It reads
// every orchestrator message's header (which instance's lease may lock it).
func (p *FSProvider) GetQueueDepths(ctx context.Context) (QueueDepths, error) {
	const op = "get_queue_depths"
	var d QueueDepths
	nowMs := p.nowMs()
	locked := map[string]map[string]bool{} // key → batch names under a live lease
	err := eachQueued(p.orchQ, func(m queued) error {
		key := m.Attrs[attrKey]
		b, seen := locked[key]
		if !seen {
			b = map[string]bool{}
			if l, ok, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key)); err == nil && ok && l.HeldAt(nowMs) {
				for _, n := range decodeOrchState(l).Batch {
					b[n] = true
				}
			}
			locked[key] = b
		}
		if !b[m.Name] {
			d.OrchestratorQueue++
		}
		return nil
	})
	if err != nil {
		return d, Retryablef(op, err, "%v", err)
	}
	wentries, err := p.workQ.List()
	if err != nil {
		return d, Retryablef(op, err, "%v", err)
	}
	claimed := map[string]bool{}
	names, err := p.workQ.Claims()
	if err != nil {
		return d, Retryablef(op, err, "%v", err)
	}
	for _, n := range names {
		// A claim lock that stays busy has a holder in a section on the
		// item (a claim, renew or ack), or one stopped in it: counted as
		// claimed rather than waited for.
		wctx, cancel := context.WithTimeout(ctx, claimBusyWait)
		err := p.workQ.WithClaim(wctx, n, func(g *fsqueue.ClaimGuard) error {
			c, ok, err := g.Read()
			if err == nil && ok && (c.State != "" || (c.Token != "" && c.LockedUntilMs > g.Now().UnixMilli())) {
				claimed[n] = true
			}
			return nil
		})
		cancel()
		if claimLockBusy(ctx, err) {
			claimed[n] = true
		}
	}
	for _, e := range wentries {
		if !claimed[e.Name()] {
			d.WorkerQueue++
		}
	}
	return d, nil
}

// ListChildren implements Admin: the children index (fs_reclaim.go).
func (p *FSProvider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	kids, err := p.childrenOf(instance)
	if err != nil {
		return nil, Retryablef("list_children", err, "%v", err)
	}
	out := make([]string, 0, len(kids))
	for _, c := range kids {
		out = append(out, c.f.Instance)
	}
	return out, nil
}

// GetParentID implements Admin.
func (p *FSProvider) GetParentID(ctx context.Context, instance string) (string, bool, error) {
	_, f, err := p.recordOf("get_parent_id", instance)
	if err != nil {
		return "", false, err
	}
	if f.Record.ParentInstanceID == nil {
		return "", false, nil
	}
	return *f.Record.ParentInstanceID, true, nil
}

// GetInstanceTree implements Admin: the instance and all its descendants,
// through the children index.
func (p *FSProvider) GetInstanceTree(ctx context.Context, instance string) (InstanceTree, error) {
	ids, err := p.treeIDs(instance)
	if err != nil {
		return InstanceTree{}, Retryablef("get_instance_tree", err, "%v", err)
	}
	return InstanceTree{RootID: instance, AllIDs: ids}, nil
}

// DeleteInstance implements Admin: a root instance and its whole tree. A
// child that had its first ack after the tree was walked (which the
// reference reports as an orphan error) makes it walk the tree again, up to
// maxTreeWalks times.
func (p *FSProvider) DeleteInstance(ctx context.Context, instance string, force bool) (DeleteInstanceResult, error) {
	const op = "delete_instance"
	if err := checkInstanceIDs(op, instance); err != nil {
		return DeleteInstanceResult{}, err
	}
	parent, hasParent, err := p.GetParentID(ctx, instance)
	if err != nil {
		return DeleteInstanceResult{}, err
	}
	if hasParent {
		return DeleteInstanceResult{}, Permanentf(op, ErrNotAllowed,
			"Cannot delete sub-orchestration %s directly (its parent is %s). Delete root instance instead.", instance, parent)
	}
	for try := 1; ; try++ {
		tree, err := p.GetInstanceTree(ctx, instance)
		if err != nil {
			return DeleteInstanceResult{}, err
		}
		if testHookTreeWalked != nil {
			testHookTreeWalked()
		}
		res, err := p.DeleteInstancesAtomic(ctx, tree.AllIDs, force)
		if errors.Is(err, errChildOutsideSet) && try < maxTreeWalks {
			// A child had its first ack after the walk (and before the
			// deletion took its flock: its unstarted start would have been
			// taken with its parent, unstartedChildren). The tree is ours
			// to delete: walk it again.
			continue
		}
		return res, err
	}
}

// maxTreeWalks bounds how often DeleteInstance walks the tree again because
// a child started meanwhile; then the orphan error is returned, as the
// reference returns it at once.
const maxTreeWalks = 5

// errChildOutsideSet is the kind of DeleteInstancesAtomic's error for a
// child of a member that is not a member (ErrNotAllowed).
var errChildOutsideSet = fmt.Errorf("%w: a child is not in the deleted set", ErrNotAllowed)

// DeleteInstancesAtomic implements Admin: all of ids, or nothing. Without
// force it refuses (ErrInstanceRunning) an id whose current execution is
// Running, and an id without an instance record whose first turn a live
// fetch holds (its lease held, nothing acked yet). It holds the instances'
// flocks from before its commit through its apply, and passes the claim
// lock of each of their pending work items, one at a time, before its
// commit (fs_deleting.go).
func (p *FSProvider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	if err := checkInstanceIDs(op, ids...); err != nil {
		return DeleteInstanceResult{}, err
	}
	// Children the members scheduled that have not started (no record yet,
	// only a queued start or a first turn in flight) join the deletion as
	// deleteAtomic finds them: child id -> the member that scheduled it.
	unstarted := map[string]string{}
	for {
		all := ids
		if len(unstarted) > 0 {
			all = append(slices.Clip(ids), slices.Sorted(maps.Keys(unstarted))...)
		}
		res, again, wait, err := p.deleteAtomic(ctx, all, unstarted, force)
		if wait != nil {
			// A member's flock or a worker item's claim lock stayed busy
			// while this try held others: wait for it holding none (its
			// holder may be stopped, and what was locked must not wait
			// with it), then try again from the start.
			if err := wait(ctx); err != nil {
				return res, Retryablef(op, err, "%v", err)
			}
			continue
		}
		if !again {
			return res, err
		}
		// A member's pending deletion, finished under its flock, reclaimed
		// its directory, or the unstarted children changed: look again
		// (what is there now is newer).
	}
}

// deleteAtomic is one try of DeleteInstancesAtomic. again is true when the
// redo of a member's pending commit reclaimed its directory (a deletion
// committed before this one), or when unstartedChildren changed unstarted
// (the members' unstarted children, which ids includes): the caller tries
// again from the start. wait
// is set when a member's flock (lockNext) or a worker item's claim lock
// (passClaims) stayed busy while the try held others: everything was let
// go, and the caller runs wait (it waits for that lock alone) before it
// tries again.
func (p *FSProvider) deleteAtomic(ctx context.Context, ids []string, unstarted map[string]string, force bool) (res DeleteInstanceResult, again bool, wait func(context.Context) error, err error) {
	const op = "delete_instances_atomic"
	if len(ids) == 0 {
		return res, false, nil, nil
	}
	keyOf := map[string]string{}
	for _, id := range ids {
		keyOf[instanceKey(id)] = id
	}
	keys := make([]string, 0, len(keyOf))
	for k := range keyOf {
		// An id with nothing to delete (a mistyped one) is not locked:
		// there is nothing to delete, and nothing to create by locking.
		if absent, err := p.instanceAbsent(k); err != nil {
			return res, false, nil, Retryablef(op, err, "%v", err)
		} else if !absent {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // a global order: concurrent deleters cannot deadlock
	guards := map[string]*lease.Guard{}
	deleted := map[string]bool{} // members whose deletion this call commits
	defer func() {
		for k, g := range guards {
			if !deleted[k] {
				// Locking may have created the directory of an instance
				// found to hold nothing: take it away again.
				if err := p.reclaimIfEmpty(g, k); err != nil {
					p.log.Warn("durofs: an empty instance directory stays", "key", k, "err", err)
				}
			}
			g.Unlock()
		}
	}()
	for _, k := range keys {
		g, busy, err := p.lockNext(ctx, k, len(guards))
		if busy {
			// The deferred unlock lets the others go.
			return res, false, func(ctx context.Context) error { return p.awaitFree(ctx, k) }, nil
		}
		if err != nil {
			return res, false, nil, Retryablef(op, err, "lock %s: %v", keyOf[k], err)
		}
		guards[k] = g
		if err := p.redoPending(ctx, g, k); err != nil {
			return res, false, nil, Retryablef(op, err, "recover pending commit of %s: %v", keyOf[k], err)
		}
		if g.Reclaimed() {
			return res, true, nil, nil
		}
	}

	// Validate inside the critical section: status, and the orphan check
	// (a child created after the caller walked the tree).
	files := map[string]*instanceFile{}
	for _, k := range keys {
		f, err := p.readInstanceFile(k)
		if err != nil {
			return res, false, nil, storageErrf(op, err, "%v", err)
		}
		if f == nil {
			// No record yet. A lease held means a live fetch took its start:
			// its first turn is running, and its start was acknowledged to
			// its client. (A member's unstarted child goes with it.)
			if _, child := unstarted[keyOf[k]]; !force && !child {
				if l, _, err := guards[k].Read(); err == nil && l.HeldAt(p.nowMs()) {
					return res, false, nil, Permanentf(op, ErrInstanceRunning, "Instance %s is still running (its first turn, fetched by %s, is not acked yet); use force to delete it", keyOf[k], l.Owner)
				}
			}
			continue
		}
		files[k] = f
		if !force && f.Status == "Running" {
			return res, false, nil, Permanentf(op, ErrInstanceRunning, "Instance %s is still running; use force to delete it", keyOf[k])
		}
	}
	for _, id := range ids {
		kids, err := p.childrenOf(id)
		if err != nil {
			return res, false, nil, Retryablef(op, err, "%v", err)
		}
		for _, c := range kids {
			if _, inSet := guards[c.key]; !inSet {
				return res, false, nil, Permanentf(op, errChildOutsideSet,
					"child instance %s of %s was created after tree traversal; deleting would orphan it (delete the whole tree)", c.f.Instance, id)
			}
		}
	}

	if changed, err := p.unstartedChildren(keyOf, files, unstarted); err != nil {
		return res, false, nil, Retryablef(op, err, "%v", err)
	} else if changed {
		return res, true, nil, nil
	}

	// Counts and the messages to delete: each member's, found by its route.
	// The worker queue first: a work ack of one of the members' items,
	// which holds only the item's claim lock, may be applying right now,
	// and its apply publishes the completion before it deletes the item
	// (applyWorkAck). Listed in this order, the deletion finds the item
	// (then it passes the item's claim lock before its commit and deletes
	// the completion in its apply: fs_deleting.go) or, the item already
	// gone, the completion. The other order can miss both: the completion
	// published just after the orchestrator queue was listed, the item
	// deleted just before the worker queue was - and the completion stays,
	// for nobody (TestDeletionListingRacingAWorkAck).
	var msgs []queueRef
	refsOf := map[string][]queueRef{}
	for _, k := range keys {
		for _, q := range []struct {
			name string
			q    *fsqueue.Queue
		}{{"worker", p.workQ}, {"orchestrator", p.orchQ}} {
			qms, err := queuedFor(q.q, k)
			if err != nil {
				return res, false, nil, Retryablef(op, err, "%v", err)
			}
			for _, m := range qms {
				refsOf[k] = append(refsOf[k], queueRef{Queue: q.name, Name: m.Name})
			}
			if testHookDeletionListed != nil {
				testHookDeletionListed(q.name)
			}
		}
		msgs = append(msgs, refsOf[k]...)
	}
	gwMsgs, err := p.gwDeletionRefs(ctx, keyOf)
	if err != nil {
		return res, false, nil, Retryablef(op, err, "%v", err)
	}
	for _, f := range files {
		if f.Record != nil {
			res.InstancesDeleted++
		}
		res.ExecutionsDeleted += f.Executions.Len()
		res.EventsDeleted += f.TotalEvents
	}
	res.QueueMessagesDeleted = uint64(len(msgs))
	for _, refs := range gwMsgs {
		res.QueueMessagesDeleted += uint64(len(refs))
	}
	if len(files) == 0 && res.QueueMessagesDeleted == 0 {
		return res, false, nil, nil
	}

	// One record deletes them all (the commit point, fs_wal.go), marked in
	// every member's lease; each member's part is applied under its flock.
	rec := &commitRecord{Kind: kindDelete, CommittedMs: p.nowMs()}
	gs := make([]*lease.Guard, 0, len(keys))
	for _, k := range keys {
		refs := append(refsOf[k], gwMsgs[k]...)
		m := deleteMember{Key: k, Instance: keyOf[k], Delete: refs}
		if f := files[k]; f != nil && f.Record != nil {
			m.Parent = f.Record.ParentInstanceID
		}
		rec.Members = append(rec.Members, m)
		gs = append(gs, guards[k])
		deleted[k] = true
	}
	// A work ack of one of the deleted worker items must not commit after
	// this deletion: live, the deletion's redo would delete the completion
	// it published, but a replay would redo the deletion and then the ack,
	// and publish it again for the next instance of the id. commitLocked
	// creates the deletion markers and passes every listed item's claim
	// lock before the append (fs_deleting.go): an ack either committed and
	// applied before that (this deletion then deletes its completion) or
	// finds a marker and waits for this instance's flock, which is held
	// until the deletion is applied.
	failpoint.Hit("delete.before_commit")
	if err := p.commitLocked(ctx, gs, rec); err != nil {
		var busy *claimBusyError
		if errors.As(err, &busy) {
			for k := range deleted {
				delete(deleted, k) // nothing committed: the deferred unlock tidies up
			}
			return res, false, func(ctx context.Context) error { return p.awaitClaimFree(ctx, busy.name) }, nil
		}
		return DeleteInstanceResult{}, false, nil, Retryablef(op, err, "commit deletion: %v", err)
	}
	afterCommitPoint("delete")
	failpoint.Hit("delete.after_commit")
	for _, m := range rec.Members {
		if err := p.applyDeleteMember(ctx, guards[m.Key], rec.CommitID, m); err != nil {
			p.applyDeferredTo(ctx, "deletion", m.Key, m.Instance, rec, err)
			return res, false, nil, nil
		}
		failpoint.Hit("delete.after_member_applied")
	}
	p.notify(wakeAll)
	return res, false, nil, nil
}

// unstartedChildren brings unstarted (child id -> the member that
// scheduled it) up to date with the members' histories, read under their
// flocks (files are their instance files, read under them too), and
// reports whether it changed.
//
// A sub-orchestration has no instance record, and so no entry in its
// parent's children index, until its own first ack: before that it is a
// start message in the orchestrator queue, or a first turn some process
// holds. Deleting the tree without it would leave the start queued, and
// the child would run - activities and all - after its parent was deleted,
// an orphan that DeleteInstance refuses to delete on its own (it names a
// parent). So a deletion takes every child its members scheduled
// (SubOrchestrationScheduled) that is not a member and has no record yet,
// or has one naming that member: its queued messages are deleted and its
// lease reclaimed like any member's, so a first turn in flight cannot ack.
// Its flock is held from before the deletion's commit, so no first ack of
// it commits in between: one that committed before is seen here (its record
// names the member) and the child is deleted as any child. An unstarted
// child that meanwhile got a record naming another parent, or none, is
// somebody else's instance of that id and leaves the set.
//
// Only members whose instance file counts sub-orchestrations
// (SubOrchestrations) are read; a history that cannot be read whole is
// skipped with a warning (the deletion must still be possible).
func (p *FSProvider) unstartedChildren(keyOf map[string]string, files map[string]*instanceFile, unstarted map[string]string) (changed bool, err error) {
	for id, parent := range unstarted {
		if f := files[instanceKey(id)]; f != nil && f.Record != nil && (f.Record.ParentInstanceID == nil || *f.Record.ParentInstanceID != parent) {
			delete(unstarted, id)
			changed = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(files)) {
		f := files[k]
		if f.SubOrchestrations == 0 {
			continue
		}
		for exec := range f.Executions.All() {
			// Read whole, not through the history cache: an entry for an
			// instance being deleted would only push out live ones.
			events, herr, err := p.loadHistory(k, exec, false)
			if err != nil {
				return false, err
			}
			if herr != nil {
				p.log.Warn("durofs: deletion cannot read a history for the sub-orchestrations it scheduled", "instance", keyOf[k], "execution", exec, "err", herr)
				continue
			}
			for _, ev := range events {
				s, ok := ev.Kind.(SubOrchestrationScheduled)
				if !ok || s.Instance == "" {
					continue
				}
				if _, member := keyOf[instanceKey(s.Instance)]; member {
					continue
				}
				cf, err := p.readInstanceFile(instanceKey(s.Instance))
				if errors.Is(err, ErrCorrupt) {
					continue // not read, as the children index's readers skip it (fsck reports it)
				}
				if err != nil {
					return false, err
				}
				if cf != nil && cf.Record != nil && (cf.Record.ParentInstanceID == nil || *cf.Record.ParentInstanceID != keyOf[k]) {
					continue // another instance of that id
				}
				unstarted[s.Instance] = keyOf[k]
				changed = true
			}
		}
	}
	return changed, nil
}

// countSubOrchestrations counts the SubOrchestrationScheduled events of
// events (instanceFile.SubOrchestrations).
func countSubOrchestrations(events []Event) uint64 {
	var n uint64
	for _, ev := range events {
		if _, ok := ev.Kind.(SubOrchestrationScheduled); ok {
			n++
		}
	}
	return n
}

// instDirExists reports whether the instance directory of key exists.
func (p *FSProvider) instDirExists(key string) (bool, error) {
	_, err := p.fs.Stat(p.instDir(key))
	if vfs.IsNotExist(err) {
		return false, nil
	}
	return err == nil, err
}

// instanceAbsent reports whether instance key has neither a directory nor a
// queued message, so that a deletion has nothing of it to delete. The queues
// are listed first: a message that is consumed meanwhile was fetched, which
// created the directory before the ack removed the message, so an instance
// that existed at any moment of the check is seen; one that appears only
// after it was created after the deletion.
func (p *FSProvider) instanceAbsent(key string) (bool, error) {
	for _, q := range []*fsqueue.Queue{p.orchQ, p.workQ} {
		msgs, err := queuedFor(q, key)
		if err != nil {
			return false, err
		}
		if len(msgs) > 0 {
			return false, nil
		}
	}
	exists, err := p.instDirExists(key)
	return !exists, err
}

// deleteMember is one instance of a deletion record. Parent is the parent
// its record named, whose children index lists it.
type deleteMember struct {
	Key      string     `json:"key"`
	Instance string     `json:"instance"`
	Parent   *string    `json:"parent,omitempty"`
	Delete   []queueRef `json:"delete,omitempty"`
}

// applyDeleteMember applies one instance's part of a deletion record under
// its flock, unsynced. Idempotent: messages first (worker items under their
// claim lock, so a worker holding one sees it vanish and its ack fails), then
// instance.json (so a crash in between leaves no listed instance without
// history), then its entry in its parent's children index (after
// instance.json: see fs_reclaim.go), then the executions, then the
// directory is reclaimed (fs_reclaim.go) - the lease first, which clears
// the mark. If a replay queued later commits of the instance behind this
// one (fs_stuck.go), the directory stays for them and the lease keeps their
// marks only.
func (p *FSProvider) applyDeleteMember(ctx context.Context, g *lease.Guard, id string, m deleteMember) error {
	if err := p.deleteRefs(ctx, m.Delete); err != nil {
		return err
	}
	if err := p.deleteCompletions(m); err != nil {
		return err
	}
	failpoint.Hit("delete.member_after_messages")
	if err := p.fs.Remove(p.instFilePath(m.Key)); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	failpoint.Hit("delete.member_after_instance_file")
	if m.Parent != nil {
		if err := p.removeChild(*m.Parent, m.Key); err != nil {
			return err
		}
		failpoint.Hit("delete.member_after_index")
	}
	if err := p.fs.RemoveAll(filepath.Join(p.instDir(m.Key), "executions")); err != nil {
		return err
	}
	failpoint.Hit("delete.member_after_executions")
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return err
	}
	if st := decodeOrchState(cur); advanceMark(&st, id) && st.Pending != nil {
		return g.Write(lease.Lease{Fence: cur.Fence, Data: orchState{Pending: st.Pending, Queued: st.Queued}.encode()})
	}
	return p.reclaimInstance(g, m.Key)
}

// deleteCompletions deletes the completions that work acks of m's worker
// items published to m's instance (their source is "w:<item>"). Such an ack
// may have committed and been applied after the deletion listed the
// instance's messages, but before the deletion passed the item's claim
// lock (passClaims), which the ack held through its apply: every such
// completion is published by now, and it precedes the deletion in the log,
// so a replay applies it first and deletes the same. No ack of a listed
// item commits after the deletion: one that took the claim lock after it
// was passed finds the deletion marker and waits for the instance's flock,
// held through this apply (fs_deleting.go).
func (p *FSProvider) deleteCompletions(m deleteMember) error {
	srcs := map[string]bool{}
	for _, r := range m.Delete {
		if r.Queue == "worker" {
			srcs["w:"+r.Name] = true
		}
	}
	if len(srcs) == 0 {
		return nil
	}
	msgs, err := queuedFor(p.orchQ, m.Key)
	if err != nil {
		return err
	}
	for _, q := range msgs {
		if srcs[q.Attrs[attrSource]] {
			if err := p.orchQ.Delete(q.Name); err != nil && !vfs.IsNotExist(err) {
				return fmt.Errorf("delete orchestrator/%s: %w", q.Name, err)
			}
		}
	}
	return nil
}

// DeleteInstanceBulk implements Admin: terminal root instances matching
// filter, each with its whole tree (forced, as in the reference).
func (p *FSProvider) DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error) {
	const op = "delete_instance_bulk"
	var res DeleteInstanceResult
	if filter.InstanceIDs != nil && len(filter.InstanceIDs) == 0 {
		return res, nil
	}
	all, err := p.scanInstances()
	if err != nil {
		return res, Retryablef(op, err, "%v", err)
	}
	cands := p.filterInstances(all, filter, func(f *instanceFile) bool {
		return f.Record.ParentInstanceID == nil && (f.Status == "Completed" || f.Status == "Failed" || f.Status == "ContinuedAsNew")
	})
	// Trees (through the children index) go in batches of about
	// bulkDeleteBatch instances, each one atomic deletion: one commit per
	// batch rather than per tree. Choosing the candidates reads every
	// instance.json once; the rest costs what the trees hold.
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := p.DeleteInstancesAtomic(ctx, batch, true)
		batch = batch[:0]
		if err != nil {
			return err
		}
		res = res.Add(r)
		return nil
	}
	for _, id := range cands {
		tree, err := p.treeIDs(id)
		if err != nil {
			return res, Retryablef(op, err, "%v", err)
		}
		if len(batch) > 0 && len(batch)+len(tree) > bulkDeleteBatch {
			if err := flush(); err != nil {
				return res, err
			}
		}
		batch = append(batch, tree...)
	}
	return res, flush()
}

// bulkDeleteBatch is how many instances DeleteInstanceBulk deletes in one
// atomic group (a larger tree is one group of its own). Each member's flock
// stays open until its group is applied.
const bulkDeleteBatch = 64

// filterInstances applies an InstanceFilter (ids, completed_before, then limit).
func (p *FSProvider) filterInstances(all []scannedInstance, filter InstanceFilter, keep func(*instanceFile) bool) []string {
	var allow map[string]bool
	if filter.InstanceIDs != nil {
		allow = map[string]bool{}
		for _, id := range filter.InstanceIDs {
			allow[id] = true
		}
	}
	limit := DefaultBulkLimit
	if filter.Limit != nil {
		limit = int(*filter.Limit)
	}
	var out []string
	for _, s := range all {
		f := s.f
		if f.Record == nil || (allow != nil && !allow[f.Instance]) || !keep(f) {
			continue
		}
		if filter.CompletedBeforeMs != nil && (f.CompletedAtMs == nil || uint64(*f.CompletedAtMs) >= *filter.CompletedBeforeMs) {
			continue
		}
		if len(out) >= limit {
			break
		}
		out = append(out, f.Instance)
	}
	return out
}

// PruneExecutions implements Admin. The current execution and Running
// executions are always kept; KV state is not touched.
func (p *FSProvider) PruneExecutions(ctx context.Context, instance string, options PruneOptions) (PruneResult, error) {
	const op = "prune_executions"
	if err := checkInstanceIDs(op, instance); err != nil {
		return PruneResult{}, err
	}
	key := instanceKey(instance)
	// No lock file, no instance (nor a pending commit, which a lease beside
	// it would mark): not found, without creating anything by locking.
	g, _, err := p.lockExisting(ctx, key, true)
	if errors.Is(err, lease.ErrGone) {
		return PruneResult{}, Permanentf(op, ErrNotFound, "Instance %s not found", instance)
	}
	if err != nil {
		return PruneResult{}, Retryablef(op, err, "lock instance: %v", err)
	}
	defer g.Unlock()
	if err := p.redoPending(ctx, g, key); err != nil {
		return PruneResult{}, Retryablef(op, err, "recover pending commit: %v", err)
	}
	f, err := p.readInstanceFile(key)
	if err != nil {
		return PruneResult{}, storageErrf(op, err, "%v", err)
	}
	if f == nil || f.Record == nil {
		return PruneResult{}, Permanentf(op, ErrNotFound, "Instance %s not found", instance)
	}
	if gwPruneSkips(p, key) { // go-workflows executions are removed through its backend (fs_gw_admin.go)
		return PruneResult{}, nil
	}
	execs := f.Executions.Slice()
	keepTop := map[uint64]bool{}
	if options.KeepLast != nil && *options.KeepLast > 0 {
		for i := len(execs) - 1; i >= 0 && len(keepTop) < int(*options.KeepLast); i-- {
			keepTop[execs[i]] = true
		}
	}
	res := PruneResult{InstancesProcessed: 1}
	nf := *f
	nf.Executions = execIDs{}
	var prune []uint64
	for _, e := range execs {
		ef, err := p.readExecutionFile(key, e)
		if err != nil {
			return PruneResult{}, storageErrf(op, err, "%v", err)
		}
		drop := e != f.CurrentExecutionID && ef != nil && ef.Status != "Running" && !keepTop[e]
		if drop && options.CompletedBeforeMs != nil {
			drop = ef.CompletedAtMs != nil && uint64(*ef.CompletedAtMs) < *options.CompletedBeforeMs
		}
		if !drop {
			nf.Executions.Add(e)
			continue
		}
		prune = append(prune, e)
		res.ExecutionsDeleted++
		res.EventsDeleted += ef.EventCount
		nf.TotalEvents -= min(nf.TotalEvents, ef.EventCount)
	}
	if len(prune) == 0 {
		return res, nil
	}
	// Commit point: the prune record. Crash after it: the next flock holder
	// removes the remaining directories and writes instance.json.
	rec := &commitRecord{Kind: kindPrune, Key: key, Instance: instance, InstanceFile: &nf, PruneExecutions: prune, CommittedMs: p.nowMs()}
	failpoint.Hit("prune.before_commit")
	if err := p.commitLocked(ctx, []*lease.Guard{g}, rec); err != nil {
		return PruneResult{}, Retryablef(op, err, "commit prune: %v", err)
	}
	afterCommitPoint("prune")
	failpoint.Hit("prune.after_commit")
	if err := p.applyPrune(g, rec); err != nil {
		p.applyDeferredTo(ctx, "prune", key, instance, rec, err)
	}
	failpoint.Hit("prune.after_apply")
	return res, nil
}

// applyPrune removes pruned execution directories and writes the new
// instance file, unsynced (idempotent), then clears the mark.
func (p *FSProvider) applyPrune(g *lease.Guard, rec *commitRecord) error {
	for _, e := range rec.PruneExecutions {
		if err := p.fs.RemoveAll(p.execDir(rec.Key, e)); err != nil {
			return err
		}
		failpoint.Hit("prune.after_exec_remove")
	}
	if rec.InstanceFile != nil {
		if err := p.writeJSONApply(p.instFilePath(rec.Key), rec.InstanceFile); err != nil {
			return err
		}
	}
	failpoint.Hit("prune.after_instance_file")
	return releaseMark(g, rec.CommitID, "", nil)
}

// PruneExecutionsBulk implements Admin: instances of any status matching filter.
func (p *FSProvider) PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, options PruneOptions) (PruneResult, error) {
	const op = "prune_executions_bulk"
	var res PruneResult
	if filter.InstanceIDs != nil && len(filter.InstanceIDs) == 0 {
		return res, nil
	}
	all, err := p.scanInstances()
	if err != nil {
		return res, Retryablef(op, err, "%v", err)
	}
	for _, id := range p.filterInstances(all, filter, func(*instanceFile) bool { return true }) {
		r, err := p.PruneExecutions(ctx, id, options)
		if err != nil {
			return res, err
		}
		res.InstancesProcessed += r.InstancesProcessed
		res.ExecutionsDeleted += r.ExecutionsDeleted
		res.EventsDeleted += r.EventsDeleted
	}
	return res, nil
}
