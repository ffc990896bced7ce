package workload

import (
	"fmt"

	"github.com/durofs/durofs/provider"
)

// turn is the decision for one fetched orchestration item: exactly the
// arguments of AckOrchestrationItem, plus the parent to notify (the
// parent's execution id is looked up by the runtime before acking).
type turn struct {
	execID    uint64
	delta     []provider.Event
	worker    []provider.WorkItem
	orchItems []provider.WorkItem
	metadata  provider.ExecutionMetadata
	cancelled []provider.ScheduledActivityIdentifier

	notify *parentNotice
	// ended is the execution's terminal status, if this turn ended it.
	ended string
	// skipped counts messages ignored as stale or for another execution.
	skipped int
}

// parentNotice is the result a finished sub-orchestration owes its parent.
type parentNotice struct {
	parent   string
	parentID uint64
	result   string
	details  provider.ErrorDetails // nil on success
}

// pinnedVersion is DuroxideVersion as a SemVer.
var pinnedVersion = provider.SemVer{Major: 0, Minor: 1, Patch: 26}

// terminalKind reports whether k ends an execution.
func terminalKind(k provider.EventKind) bool {
	switch k.(type) {
	case provider.OrchestrationCompleted, provider.OrchestrationFailed, provider.OrchestrationContinuedAsNew:
		return true
	}
	return false
}

// maxEventID is the highest event id in h.
func maxEventID(h []provider.Event) uint64 {
	var m uint64
	for _, e := range h {
		m = max(m, e.EventID)
	}
	return m
}

// decide computes one turn of item at nowMs. It is a pure function: the
// same item and time give the same turn.
func decide(item provider.OrchestrationItem, nowMs uint64) turn {
	hist := item.History
	execID := max(item.ExecutionID, provider.InitialExecutionID)
	msgs := item.Messages
	t := turn{execID: execID}

	// A new execution: the first start (StartOrchestration) or the next one
	// (ContinueAsNew after OrchestrationContinuedAsNew).
	var started *provider.OrchestrationStarted
	ended := len(hist) > 0 && terminalKind(hist[len(hist)-1].Kind)
	if len(hist) == 0 || ended {
		continued := false
		if ended {
			_, continued = hist[len(hist)-1].Kind.(provider.OrchestrationContinuedAsNew)
		}
		for i, m := range msgs {
			var s *provider.OrchestrationStarted
			switch v := m.(type) {
			case provider.StartOrchestration:
				if len(hist) == 0 {
					s = &provider.OrchestrationStarted{Name: v.Orchestration, Version: derefOr(v.Version, OrchestrationVersion),
						Input: v.Input, ParentInstance: v.ParentInstance, ParentID: v.ParentID}
				}
			case provider.ContinueAsNew:
				if len(hist) == 0 || continued {
					s = &provider.OrchestrationStarted{Name: v.Orchestration, Version: derefOr(v.Version, OrchestrationVersion),
						Input: v.Input, CarryForwardEvents: v.CarryForwardEvents, InitialCustomStatus: v.InitialCustomStatus}
				}
			}
			if s != nil {
				started = s
				if len(hist) > 0 {
					execID++
				}
				t.execID = execID
				hist = nil
				msgs = append(append([]provider.WorkItem(nil), msgs[:i]...), msgs[i+1:]...)
				break
			}
		}
		if started == nil {
			// Nothing to run: an ended execution (late completions, events)
			// or an instance without a start. Consume the batch.
			t.skipped = len(msgs)
			return t
		}
	}

	nextID := maxEventID(hist) + 1
	full := append([]provider.Event(nil), hist...)
	add := func(kind provider.EventKind, source *uint64) {
		ev := newEvent(item.Instance, execID, nextID, source, nowMs, kind)
		nextID++
		t.delta = append(t.delta, ev)
		full = append(full, ev)
	}
	if started != nil {
		add(*started, nil)
		name, version := started.Name, started.Version
		pin := pinnedVersion
		t.metadata.OrchestrationName, t.metadata.OrchestrationVersion = &name, &version
		t.metadata.ParentInstanceID = started.ParentInstance
		t.metadata.PinnedDuroxideVersion = &pin
	} else {
		for _, e := range hist {
			if s, ok := e.Kind.(provider.OrchestrationStarted); ok {
				started = &s
				break
			}
		}
		if started == nil {
			// History without a start: nothing can be replayed.
			t.skipped = len(msgs)
			return t
		}
	}

	// Messages become completion events, in batch order. Stale messages
	// (another execution, unknown or already completed operation) are
	// skipped; the ack consumes them all the same.
	scheduled := map[uint64]string{} // event id → scheduling event type
	completed := map[uint64]bool{}
	var cancelReason *string
	for _, e := range full {
		switch e.Kind.(type) {
		case provider.ActivityScheduled, provider.TimerCreated, provider.SubOrchestrationScheduled, provider.ExternalSubscribed:
			scheduled[e.EventID] = e.Kind.Type()
		}
		if isCompletion(e.Kind) && e.SourceEventID != nil {
			completed[*e.SourceEventID] = true
		}
	}
	complete := func(src uint64, want string, kind provider.EventKind) {
		if scheduled[src] != want || completed[src] {
			t.skipped++
			return
		}
		completed[src] = true
		s := src
		add(kind, &s)
	}
	for _, m := range msgs {
		switch v := m.(type) {
		case provider.ActivityCompleted:
			if v.ExecutionID != execID {
				t.skipped++
				continue
			}
			complete(v.ID, "ActivityScheduled", provider.ActivityCompletedEvent{Result: v.Result})
		case provider.ActivityFailed:
			if v.ExecutionID != execID {
				t.skipped++
				continue
			}
			complete(v.ID, "ActivityScheduled", provider.ActivityFailedEvent{Details: v.Details})
		case provider.TimerFired:
			if v.ExecutionID != execID {
				t.skipped++
				continue
			}
			complete(v.ID, "TimerCreated", provider.TimerFiredEvent{FireAtMs: v.FireAtMs})
		case provider.SubOrchCompleted:
			if v.ParentExecutionID != execID {
				t.skipped++
				continue
			}
			complete(v.ParentID, "SubOrchestrationScheduled", provider.SubOrchestrationCompleted{Result: v.Result})
		case provider.SubOrchFailed:
			if v.ParentExecutionID != execID {
				t.skipped++
				continue
			}
			complete(v.ParentID, "SubOrchestrationScheduled", provider.SubOrchestrationFailed{Details: v.Details})
		case provider.ExternalRaised:
			// Delivered to the first subscription of that name that has no
			// event yet, if any; buffered (no source) otherwise.
			var src *uint64
			for _, e := range full {
				if sub, ok := e.Kind.(provider.ExternalSubscribed); ok && sub.Name == v.Name && !completed[e.EventID] {
					id := e.EventID
					src = &id
					completed[id] = true
					break
				}
			}
			add(provider.ExternalEvent{Name: v.Name, Data: v.Data}, src)
		case provider.CancelInstance:
			if cancelReason == nil {
				r := v.Reason
				cancelReason = &r
				add(provider.OrchestrationCancelRequested{Reason: r}, nil)
			}
		default:
			// Duplicate starts, QueueMessages: not used by the workload.
			t.skipped++
		}
	}

	o := newOrch(item.Instance, execID, *started, full, nextID, nowMs)
	switch fn, ok := orchestrations[started.Name]; {
	case cancelReason != nil:
		o.failWith(provider.ApplicationError{Kind: provider.AppCancelled(*cancelReason), Message: *cancelReason})
		// Outstanding activities are cancelled with the instance.
		for _, e := range full {
			if _, ok := e.Kind.(provider.ActivityScheduled); ok && !completed[e.EventID] {
				o.cancelled = append(o.cancelled, provider.ScheduledActivityIdentifier{Instance: item.Instance, ExecutionID: execID, ActivityID: e.EventID})
			}
		}
	case !ok:
		o.fail("unregistered:" + started.Name)
	default:
		fn(o)
		if o.nondet == "" && o.end == nil && o.next < len(o.sched) {
			o.nondet = fmt.Sprintf("history has %d scheduled operations, code replayed %d", len(o.sched), o.next)
		}
		if o.nondet != "" {
			msg := o.nondet
			o.end = nil
			o.failWith(provider.ConfigurationError{Kind: provider.ConfigNondeterminism, Resource: started.Name, Message: &msg})
		}
	}
	t.delta = append(t.delta, o.delta...)
	t.worker, t.orchItems, t.cancelled = o.worker, o.orchItems, o.cancelled
	nextID = o.nextID

	if o.end != nil {
		var kind provider.EventKind
		switch o.end.status {
		case StatusCompleted:
			kind = provider.OrchestrationCompleted{Output: o.end.output}
		case StatusFailed:
			kind = provider.OrchestrationFailed{Details: o.end.details}
		default:
			kind = provider.OrchestrationContinuedAsNew{Input: o.end.output}
			v := started.Version
			t.orchItems = append(t.orchItems, provider.ContinueAsNew{
				Instance: item.Instance, Orchestration: started.Name, Input: o.end.output,
				Version: &v, CarryForwardEvents: [][2]string{},
			})
		}
		add(kind, nil)
		status, output := o.end.status, o.end.output
		t.metadata.Status, t.metadata.Output = &status, &output
		t.ended = status
		if started.ParentInstance != nil && started.ParentID != nil && status != "ContinuedAsNew" {
			t.notify = &parentNotice{parent: *started.ParentInstance, parentID: *started.ParentID, result: output, details: o.end.details}
		}
	}
	return t
}

func derefOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}
