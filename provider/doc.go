// Package provider is the duroxide Provider contract in Go, and its filesystem
// implementation.
//
// The contract (a port of duroxide's src/providers/mod.rs, crate version
// DuroxideVersion) is the [Provider] interface, the optional [Admin]
// capability, and the data they exchange: [WorkItem] queue payloads, history
// [Event]s, [ExecutionMetadata], [OrchestrationItem] and the management
// types. WorkItem and Event marshal to exactly duroxide's serde JSON, so a
// durofs directory can be read by any tool that speaks duroxide's format, and
// events of types this version does not know are stored and returned byte for
// byte.
//
// Errors are [*ProviderError] values; [IsRetryable] tells a runtime whether to
// retry. Contract failures (an invalid or expired lock token, a duplicate
// event, a missing instance, invalid metadata) are permanent; errors.Is with
// [ErrInvalidLockToken], [ErrNotFound] and the other sentinels names the
// cause.
//
// # Work items and history events
//
// A work item is a message in a queue; a history event is what the runtime
// appends to an execution's history when it decides a turn. Several come in
// pairs with the same JSON name ("ActivityCompleted" is a work item's tag and
// an event's type), so the Go event types carry an Event or a longer name:
//
//	work item (queue message)   history event (EventKind)           its JSON "type"
//	StartOrchestration          OrchestrationStarted                 OrchestrationStarted
//	ActivityExecute             (sent for) ActivityScheduled         ActivityScheduled
//	ActivityCompleted           ActivityCompletedEvent               ActivityCompleted
//	ActivityFailed              ActivityFailedEvent                  ActivityFailed
//	TimerFired                  TimerFiredEvent (after TimerCreated) TimerFired
//	ExternalRaised              ExternalEvent                        ExternalEvent
//	SubOrchCompleted            SubOrchestrationCompleted            SubOrchestrationCompleted
//	SubOrchFailed               SubOrchestrationFailed               SubOrchestrationFailed
//	CancelInstance              OrchestrationCancelRequested         OrchestrationCancelRequested
//	ContinueAsNew               (sent after) OrchestrationContinuedAsNew, then OrchestrationStarted
//	QueueMessage                QueueEventDelivered                  ExternalEventPersistent
//
// Read a row as: the runtime fetches the work item on the left (a worker's
// ActivityCompleted arrives in the orchestrator queue) and appends the event
// in the middle to the history (an ActivityCompletedEvent whose
// SourceEventID is the ActivityScheduled event's id). ActivityExecute and
// ContinueAsNew go the other way: the runtime appends the event and sends the
// work item in the same ack. [SubOrchestrationScheduled] starts a child with a
// StartOrchestration for the child instance.
//
// # The filesystem provider
//
// [Open] returns an [FSProvider] on a directory that several processes may
// share; any of them may be killed or lose power at any instant without an
// acknowledged call being lost, duplicated or half applied. Every multi-file
// change (ack, work-item ack, prune, delete, append) is one record of a
// write-ahead log the processes share (package wal): the append plus one
// group fdatasync is the commit point, the files are applied after it and
// made durable by a background checkpoint. fs_wal.go states the protocol and
// what a crash after each step leaves; the repository's docs/design.md and
// docs/format.md describe the design and every file (format version
// FormatVersion).
//
// [OpenReadOnly], [Fsck] and the inspection methods ([FSProvider.Instances],
// [FSProvider.InstanceDetail], ...) back the durofs command.
package provider
