package provider

// Messages for instances that were never started.
//
// A fetch leaves queued a message for an instance that has no instance.json,
// no execution, no pending commit and no start (StartOrchestration or
// ContinueAsNew) among its queued messages - an event raised for a wrong id,
// a completion racing ahead of its start - because its start may still come;
// only QueueMessage items are deleted by the fetch (contract test 50).
// Nothing else removes them, so OrphanMessages lists them (durofs queues)
// and an operator drains them: DrainOrphanMessages (durofs drain) is a
// commit like any other, one log record - a deletion (fs_admin.go) whose
// members are those instances and whose messages are their queued ones -
// decided and applied under the instances' flocks.

import (
	"context"
	"sort"
	"time"

	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// startKind reports whether an orchestrator message of kind starts its
// instance.
func startKind(kind string) bool { return kind == "StartOrchestration" || kind == "ContinueAsNew" }

// orphanCandidates groups the orchestrator queue's messages by instance key
// and keeps the keys without a queued start. It reads every message's
// header.
func (p *FSProvider) orphanCandidates() (map[string][]queued, error) {
	byKey := map[string][]queued{}
	started := map[string]bool{}
	err := eachQueued(p.orchQ, func(m queued) error {
		key := m.Attrs[attrKey]
		if key == "" {
			return nil
		}
		if startKind(m.Attrs[attrKind]) {
			started[key] = true
		}
		byKey[key] = append(byKey[key], m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k := range started {
		delete(byKey, k)
	}
	return byKey, nil
}

// neverStarted reports whether instance key has no instance.json, no
// execution and no commit marked pending (its first ack in flight).
func (p *FSProvider) neverStarted(ctx context.Context, key string) (bool, error) {
	if _, err := p.fs.Lstat(p.instFilePath(key)); err == nil {
		return false, nil
	} else if !vfs.IsNotExist(err) {
		return false, err
	}
	if ids, err := p.listExecutions(key); err != nil || len(ids) > 0 {
		return false, err
	}
	cur, _, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key))
	if err == nil && decodeOrchState(cur).Pending != nil {
		return false, nil
	}
	return true, nil
}

// OrphanMessages lists the orchestrator messages queued for instances that
// were never started (see fs_orphans.go), oldest first. A fetch leaves them
// queued until their start arrives; DrainOrphanMessages deletes them.
func (p *FSProvider) OrphanMessages(ctx context.Context) ([]QueuedMessage, error) {
	const op = "orphan_messages"
	cands, err := p.orphanCandidates()
	if err != nil {
		return nil, Retryablef(op, err, "list orchestrator queue: %v", err)
	}
	var out []QueuedMessage
	for key, entries := range cands {
		if err := ctx.Err(); err != nil {
			return nil, Retryablef(op, err, "%v", err)
		}
		ok, err := p.neverStarted(ctx, key)
		if err != nil {
			return nil, Retryablef(op, err, "%v", err)
		}
		if !ok {
			continue
		}
		for _, e := range entries {
			out = append(out, queuedMessage("orchestrator", e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// DrainOrphanMessages deletes the messages OrphanMessages lists that were
// enqueued at least minAge ago, for the given instances (every instance if
// none is given). It decides under the instances' flocks - a start queued
// since, or a first ack, keeps an instance's messages - and commits one log
// record for them all (all are deleted, or none). It returns the messages
// deleted.
func (p *FSProvider) DrainOrphanMessages(ctx context.Context, instances []string, minAge time.Duration) ([]QueuedMessage, error) {
	const op = "drain_orphan_messages"
	if err := checkInstanceIDs(op, instances...); err != nil {
		return nil, err
	}
	cands, err := p.orphanCandidates()
	if err != nil {
		return nil, Retryablef(op, err, "list orchestrator queue: %v", err)
	}
	if len(instances) > 0 {
		want := map[string]bool{}
		for _, id := range instances {
			want[instanceKey(id)] = true
		}
		for k := range cands {
			if !want[k] {
				delete(cands, k)
			}
		}
	}
	keys := make([]string, 0, len(cands))
	for k := range cands {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a global order, as deletions take them
	cutoff := p.nowMs() - minAge.Milliseconds()
	for {
		drained, busy, err := p.drainOnce(ctx, keys, cutoff)
		if busy == "" {
			return drained, err
		}
		// An instance's flock stayed busy while the try held others: wait
		// for it holding none (lockNext), then try again.
		if err := p.awaitFree(ctx, busy); err != nil {
			return nil, Retryablef(op, err, "lock %s: %v", instanceIDOf(busy), err)
		}
	}
}

// drainOnce is one try of DrainOrphanMessages over keys (sorted), for
// messages enqueued at or before cutoff. busy names an instance whose flock
// stayed busy (lockNext) while the try held others: everything was let go
// and nothing committed.
func (p *FSProvider) drainOnce(ctx context.Context, keys []string, cutoff int64) (_ []QueuedMessage, busy string, _ error) {
	const op = "drain_orphan_messages"
	guards := map[string]*lease.Guard{}
	drainedKeys := map[string]bool{}
	defer func() {
		for k, g := range guards {
			if !drainedKeys[k] {
				// Locking may have created the directory: an instance never
				// started has nothing else in it.
				if err := p.reclaimIfEmpty(g, k); err != nil {
					p.log.Warn("durofs: an empty instance directory stays", "key", k, "err", err)
				}
			}
			g.Unlock()
		}
	}()
	rec := &commitRecord{Kind: kindDelete, CommittedMs: p.nowMs()}
	var gs []*lease.Guard
	var drained []QueuedMessage
	for _, k := range keys {
		g, isBusy, err := p.lockNext(ctx, k, len(guards))
		if isBusy {
			return nil, k, nil
		}
		if err != nil {
			return nil, "", Retryablef(op, err, "lock %s: %v", instanceIDOf(k), err)
		}
		guards[k] = g
		if err := p.redoPending(ctx, g, k); err != nil {
			return nil, "", Retryablef(op, err, "recover pending commit of %s: %v", instanceIDOf(k), err)
		}
		if g.Reclaimed() {
			continue // a deletion of it was pending: its messages went with it
		}
		// Under the flock: still never started, and still no start?
		ok, err := p.neverStarted(ctx, k)
		if err != nil {
			return nil, "", Retryablef(op, err, "%v", err)
		}
		msgs, err := queuedFor(p.orchQ, k)
		if err != nil {
			return nil, "", Retryablef(op, err, "list orchestrator queue: %v", err)
		}
		m := deleteMember{Key: k, Instance: instanceIDOf(k)}
		for _, q := range msgs {
			if startKind(q.Attrs[attrKind]) {
				ok = false
			}
		}
		for _, q := range msgs {
			if ok && q.EnqueuedAtMs <= cutoff {
				m.Delete = append(m.Delete, queueRef{Queue: "orchestrator", Name: q.Name})
				m.Instance = q.Attrs[attrInstance]
				drained = append(drained, queuedMessage("orchestrator", q))
			}
		}
		if len(m.Delete) > 0 {
			rec.Members = append(rec.Members, m)
			gs = append(gs, g)
			drainedKeys[k] = true
		}
	}
	if len(rec.Members) == 0 {
		return nil, "", nil
	}
	if err := p.commitLocked(ctx, gs, rec); err != nil {
		return nil, "", Retryablef(op, err, "commit drain: %v", err)
	}
	afterCommitPoint("drain")
	for _, m := range rec.Members {
		if err := p.applyDeleteMember(ctx, guards[m.Key], rec.CommitID, m); err != nil {
			p.applyDeferredTo(ctx, "drain", m.Key, m.Instance, rec, err)
			break
		}
	}
	sort.Slice(drained, func(i, j int) bool { return drained[i].Name < drained[j].Name })
	p.log.Info("durofs: drained messages of instances never started", "messages", len(drained), "instances", len(rec.Members))
	return drained, "", nil
}
