package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/lease"
)

// Read implements Provider: the latest execution's history.
func (p *FSProvider) Read(ctx context.Context, instance string) ([]Event, error) {
	const op = "read"
	key := instanceKey(instance)
	exec, err := p.latestExecution(key)
	if err != nil {
		return nil, storageErrf(op, err, "%v", err)
	}
	if exec == 0 {
		return []Event{}, nil
	}
	return p.readExec(ctx, op, key, exec)
}

// ReadWithExecution implements Provider.
func (p *FSProvider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]Event, error) {
	return p.readExec(ctx, "read_with_execution", instanceKey(instance), executionID)
}

// readExec reads an execution's history without the instance flock. A
// history that looks truncated may only be in the middle of a change by
// another process (a commit's apply, a prune or a deletion removing the
// execution): it is read again under the flock, after finishing a pending
// commit, before it is reported as loss.
func (p *FSProvider) readExec(ctx context.Context, op, key string, exec uint64) ([]Event, error) {
	events, herr, err := p.loadHistory(key, exec, false)
	if errors.Is(herr, history.ErrTruncated) {
		err = p.settled(ctx, key, func() error {
			events, herr, err = p.loadHistory(key, exec, false)
			return err
		})
	}
	if err != nil {
		return nil, Retryablef(op, err, "%v", err)
	}
	if herr != nil {
		return nil, Permanentf(op, ErrCorrupt, "Failed to deserialize history: %v", herr)
	}
	return events, nil
}

// settled runs read under the instance flock, after the commit the lease
// marks pending (if any) is finished: an unlocked reader's second look at
// something that seemed damaged. An instance without a lock file has
// nothing to finish (and locking never creates one here): read runs
// unlocked. The wait for the flock is bounded like a lease holder's call
// (leaseWaitCtx): until the instance's lease expires, plus a margin - a
// process stopped while it holds the flock holds this read up no longer,
// which then fails retryably.
func (p *FSProvider) settled(ctx context.Context, key string, read func() error) error {
	var untilMs int64
	if cur, _, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key)); err == nil {
		untilMs = max(cur.ExpiresAtMs, 1) // 1: no lease, so the margin alone
	}
	wctx, cancel := p.leaseWaitCtx(ctx, key, "", untilMs)
	defer cancel()
	g, _, err := p.lockExisting(wctx, key, true)
	if errors.Is(err, lease.ErrGone) {
		return read()
	}
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return fmt.Errorf("the instance's flock is held by another process past its lease: %w", err)
		}
		return err
	}
	defer g.Unlock()
	if err := p.redoPending(ctx, g, key); err != nil {
		return fmt.Errorf("recover pending commit: %w", err)
	}
	return read()
}

// AppendWithExecution implements Provider. It is a test and debugging path,
// but it is still a commit: under the instance flock it validates (event id 0
// and duplicates fail with nothing written), writes a commit record that
// appends the events at their position and updates the instance's summary
// counters, and applies it. Like the SQLite reference it creates no
// execution record.
func (p *FSProvider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []Event) error {
	const op = "append_with_execution"
	if err := checkInstanceIDs(op, instance); err != nil {
		return err
	}
	events, err := normalizeEvents(op, events)
	if err != nil {
		return err
	}
	for _, e := range events {
		if err := p.limits.checkEvent(op, e); err != nil {
			return err
		}
	}
	if len(events) == 0 {
		return nil
	}
	key := instanceKey(instance)
	var g *lease.Guard
	for {
		var err error
		if g, err = p.lockInstance(ctx, key); err != nil {
			return Retryablef(op, err, "lock instance: %v", err)
		}
		if err := p.redoPending(ctx, g, key); err != nil {
			g.Unlock()
			return Retryablef(op, err, "recover pending commit: %v", err)
		}
		if !g.Reclaimed() {
			break
		}
		g.Unlock() // that was a deletion of the instance: lock it anew
	}
	defer g.Unlock()
	cur, _, _ := g.Read()
	// A history that lost committed events is never extended.
	scan, err := p.readCommittedHistory(key, executionID)
	if err != nil {
		if errors.Is(err, history.ErrCorrupt) {
			return Permanentf(op, ErrCorrupt, "%v", err)
		}
		return Retryablef(op, err, "%v", err)
	}
	existing := make(map[uint64]bool, len(scan.Records))
	for _, r := range scan.Records {
		existing[r.ID] = true
	}
	rec := &commitRecord{Instance: instance, Key: key, Fence: cur.Fence,
		ExecutionID: executionID, CommittedMs: p.nowMs(), HistoryBase: len(scan.Records)}
	for _, ev := range events {
		if ev.EventID == 0 {
			return Permanentf(op, ErrInvalidEvent, "event_id must be set by runtime")
		}
		if existing[ev.EventID] {
			return Permanentf(op, ErrDuplicateEvent, "duplicate event_id %d in execution %d", ev.EventID, executionID)
		}
		existing[ev.EventID] = true
		raw, err := ev.MarshalJSON()
		if err != nil {
			return Permanentf(op, ErrInvalidEvent, "encode event %d: %v", ev.EventID, err)
		}
		rec.History = append(rec.History, compactJSON(raw))
		rec.HistoryIDs = append(rec.HistoryIDs, ev.EventID)
	}
	inf, err := p.readInstanceFile(key)
	if err != nil {
		return storageErrf(op, err, "%v", err)
	}
	if inf != nil {
		nf := *inf
		nf.TotalEvents += uint64(len(events))
		nf.SubOrchestrations += countSubOrchestrations(events)
		rec.InstanceFile = &nf
	}
	if ef, err := p.readExecutionFile(key, executionID); err == nil && ef != nil {
		ne := *ef
		ne.EventCount = uint64(len(scan.Records) + len(events))
		rec.ExecutionFile = &ne
	}
	if err := p.commitLocked(ctx, []*lease.Guard{g}, rec); err != nil {
		return Retryablef(op, err, "commit: %v", err)
	}
	if err := p.apply(ctx, g, rec, false); err != nil {
		p.applyDeferredTo(ctx, "append", key, instance, rec, err)
	}
	return nil
}

// GetCustomStatus implements Provider. Custom status is materialized from
// the last CustomStatusUpdated event of each ack's history delta and kept on
// the instance record (so it survives continue-as-new); its version grows by
// one per ack that carries such an event.
func (p *FSProvider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*CustomStatus, error) {
	inf, err := p.readInstanceFile(instanceKey(instance))
	if err != nil {
		return nil, storageErrf("get_custom_status", err, "%v", err)
	}
	if inf == nil || inf.Record == nil || inf.Record.CustomStatusVersion <= lastSeenVersion {
		return nil, nil
	}
	return &CustomStatus{Status: inf.Record.CustomStatus, Version: inf.Record.CustomStatusVersion}, nil
}
