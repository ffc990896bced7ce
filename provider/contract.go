package provider

import (
	"context"
	"time"
)

// Provider is duroxide's storage contract: two peek-lock queues (orchestrator
// and worker), append-only per-execution history, and instance locks with
// expiry. Every method is safe for concurrent use by goroutines and, for the
// filesystem provider, by several processes sharing one directory.
//
// Durations of zero mean "none": a zero delay makes an item visible at once.
type Provider interface {
	// Name identifies the implementation, for logs.
	Name() string
	// Version is the implementation's version, for logs.
	Version() string

	// FetchOrchestrationItem locks the instance whose oldest visible message is
	// oldest overall and returns every visible message of it as one batch,
	// with the current execution's history. It returns (nil, nil) when there
	// is no work. It may wait up to pollTimeout for work to arrive. A non-nil
	// filter skips (without locking) instances whose current execution is
	// pinned to a version outside filter's first range.
	FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *DispatcherCapabilityFilter) (*LockedOrchestrationItem, error)

	// AckOrchestrationItem commits one orchestration turn atomically: it
	// appends historyDelta to executionID, enqueues workerItems and
	// orchestratorItems (TimerFired visible at its fire time), stores
	// metadata, deletes the fetched batch and the cancelled activities, and
	// releases the lock. On any error nothing changes and the lock stays held.
	AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []Event, workerItems, orchestratorItems []WorkItem, metadata ExecutionMetadata, cancelledActivities []ScheduledActivityIdentifier) error

	// AbandonOrchestrationItem releases the lock without committing. The
	// batch becomes visible again after delay; with ignoreAttempt the fetch's
	// attempt increment is undone (never below zero).
	AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error

	// RenewOrchestrationItemLock extends a valid, unexpired lock to now+extendFor.
	RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error

	// Read returns the history of the instance's latest execution (empty if unknown).
	Read(ctx context.Context, instance string) ([]Event, error)
	// ReadWithExecution returns one execution's history (empty if unknown).
	ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	// AppendWithExecution appends events to an execution's history outside
	// any turn (a test and debugging path). Duplicate event ids fail.
	AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []Event) error

	// EnqueueForWorker enqueues an ActivityExecute, visible at once.
	EnqueueForWorker(ctx context.Context, item WorkItem) error
	// FetchWorkItem peek-locks the oldest eligible worker item. It returns
	// (nil, nil) when there is none. session selects session-affine items
	// (nil: only items without a session); tagFilter selects by tag.
	FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *SessionFetchConfig, tagFilter TagFilter) (*LockedWorkItem, error)
	// AckWorkItem deletes the locked item and, if completion is non-nil (an
	// ActivityCompleted or ActivityFailed), enqueues it for the orchestrator,
	// atomically. It fails permanently if the lock expired or the item was
	// cancelled or already acked.
	AckWorkItem(ctx context.Context, token string, completion WorkItem) error
	// RenewWorkItemLock extends a valid, unexpired work-item lock.
	RenewWorkItemLock(ctx context.Context, token string, extendFor time.Duration) error
	// AbandonWorkItem releases a work-item lock; the item is visible again
	// after delay. With ignoreAttempt the attempt count is decremented.
	AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error

	// RenewSessionLock extends the live, non-idle sessions owned by ownerIDs
	// and returns how many it extended.
	RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error)
	// CleanupOrphanedSessions removes expired sessions with no queued items
	// and returns how many it removed.
	CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error)

	// EnqueueForOrchestrator enqueues any orchestrator-bound work item. Its
	// visibility is now+delay; a TimerFired's fire time is not used here.
	EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay time.Duration) error

	// GetCustomStatus returns the instance's custom status if its version is
	// greater than lastSeenVersion, and nil otherwise.
	GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*CustomStatus, error)

	// Admin returns the management capability, if the provider has one.
	Admin() (Admin, bool)
}

// Admin is the management capability (duroxide's ProviderAdmin).
type Admin interface {
	// ListInstances returns every instance id.
	ListInstances(ctx context.Context) ([]string, error)
	// ListInstancesByStatus returns the instances whose current execution has status.
	ListInstancesByStatus(ctx context.Context, status string) ([]string, error)
	// ListExecutions returns an instance's execution ids, ascending.
	ListExecutions(ctx context.Context, instance string) ([]uint64, error)
	// ReadHistoryWithExecutionID returns one execution's history.
	ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	// ReadHistory returns the latest execution's history.
	ReadHistory(ctx context.Context, instance string) ([]Event, error)
	// LatestExecutionID returns the highest execution id (1 if none).
	LatestExecutionID(ctx context.Context, instance string) (uint64, error)
	// GetInstanceInfo describes an instance; a permanent error if it does not exist.
	GetInstanceInfo(ctx context.Context, instance string) (InstanceInfo, error)
	// GetExecutionInfo describes one execution; a permanent error if missing.
	GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (ExecutionInfo, error)
	// GetSystemMetrics returns store-wide counts.
	GetSystemMetrics(ctx context.Context) (SystemMetrics, error)
	// GetQueueDepths counts unlocked queue messages.
	GetQueueDepths(ctx context.Context) (QueueDepths, error)
	// ListChildren returns the direct sub-orchestrations of an instance.
	ListChildren(ctx context.Context, instance string) ([]string, error)
	// GetParentID returns the parent of an instance ("" and false for a root);
	// a permanent error if the instance does not exist.
	GetParentID(ctx context.Context, instance string) (parent string, ok bool, err error)
	// DeleteInstancesAtomic deletes all of ids, or nothing.
	DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error)
	// GetInstanceTree returns an instance and all its descendants.
	GetInstanceTree(ctx context.Context, instance string) (InstanceTree, error)
	// DeleteInstance deletes a root instance and its tree.
	DeleteInstance(ctx context.Context, instance string, force bool) (DeleteInstanceResult, error)
	// DeleteInstanceBulk deletes terminal root instances matching filter, with their trees.
	DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error)
	// PruneExecutions deletes old executions of one instance.
	PruneExecutions(ctx context.Context, instance string, options PruneOptions) (PruneResult, error)
	// PruneExecutionsBulk prunes every instance matching filter.
	PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, options PruneOptions) (PruneResult, error)
}

// LockedOrchestrationItem is what FetchOrchestrationItem returns: the item,
// the token that acks, abandons or renews it, and the attempt count (the
// maximum over the batch's messages, counting this fetch).
type LockedOrchestrationItem struct {
	Item         OrchestrationItem
	LockToken    string
	AttemptCount uint32
}

// LockedWorkItem is what FetchWorkItem returns.
type LockedWorkItem struct {
	Item         WorkItem
	LockToken    string
	AttemptCount uint32
}

// CustomStatus is an instance's custom status and its version. Status is nil
// when the status was cleared. The version increases by one per ack whose
// history delta contains a CustomStatusUpdated event.
type CustomStatus struct {
	Status  *string
	Version uint64
}

// OrchestrationItem is one locked orchestration turn's input.
type OrchestrationItem struct {
	Instance          string
	OrchestrationName string
	ExecutionID       uint64
	Version           string
	// History is the current execution's history, ordered by event id.
	History []Event
	// Messages is the batch, in enqueue order.
	Messages []WorkItem
	// HistoryError is set (and History empty) when the stored history could
	// not be decoded; the lock is held all the same.
	HistoryError *string
	// KVSnapshot is the instance's key-value state from earlier executions.
	// durofs does not implement the KV store yet; it is always empty.
	KVSnapshot map[string]KVEntry
}

// KVEntry is one key-value entry of a KV snapshot.
type KVEntry struct {
	Value           string
	LastUpdatedAtMs uint64
}

// The statuses of an execution: the values of ExecutionMetadata.Status,
// InstanceInfo.Status and ExecutionInfo.Status.
const (
	StatusRunning        = "Running"
	StatusCompleted      = "Completed"
	StatusFailed         = "Failed"
	StatusContinuedAsNew = "ContinuedAsNew"
)

// ExecutionMetadata is what the runtime tells the provider about an execution
// at ack. The provider stores it; it never derives it from events.
type ExecutionMetadata struct {
	// Status is StatusCompleted, StatusFailed, StatusContinuedAsNew or (in
	// tests) StatusRunning; nil leaves the execution's status as it is. Any
	// other value makes the ack fail permanently with ErrInvalidMetadata,
	// having written nothing.
	Status *string
	// Output is the result, the error message, or the continue-as-new input.
	Output               *string
	OrchestrationName    *string
	OrchestrationVersion *string
	// ParentInstanceID is stored when the instance record is created.
	ParentInstanceID *string
	// PinnedDuroxideVersion, when set, overwrites the execution's pin.
	PinnedDuroxideVersion *SemVer
}

// validate checks the metadata's status: a permanent ErrInvalidMetadata
// ProviderError for op if it is not an execution status.
func (m ExecutionMetadata) validate(op string) error {
	if m.Status == nil {
		return nil
	}
	switch *m.Status {
	case StatusRunning, StatusCompleted, StatusFailed, StatusContinuedAsNew:
		return nil
	}
	return Permanentf(op, ErrInvalidMetadata, "unknown execution status %q (want %s, %s, %s or %s)",
		*m.Status, StatusRunning, StatusCompleted, StatusFailed, StatusContinuedAsNew)
}

// ScheduledActivityIdentifier names one activity: the ActivityExecute's
// instance, execution and id (the ActivityScheduled event id).
type ScheduledActivityIdentifier struct {
	Instance    string
	ExecutionID uint64
	ActivityID  uint64
}

// SessionFetchConfig asks FetchWorkItem for session-affine items on behalf of
// OwnerID, claiming sessions for LockTimeout.
type SessionFetchConfig struct {
	OwnerID     string
	LockTimeout time.Duration
}

// Constants of the contract.
const (
	// InitialExecutionID is the first execution of an instance.
	InitialExecutionID uint64 = 1
	// InitialEventID is the first event of an execution.
	InitialEventID uint64 = 1
	// MaxWorkerTags is the most tags a TagFilter may name.
	MaxWorkerTags = 5
	// MaxTagNameBytes is the longest tag.
	MaxTagNameBytes = 256
	// MaxCustomStatusBytes is the largest custom status the runtime sends.
	MaxCustomStatusBytes = 256 * 1024
)
