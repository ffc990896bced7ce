package provider

import (
	"reflect"
	"slices"
)

// normalizeEvents returns the events a call is about to store (an ack's
// history delta, AppendWithExecution's events) in the one form that every
// check and every materialization after it reads, so that what is validated
// is what is stored:
//
//   - An event with Raw set (decoded from JSON) is stored as Raw's bytes
//     (Event.MarshalJSON), so it is replaced by Raw decoded: its kind, and
//     with it the custom status and the sub-orchestration count an ack
//     takes from it, are Raw's. Raw's event_id must be EventID, the id the
//     ack checks for duplicates and stores in the record's frame; an event
//     whose Raw says another id (a decoded event renumbered without
//     clearing Raw, see Event.WithoutRaw) or does not decode fails with
//     ErrInvalidEvent.
//   - A pointer kind (&CustomStatusUpdated{...}), which MarshalJSON stores
//     like its value, becomes its value, so that the type switches on Kind
//     (buildCommit, Limits.checkEvent, countSubOrchestrations) see it.
//
// Nothing is changed in events: a copy is returned when an event changes.
// A failure is a permanent *ProviderError of op.
func normalizeEvents(op string, events []Event) ([]Event, error) {
	var out []Event
	for i, e := range events {
		n, changed, err := normalizeEvent(op, e)
		if err != nil {
			return nil, err
		}
		if out == nil && changed {
			out = slices.Clone(events)
		}
		if out != nil {
			out[i] = n
		}
	}
	if out == nil {
		return events, nil
	}
	return out, nil
}

// normalizeEvent is normalizeEvents for one event; changed says whether
// the result differs from e.
func normalizeEvent(op string, e Event) (n Event, changed bool, err error) {
	if len(e.Raw) > 0 {
		var d Event
		if err := d.UnmarshalJSON(e.Raw); err != nil {
			return Event{}, false, Permanentf(op, ErrInvalidEvent, "event %d: Raw does not decode as an event: %v", e.EventID, err)
		}
		if d.EventID != e.EventID {
			return Event{}, false, Permanentf(op, ErrInvalidEvent,
				"event %d: Raw holds event_id %d; the stored event would not be the one checked (clear Raw after changing a decoded event: Event.WithoutRaw)",
				e.EventID, d.EventID)
		}
		return d, true, nil
	}
	if e.Kind != nil && reflect.ValueOf(e.Kind).Kind() == reflect.Pointer {
		// A nil pointer stays: encoding it fails ("nil Kind"), and the
		// caller reports that.
		if k, ok := derefSealed(e.Kind); ok {
			e.Kind = k
			return e, true, nil
		}
	}
	return e, false, nil
}
