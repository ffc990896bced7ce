package provider

// InstanceInfo describes an instance (Admin.GetInstanceInfo).
type InstanceInfo struct {
	InstanceID           string
	OrchestrationName    string
	OrchestrationVersion string
	CurrentExecutionID   uint64
	// Status is the current execution's status: "Running", "Completed",
	// "Failed", "ContinuedAsNew", or "Unknown" if it has no record.
	Status string
	Output *string
	// CreatedAtMs and UpdatedAtMs are milliseconds since the Unix epoch.
	CreatedAtMs      uint64
	UpdatedAtMs      uint64
	ParentInstanceID *string
}

// ExecutionInfo describes one execution (Admin.GetExecutionInfo).
type ExecutionInfo struct {
	ExecutionID   uint64
	Status        string
	Output        *string
	StartedAtMs   uint64
	CompletedAtMs *uint64
	EventCount    uint64
}

// SystemMetrics are store-wide counts.
type SystemMetrics struct {
	TotalInstances     uint64
	TotalExecutions    uint64
	RunningInstances   uint64
	CompletedInstances uint64
	FailedInstances    uint64
	TotalEvents        uint64
}

// QueueDepths counts unlocked messages. TimerQueue is always 0: timers are
// delayed orchestrator messages.
type QueueDepths struct {
	OrchestratorQueue uint64
	WorkerQueue       uint64
	TimerQueue        uint64
}

// InstanceFilter selects instances for bulk operations; criteria are ANDed.
type InstanceFilter struct {
	// InstanceIDs, when non-nil, is an allow-list (an empty list selects nothing).
	InstanceIDs []string
	// CompletedBeforeMs, when non-nil, keeps instances whose current execution
	// completed strictly before it.
	CompletedBeforeMs *uint64
	// Limit caps the number of instances (default 1000).
	Limit *uint32
}

// DefaultBulkLimit is InstanceFilter's default Limit.
const DefaultBulkLimit = 1000

// PruneOptions selects executions to prune; criteria are ANDed. The current
// execution is always kept, so KeepLast of nil, 0 and 1 are equivalent.
type PruneOptions struct {
	KeepLast          *uint32
	CompletedBeforeMs *uint64
}

// DeleteInstanceResult counts what a deletion removed.
type DeleteInstanceResult struct {
	InstancesDeleted     uint64
	ExecutionsDeleted    uint64
	EventsDeleted        uint64
	QueueMessagesDeleted uint64
}

// Add returns the sum of r and o.
func (r DeleteInstanceResult) Add(o DeleteInstanceResult) DeleteInstanceResult {
	return DeleteInstanceResult{
		InstancesDeleted:     r.InstancesDeleted + o.InstancesDeleted,
		ExecutionsDeleted:    r.ExecutionsDeleted + o.ExecutionsDeleted,
		EventsDeleted:        r.EventsDeleted + o.EventsDeleted,
		QueueMessagesDeleted: r.QueueMessagesDeleted + o.QueueMessagesDeleted,
	}
}

// PruneResult counts what a prune removed.
type PruneResult struct {
	InstancesProcessed uint64
	ExecutionsDeleted  uint64
	EventsDeleted      uint64
}

// InstanceTree is an instance and all its descendants.
type InstanceTree struct {
	RootID string
	// AllIDs includes RootID, in no particular order.
	AllIDs []string
}

// IsRootOnly reports whether the tree has no descendants.
func (t InstanceTree) IsRootOnly() bool { return len(t.AllIDs) == 1 }

// Size is the number of instances in the tree.
func (t InstanceTree) Size() int { return len(t.AllIDs) }
