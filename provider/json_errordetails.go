package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// MarshalErrorDetails encodes d as duroxide's externally tagged ErrorDetails
// JSON ({"Application":{...}} and so on), byte for byte as serde_json writes
// it. d may be one of the four ErrorDetails types or a non-nil pointer to one.
func MarshalErrorDetails(d ErrorDetails) ([]byte, error) {
	v, ok := derefSealed(d)
	if !ok {
		return nil, errors.New("provider: marshal error details: nil ErrorDetails")
	}
	switch v := v.(type) {
	case InfrastructureError:
		return v.MarshalJSON()
	case ConfigurationError:
		return v.MarshalJSON()
	case ApplicationError:
		return v.MarshalJSON()
	case PoisonError:
		return v.MarshalJSON()
	}
	return nil, fmt.Errorf("provider: marshal error details: unsupported type %T", d)
}

// UnmarshalErrorDetails decodes duroxide's ErrorDetails JSON. It returns the
// value type (InfrastructureError, ConfigurationError, ApplicationError or
// PoisonError). An unknown variant or kind is an error; unknown fields are
// ignored.
func UnmarshalErrorDetails(data []byte) (ErrorDetails, error) {
	if !json.Valid(data) {
		return nil, errors.New("provider: unmarshal error details: invalid JSON")
	}
	d, err := unmarshalErrorDetails(data)
	if err != nil {
		return nil, fmt.Errorf("provider: unmarshal error details: %w", err)
	}
	return d, nil
}

// unmarshalErrorDetails decodes already validated ErrorDetails JSON.
func unmarshalErrorDetails(data []byte) (ErrorDetails, error) {
	tag, body, err := parseExternallyTagged(data)
	if err != nil {
		return nil, err
	}
	obj, err := parseObject(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	r := fieldReader{obj: obj}
	var d ErrorDetails
	switch tag {
	case "Infrastructure":
		d = InfrastructureError{
			Operation: r.str("operation"),
			Message:   r.str("message"),
			Retryable: r.boolean("retryable"),
		}
	case "Configuration":
		v := ConfigurationError{
			Kind:     ConfigErrorKind(r.str("kind")),
			Resource: r.str("resource"),
			Message:  r.optStr("message"),
		}
		if r.err == nil && v.Kind != ConfigNondeterminism {
			r.fail("kind", fmt.Errorf("unknown ConfigErrorKind %q", string(v.Kind)))
		}
		d = v
	case "Application":
		v := ApplicationError{
			Message:   r.str("message"),
			Retryable: r.boolean("retryable"),
		}
		if r.err == nil {
			raw, ok := obj["kind"]
			if !ok {
				r.missing("kind")
			} else if err := v.Kind.UnmarshalJSON(raw); err != nil {
				r.fail("kind", err)
			}
		}
		d = v
	case "Poison":
		v := PoisonError{
			AttemptCount: r.u32("attempt_count"),
			MaxAttempts:  r.u32("max_attempts"),
			Message:      r.str("message"),
		}
		if r.err == nil {
			raw, ok := obj["message_type"]
			if !ok {
				r.missing("message_type")
			} else if err := v.MessageType.UnmarshalJSON(raw); err != nil {
				r.fail("message_type", err)
			}
		}
		d = v
	default:
		return nil, fmt.Errorf("unknown ErrorDetails variant %q", tag)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", tag, r.err)
	}
	return d, nil
}

// MarshalJSON encodes the error as {"Infrastructure":{"operation","message","retryable"}}.
func (e InfrastructureError) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("operation", e.Operation)
	w.str("message", e.Message)
	w.boolean("retryable", e.Retryable)
	return externallyTagged("Infrastructure", w.close()), nil
}

// MarshalJSON encodes the error as
// {"Configuration":{"kind","resource","message"}}, message null when nil.
// Kind must be ConfigNondeterminism.
func (e ConfigurationError) MarshalJSON() ([]byte, error) {
	if e.Kind != ConfigNondeterminism {
		return nil, fmt.Errorf("provider: marshal ConfigurationError: unknown kind %q", string(e.Kind))
	}
	w := newObjWriter()
	w.str("kind", string(e.Kind))
	w.str("resource", e.Resource)
	w.strOrNull("message", e.Message)
	return externallyTagged("Configuration", w.close()), nil
}

// MarshalJSON encodes the error as {"Application":{"kind","message","retryable"}}.
func (e ApplicationError) MarshalJSON() ([]byte, error) {
	k, err := e.Kind.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("provider: marshal ApplicationError: %w", err)
	}
	w := newObjWriter()
	w.raw("kind", k)
	w.str("message", e.Message)
	w.boolean("retryable", e.Retryable)
	return externallyTagged("Application", w.close()), nil
}

// MarshalJSON encodes the error as
// {"Poison":{"attempt_count","max_attempts","message_type","message"}}.
func (e PoisonError) MarshalJSON() ([]byte, error) {
	mt, err := e.MessageType.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("provider: marshal PoisonError: %w", err)
	}
	w := newObjWriter()
	w.u64("attempt_count", uint64(e.AttemptCount))
	w.u64("max_attempts", uint64(e.MaxAttempts))
	w.raw("message_type", mt)
	w.str("message", e.Message)
	return externallyTagged("Poison", w.close()), nil
}

// MarshalJSON encodes the kind as "ActivityFailed", "OrchestrationFailed" or
// "Panicked", or as {"Cancelled":{"reason":...}} when Name is "Cancelled".
// Any other Name is an error.
func (k AppErrorKind) MarshalJSON() ([]byte, error) {
	switch k.Name {
	case "ActivityFailed", "OrchestrationFailed", "Panicked":
		return appendJSONString(nil, k.Name), nil
	case "Cancelled":
		w := newObjWriter()
		w.str("reason", k.CancelReason)
		return externallyTagged("Cancelled", w.close()), nil
	}
	return nil, fmt.Errorf("provider: unknown AppErrorKind %q", k.Name)
}

// UnmarshalJSON decodes an AppErrorKind written by MarshalJSON.
func (k *AppErrorKind) UnmarshalJSON(data []byte) error {
	raw := trimJSONSpace(data)
	if len(raw) > 0 && raw[0] == '"' {
		s, err := decodeJSONString(raw)
		if err != nil {
			return fmt.Errorf("AppErrorKind: %w", err)
		}
		switch s {
		case "ActivityFailed", "OrchestrationFailed", "Panicked":
			*k = AppErrorKind{Name: s}
			return nil
		}
		return fmt.Errorf("AppErrorKind: unknown unit variant %q", s)
	}
	if !json.Valid(raw) {
		return errors.New("AppErrorKind: invalid JSON")
	}
	tag, body, err := parseExternallyTagged(raw)
	if err != nil {
		return fmt.Errorf("AppErrorKind: %w", err)
	}
	if tag != "Cancelled" {
		return fmt.Errorf("AppErrorKind: unknown struct variant %q", tag)
	}
	obj, err := parseObject(body)
	if err != nil {
		return fmt.Errorf("AppErrorKind Cancelled: %w", err)
	}
	r := fieldReader{obj: obj}
	reason := r.str("reason")
	if r.err != nil {
		return fmt.Errorf("AppErrorKind Cancelled: %w", r.err)
	}
	*k = AppCancelled(reason)
	return nil
}

// MarshalJSON encodes the message type as {"Orchestration":{"instance",
// "execution_id"}}, {"Activity":{"instance","execution_id","activity_name",
// "activity_id"}} or {"FailedDeserialization":{"instance","execution_id",
// "error"}}, by Kind. Fields that do not belong to Kind are not written.
func (t PoisonMessageType) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", t.Instance)
	w.u64("execution_id", t.ExecutionID)
	switch t.Kind {
	case "Orchestration":
	case "Activity":
		w.str("activity_name", t.ActivityName)
		w.u64("activity_id", t.ActivityID)
	case "FailedDeserialization":
		w.str("error", t.Error)
	default:
		return nil, fmt.Errorf("provider: unknown PoisonMessageType %q", t.Kind)
	}
	return externallyTagged(t.Kind, w.close()), nil
}

// UnmarshalJSON decodes a PoisonMessageType written by MarshalJSON.
func (t *PoisonMessageType) UnmarshalJSON(data []byte) error {
	if !json.Valid(data) {
		return errors.New("PoisonMessageType: invalid JSON")
	}
	tag, body, err := parseExternallyTagged(data)
	if err != nil {
		return fmt.Errorf("PoisonMessageType: %w", err)
	}
	obj, err := parseObject(body)
	if err != nil {
		return fmt.Errorf("PoisonMessageType %s: %w", tag, err)
	}
	r := fieldReader{obj: obj}
	v := PoisonMessageType{Kind: tag, Instance: r.str("instance"), ExecutionID: r.u64("execution_id")}
	switch tag {
	case "Orchestration":
	case "Activity":
		v.ActivityName = r.str("activity_name")
		v.ActivityID = r.u64("activity_id")
	case "FailedDeserialization":
		v.Error = r.str("error")
	default:
		return fmt.Errorf("PoisonMessageType: unknown variant %q", tag)
	}
	if r.err != nil {
		return fmt.Errorf("PoisonMessageType %s: %w", tag, r.err)
	}
	*t = v
	return nil
}

// Category implements ErrorDetails: "infrastructure".
func (InfrastructureError) Category() string { return "infrastructure" }

// DisplayMessage implements ErrorDetails: "infrastructure:{op}: {msg}".
func (e InfrastructureError) DisplayMessage() string {
	return "infrastructure:" + e.Operation + ": " + e.Message
}

// IsRetryable implements ErrorDetails: the Retryable flag.
func (e InfrastructureError) IsRetryable() bool { return e.Retryable }

// Category implements ErrorDetails: "configuration".
func (ConfigurationError) Category() string { return "configuration" }

// DisplayMessage implements ErrorDetails: "nondeterministic: {msg}", or
// "nondeterministic in {resource}" when Message is nil.
func (e ConfigurationError) DisplayMessage() string {
	if e.Message != nil {
		return "nondeterministic: " + *e.Message
	}
	return "nondeterministic in " + e.Resource
}

// IsRetryable implements ErrorDetails: configuration errors never are.
func (ConfigurationError) IsRetryable() bool { return false }

// Category implements ErrorDetails: "application".
func (ApplicationError) Category() string { return "application" }

// DisplayMessage implements ErrorDetails: "canceled: {reason}" for
// Cancelled, "orchestration panicked: {msg}" for Panicked, and the message
// itself otherwise.
func (e ApplicationError) DisplayMessage() string {
	switch e.Kind.Name {
	case "Cancelled":
		return "canceled: " + e.Kind.CancelReason
	case "Panicked":
		return "orchestration panicked: " + e.Message
	}
	return e.Message
}

// IsRetryable implements ErrorDetails: the Retryable flag.
func (e ApplicationError) IsRetryable() bool { return e.Retryable }

// Category implements ErrorDetails: "poison".
func (PoisonError) Category() string { return "poison" }

// DisplayMessage implements ErrorDetails:
// "poison: orchestration {inst} exceeded {n} attempts (max {m})",
// "poison: activity {name}#{id} exceeded {n} attempts (max {m})", or
// "poison: orchestration {inst} history deserialization failed after {n}
// attempts (max {m}): {err}", by message type.
func (e PoisonError) DisplayMessage() string {
	n := strconv.FormatUint(uint64(e.AttemptCount), 10)
	m := strconv.FormatUint(uint64(e.MaxAttempts), 10)
	mt := e.MessageType
	switch mt.Kind {
	case "Activity":
		return "poison: activity " + mt.ActivityName + "#" + strconv.FormatUint(mt.ActivityID, 10) +
			" exceeded " + n + " attempts (max " + m + ")"
	case "FailedDeserialization":
		return "poison: orchestration " + mt.Instance + " history deserialization failed after " + n +
			" attempts (max " + m + "): " + mt.Error
	}
	return "poison: orchestration " + mt.Instance + " exceeded " + n + " attempts (max " + m + ")"
}

// IsRetryable implements ErrorDetails: poison errors never are.
func (PoisonError) IsRetryable() bool { return false }
