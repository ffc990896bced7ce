package provider

// Workflow instances (see fs_gw.go): removal of finished executions (one,
// or every one finished before a time, in atomic batches), stats, listings
// and queue preparation.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

// PrepareWorkflowQueues creates the queue directories of workflow queues
// (activity false) or activity queues (true), so fetches find them.
func (p *FSProvider) PrepareWorkflowQueues(queues []string, activity bool) error {
	for _, q := range queues {
		if _, _, err := p.gwQueueOf(q, activity); err != nil {
			return err
		}
	}
	return nil
}

// gwRemoveFrom adds the removal of execution ex of b's instance (listed in
// b.inf or not, gwFind): its directory, its record, its by-id entry, and
// its pending events.
func (p *FSProvider) gwRemoveFrom(b *gwBuild, ex gwExec) error {
	execID := ex.ID
	dir, q, err := p.gwQueueOf(ex.Queue, false)
	if err != nil {
		return err
	}
	msgs, err := queuedFor(q, b.key)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Attrs[attrExec] == execID {
			b.part.Delete = append(b.part.Delete, queueRef{Queue: dir, Name: m.Name})
		}
	}
	b.part.RemoveExecs = append(b.part.RemoveExecs, ex.N)
	b.part.RemoveIDs = append(b.part.RemoveIDs, execID)
	delete(b.states, ex.N)
	var keep []gwExec
	for _, e := range b.inf.GW.Executions {
		if e.N != ex.N {
			keep = append(keep, e)
		}
	}
	b.inf.GW.Executions = keep
	b.inf.Executions.Remove(ex.N)
	b.inf.TotalEvents -= min(b.inf.TotalEvents, uint64(ex.Events))
	b.changed = true
	return nil
}

// RemoveWorkflow removes a finished execution - its history, its record and
// its pending events - in one log record: ErrWorkflowNotFound if unknown,
// ErrWorkflowNotFinished if active. The instance's last execution takes
// the instance with it: instance.json, its children index entry, and then
// its directory, lock and lease (reclaimed as a deleted orchestration's,
// fs_reclaim.go).
func (p *FSProvider) RemoveWorkflow(ctx context.Context, ref WorkflowRef) error {
	key := instanceKey(ref.InstanceID)
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
	b, err := p.newGWBuild(key, ref.InstanceID)
	if err != nil {
		return err
	}
	ex, err := p.gwFind(key, b.inf, ref.ExecutionID)
	if err != nil {
		return err
	}
	if ex == nil {
		return ErrWorkflowNotFound
	}
	if ex.State == WorkflowActive {
		return ErrWorkflowNotFinished
	}
	if err := p.gwRemoveFrom(b, *ex); err != nil {
		return err
	}
	if err := p.gwFinish(b, guards[key].Now().UnixMilli(), 0); err != nil {
		return err
	}
	return p.gwCommit(ctx, "remove", guards, []*gwBuild{b}, nil)
}

// gwScanned is an instance with workflow executions, from a directory scan.
type gwScanned struct {
	key string
	f   *gwInstanceFile
}

// gwScan reads every instance.json that has workflow executions.
func (p *FSProvider) gwScan() ([]gwScanned, error) {
	keys, err := p.fs.ReadDirNames(filepath.Join(p.dir, "instances"))
	if err != nil {
		return nil, err
	}
	sort.Strings(keys)
	var out []gwScanned
	for _, k := range keys {
		f, err := p.readGWInstance(k)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				continue
			}
			return nil, err
		}
		if f != nil && f.GW != nil {
			out = append(out, gwScanned{k, f})
		}
	}
	return out, nil
}

// RemoveWorkflows removes every execution that finished (or continued as
// new) before before, in atomic batches of up to batch executions (one log
// record each). It returns how many it removed.
func (p *FSProvider) RemoveWorkflows(ctx context.Context, before time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = 100
	}
	all, err := p.gwScan()
	if err != nil {
		return 0, err
	}
	type cand struct{ key, instance, exec string }
	var cands []cand
	for _, s := range all {
		execs, err := p.gwAll(s.key, s.f)
		if err != nil {
			return 0, err
		}
		for _, e := range execs {
			// Compared as times: before.UnixNano() is undefined outside
			// 1678-2262 (a far-future before would remove nothing, some
			// dates before 1678 everything).
			if e.State != WorkflowActive && e.CompletedNs != nil && time.Unix(0, *e.CompletedNs).Before(before) {
				cands = append(cands, cand{s.key, s.f.Instance, e.ID})
			}
		}
	}
	removed := 0
	for i := 0; i < len(cands); i += batch {
		chunk := cands[i:min(i+batch, len(cands))]
		keys := make([]string, len(chunk))
		for j, c := range chunk {
			keys[j] = c.key
		}
		n, err := p.removeBatch(ctx, keys, func(key string, b *gwBuild) error {
			for _, c := range chunk {
				if c.key != key {
					continue
				}
				ex, err := p.gwFind(key, b.inf, c.exec)
				if err != nil {
					return err
				}
				if ex != nil && ex.State != WorkflowActive {
					if err := p.gwRemoveFrom(b, *ex); err != nil {
						return err
					}
				}
			}
			return nil
		})
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// removeBatch locks keys, lets fill add removals to each instance's part,
// and commits the parts that changed as one record.
func (p *FSProvider) removeBatch(ctx context.Context, keys []string, fill func(key string, b *gwBuild) error) (int, error) {
	guards, unlock, err := p.gwLock(ctx, keys)
	if err != nil {
		return 0, err
	}
	defer unlock()
	var builds []*gwBuild
	n := 0
	nowMs := p.nowMs()
	for key := range guards {
		b, err := p.newGWBuild(key, "")
		if err != nil {
			return 0, err
		}
		if b.inf == nil || b.inf.GW == nil {
			continue
		}
		if err := fill(key, b); err != nil {
			return 0, err
		}
		if b.changed {
			n += len(b.part.RemoveExecs)
			if err := p.gwFinish(b, nowMs, 0); err != nil {
				return 0, err
			}
			builds = append(builds, b)
		}
	}
	if len(builds) == 0 {
		return 0, nil
	}
	sort.Slice(builds, func(i, j int) bool { return builds[i].key < builds[j].key })
	if err := p.gwCommit(ctx, "remove", guards, builds, nil); err != nil {
		return 0, err
	}
	return n, nil
}

// WorkflowExecutions lists every execution of every instance (a scan of the
// instance files and of the state.json of the executions they do not list).
func (p *FSProvider) WorkflowExecutions(ctx context.Context) ([]WorkflowExecution, error) {
	all, err := p.gwScan()
	if err != nil {
		return nil, err
	}
	var out []WorkflowExecution
	for _, s := range all {
		execs, err := p.gwAll(s.key, s.f)
		if err != nil {
			return nil, err
		}
		for i := range execs {
			out = append(out, execs[i].public(s.f.Instance))
		}
	}
	return out, nil
}

// WorkflowStats counts active executions, workflow tasks ready to be
// fetched per workflow queue (instances with a visible pending event of
// their active execution, not locked) and activity tasks per activity queue
// (locked or not).
type WorkflowStats struct {
	ActiveExecutions int64
	ReadyTasks       map[string]int64
	ActivityTasks    map[string]int64
}

// WorkflowStats returns the current counts.
func (p *FSProvider) WorkflowStats(ctx context.Context) (WorkflowStats, error) {
	st := WorkflowStats{ReadyTasks: map[string]int64{}, ActivityTasks: map[string]int64{}}
	all, err := p.gwScan()
	if err != nil {
		return st, err
	}
	actives := map[string]string{} // key -> active execution id
	for _, s := range all {
		if a := s.f.active(); a != nil {
			st.ActiveExecutions++
			actives[s.key] = a.ID
		}
	}
	nowMs := p.nowMs()
	wdirs, err := p.gwQueueDirs(false)
	if err != nil {
		return st, err
	}
	for _, dir := range wdirs {
		name, err := p.gwQueueName(dir)
		if err != nil {
			return st, err
		}
		q, err := p.gwQueue(dir)
		if err != nil {
			return st, err
		}
		ready := map[string]bool{}
		for e, err := range q.Visible(nowMs) {
			if err != nil {
				return st, err
			}
			m, ok, err := readQueued(q, e)
			if err != nil {
				return st, err
			}
			key := m.Attrs[attrKey]
			if !ok || ready[key] || actives[key] == "" || actives[key] != m.Attrs[attrExec] {
				continue
			}
			l, ok, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key))
			if err == nil && ok && l.HeldAt(nowMs) {
				continue
			}
			ready[key] = true
		}
		if len(ready) > 0 {
			st.ReadyTasks[name] = int64(len(ready))
		}
	}
	adirs, err := p.gwQueueDirs(true)
	if err != nil {
		return st, err
	}
	for _, dir := range adirs {
		name, err := p.gwQueueName(dir)
		if err != nil {
			return st, err
		}
		q, err := p.gwQueue(dir)
		if err != nil {
			return st, err
		}
		n, err := q.Len()
		if err != nil {
			return st, err
		}
		if n > 0 {
			st.ActivityTasks[name] = int64(n)
		}
	}
	return st, nil
}

// FutureWorkflowEvents returns every pending future event (timer) of every
// workflow queue, fired or not.
func (p *FSProvider) FutureWorkflowEvents(ctx context.Context) ([]WorkflowEvent, error) {
	dirs, err := p.gwQueueDirs(false)
	if err != nil {
		return nil, err
	}
	var out []WorkflowEvent
	for _, dir := range dirs {
		q, err := p.gwQueue(dir)
		if err != nil {
			return nil, err
		}
		err = eachQueued(q, func(h queued) error {
			if h.Attrs[attrTimer] != "1" {
				return nil
			}
			if m, err := q.Get(h.Name); err == nil {
				out = append(out, eventOfMessage(m))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// gwPruneSkips reports whether PruneExecutions must leave instance key
// alone: it holds workflow executions, whose record (instance.json's "gw")
// an orchestration prune would drop. They are removed with RemoveWorkflow
// and RemoveWorkflows.
func gwPruneSkips(p *FSProvider, key string) bool {
	f, err := p.readGWInstance(key)
	return err == nil && f != nil && f.GW != nil
}

// gwDeletionRefs returns, per instance key of keys, the messages of the
// workflow queues that belong to it - pending events (timers included) and
// activity tasks, claimed or not - for an orchestration deletion
// (DeleteInstancesAtomic), which removes them in its one log record. The
// caller holds the flocks of keys, so no workflow task of theirs adds
// messages meanwhile. An activity task whose completion is committed but not
// applied (its claim marked) is finished first, under its claim lock, so
// that the pending event it publishes is listed too and a replay, which
// applies the completion's record before the deletion's, cannot leave it
// behind.
func (p *FSProvider) gwDeletionRefs(ctx context.Context, keys map[string]string) (map[string][]queueRef, error) {
	out := map[string][]queueRef{}
	// Activity queues first: see above.
	for _, first := range []bool{true, false} {
		err := p.gwEachQueue(func(dir string, activity bool, q *fsqueue.Queue) error {
			if activity != first {
				return nil
			}
			for key := range keys {
				msgs, err := queuedFor(q, key)
				if err != nil {
					return err
				}
				for _, m := range msgs {
					if activity {
						err := q.WithClaim(ctx, m.Name, func(g *fsqueue.ClaimGuard) error { return p.gwRedoAct(q, g) })
						if err != nil {
							return fmt.Errorf("finish the pending completion of activity task %s/%s: %w", dir, m.Name, err)
						}
					}
					out[key] = append(out[key], queueRef{Queue: dir, Name: m.Name})
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// queueDir is the directory of the queue a queueRef names: a workflow queue
// directory, or the orchestrator or worker queue.
func (p *FSProvider) queueDir(name string) string {
	if _, ok := gwQueueKind(name); ok {
		return filepath.Join(p.dir, "queues", name)
	}
	return p.queue(name).Dir()
}
