package workload

import (
	"fmt"
	"strconv"
	"time"

	"github.com/durofs/durofs/provider"
)

// orchFunc is an orchestration in replay style: it is run from the start on
// every turn, schedules work through o in a deterministic order, and returns
// as soon as it needs a result that is not in the history yet. It ends the
// execution by calling o.complete, o.fail or o.continueAsNew.
type orchFunc func(o *orch)

// orch is the replay context of one turn. Scheduling calls are matched, in
// order, against the scheduling events already in the history (replay);
// calls beyond the history are new and become new events and work items.
type orch struct {
	instance string
	execID   uint64
	input    string
	nowMs    uint64

	hist   []provider.Event // existing history plus this turn's completions
	sched  []int            // indices in hist of scheduling events, in order
	next   int              // next scheduling event to replay
	byID   map[uint64]int   // event id → index in hist
	doneBy map[uint64]int   // scheduling event id → index of its completion
	// ext is the index in hist of every ExternalEvent, by name, in order;
	// extUsed counts the subscriptions matched to them so far.
	ext     map[string][]int
	extUsed map[string]int
	cancels map[uint64]bool // activity ids with an ActivityCancelRequested

	// Output of the turn.
	nextID    uint64
	delta     []provider.Event
	worker    []provider.WorkItem
	orchItems []provider.WorkItem
	cancelled []provider.ScheduledActivityIdentifier
	end       *ending
	nondet    string // the first nondeterminism found
}

// ending is how an execution ends.
type ending struct {
	status  string // "Completed", "Failed" or "ContinuedAsNew"
	output  string // the output, or the continue-as-new input
	details provider.ErrorDetails
}

// future is the handle of one scheduled operation.
type future struct {
	id   uint64 // the scheduling event's id (0: never completes)
	kind string // scheduling event type
	pos  int    // index in hist of the completion, -1 while pending
	val  string
	err  provider.ErrorDetails
}

// done reports whether the operation's result is in the history.
func (f *future) done() bool { return f.pos >= 0 }

// value is the result (empty for timers or failures).
func (f *future) value() string { return f.val }

// failed returns the failure details of a failed activity or sub-orchestration.
func (f *future) failed() (provider.ErrorDetails, bool) { return f.err, f.err != nil }

func newOrch(instance string, execID uint64, started provider.OrchestrationStarted, hist []provider.Event, nextID, nowMs uint64) *orch {
	o := &orch{
		instance: instance, execID: execID, input: started.Input,
		nowMs: nowMs, hist: hist, byID: map[uint64]int{}, doneBy: map[uint64]int{},
		ext: map[string][]int{}, extUsed: map[string]int{}, cancels: map[uint64]bool{}, nextID: nextID,
	}
	for i, ev := range hist {
		o.byID[ev.EventID] = i
		switch k := ev.Kind.(type) {
		case provider.ActivityScheduled, provider.TimerCreated, provider.SubOrchestrationScheduled, provider.ExternalSubscribed:
			o.sched = append(o.sched, i)
		case provider.ExternalEvent:
			o.ext[k.Name] = append(o.ext[k.Name], i)
		case provider.ActivityCancelRequested:
			if ev.SourceEventID != nil {
				o.cancels[*ev.SourceEventID] = true
			}
		}
		if isCompletion(ev.Kind) && ev.SourceEventID != nil {
			if _, seen := o.doneBy[*ev.SourceEventID]; !seen {
				o.doneBy[*ev.SourceEventID] = i
			}
		}
	}
	return o
}

// isCompletion reports whether k completes a scheduled operation (and so
// carries a source_event_id).
func isCompletion(k provider.EventKind) bool {
	switch k.(type) {
	case provider.ActivityCompletedEvent, provider.ActivityFailedEvent, provider.TimerFiredEvent,
		provider.SubOrchestrationCompleted, provider.SubOrchestrationFailed:
		return true
	}
	return false
}

// newEvent appends an event of this turn with the next event id.
func (o *orch) newEvent(kind provider.EventKind, source *uint64) uint64 {
	id := o.nextID
	o.nextID++
	o.delta = append(o.delta, newEvent(o.instance, o.execID, id, source, o.nowMs, kind))
	return id
}

// newEvent builds an event stamped with the runtime's version.
func newEvent(instance string, execID, id uint64, source *uint64, nowMs uint64, kind provider.EventKind) provider.Event {
	return provider.Event{
		EventID: id, SourceEventID: source, InstanceID: instance, ExecutionID: execID,
		TimestampMs: nowMs, DuroxideVersion: DuroxideVersion, Kind: kind,
	}
}

// schedule replays or issues one scheduling command. name is the
// activity, sub-orchestration or event name ("" for timers).
func (o *orch) schedule(kind provider.EventKind, name string, issue func(id uint64)) *future {
	f := &future{kind: kind.Type(), pos: -1}
	if o.nondet != "" || o.end != nil {
		return f
	}
	if o.next < len(o.sched) {
		ev := o.hist[o.sched[o.next]]
		o.next++
		if ev.Kind.Type() != kind.Type() || scheduledName(ev.Kind) != name {
			o.nondet = fmt.Sprintf("command %d: history has %s %q, code scheduled %s %q",
				o.next, ev.Kind.Type(), scheduledName(ev.Kind), kind.Type(), name)
			return f
		}
		f.id = ev.EventID
	} else {
		f.id = o.newEvent(kind, nil)
		if issue != nil {
			issue(f.id)
		}
	}
	o.resolve(f, name)
	return f
}

// resolve fills in f's result from the history.
func (o *orch) resolve(f *future, name string) {
	if f.kind == "ExternalSubscribed" {
		n := o.extUsed[name]
		o.extUsed[name] = n + 1
		if n < len(o.ext[name]) {
			f.pos = o.ext[name][n]
			f.val = o.hist[f.pos].Kind.(provider.ExternalEvent).Data
		}
		return
	}
	i, ok := o.doneBy[f.id]
	if !ok {
		return
	}
	f.pos = i
	switch k := o.hist[i].Kind.(type) {
	case provider.ActivityCompletedEvent:
		f.val = k.Result
	case provider.ActivityFailedEvent:
		f.err = k.Details
	case provider.SubOrchestrationCompleted:
		f.val = k.Result
	case provider.SubOrchestrationFailed:
		f.err = k.Details
	}
}

// scheduledName is the name a scheduling event was issued with.
func scheduledName(k provider.EventKind) string {
	switch v := k.(type) {
	case provider.ActivityScheduled:
		return v.Name
	case provider.SubOrchestrationScheduled:
		return v.Name
	case provider.ExternalSubscribed:
		return v.Name
	}
	return ""
}

// activity schedules an activity.
func (o *orch) activity(name, input string) *future {
	return o.schedule(provider.ActivityScheduled{Name: name, Input: input}, name, func(id uint64) {
		o.worker = append(o.worker, provider.ActivityExecute{
			Instance: o.instance, ExecutionID: o.execID, ID: id, Name: name, Input: input,
		})
	})
}

// timer schedules a durable timer that fires d after the turn that
// creates it.
func (o *orch) timer(d time.Duration) *future {
	fireAt := o.nowMs + uint64(d.Milliseconds())
	if o.next < len(o.sched) {
		if tc, ok := o.hist[o.sched[o.next]].Kind.(provider.TimerCreated); ok {
			fireAt = tc.FireAtMs // replay: keep the recorded fire time
		}
	}
	return o.schedule(provider.TimerCreated{FireAtMs: fireAt}, "", func(id uint64) {
		o.orchItems = append(o.orchItems, provider.TimerFired{
			Instance: o.instance, ExecutionID: o.execID, ID: id, FireAtMs: fireAt,
		})
	})
}

// subOrchestration starts a child orchestration with a deterministic
// instance id derived from the parent's and the scheduling event's id.
func (o *orch) subOrchestration(name, input string) *future {
	// The child id depends on the event id, known only once scheduled; on
	// replay it is read back from the history.
	childOf := func(id uint64) string { return o.instance + "::sub::" + strconv.FormatUint(id, 10) }
	var child string
	if o.next < len(o.sched) {
		if s, ok := o.hist[o.sched[o.next]].Kind.(provider.SubOrchestrationScheduled); ok {
			child = s.Instance
		}
	} else {
		child = childOf(o.nextID)
	}
	return o.schedule(provider.SubOrchestrationScheduled{Name: name, Instance: child, Input: input}, name, func(id uint64) {
		v := OrchestrationVersion
		parent, pid := o.instance, id
		o.orchItems = append(o.orchItems, provider.StartOrchestration{
			Instance: child, Orchestration: name, Input: input, Version: &v,
			ParentInstance: &parent, ParentID: &pid, ExecutionID: provider.InitialExecutionID,
		})
	})
}

// waitEvent subscribes to the next external event called name.
func (o *orch) waitEvent(name string) *future {
	return o.schedule(provider.ExternalSubscribed{Name: name}, name, nil)
}

// selectFirst returns the index of the future whose result came first in
// the history, or -1 if none has completed.
func (o *orch) selectFirst(fs ...*future) int {
	best := -1
	for i, f := range fs {
		if f.done() && (best < 0 || f.pos < fs[best].pos) {
			best = i
		}
	}
	return best
}

// cancelActivity cancels a pending activity: an ActivityCancelRequested
// event (once) and the activity in the ack's cancelled list.
func (o *orch) cancelActivity(f *future, reason string) {
	if f.kind != "ActivityScheduled" || f.id == 0 || f.done() || o.cancels[f.id] {
		return
	}
	o.cancels[f.id] = true
	src := f.id
	o.newEvent(provider.ActivityCancelRequested{Reason: reason}, &src)
	o.cancelled = append(o.cancelled, provider.ScheduledActivityIdentifier{
		Instance: o.instance, ExecutionID: o.execID, ActivityID: f.id,
	})
}

// complete ends the execution successfully.
func (o *orch) complete(output string) {
	if o.end == nil {
		o.end = &ending{status: StatusCompleted, output: output}
	}
}

// fail ends the execution with an application error.
func (o *orch) fail(message string) {
	o.failWith(provider.ApplicationError{Kind: provider.AppOrchestrationFailed, Message: message})
}

func (o *orch) failWith(d provider.ErrorDetails) {
	if o.end == nil {
		o.end = &ending{status: StatusFailed, output: d.DisplayMessage(), details: d}
	}
}

// continueAsNew ends the execution and starts the next one with input.
func (o *orch) continueAsNew(input string) {
	if o.end == nil {
		o.end = &ending{status: "ContinuedAsNew", output: input}
	}
}
