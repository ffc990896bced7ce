package provider

import (
	"errors"
	"fmt"
)

// ProviderError is the error every Provider method returns. Op names the
// operation ("ack_orchestration_item"), Message says what went wrong, and
// Retryable tells the runtime whether trying again may succeed. Err, when set,
// is the underlying cause or a sentinel kind (ErrInvalidLockToken, …), so
// errors.Is works on both.
type ProviderError struct {
	Op        string
	Message   string
	Retryable bool
	Err       error
}

// Error prints "op: message", the form duroxide's tests match substrings in.
func (e *ProviderError) Error() string { return e.Op + ": " + e.Message }

// Unwrap returns the cause.
func (e *ProviderError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRetryable) and errors.Is(err, ErrPermanent) work.
func (e *ProviderError) Is(target error) bool {
	switch target {
	case ErrRetryable:
		return e.Retryable
	case ErrPermanent:
		return !e.Retryable
	}
	return false
}

// IsRetryable reports whether the method that returned err may succeed if
// called again. Only a *ProviderError with Retryable set is retryable; the
// filesystem provider wraps transient I/O failures that way itself.
func IsRetryable(err error) bool {
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Retryable
}

// Sentinels for errors.Is. ErrRetryable and ErrPermanent match by the
// Retryable flag; the others are causes carried in ProviderError.Err.
var (
	ErrRetryable = errors.New("retryable provider error")
	ErrPermanent = errors.New("permanent provider error")

	// ErrInvalidLockToken: the token holds no live lock - it is malformed
	// or unknown, was acked or abandoned, its lock was taken over by
	// another fetch or expired, or its work item is gone. Every token
	// operation of FSProvider's two queues (ack, abandon, renew) fails with
	// it, so
	// errors.Is(err, ErrInvalidLockToken) is the one test for a stale
	// token; some of these errors also match a more specific kind:
	// ErrLockExpired, or ErrNotFound for a work item that no longer exists.
	ErrInvalidLockToken = errors.New("invalid lock token")
	// ErrLockExpired: the token still names the lock but it has expired
	// (the error matches ErrInvalidLockToken too).
	ErrLockExpired = errors.New("lock expired")
	// ErrDuplicateEvent: an event id already exists in the execution.
	ErrDuplicateEvent = errors.New("duplicate event id")
	// ErrInvalidEvent: an event is malformed (event_id 0, …).
	ErrInvalidEvent = errors.New("invalid event")
	// ErrInvalidMetadata: an ack's ExecutionMetadata is malformed (a status
	// that is not one of the Status* constants).
	ErrInvalidMetadata = errors.New("invalid execution metadata")
	// ErrInvalidWorkItem: a work item of the wrong variant for the call.
	ErrInvalidWorkItem = errors.New("invalid work item type")
	// ErrNotAllowed: a well-formed request the contract forbids on this
	// instance: deleting a sub-orchestration directly, or a deletion that
	// would orphan a child not in the deleted set.
	ErrNotAllowed = errors.New("operation not allowed on this instance")
	// ErrNotFound: the instance, execution or work item does not exist.
	// A work-item token whose item is gone (acked, cancelled by its
	// orchestration, or deleted with its instance) fails with an error
	// matching both ErrNotFound - the contract's "not found" for a
	// cancelled activity - and ErrInvalidLockToken. (An orchestration
	// token of a deleted instance is just ErrInvalidLockToken, as the
	// contract asks: its instance's lock file, and so its lock, remain.)
	ErrNotFound = errors.New("not found")
	// ErrInstanceRunning: a non-forced delete of a running instance.
	ErrInstanceRunning = errors.New("instance still running")
	// ErrTooLarge: an item exceeds a configured size limit.
	ErrTooLarge = errors.New("too large")
	// ErrCorrupt: stored data failed its checksum or could not be decoded.
	ErrCorrupt = errors.New("corrupt data")
	// ErrUnsupportedFS: Open refused a network file system or an unknown format.
	ErrUnsupportedFS = errors.New("unsupported file system or format")
	// ErrClosed: the provider was closed.
	ErrClosed = errors.New("provider closed")
)

// Stale-token causes: a token that holds no live lock because its lock
// expired, or because its work item is gone (see ErrInvalidLockToken).
var (
	errTokenExpired = errors.Join(ErrInvalidLockToken, ErrLockExpired)
	errTokenGone    = errors.Join(ErrInvalidLockToken, ErrNotFound)
)

// Permanent returns a non-retryable ProviderError.
func Permanent(op, msg string) *ProviderError {
	return &ProviderError{Op: op, Message: msg}
}

// Retryable returns a retryable ProviderError.
func Retryable(op, msg string) *ProviderError {
	return &ProviderError{Op: op, Message: msg, Retryable: true}
}

// Permanentf returns a permanent ProviderError whose cause is kind.
func Permanentf(op string, kind error, format string, args ...any) *ProviderError {
	return &ProviderError{Op: op, Message: fmt.Sprintf(format, args...), Err: kind}
}

// Retryablef returns a retryable ProviderError wrapping cause.
func Retryablef(op string, cause error, format string, args ...any) *ProviderError {
	return &ProviderError{Op: op, Message: fmt.Sprintf(format, args...), Retryable: true, Err: cause}
}
