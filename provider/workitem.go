package provider

import (
	"reflect"
	"slices"
)

// WorkItem is a queue payload: one of StartOrchestration, ActivityExecute,
// ActivityCompleted, ActivityFailed, TimerFired, ExternalRaised,
// SubOrchCompleted, SubOrchFailed, CancelInstance, ContinueAsNew,
// QueueMessage. Each marshals to duroxide's externally tagged JSON
// (`{"Variant":{...}}`); use MarshalWorkItem / UnmarshalWorkItem for the
// interface value.
type WorkItem interface {
	// Kind returns the variant name, which is also its JSON tag.
	Kind() string
	isWorkItem()
}

// StartOrchestration starts an execution (routed to Instance).
type StartOrchestration struct {
	Instance      string
	Orchestration string
	Input         string
	// Version nil means "the runtime resolves it".
	Version        *string
	ParentInstance *string
	ParentID       *uint64
	ExecutionID    uint64
}

// ActivityExecute asks a worker to run an activity (worker queue only).
type ActivityExecute struct {
	Instance    string
	ExecutionID uint64
	// ID is the ActivityScheduled event id.
	ID        uint64
	Name      string
	Input     string
	SessionID *string
	Tag       *string
}

// ActivityCompleted reports an activity's result.
type ActivityCompleted struct {
	Instance    string
	ExecutionID uint64
	ID          uint64
	Result      string
}

// ActivityFailed reports an activity's failure.
type ActivityFailed struct {
	Instance    string
	ExecutionID uint64
	ID          uint64
	Details     ErrorDetails
}

// TimerFired is a durable timer's expiry. Through an ack it becomes visible
// at FireAtMs; through EnqueueForOrchestrator, after the given delay.
type TimerFired struct {
	Instance    string
	ExecutionID uint64
	// ID is the TimerCreated event id.
	ID       uint64
	FireAtMs uint64
}

// ExternalRaised is an external event raised by a client.
type ExternalRaised struct {
	Instance string
	Name     string
	Data     string
}

// SubOrchCompleted reports a sub-orchestration's result to its parent
// (routed to ParentInstance).
type SubOrchCompleted struct {
	ParentInstance    string
	ParentExecutionID uint64
	ParentID          uint64
	Result            string
}

// SubOrchFailed reports a sub-orchestration's failure to its parent.
type SubOrchFailed struct {
	ParentInstance    string
	ParentExecutionID uint64
	ParentID          uint64
	Details           ErrorDetails
}

// CancelInstance asks an instance to cancel.
type CancelInstance struct {
	Instance string
	Reason   string
}

// ContinueAsNew starts the next execution of an instance.
type ContinueAsNew struct {
	Instance      string
	Orchestration string
	Input         string
	Version       *string
	// CarryForwardEvents are (name, data) pairs; always serialized, even empty.
	CarryForwardEvents  [][2]string
	InitialCustomStatus *string
}

// QueueMessage is a persistent mailbox message.
type QueueMessage struct {
	Instance string
	Name     string
	Data     string
}

func (StartOrchestration) isWorkItem() {}
func (ActivityExecute) isWorkItem()    {}
func (ActivityCompleted) isWorkItem()  {}
func (ActivityFailed) isWorkItem()     {}
func (TimerFired) isWorkItem()         {}
func (ExternalRaised) isWorkItem()     {}
func (SubOrchCompleted) isWorkItem()   {}
func (SubOrchFailed) isWorkItem()      {}
func (CancelInstance) isWorkItem()     {}
func (ContinueAsNew) isWorkItem()      {}
func (QueueMessage) isWorkItem()       {}

// Kind implements WorkItem.
func (StartOrchestration) Kind() string { return "StartOrchestration" }

// Kind implements WorkItem.
func (ActivityExecute) Kind() string { return "ActivityExecute" }

// Kind implements WorkItem.
func (ActivityCompleted) Kind() string { return "ActivityCompleted" }

// Kind implements WorkItem.
func (ActivityFailed) Kind() string { return "ActivityFailed" }

// Kind implements WorkItem.
func (TimerFired) Kind() string { return "TimerFired" }

// Kind implements WorkItem.
func (ExternalRaised) Kind() string { return "ExternalRaised" }

// Kind implements WorkItem.
func (SubOrchCompleted) Kind() string { return "SubOrchCompleted" }

// Kind implements WorkItem.
func (SubOrchFailed) Kind() string { return "SubOrchFailed" }

// Kind implements WorkItem.
func (CancelInstance) Kind() string { return "CancelInstance" }

// Kind implements WorkItem.
func (ContinueAsNew) Kind() string { return "ContinueAsNew" }

// Kind implements WorkItem.
func (QueueMessage) Kind() string { return "QueueMessage" }

// derefItem returns the work item a pointer work item points to
// (*ActivityExecute → ActivityExecute: the pointer types implement WorkItem
// too, through the value methods); other values are returned unchanged and
// a nil pointer becomes nil. Every entry point takes items through it, so
// callers may pass either form.
func derefItem(w WorkItem) WorkItem {
	if w == nil {
		return nil
	}
	v, ok := derefSealed(w)
	if !ok {
		return nil
	}
	return v
}

// derefItems applies derefItem to each item, copying the slice only if an
// item changes.
func derefItems(ws []WorkItem) []WorkItem {
	for i, w := range ws {
		if w != nil && reflect.ValueOf(w).Kind() == reflect.Pointer {
			out := slices.Clone(ws)
			for j := i; j < len(out); j++ {
				out[j] = derefItem(out[j])
			}
			return out
		}
	}
	return ws
}

// Queue names a provider queue.
type Queue int

// The two queues.
const (
	OrchestratorQueue Queue = iota
	WorkerQueue
)

// String returns "orchestrator" or "worker".
func (q Queue) String() string {
	if q == WorkerQueue {
		return "worker"
	}
	return "orchestrator"
}

// TargetInstance returns the instance a work item is routed to: the parent
// for SubOrchCompleted/SubOrchFailed, Instance for everything else.
func TargetInstance(w WorkItem) string {
	switch v := derefItem(w).(type) {
	case StartOrchestration:
		return v.Instance
	case ActivityExecute:
		return v.Instance
	case ActivityCompleted:
		return v.Instance
	case ActivityFailed:
		return v.Instance
	case TimerFired:
		return v.Instance
	case ExternalRaised:
		return v.Instance
	case SubOrchCompleted:
		return v.ParentInstance
	case SubOrchFailed:
		return v.ParentInstance
	case CancelInstance:
		return v.Instance
	case ContinueAsNew:
		return v.Instance
	case QueueMessage:
		return v.Instance
	}
	return ""
}

// QueueOf returns the queue a work item belongs to: the worker queue for
// ActivityExecute, the orchestrator queue for everything else.
func QueueOf(w WorkItem) Queue {
	if _, ok := derefItem(w).(ActivityExecute); ok {
		return WorkerQueue
	}
	return OrchestratorQueue
}

// VisibleAtMs returns when an orchestrator item enqueued through an ack
// becomes visible: a TimerFired at its fire time, everything else at nowMs.
func VisibleAtMs(w WorkItem, nowMs int64) int64 {
	if t, ok := derefItem(w).(TimerFired); ok {
		return int64(t.FireAtMs)
	}
	return nowMs
}
