package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// WithoutRaw returns a copy of e with Raw cleared, so that MarshalJSON
// encodes the Go fields instead of writing the original bytes. Use it after
// modifying the fields of a decoded event.
func (e Event) WithoutRaw() Event {
	e.Raw = nil
	return e
}

// MarshalJSON encodes the event as duroxide's serde JSON.
//
// When Raw is set (the event was decoded from JSON), MarshalJSON returns a
// copy of Raw verbatim, which must be valid JSON; this keeps unknown event
// types and unknown fields byte for byte. Otherwise it writes the common
// fields (event_id, source_event_id, instance_id, execution_id, timestamp_ms,
// duroxide_version), then "type", then the kind's fields, exactly as
// serde_json does. An UnknownEvent without Raw cannot be encoded.
//
// Call MarshalJSON directly for exact bytes: encoding/json's Marshal
// re-compacts the result and, by default, escapes '<', '>' and '&'.
func (e Event) MarshalJSON() ([]byte, error) {
	if len(e.Raw) > 0 {
		if !json.Valid(e.Raw) {
			return nil, errors.New("provider: marshal event: Raw is not valid JSON")
		}
		return bytes.Clone(e.Raw), nil
	}
	kind, ok := derefSealed(e.Kind)
	if !ok {
		return nil, errors.New("provider: marshal event: nil Kind")
	}
	w := newObjWriter()
	w.u64("event_id", e.EventID)
	w.u64OrNull("source_event_id", e.SourceEventID)
	w.str("instance_id", e.InstanceID)
	w.u64("execution_id", e.ExecutionID)
	w.u64("timestamp_ms", e.TimestampMs)
	w.str("duroxide_version", e.DuroxideVersion)
	if err := writeEventKind(w, kind); err != nil {
		return nil, fmt.Errorf("provider: marshal event: %w", err)
	}
	return w.close(), nil
}

// writeEventKind writes "type" and the kind's fields.
func writeEventKind(w *objWriter, kind EventKind) error {
	details := func(d ErrorDetails) error {
		b, err := MarshalErrorDetails(d)
		if err != nil {
			return fmt.Errorf("%s details: %w", kind.Type(), err)
		}
		w.raw("details", b)
		return nil
	}
	if u, ok := kind.(UnknownEvent); ok {
		return fmt.Errorf("cannot encode event of unknown type %q without Raw", u.TypeName)
	}
	w.str("type", kind.Type())
	switch k := kind.(type) {
	case OrchestrationStarted:
		w.str("name", k.Name)
		w.str("version", k.Version)
		w.str("input", k.Input)
		w.strOrNull("parent_instance", k.ParentInstance)
		w.u64OrNull("parent_id", k.ParentID)
		if k.CarryForwardEvents != nil {
			w.pairs("carry_forward_events", k.CarryForwardEvents)
		}
		w.strOmitNil("initial_custom_status", k.InitialCustomStatus)
	case OrchestrationCompleted:
		w.str("output", k.Output)
	case OrchestrationFailed:
		return details(k.Details)
	case ActivityScheduled:
		w.str("name", k.Name)
		w.str("input", k.Input)
		w.strOmitNil("session_id", k.SessionID)
		w.strOmitNil("tag", k.Tag)
	case ActivityCompletedEvent:
		w.str("result", k.Result)
	case ActivityFailedEvent:
		return details(k.Details)
	case ActivityCancelRequested:
		w.str("reason", k.Reason)
	case TimerCreated:
		w.u64("fire_at_ms", k.FireAtMs)
	case TimerFiredEvent:
		w.u64("fire_at_ms", k.FireAtMs)
	case ExternalSubscribed:
		w.str("name", k.Name)
	case ExternalEvent:
		w.str("name", k.Name)
		w.str("data", k.Data)
	case OrchestrationChained:
		w.str("name", k.Name)
		w.str("instance", k.Instance)
		w.str("input", k.Input)
	case SubOrchestrationScheduled:
		w.str("name", k.Name)
		w.str("instance", k.Instance)
		w.str("input", k.Input)
	case SubOrchestrationCompleted:
		w.str("result", k.Result)
	case SubOrchestrationFailed:
		return details(k.Details)
	case SubOrchestrationCancelRequested:
		w.str("reason", k.Reason)
	case OrchestrationContinuedAsNew:
		w.str("input", k.Input)
	case OrchestrationCancelRequested:
		w.str("reason", k.Reason)
	case ExternalSubscribedCancelled:
		w.str("reason", k.Reason)
	case QueueSubscribed:
		w.str("name", k.Name)
	case QueueEventDelivered:
		w.str("name", k.Name)
		w.str("data", k.Data)
	case QueueSubscriptionCancelled:
		w.str("reason", k.Reason)
	case CustomStatusUpdated:
		w.strOrNull("status", k.Status)
	case KeyValueSet:
		w.str("key", k.Key)
		w.str("value", k.Value)
		w.u64("last_updated_at_ms", k.LastUpdatedAtMs)
	case KeyValueCleared:
		w.str("key", k.Key)
	case KeyValuesCleared:
	default:
		return fmt.Errorf("unsupported event kind %T", kind)
	}
	return nil
}

// UnmarshalJSON decodes duroxide's serde JSON for an Event and keeps a copy
// of data in Raw, so that MarshalJSON gives back the same bytes.
//
// The common fields are required (source_event_id may be null or missing),
// and "type" must be a string. A type this version does not know decodes
// without error as UnknownEvent{TypeName}, its fields kept only in Raw.
// Unknown fields of known types are ignored (and kept in Raw). JSON null is
// an error, not a no-op, since an Event is never optional. On error e is
// left unchanged.
func (e *Event) UnmarshalJSON(data []byte) error {
	if !json.Valid(data) {
		return errors.New("provider: unmarshal event: invalid JSON")
	}
	obj, err := parseObject(data)
	if err != nil {
		return fmt.Errorf("provider: unmarshal event: %w", err)
	}
	rawType, ok := obj["type"]
	if !ok {
		return errors.New(`provider: unmarshal event: missing field "type"`)
	}
	typ, err := decodeJSONString(rawType)
	if err != nil {
		return fmt.Errorf(`provider: unmarshal event: field "type": %w`, err)
	}
	r := fieldReader{obj: obj}
	ev := Event{
		EventID:         r.u64("event_id"),
		SourceEventID:   r.optU64("source_event_id"),
		InstanceID:      r.str("instance_id"),
		ExecutionID:     r.u64("execution_id"),
		TimestampMs:     r.u64("timestamp_ms"),
		DuroxideVersion: r.str("duroxide_version"),
		Kind:            readEventKind(&r, typ),
	}
	if r.err != nil {
		return fmt.Errorf("provider: unmarshal event %s: %w", typ, r.err)
	}
	ev.Raw = json.RawMessage(bytes.Clone(data))
	*e = ev
	return nil
}

// readEventKind decodes the kind named typ from the event's fields.
func readEventKind(r *fieldReader, typ string) EventKind {
	switch typ {
	case "OrchestrationStarted":
		return OrchestrationStarted{
			Name:                r.str("name"),
			Version:             r.str("version"),
			Input:               r.str("input"),
			ParentInstance:      r.optStr("parent_instance"),
			ParentID:            r.optU64("parent_id"),
			CarryForwardEvents:  r.optPairs("carry_forward_events"),
			InitialCustomStatus: r.optStr("initial_custom_status"),
		}
	case "OrchestrationCompleted":
		return OrchestrationCompleted{Output: r.str("output")}
	case "OrchestrationFailed":
		return OrchestrationFailed{Details: r.details("details")}
	case "ActivityScheduled":
		return ActivityScheduled{
			Name:      r.str("name"),
			Input:     r.str("input"),
			SessionID: r.optStr("session_id"),
			Tag:       r.optStr("tag"),
		}
	case "ActivityCompleted":
		return ActivityCompletedEvent{Result: r.str("result")}
	case "ActivityFailed":
		return ActivityFailedEvent{Details: r.details("details")}
	case "ActivityCancelRequested":
		return ActivityCancelRequested{Reason: r.str("reason")}
	case "TimerCreated":
		return TimerCreated{FireAtMs: r.u64("fire_at_ms")}
	case "TimerFired":
		return TimerFiredEvent{FireAtMs: r.u64("fire_at_ms")}
	case "ExternalSubscribed":
		return ExternalSubscribed{Name: r.str("name")}
	case "ExternalEvent":
		return ExternalEvent{Name: r.str("name"), Data: r.str("data")}
	case "OrchestrationChained":
		return OrchestrationChained{Name: r.str("name"), Instance: r.str("instance"), Input: r.str("input")}
	case "SubOrchestrationScheduled":
		return SubOrchestrationScheduled{Name: r.str("name"), Instance: r.str("instance"), Input: r.str("input")}
	case "SubOrchestrationCompleted":
		return SubOrchestrationCompleted{Result: r.str("result")}
	case "SubOrchestrationFailed":
		return SubOrchestrationFailed{Details: r.details("details")}
	case "SubOrchestrationCancelRequested":
		return SubOrchestrationCancelRequested{Reason: r.str("reason")}
	case "OrchestrationContinuedAsNew":
		return OrchestrationContinuedAsNew{Input: r.str("input")}
	case "OrchestrationCancelRequested":
		return OrchestrationCancelRequested{Reason: r.str("reason")}
	case "ExternalSubscribedCancelled":
		return ExternalSubscribedCancelled{Reason: r.str("reason")}
	case "ExternalSubscribedPersistent":
		return QueueSubscribed{Name: r.str("name")}
	case "ExternalEventPersistent":
		return QueueEventDelivered{Name: r.str("name"), Data: r.str("data")}
	case "ExternalSubscribedPersistentCancelled":
		return QueueSubscriptionCancelled{Reason: r.str("reason")}
	case "CustomStatusUpdated":
		return CustomStatusUpdated{Status: r.optStr("status")}
	case "KeyValueSet":
		return KeyValueSet{Key: r.str("key"), Value: r.str("value"), LastUpdatedAtMs: r.u64Default("last_updated_at_ms")}
	case "KeyValueCleared":
		return KeyValueCleared{Key: r.str("key")}
	case "KeyValuesCleared":
		return KeyValuesCleared{}
	}
	return UnknownEvent{TypeName: typ}
}
