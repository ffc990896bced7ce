package provider

// ErrorDetails is duroxide's structured error: one of InfrastructureError,
// ConfigurationError, ApplicationError, PoisonError. JSON is externally
// tagged ({"Application":{...}}).
type ErrorDetails interface {
	// Category is "infrastructure", "configuration", "application" or "poison".
	Category() string
	// DisplayMessage is the string the runtime stores as metadata output on failure.
	DisplayMessage() string
	// IsRetryable follows duroxide: Infrastructure and Application use their
	// flag; Configuration and Poison are never retryable.
	IsRetryable() bool
	isErrorDetails()
}

// InfrastructureError is a provider or infrastructure failure.
type InfrastructureError struct {
	Operation string
	Message   string
	Retryable bool
}

// ConfigurationError is a configuration problem such as nondeterminism.
type ConfigurationError struct {
	Kind     ConfigErrorKind
	Resource string
	Message  *string // null when absent
}

// ConfigErrorKind is "Nondeterminism".
type ConfigErrorKind string

// ConfigNondeterminism is the only ConfigErrorKind.
const ConfigNondeterminism ConfigErrorKind = "Nondeterminism"

// ApplicationError is a failure raised by user code.
type ApplicationError struct {
	Kind      AppErrorKind
	Message   string
	Retryable bool
}

// AppErrorKind is "ActivityFailed", "OrchestrationFailed", "Panicked" or
// Cancelled{reason} (Name "Cancelled" with CancelReason set).
type AppErrorKind struct {
	Name         string
	CancelReason string
}

// Application error kinds.
var (
	AppActivityFailed      = AppErrorKind{Name: "ActivityFailed"}
	AppOrchestrationFailed = AppErrorKind{Name: "OrchestrationFailed"}
	AppPanicked            = AppErrorKind{Name: "Panicked"}
)

// AppCancelled returns the Cancelled{reason} kind.
func AppCancelled(reason string) AppErrorKind {
	return AppErrorKind{Name: "Cancelled", CancelReason: reason}
}

// PoisonError says a message exceeded its attempts.
type PoisonError struct {
	AttemptCount uint32
	MaxAttempts  uint32
	MessageType  PoisonMessageType
	Message      string
}

// PoisonMessageType says what was poisoned: Kind is "Orchestration",
// "Activity" or "FailedDeserialization"; the other fields are those of the kind.
type PoisonMessageType struct {
	Kind         string
	Instance     string
	ExecutionID  uint64
	ActivityName string // Activity only
	ActivityID   uint64 // Activity only
	Error        string // FailedDeserialization only
}

func (InfrastructureError) isErrorDetails() {}
func (ConfigurationError) isErrorDetails()  {}
func (ApplicationError) isErrorDetails()    {}
func (PoisonError) isErrorDetails()         {}
