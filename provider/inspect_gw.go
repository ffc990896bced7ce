package provider

// Inspection of the go-workflows queues and instances (fs_gw.go) for the
// operator commands: queue depths, an instance's pending events and
// activity tasks, its executions' go-workflows ids, and its pending
// commits. Read without locks, as the rest of inspect.go.

import (
	"context"

	"github.com/durofs/durofs/fsqueue"
)

// gwQueueStats counts the messages of every go-workflows queue (workflow
// queues first, then activity queues, each sorted by name).
func (p *FSProvider) gwQueueStats(ctx context.Context, nowMs int64) ([]QueueStat, error) {
	var out []QueueStat
	err := p.gwEachQueue(func(dir string, activity bool, q *fsqueue.Queue) error {
		st := QueueStat{Queue: dir, Kinds: map[string]int{}}
		name, err := p.gwQueueName(dir)
		if err != nil {
			return err
		}
		st.Name = name
		if activity {
			err = p.claimedQueueStat(q, &st, nowMs, gwActivityKind)
		} else {
			err = p.leasedQueueStat(ctx, q, &st, nowMs,
				func(attrs map[string]string) string { return attrs[attrType] },
				func(attrs map[string]string) bool { return attrs[attrTimer] == "1" })
		}
		out = append(out, st)
		return err
	})
	return out, err
}

// gwActivityKind is the kind QueuedMessage and QueueStat give an activity
// task of a go-workflows activity queue.
const gwActivityKind = "ActivityTask"

// gwInstanceMessages lists the messages of instance key in the go-workflows
// queues: its pending events (Kind: the event type) and activity tasks.
func (p *FSProvider) gwInstanceMessages(key string) ([]QueuedMessage, error) {
	var out []QueuedMessage
	err := p.gwEachQueue(func(dir string, activity bool, q *fsqueue.Queue) error {
		msgs, err := queuedFor(q, key)
		for _, m := range msgs {
			kind := m.Attrs[attrType]
			if activity {
				kind = gwActivityKind
			}
			out = append(out, QueuedMessage{Queue: dir, Name: m.Name, Kind: kind, Instance: m.Attrs[attrInstance],
				VisibleAtMs: m.VisibleAtMs, EnqueuedAtMs: m.EnqueuedAtMs})
		}
		return err
	})
	return out, err
}

// WorkflowExecutionSummary is one go-workflows execution of an instance, as
// its record (in instance.json, or in its state.json) has it (durofs show).
type WorkflowExecutionSummary struct {
	// ExecutionID is go-workflows' execution id; Number the execution's
	// directory, executions/<Number>.
	ExecutionID string `json:"execution_id"`
	Number      uint64 `json:"number"`
	// Queue is the workflow queue; Name the workflow's name.
	Queue string `json:"queue"`
	Name  string `json:"name,omitempty"`
	// State is "active", "continued-as-new" or "finished"; Failed marks a
	// finished one that ended in an error.
	State  string          `json:"state"`
	Failed bool            `json:"failed,omitempty"`
	Parent *WorkflowParent `json:"parent,omitempty"`
	// LastSequenceID is the last executed event's sequence id; Events the
	// history's length.
	LastSequenceID int64 `json:"last_sequence_id"`
	Events         int   `json:"events"`
}

// String names a workflow state as WorkflowExecutionSummary does.
func (s WorkflowState) String() string {
	switch s {
	case WorkflowActive:
		return "active"
	case WorkflowContinuedAsNew:
		return "continued-as-new"
	case WorkflowFinished:
		return "finished"
	}
	return "unknown"
}

// gwExecutionSummaries returns the go-workflows executions of key (nil for
// an orchestration instance or none): the one instance.json lists and those
// in the state.json of the others.
func (p *FSProvider) gwExecutionSummaries(key string) ([]WorkflowExecutionSummary, error) {
	f, err := p.readGWInstance(key)
	if err != nil || f == nil || f.GW == nil {
		return nil, err
	}
	execs, err := p.gwAll(key, f)
	if err != nil {
		return nil, err
	}
	out := make([]WorkflowExecutionSummary, 0, len(execs))
	for _, e := range execs {
		out = append(out, WorkflowExecutionSummary{ExecutionID: e.ID, Number: e.N, Queue: e.Queue, Name: e.Name,
			State: e.State.String(), Failed: e.Failed, Parent: e.Parent, LastSequenceID: e.LastSeq, Events: e.Events})
	}
	return out, nil
}

// gwPendingInfo fills in a pending "gw" or "gw_act" record's counts: its
// operation, the events it appends, the messages it publishes and deletes,
// and (gw) the instances it changes.
func gwPendingInfo(pc *PendingCommitInfo, rec *commitRecord, key string) {
	if rec.GW == nil {
		return
	}
	pc.Op = rec.GW.Op
	for _, pt := range rec.GW.Parts {
		pc.Keys = append(pc.Keys, pt.Key)
		pc.Events += len(pt.History)
		pc.Publish += len(pt.Publish)
		pc.Delete += len(pt.Delete)
		if pt.Key == key {
			pc.Instance, pc.Fence = pt.Instance, pt.Fence
		}
	}
}

// gwActQueueOf is the activity queue of a "gw_act" record (nil if it names
// none).
func (p *FSProvider) gwActQueueOf(rec *commitRecord) *fsqueue.Queue {
	if rec.GW == nil {
		return nil
	}
	q, err := p.gwQueue(rec.GW.ActQueue)
	if err != nil {
		return nil
	}
	return q
}
