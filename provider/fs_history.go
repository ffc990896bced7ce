package provider

import (
	"context"
	"errors"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/lease"
)

// Read implements Provider: the latest execution's history.
func (p *FSProvider) Read(ctx context.Context, instance string) ([]Event, error) {
	const op = "read"
	key := instanceKey(instance)
	exec, err := p.latestExecution(key)
	if err != nil {
		return nil, Retryablef(op, err, "%v", err)
	}
	if exec == 0 {
		return []Event{}, nil
	}
	return p.readExec(op, key, exec)
}

// ReadWithExecution implements Provider.
func (p *FSProvider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]Event, error) {
	return p.readExec("read_with_execution", instanceKey(instance), executionID)
}

func (p *FSProvider) readExec(op, key string, exec uint64) ([]Event, error) {
	events, historyErr, err := p.readHistory(key, exec)
	if err != nil {
		return nil, Retryablef(op, err, "%v", err)
	}
	if historyErr != nil {
		return nil, Permanentf(op, ErrCorrupt, "%s", *historyErr)
	}
	return events, nil
}

// AppendWithExecution implements Provider. It appends under the instance
// flock (so it cannot interleave with an ack) and rejects event id 0 and
// duplicates without writing anything.
func (p *FSProvider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []Event) error {
	const op = "append_with_execution"
	key := instanceKey(instance)
	g, err := p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
	if err != nil {
		return Retryablef(op, err, "lock instance: %v", err)
	}
	defer g.Unlock()
	if err := p.redoPending(ctx, g, key); err != nil {
		return Retryablef(op, err, "recover pending commit: %v", err)
	}
	cur, _, _ := g.Read()
	recs := make([]history.Record, 0, len(events))
	for _, ev := range events {
		if ev.EventID == 0 {
			return Permanentf(op, ErrInvalidEvent, "event_id must be set by runtime")
		}
		raw, err := ev.MarshalJSON()
		if err != nil {
			return Permanentf(op, ErrInvalidEvent, "encode event %d: %v", ev.EventID, err)
		}
		recs = append(recs, history.Record{ID: ev.EventID, Epoch: cur.Fence, Payload: compactJSON(raw)})
	}
	if err := p.mkdirDurable(p.execDir(key, executionID)); err != nil {
		return Retryablef(op, err, "%v", err)
	}
	if err := history.Open(p.fs, p.historyPath(key, executionID)).Append(recs); err != nil {
		if errors.Is(err, history.ErrDuplicateID) {
			return Permanentf(op, ErrDuplicateEvent, "duplicate event_id: %v", err)
		}
		return Retryablef(op, err, "%v", err)
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
		return nil, Retryablef("get_custom_status", err, "%v", err)
	}
	if inf == nil || inf.Record == nil || inf.Record.CustomStatusVersion <= lastSeenVersion {
		return nil, nil
	}
	return &CustomStatus{Status: inf.Record.CustomStatus, Version: inf.Record.CustomStatusVersion}, nil
}

var _ = lease.ErrCorrupt
