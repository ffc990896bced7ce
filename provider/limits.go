package provider

import (
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"
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

// checkWorkItem checks one work item (what names it in the error): its ids
// (checkIDs) and sizes.
func (l Limits) checkWorkItem(op, what string, w WorkItem) error {
	if w == nil {
		return nil
	}
	if err := checkIDs(op, what, workItemIDs(w)); err != nil {
		return err
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
	if err := checkIDs(op, what, eventIDs(e)); err != nil {
		return err
	}
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

// checkAckLimits checks everything an orchestration ack would store: the
// sizes of its events and items, and the ids in them and in its metadata.
func (p *FSProvider) checkAckLimits(op string, delta []Event, workerItems, orchItems []WorkItem, md ExecutionMetadata) error {
	if err := checkIDs(op, "metadata", metadataIDs(md)); err != nil {
		return err
	}
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

// ErrInvalidID: an id or name that is not valid UTF-8 (see checkIDs).
//
// It is declared here, beside the check, rather than with the other
// sentinels in errors.go, only to keep this change out of files under
// concurrent rewrite; it belongs with them.
var ErrInvalidID = errors.New("invalid id")

// An idField is one id or name a call would store: an instance id (also a
// parent's), a session id, a tag, an activity, orchestration or event name,
// a version, a key-value key, an execution status. nil means absent.
//
// Ids must be valid UTF-8. Everything durofs stores is JSON, and
// encoding/json replaces each invalid byte by U+FFFD, so two ids that differ
// only in invalid bytes ("\xff\xfe", "\xfe\xff") would be stored under
// different file names (names.Encode escapes the raw bytes) but come back
// from a fetch or ListInstances as the same "\uFFFD\uFFFD", which addresses
// neither. duroxide's ids are Rust Strings and always valid UTF-8, so only a
// Go caller can send such an id; it is refused with a permanent ErrInvalidID
// before anything is written. Payloads (inputs, outputs, results, event
// data, error details, custom status) are not ids and are not checked here.
type idField struct {
	name string
	val  *string
}

// checkIDs returns a permanent ErrInvalidID error naming the first field
// (of the item or event described by what) that is not valid UTF-8.
func checkIDs(op, what string, ids []idField) error {
	for _, f := range ids {
		if f.val != nil && !utf8.ValidString(*f.val) {
			return Permanentf(op, ErrInvalidID, "%s: %s %s is not valid UTF-8; ids and names must be valid UTF-8; nothing was written", what, f.name, quoteID(*f.val))
		}
	}
	return nil
}

// checkInstanceIDs checks the instance ids a call that writes takes as
// parameters. (Calls that only read need no check: no stored instance can
// have such an id, so they find nothing.)
func checkInstanceIDs(op string, ids ...string) error {
	for _, id := range ids {
		if !utf8.ValidString(id) {
			return Permanentf(op, ErrInvalidID, "instance id %s is not valid UTF-8; ids must be valid UTF-8; nothing was written", quoteID(id))
		}
	}
	return nil
}

// quoteID quotes an id for an error message, cut after 64 bytes (an id
// may be as long as MaxPayloadBytes).
func quoteID(id string) string {
	const shown = 64
	if len(id) <= shown {
		return fmt.Sprintf("%q", id)
	}
	return fmt.Sprintf("%q… (%d bytes)", id[:shown], len(id))
}

// sessionConfigIDs lists the owner id of a FetchWorkItem session config,
// which a session claim stores.
func sessionConfigIDs(s *SessionFetchConfig) []idField {
	if s == nil {
		return nil
	}
	return []idField{{"owner id", &s.OwnerID}}
}

// workItemIDs lists the ids and names of a work item.
func workItemIDs(w WorkItem) []idField {
	switch v := derefItem(w).(type) {
	case StartOrchestration:
		return []idField{{"instance", &v.Instance}, {"orchestration", &v.Orchestration}, {"version", v.Version}, {"parent instance", v.ParentInstance}}
	case ActivityExecute:
		return []idField{{"instance", &v.Instance}, {"activity name", &v.Name}, {"session id", v.SessionID}, {"tag", v.Tag}}
	case ActivityCompleted:
		return []idField{{"instance", &v.Instance}}
	case ActivityFailed:
		return []idField{{"instance", &v.Instance}}
	case TimerFired:
		return []idField{{"instance", &v.Instance}}
	case ExternalRaised:
		return []idField{{"instance", &v.Instance}, {"event name", &v.Name}}
	case SubOrchCompleted:
		return []idField{{"parent instance", &v.ParentInstance}}
	case SubOrchFailed:
		return []idField{{"parent instance", &v.ParentInstance}}
	case CancelInstance:
		return []idField{{"instance", &v.Instance}}
	case ContinueAsNew:
		return []idField{{"instance", &v.Instance}, {"orchestration", &v.Orchestration}, {"version", v.Version}}
	case QueueMessage:
		return []idField{{"instance", &v.Instance}, {"queue name", &v.Name}}
	}
	return nil
}

// eventIDs lists the ids and names of a history event.
func eventIDs(e Event) []idField {
	ids := []idField{{"instance", &e.InstanceID}, {"duroxide version", &e.DuroxideVersion}}
	kind, _ := derefSealed(e.Kind) // a *Kind is stored like its Kind (json_event.go)
	switch k := kind.(type) {
	case OrchestrationStarted:
		ids = append(ids, idField{"orchestration", &k.Name}, idField{"version", &k.Version}, idField{"parent instance", k.ParentInstance})
	case ActivityScheduled:
		ids = append(ids, idField{"activity name", &k.Name}, idField{"session id", k.SessionID}, idField{"tag", k.Tag})
	case ExternalSubscribed:
		ids = append(ids, idField{"event name", &k.Name})
	case ExternalEvent:
		ids = append(ids, idField{"event name", &k.Name})
	case OrchestrationChained:
		ids = append(ids, idField{"orchestration", &k.Name}, idField{"instance", &k.Instance})
	case SubOrchestrationScheduled:
		ids = append(ids, idField{"orchestration", &k.Name}, idField{"instance", &k.Instance})
	case QueueSubscribed:
		ids = append(ids, idField{"queue name", &k.Name})
	case QueueEventDelivered:
		ids = append(ids, idField{"queue name", &k.Name})
	case KeyValueSet:
		ids = append(ids, idField{"key", &k.Key})
	case KeyValueCleared:
		ids = append(ids, idField{"key", &k.Key})
	}
	return ids
}

// metadataIDs lists the ids and names of an ack's metadata.
func metadataIDs(md ExecutionMetadata) []idField {
	return []idField{{"status", md.Status}, {"orchestration", md.OrchestrationName}, {"version", md.OrchestrationVersion}, {"parent instance", md.ParentInstanceID}}
}
