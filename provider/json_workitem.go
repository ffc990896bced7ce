package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// This file holds the WorkItem JSON codec and the small JSON reader and
// writer that the WorkItem, Event and ErrorDetails codecs share.
//
// The writer produces exactly serde_json's compact output: members in
// declaration order, no whitespace, and strings escaped the way serde_json
// escapes them (only '"', '\\' and control characters; '<', '>', '&', '/',
// U+2028 and U+2029 are written as they are). The reader follows serde's
// derive rules: required fields must be present, Option fields may be
// missing or null, unknown fields are ignored, and duplicate fields are an
// error.
//
// The MarshalJSON methods are meant to be called directly or through
// MarshalWorkItem / MarshalErrorDetails. encoding/json's Marshal re-compacts
// whatever a MarshalJSON method returns and, unless the Encoder's
// SetEscapeHTML(false) is used, escapes '<', '>' and '&', so its output can
// differ from serde's bytes.

// MarshalWorkItem encodes w as duroxide's externally tagged JSON,
// {"Variant":{...}}, byte for byte as serde_json writes it. w may be any of
// the WorkItem variants, or a non-nil pointer to one.
func MarshalWorkItem(w WorkItem) ([]byte, error) {
	v, ok := derefSealed(w)
	if !ok {
		return nil, errors.New("provider: marshal work item: nil work item")
	}
	switch v := v.(type) {
	case StartOrchestration:
		return v.MarshalJSON()
	case ActivityExecute:
		return v.MarshalJSON()
	case ActivityCompleted:
		return v.MarshalJSON()
	case ActivityFailed:
		return v.MarshalJSON()
	case TimerFired:
		return v.MarshalJSON()
	case ExternalRaised:
		return v.MarshalJSON()
	case SubOrchCompleted:
		return v.MarshalJSON()
	case SubOrchFailed:
		return v.MarshalJSON()
	case CancelInstance:
		return v.MarshalJSON()
	case ContinueAsNew:
		return v.MarshalJSON()
	case QueueMessage:
		return v.MarshalJSON()
	}
	return nil, fmt.Errorf("provider: marshal work item: unsupported type %T", w)
}

// UnmarshalWorkItem decodes duroxide's externally tagged WorkItem JSON. It
// returns the concrete value type (StartOrchestration, not
// *StartOrchestration). The outer object must have exactly one key, a known
// variant name; unknown fields inside the variant are ignored. A missing
// ContinueAsNew carry_forward_events decodes as nil, and so does an empty one.
func UnmarshalWorkItem(data []byte) (WorkItem, error) {
	if !json.Valid(data) {
		return nil, errors.New("provider: unmarshal work item: invalid JSON")
	}
	tag, body, err := parseExternallyTagged(data)
	if err != nil {
		return nil, fmt.Errorf("provider: unmarshal work item: %w", err)
	}
	obj, err := parseObject(body)
	if err != nil {
		return nil, fmt.Errorf("provider: unmarshal work item %s: %w", tag, err)
	}
	r := fieldReader{obj: obj}
	var w WorkItem
	switch tag {
	case "StartOrchestration":
		w = StartOrchestration{
			Instance:       r.str("instance"),
			Orchestration:  r.str("orchestration"),
			Input:          r.str("input"),
			Version:        r.optStr("version"),
			ParentInstance: r.optStr("parent_instance"),
			ParentID:       r.optU64("parent_id"),
			ExecutionID:    r.u64("execution_id"),
		}
	case "ActivityExecute":
		w = ActivityExecute{
			Instance:    r.str("instance"),
			ExecutionID: r.u64("execution_id"),
			ID:          r.u64("id"),
			Name:        r.str("name"),
			Input:       r.str("input"),
			SessionID:   r.optStr("session_id"),
			Tag:         r.optStr("tag"),
		}
	case "ActivityCompleted":
		w = ActivityCompleted{
			Instance:    r.str("instance"),
			ExecutionID: r.u64("execution_id"),
			ID:          r.u64("id"),
			Result:      r.str("result"),
		}
	case "ActivityFailed":
		w = ActivityFailed{
			Instance:    r.str("instance"),
			ExecutionID: r.u64("execution_id"),
			ID:          r.u64("id"),
			Details:     r.details("details"),
		}
	case "TimerFired":
		w = TimerFired{
			Instance:    r.str("instance"),
			ExecutionID: r.u64("execution_id"),
			ID:          r.u64("id"),
			FireAtMs:    r.u64("fire_at_ms"),
		}
	case "ExternalRaised":
		w = ExternalRaised{
			Instance: r.str("instance"),
			Name:     r.str("name"),
			Data:     r.str("data"),
		}
	case "SubOrchCompleted":
		w = SubOrchCompleted{
			ParentInstance:    r.str("parent_instance"),
			ParentExecutionID: r.u64("parent_execution_id"),
			ParentID:          r.u64("parent_id"),
			Result:            r.str("result"),
		}
	case "SubOrchFailed":
		w = SubOrchFailed{
			ParentInstance:    r.str("parent_instance"),
			ParentExecutionID: r.u64("parent_execution_id"),
			ParentID:          r.u64("parent_id"),
			Details:           r.details("details"),
		}
	case "CancelInstance":
		w = CancelInstance{
			Instance: r.str("instance"),
			Reason:   r.str("reason"),
		}
	case "ContinueAsNew":
		v := ContinueAsNew{
			Instance:            r.str("instance"),
			Orchestration:       r.str("orchestration"),
			Input:               r.str("input"),
			Version:             r.optStr("version"),
			CarryForwardEvents:  r.pairsDefault("carry_forward_events"),
			InitialCustomStatus: r.optStr("initial_custom_status"),
		}
		if len(v.CarryForwardEvents) == 0 {
			v.CarryForwardEvents = nil
		}
		w = v
	case "QueueMessage":
		w = QueueMessage{
			Instance: r.str("instance"),
			Name:     r.str("name"),
			Data:     r.str("data"),
		}
	default:
		return nil, fmt.Errorf("provider: unmarshal work item: unknown variant %q", tag)
	}
	if r.err != nil {
		return nil, fmt.Errorf("provider: unmarshal work item %s: %w", tag, r.err)
	}
	return w, nil
}

// MarshalJSON encodes the item as {"StartOrchestration":{...}}; version,
// parent_instance and parent_id are null when nil.
func (v StartOrchestration) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.str("orchestration", v.Orchestration)
	w.str("input", v.Input)
	w.strOrNull("version", v.Version)
	w.strOrNull("parent_instance", v.ParentInstance)
	w.u64OrNull("parent_id", v.ParentID)
	w.u64("execution_id", v.ExecutionID)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"ActivityExecute":{...}}; session_id and
// tag are omitted when nil.
func (v ActivityExecute) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.u64("execution_id", v.ExecutionID)
	w.u64("id", v.ID)
	w.str("name", v.Name)
	w.str("input", v.Input)
	w.strOmitNil("session_id", v.SessionID)
	w.strOmitNil("tag", v.Tag)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"ActivityCompleted":{...}}.
func (v ActivityCompleted) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.u64("execution_id", v.ExecutionID)
	w.u64("id", v.ID)
	w.str("result", v.Result)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"ActivityFailed":{...}}. Details must not
// be nil.
func (v ActivityFailed) MarshalJSON() ([]byte, error) {
	d, err := MarshalErrorDetails(v.Details)
	if err != nil {
		return nil, fmt.Errorf("provider: marshal ActivityFailed details: %w", err)
	}
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.u64("execution_id", v.ExecutionID)
	w.u64("id", v.ID)
	w.raw("details", d)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"TimerFired":{...}}.
func (v TimerFired) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.u64("execution_id", v.ExecutionID)
	w.u64("id", v.ID)
	w.u64("fire_at_ms", v.FireAtMs)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"ExternalRaised":{...}}.
func (v ExternalRaised) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.str("name", v.Name)
	w.str("data", v.Data)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"SubOrchCompleted":{...}}.
func (v SubOrchCompleted) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("parent_instance", v.ParentInstance)
	w.u64("parent_execution_id", v.ParentExecutionID)
	w.u64("parent_id", v.ParentID)
	w.str("result", v.Result)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"SubOrchFailed":{...}}. Details must not
// be nil.
func (v SubOrchFailed) MarshalJSON() ([]byte, error) {
	d, err := MarshalErrorDetails(v.Details)
	if err != nil {
		return nil, fmt.Errorf("provider: marshal SubOrchFailed details: %w", err)
	}
	w := newObjWriter()
	w.str("parent_instance", v.ParentInstance)
	w.u64("parent_execution_id", v.ParentExecutionID)
	w.u64("parent_id", v.ParentID)
	w.raw("details", d)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"CancelInstance":{...}}.
func (v CancelInstance) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.str("reason", v.Reason)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"ContinueAsNew":{...}}: version is null
// when nil, carry_forward_events is always written ([] when empty), and
// initial_custom_status is omitted when nil.
func (v ContinueAsNew) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.str("orchestration", v.Orchestration)
	w.str("input", v.Input)
	w.strOrNull("version", v.Version)
	w.pairs("carry_forward_events", v.CarryForwardEvents)
	w.strOmitNil("initial_custom_status", v.InitialCustomStatus)
	return externallyTagged(v.Kind(), w.close()), nil
}

// MarshalJSON encodes the item as {"QueueMessage":{...}}.
func (v QueueMessage) MarshalJSON() ([]byte, error) {
	w := newObjWriter()
	w.str("instance", v.Instance)
	w.str("name", v.Name)
	w.str("data", v.Data)
	return externallyTagged(v.Kind(), w.close()), nil
}

// ---------------------------------------------------------------------------
// Shared helpers.

// derefSealed returns v with one level of pointer removed, so that a *T whose
// T implements one of the package's sealed interfaces is handled like T. ok
// is false for a nil interface or a nil pointer.
func derefSealed[I any](v I) (out I, ok bool) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return out, false
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return out, false
		}
		out, ok = rv.Elem().Interface().(I)
		return out, ok
	}
	return v, true
}

// objWriter builds one compact JSON object, member by member.
type objWriter struct {
	buf   []byte
	comma bool
}

func newObjWriter() *objWriter {
	return &objWriter{buf: append(make([]byte, 0, 128), '{')}
}

func (w *objWriter) key(k string) {
	if w.comma {
		w.buf = append(w.buf, ',')
	}
	w.comma = true
	w.buf = appendJSONString(w.buf, k)
	w.buf = append(w.buf, ':')
}

func (w *objWriter) str(k, v string) {
	w.key(k)
	w.buf = appendJSONString(w.buf, v)
}

// strOrNull writes v, or null when v is nil (an Option without skip).
func (w *objWriter) strOrNull(k string, v *string) {
	w.key(k)
	if v == nil {
		w.buf = append(w.buf, "null"...)
		return
	}
	w.buf = appendJSONString(w.buf, *v)
}

// strOmitNil writes v, or nothing when v is nil (skip_serializing_if).
func (w *objWriter) strOmitNil(k string, v *string) {
	if v != nil {
		w.str(k, *v)
	}
}

func (w *objWriter) u64(k string, v uint64) {
	w.key(k)
	w.buf = strconv.AppendUint(w.buf, v, 10)
}

func (w *objWriter) u64OrNull(k string, v *uint64) {
	if v == nil {
		w.key(k)
		w.buf = append(w.buf, "null"...)
		return
	}
	w.u64(k, *v)
}

func (w *objWriter) boolean(k string, v bool) {
	w.key(k)
	w.buf = strconv.AppendBool(w.buf, v)
}

// pairs writes a list of (name, data) tuples as [["n","d"],...].
func (w *objWriter) pairs(k string, v [][2]string) {
	w.key(k)
	w.buf = append(w.buf, '[')
	for i, p := range v {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = append(w.buf, '[')
		w.buf = appendJSONString(w.buf, p[0])
		w.buf = append(w.buf, ',')
		w.buf = appendJSONString(w.buf, p[1])
		w.buf = append(w.buf, ']')
	}
	w.buf = append(w.buf, ']')
}

// raw writes an already encoded JSON value.
func (w *objWriter) raw(k string, v []byte) {
	w.key(k)
	w.buf = append(w.buf, v...)
}

func (w *objWriter) close() []byte {
	return append(w.buf, '}')
}

// externallyTagged wraps an encoded value as {"tag":inner}.
func externallyTagged(tag string, inner []byte) []byte {
	b := make([]byte, 0, len(tag)+len(inner)+5)
	b = append(b, '{')
	b = appendJSONString(b, tag)
	b = append(b, ':')
	b = append(b, inner...)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way serde_json writes it:
// '"' and '\\' are backslash-escaped, \b \t \n \f \r use their short forms,
// the other control characters below 0x20 are \u00xx (lowercase hex), and
// everything else, including '<', '>', '&', DEL, U+2028 and U+2029, is
// written verbatim. Invalid UTF-8 (which a Rust String cannot hold) is
// replaced by U+FFFD, as encoding/json does when it decodes.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, string(utf8.RuneError)...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// parseExternallyTagged splits {"Tag":value} into the tag and the value. The
// object must have exactly one member.
func parseExternallyTagged(data []byte) (string, json.RawMessage, error) {
	obj, err := parseObject(data)
	if err != nil {
		return "", nil, err
	}
	if len(obj) != 1 {
		return "", nil, fmt.Errorf("expected an object with exactly one key (the variant), got %d keys", len(obj))
	}
	for tag, body := range obj {
		return tag, body, nil
	}
	return "", nil, errors.New("unreachable")
}

// trimJSONSpace removes the JSON whitespace around a raw value.
func trimJSONSpace(raw []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(raw) > 0 && isSpace(raw[0]) {
		raw = raw[1:]
	}
	for len(raw) > 0 && isSpace(raw[len(raw)-1]) {
		raw = raw[:len(raw)-1]
	}
	return raw
}

func isJSONNull(raw []byte) bool {
	return string(trimJSONSpace(raw)) == "null"
}

func decodeJSONString(raw []byte) (string, error) {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", errors.New("expected a string")
	}
	if s, ok := plainJSONString(raw); ok {
		return s, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("invalid string: %w", err)
	}
	return s, nil
}

// decodeJSONUint decodes a non-negative integer that fits in bits bits. Like
// serde, it rejects fractions, exponents and negative numbers.
func decodeJSONUint(raw []byte, bits int) (uint64, error) {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return 0, errors.New("expected an unsigned integer")
	}
	n, err := strconv.ParseUint(string(raw), 10, bits)
	if err != nil {
		return 0, fmt.Errorf("expected an unsigned %d-bit integer: %w", bits, err)
	}
	return n, nil
}

func decodeJSONBool(raw []byte) (bool, error) {
	switch string(trimJSONSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errors.New("expected a boolean")
}

// decodeJSONPairs decodes [["n","d"],...]; each element must be a
// two-element array of strings. An empty list gives an empty, non-nil slice.
func decodeJSONPairs(raw []byte) ([][2]string, error) {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errors.New("expected an array")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("invalid array: %w", err)
	}
	out := make([][2]string, 0, len(elems))
	for i, e := range elems {
		e = trimJSONSpace(e)
		if len(e) == 0 || e[0] != '[' {
			return nil, fmt.Errorf("element %d: expected a [name, data] array", i)
		}
		var pair []json.RawMessage
		if err := json.Unmarshal(e, &pair); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		if len(pair) != 2 {
			return nil, fmt.Errorf("element %d: expected 2 elements, got %d", i, len(pair))
		}
		var p [2]string
		for j := range p {
			s, err := decodeJSONString(pair[j])
			if err != nil {
				return nil, fmt.Errorf("element %d.%d: %w", i, j, err)
			}
			p[j] = s
		}
		out = append(out, p)
	}
	return out, nil
}

// fieldReader reads typed fields out of a jsonObject, keeping the first
// error so that a whole struct can be decoded in one expression.
type fieldReader struct {
	obj jsonObject
	err error
}

func (r *fieldReader) fail(k string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("field %q: %w", k, err)
	}
}

func (r *fieldReader) missing(k string) {
	if r.err == nil {
		r.err = fmt.Errorf("missing field %q", k)
	}
}

// str reads a required string.
func (r *fieldReader) str(k string) string {
	if r.err != nil {
		return ""
	}
	raw, ok := r.obj[k]
	if !ok {
		r.missing(k)
		return ""
	}
	s, err := decodeJSONString(raw)
	if err != nil {
		r.fail(k, err)
	}
	return s
}

// optStr reads an Option<String>: missing or null is nil.
func (r *fieldReader) optStr(k string) *string {
	if r.err != nil {
		return nil
	}
	raw, ok := r.obj[k]
	if !ok || isJSONNull(raw) {
		return nil
	}
	s, err := decodeJSONString(raw)
	if err != nil {
		r.fail(k, err)
		return nil
	}
	return &s
}

func (r *fieldReader) uint(k string, bits int, required bool) uint64 {
	if r.err != nil {
		return 0
	}
	raw, ok := r.obj[k]
	if !ok {
		if required {
			r.missing(k)
		}
		return 0
	}
	n, err := decodeJSONUint(raw, bits)
	if err != nil {
		r.fail(k, err)
	}
	return n
}

// u64 reads a required u64.
func (r *fieldReader) u64(k string) uint64 { return r.uint(k, 64, true) }

// u64Default reads a #[serde(default)] u64: missing is 0.
func (r *fieldReader) u64Default(k string) uint64 { return r.uint(k, 64, false) }

// u32 reads a required u32.
func (r *fieldReader) u32(k string) uint32 { return uint32(r.uint(k, 32, true)) }

// optU64 reads an Option<u64>: missing or null is nil.
func (r *fieldReader) optU64(k string) *uint64 {
	if r.err != nil {
		return nil
	}
	raw, ok := r.obj[k]
	if !ok || isJSONNull(raw) {
		return nil
	}
	n, err := decodeJSONUint(raw, 64)
	if err != nil {
		r.fail(k, err)
		return nil
	}
	return &n
}

// boolean reads a required bool.
func (r *fieldReader) boolean(k string) bool {
	if r.err != nil {
		return false
	}
	raw, ok := r.obj[k]
	if !ok {
		r.missing(k)
		return false
	}
	b, err := decodeJSONBool(raw)
	if err != nil {
		r.fail(k, err)
	}
	return b
}

// pairsDefault reads a #[serde(default)] Vec<(String,String)>: missing is nil.
func (r *fieldReader) pairsDefault(k string) [][2]string {
	if r.err != nil {
		return nil
	}
	raw, ok := r.obj[k]
	if !ok {
		return nil
	}
	p, err := decodeJSONPairs(raw)
	if err != nil {
		r.fail(k, err)
	}
	return p
}

// optPairs reads an Option<Vec<(String,String)>>: missing or null is nil, an
// empty list is an empty, non-nil slice.
func (r *fieldReader) optPairs(k string) [][2]string {
	if r.err != nil {
		return nil
	}
	raw, ok := r.obj[k]
	if !ok || isJSONNull(raw) {
		return nil
	}
	p, err := decodeJSONPairs(raw)
	if err != nil {
		r.fail(k, err)
	}
	return p
}

// details reads a required ErrorDetails.
func (r *fieldReader) details(k string) ErrorDetails {
	if r.err != nil {
		return nil
	}
	raw, ok := r.obj[k]
	if !ok {
		r.missing(k)
		return nil
	}
	d, err := unmarshalErrorDetails(raw)
	if err != nil {
		r.fail(k, err)
		return nil
	}
	return d
}
