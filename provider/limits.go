package provider

import (
	"fmt"
	"reflect"
)

// Limits bound the sizes of what callers store, so that one oversized item
// cannot fill the disk or make every later read of a queue or a history slow.
// A call that would exceed a limit fails with a permanent error wrapping
// ErrTooLarge that names the item, the size and the limit, before anything
// is written or any lock is changed: an ack refused for size keeps its lock
// (the runtime's failure path then acks a failure with the same token).
//
// A zero field takes its default; a negative field means no limit.
type Limits struct {
	// MaxMessageBytes bounds one queue message: a work item's JSON
	// (MarshalWorkItem), as passed to EnqueueForOrchestrator,
	// EnqueueForWorker, as an ack's worker or orchestrator item, or as a
	// work item's completion. Default 16 MiB.
	MaxMessageBytes int
	// MaxEventBytes bounds one history event's JSON (Event.MarshalJSON), in
	// an ack's history delta or AppendWithExecution. Default 16 MiB.
	MaxEventBytes int
	// MaxPayloadBytes bounds any single string a work item or event carries
	// (inputs, outputs, results, event data, error messages, names).
	// Default 16 MiB.
	MaxPayloadBytes int
	// MaxCustomStatusBytes bounds a custom status (CustomStatusUpdated,
	// and the initial custom status of OrchestrationStarted and
	// ContinueAsNew). Default 256 KiB, duroxide's MAX_CUSTOM_STATUS_BYTES.
	MaxCustomStatusBytes int
	// MaxTagBytes bounds an activity's tag. Default 256, duroxide's
	// MAX_TAG_NAME_BYTES.
	MaxTagBytes int
}

// Default limits.
const (
	DefaultMaxMessageBytes      = 16 << 20
	DefaultMaxEventBytes        = 16 << 20
	DefaultMaxPayloadBytes      = 16 << 20
	DefaultMaxCustomStatusBytes = 256 << 10
	DefaultMaxTagBytes          = 256
)

// withDefaults fills zero fields with the defaults.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxMessageBytes, DefaultMaxMessageBytes)
	def(&l.MaxEventBytes, DefaultMaxEventBytes)
	def(&l.MaxPayloadBytes, DefaultMaxPayloadBytes)
	def(&l.MaxCustomStatusBytes, DefaultMaxCustomStatusBytes)
	def(&l.MaxTagBytes, DefaultMaxTagBytes)
	return l
}

// over returns an ErrTooLarge error if n exceeds limit (negative: none).
func over(op, what string, n, limit int, name string) error {
	if limit < 0 || n <= limit {
		return nil
	}
	return Permanentf(op, ErrTooLarge, "%s is %d bytes, over the limit of %d bytes (Options.Limits.%s); nothing was written", what, n, limit, name)
}

// checkWorkItem checks one work item (what names it in the error).
func (l Limits) checkWorkItem(op, what string, w WorkItem) error {
	if w == nil {
		return nil
	}
	if err := l.checkStrings(op, what, reflect.ValueOf(w)); err != nil {
		return err
	}
	switch v := w.(type) {
	case ActivityExecute:
		if v.Tag != nil {
			if err := over(op, what+": tag", len(*v.Tag), l.MaxTagBytes, "MaxTagBytes"); err != nil {
				return err
			}
		}
	case ContinueAsNew:
		if v.InitialCustomStatus != nil {
			if err := over(op, what+": initial custom status", len(*v.InitialCustomStatus), l.MaxCustomStatusBytes, "MaxCustomStatusBytes"); err != nil {
				return err
			}
		}
	}
	if l.MaxMessageBytes < 0 {
		return nil
	}
	b, err := MarshalWorkItem(w)
	if err != nil {
		return nil // the caller reports the encoding error
	}
	return over(op, what, len(b), l.MaxMessageBytes, "MaxMessageBytes")
}

// checkEvent checks one history event.
func (l Limits) checkEvent(op string, e Event) error {
	what := fmt.Sprintf("event %d", e.EventID)
	if err := l.checkStrings(op, what, reflect.ValueOf(e.Kind)); err != nil {
		return err
	}
	var status *string
	switch k := e.Kind.(type) {
	case CustomStatusUpdated:
		status = k.Status
	case OrchestrationStarted:
		status = k.InitialCustomStatus
	}
	if status != nil {
		if err := over(op, what+": custom status", len(*status), l.MaxCustomStatusBytes, "MaxCustomStatusBytes"); err != nil {
			return err
		}
	}
	if l.MaxEventBytes < 0 {
		return nil
	}
	b, err := e.MarshalJSON()
	if err != nil {
		return nil // the caller reports the encoding error
	}
	return over(op, what, len(b), l.MaxEventBytes, "MaxEventBytes")
}

// checkStrings checks every string reachable from v (struct fields,
// pointers, interfaces, slices, arrays, maps) against MaxPayloadBytes.
// Byte slices (raw JSON kept for round trips) are measured by the event and
// message limits instead.
func (l Limits) checkStrings(op, what string, v reflect.Value) error {
	if l.MaxPayloadBytes < 0 {
		return nil
	}
	field, n := longestString(v, "")
	if field == "" {
		field = "a payload"
	}
	return over(op, what+": "+field, n, l.MaxPayloadBytes, "MaxPayloadBytes")
}

// longestString returns the length of the longest string reachable from v
// and the path of the field holding it.
func longestString(v reflect.Value, path string) (string, int) {
	switch v.Kind() {
	case reflect.String:
		return path, v.Len()
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", 0
		}
		return longestString(v.Elem(), path)
	case reflect.Struct:
		best, n := "", 0
		t := v.Type()
		for i := range v.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			p := t.Field(i).Name
			if path != "" {
				p = path + "." + p
			}
			if f, m := longestString(v.Field(i), p); m > n {
				best, n = f, m
			}
		}
		return best, n
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", 0
		}
		best, n := "", 0
		for i := range v.Len() {
			if f, m := longestString(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); m > n {
				best, n = f, m
			}
		}
		return best, n
	case reflect.Map:
		best, n := "", 0
		it := v.MapRange()
		for it.Next() {
			p := fmt.Sprintf("%s[%v]", path, it.Key())
			if f, m := longestString(it.Key(), p); m > n {
				best, n = f, m
			}
			if f, m := longestString(it.Value(), p); m > n {
				best, n = f, m
			}
		}
		return best, n
	}
	return "", 0
}

// checkAckLimits checks everything an orchestration ack would store.
func (p *FSProvider) checkAckLimits(op string, delta []Event, workerItems, orchItems []WorkItem) error {
	for _, e := range delta {
		if err := p.limits.checkEvent(op, e); err != nil {
			return err
		}
	}
	for i, w := range workerItems {
		if err := p.limits.checkWorkItem(op, fmt.Sprintf("worker item %d (%s)", i, kindOf(w)), w); err != nil {
			return err
		}
	}
	for i, w := range orchItems {
		if err := p.limits.checkWorkItem(op, fmt.Sprintf("orchestrator item %d (%s)", i, kindOf(w)), w); err != nil {
			return err
		}
	}
	return nil
}
