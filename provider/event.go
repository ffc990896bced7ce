package provider

import "encoding/json"

// Event is one history record: the common fields and a Kind.
//
// JSON: the common fields followed by the flattened, "type"-tagged kind,
// exactly as duroxide's serde writes it. An Event decoded from JSON keeps its
// original bytes in Raw, and MarshalJSON writes Raw verbatim when it is set, so
// events of unknown types and unknown fields round-trip byte for byte. Clear
// Raw after changing a decoded event's fields.
type Event struct {
	EventID uint64
	// SourceEventID is the scheduling event's id for completions (null otherwise).
	SourceEventID *uint64
	// InstanceID and ExecutionID are denormalized copies; providers ignore them.
	InstanceID      string
	ExecutionID     uint64
	TimestampMs     uint64
	DuroxideVersion string
	Kind            EventKind
	// Raw is the event's original JSON, if it was decoded from JSON.
	Raw json.RawMessage
}

// EventKind is the variant part of an Event. Type returns the JSON "type" tag.
type EventKind interface {
	Type() string
	isEventKind()
}

// OrchestrationStarted is the first event of an execution.
type OrchestrationStarted struct {
	Name                string
	Version             string
	Input               string
	ParentInstance      *string
	ParentID            *uint64
	CarryForwardEvents  [][2]string // omitted when nil
	InitialCustomStatus *string     // omitted when nil
}

// OrchestrationCompleted ends an execution successfully.
type OrchestrationCompleted struct{ Output string }

// OrchestrationFailed ends an execution with an error.
type OrchestrationFailed struct{ Details ErrorDetails }

// ActivityScheduled records a scheduled activity.
type ActivityScheduled struct {
	Name      string
	Input     string
	SessionID *string // omitted when nil
	Tag       *string // omitted when nil
}

// ActivityCompletedEvent records an activity result ("ActivityCompleted").
type ActivityCompletedEvent struct{ Result string }

// ActivityFailedEvent records an activity failure ("ActivityFailed").
type ActivityFailedEvent struct{ Details ErrorDetails }

// ActivityCancelRequested records a cancellation request for an activity.
type ActivityCancelRequested struct{ Reason string }

// TimerCreated records a durable timer.
type TimerCreated struct{ FireAtMs uint64 }

// TimerFiredEvent records a timer's expiry ("TimerFired").
type TimerFiredEvent struct{ FireAtMs uint64 }

// ExternalSubscribed records a subscription to an external event.
type ExternalSubscribed struct{ Name string }

// ExternalEvent records a delivered external event.
type ExternalEvent struct {
	Name string
	Data string
}

// OrchestrationChained records a fire-and-forget orchestration start.
type OrchestrationChained struct {
	Name     string
	Instance string
	Input    string
}

// SubOrchestrationScheduled records a sub-orchestration start.
type SubOrchestrationScheduled struct {
	Name     string
	Instance string
	Input    string
}

// SubOrchestrationCompleted records a sub-orchestration result.
type SubOrchestrationCompleted struct{ Result string }

// SubOrchestrationFailed records a sub-orchestration failure.
type SubOrchestrationFailed struct{ Details ErrorDetails }

// SubOrchestrationCancelRequested records a sub-orchestration cancellation.
type SubOrchestrationCancelRequested struct{ Reason string }

// OrchestrationContinuedAsNew ends an execution with continue-as-new.
type OrchestrationContinuedAsNew struct{ Input string }

// OrchestrationCancelRequested records a cancellation request.
type OrchestrationCancelRequested struct{ Reason string }

// ExternalSubscribedCancelled records a cancelled subscription.
type ExternalSubscribedCancelled struct{ Reason string }

// QueueSubscribed is "ExternalSubscribedPersistent".
type QueueSubscribed struct{ Name string }

// QueueEventDelivered is "ExternalEventPersistent".
type QueueEventDelivered struct {
	Name string
	Data string
}

// QueueSubscriptionCancelled is "ExternalSubscribedPersistentCancelled".
type QueueSubscriptionCancelled struct{ Reason string }

// CustomStatusUpdated sets (Status non-nil) or clears (nil) the custom status.
type CustomStatusUpdated struct{ Status *string }

// KeyValueSet sets a key-value entry.
type KeyValueSet struct {
	Key             string
	Value           string
	LastUpdatedAtMs uint64
}

// KeyValueCleared removes a key.
type KeyValueCleared struct{ Key string }

// KeyValuesCleared removes every key.
type KeyValuesCleared struct{}

// UnknownEvent is an event whose "type" this version does not know. Its
// fields are only in the Event's Raw bytes, which are stored verbatim.
type UnknownEvent struct{ TypeName string }

// Type implements EventKind.
func (OrchestrationStarted) Type() string { return "OrchestrationStarted" }

// Type implements EventKind.
func (OrchestrationCompleted) Type() string { return "OrchestrationCompleted" }

// Type implements EventKind.
func (OrchestrationFailed) Type() string { return "OrchestrationFailed" }

// Type implements EventKind.
func (ActivityScheduled) Type() string { return "ActivityScheduled" }

// Type implements EventKind.
func (ActivityCompletedEvent) Type() string { return "ActivityCompleted" }

// Type implements EventKind.
func (ActivityFailedEvent) Type() string { return "ActivityFailed" }

// Type implements EventKind.
func (ActivityCancelRequested) Type() string { return "ActivityCancelRequested" }

// Type implements EventKind.
func (TimerCreated) Type() string { return "TimerCreated" }

// Type implements EventKind.
func (TimerFiredEvent) Type() string { return "TimerFired" }

// Type implements EventKind.
func (ExternalSubscribed) Type() string { return "ExternalSubscribed" }

// Type implements EventKind.
func (ExternalEvent) Type() string { return "ExternalEvent" }

// Type implements EventKind.
func (OrchestrationChained) Type() string { return "OrchestrationChained" }

// Type implements EventKind.
func (SubOrchestrationScheduled) Type() string { return "SubOrchestrationScheduled" }

// Type implements EventKind.
func (SubOrchestrationCompleted) Type() string { return "SubOrchestrationCompleted" }

// Type implements EventKind.
func (SubOrchestrationFailed) Type() string { return "SubOrchestrationFailed" }

// Type implements EventKind.
func (SubOrchestrationCancelRequested) Type() string { return "SubOrchestrationCancelRequested" }

// Type implements EventKind.
func (OrchestrationContinuedAsNew) Type() string { return "OrchestrationContinuedAsNew" }

// Type implements EventKind.
func (OrchestrationCancelRequested) Type() string { return "OrchestrationCancelRequested" }

// Type implements EventKind.
func (ExternalSubscribedCancelled) Type() string { return "ExternalSubscribedCancelled" }

// Type implements EventKind.
func (QueueSubscribed) Type() string { return "ExternalSubscribedPersistent" }

// Type implements EventKind.
func (QueueEventDelivered) Type() string { return "ExternalEventPersistent" }

// Type implements EventKind.
func (QueueSubscriptionCancelled) Type() string { return "ExternalSubscribedPersistentCancelled" }

// Type implements EventKind.
func (CustomStatusUpdated) Type() string { return "CustomStatusUpdated" }

// Type implements EventKind.
func (KeyValueSet) Type() string { return "KeyValueSet" }

// Type implements EventKind.
func (KeyValueCleared) Type() string { return "KeyValueCleared" }

// Type implements EventKind.
func (KeyValuesCleared) Type() string { return "KeyValuesCleared" }

// Type implements EventKind.
func (u UnknownEvent) Type() string { return u.TypeName }

func (OrchestrationStarted) isEventKind()            {}
func (OrchestrationCompleted) isEventKind()          {}
func (OrchestrationFailed) isEventKind()             {}
func (ActivityScheduled) isEventKind()               {}
func (ActivityCompletedEvent) isEventKind()          {}
func (ActivityFailedEvent) isEventKind()             {}
func (ActivityCancelRequested) isEventKind()         {}
func (TimerCreated) isEventKind()                    {}
func (TimerFiredEvent) isEventKind()                 {}
func (ExternalSubscribed) isEventKind()              {}
func (ExternalEvent) isEventKind()                   {}
func (OrchestrationChained) isEventKind()            {}
func (SubOrchestrationScheduled) isEventKind()       {}
func (SubOrchestrationCompleted) isEventKind()       {}
func (SubOrchestrationFailed) isEventKind()          {}
func (SubOrchestrationCancelRequested) isEventKind() {}
func (OrchestrationContinuedAsNew) isEventKind()     {}
func (OrchestrationCancelRequested) isEventKind()    {}
func (ExternalSubscribedCancelled) isEventKind()     {}
func (QueueSubscribed) isEventKind()                 {}
func (QueueEventDelivered) isEventKind()             {}
func (QueueSubscriptionCancelled) isEventKind()      {}
func (CustomStatusUpdated) isEventKind()             {}
func (KeyValueSet) isEventKind()                     {}
func (KeyValueCleared) isEventKind()                 {}
func (KeyValuesCleared) isEventKind()                {}
func (UnknownEvent) isEventKind()                    {}
