package provider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// jtPtr returns a pointer to v (test helper for optional fields).
func jtPtr[T any](v T) *T { return &v }

// jtLines reads the non-empty lines of a testdata file.
func jtLines(tb testing.TB, name string) [][]byte {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			lines = append(lines, bytes.Clone(l))
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("read %s: %v", name, err)
	}
	return lines
}

// jtEvent builds an Event with the common fields the §3.2 examples share.
func jtEvent(id uint64, src *uint64, exec, ts uint64, k EventKind) Event {
	return Event{
		EventID:         id,
		SourceEventID:   src,
		InstanceID:      "order-1",
		ExecutionID:     exec,
		TimestampMs:     ts,
		DuroxideVersion: "0.1.26",
		Kind:            k,
	}
}

// The expected Go values of testdata/workitems.jsonl, line by line.
var goldenWorkItems = []WorkItem{
	StartOrchestration{Instance: "order-1", Orchestration: "TestOrch", Input: "{}", Version: jtPtr("1.0.0"), ExecutionID: 1},
	StartOrchestration{Instance: "order-1::sub::4", Orchestration: "Child", Input: "{}", ParentInstance: jtPtr("order-1"), ParentID: jtPtr(uint64(4)), ExecutionID: 1},
	ActivityExecute{Instance: "order-1", ExecutionID: 1, ID: 2, Name: "Charge", Input: `{"amount":5}`},
	ActivityExecute{Instance: "order-1", ExecutionID: 1, ID: 3, Name: "Render", Input: "{}", SessionID: jtPtr("s-42"), Tag: jtPtr("gpu")},
	ActivityCompleted{Instance: "order-1", ExecutionID: 1, ID: 2, Result: `"ok"`},
	ActivityFailed{Instance: "order-1", ExecutionID: 1, ID: 2, Details: ApplicationError{Kind: AppActivityFailed, Message: "card declined"}},
	TimerFired{Instance: "order-1", ExecutionID: 1, ID: 5, FireAtMs: 1767225600000},
	ExternalRaised{Instance: "order-1", Name: "Approve", Data: `{"by":"bob"}`},
	SubOrchCompleted{ParentInstance: "order-1", ParentExecutionID: 1, ParentID: 4, Result: `"done"`},
	SubOrchFailed{ParentInstance: "order-1", ParentExecutionID: 1, ParentID: 4, Details: ApplicationError{Kind: AppOrchestrationFailed, Message: "child blew up"}},
	CancelInstance{Instance: "order-1", Reason: "user requested"},
	ContinueAsNew{Instance: "order-1", Orchestration: "TestOrch", Input: `{"page":2}`, Version: jtPtr("1.0.0")},
	ContinueAsNew{Instance: "order-1", Orchestration: "TestOrch", Input: "{}", CarryForwardEvents: [][2]string{{"ConfigUpdate", "v2"}}, InitialCustomStatus: jtPtr("50%")},
	QueueMessage{Instance: "order-1", Name: "ConfigUpdate", Data: "v3"},
}

// The expected Go values of testdata/events.jsonl, line by line.
var goldenEvents = []Event{
	jtEvent(1, nil, 1, 1767225600000, OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"}),
	jtEvent(1, nil, 2, 1767225600500, OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: `{"page":2}`,
		CarryForwardEvents: [][2]string{{"ConfigUpdate", "v2"}}, InitialCustomStatus: jtPtr("50%")}),
	jtEvent(2, nil, 1, 1767225600010, ActivityScheduled{Name: "Charge", Input: `{"amount":5}`}),
	jtEvent(3, nil, 1, 1767225600010, ActivityScheduled{Name: "Render", Input: "{}", SessionID: jtPtr("s-42"), Tag: jtPtr("gpu")}),
	jtEvent(4, jtPtr(uint64(2)), 1, 1767225601000, ActivityCompletedEvent{Result: `"ok"`}),
	jtEvent(5, jtPtr(uint64(3)), 1, 1767225601000, ActivityFailedEvent{Details: ApplicationError{Kind: AppActivityFailed, Message: "gpu busy"}}),
	jtEvent(6, nil, 1, 1767225601000, TimerCreated{FireAtMs: 1767225661000}),
	jtEvent(7, jtPtr(uint64(6)), 1, 1767225661005, TimerFiredEvent{FireAtMs: 1767225661000}),
	jtEvent(8, nil, 1, 1767225661006, ExternalSubscribed{Name: "Approve"}),
	jtEvent(9, nil, 1, 1767225700000, ExternalEvent{Name: "Approve", Data: "{}"}),
	jtEvent(10, nil, 1, 1767225700001, SubOrchestrationScheduled{Name: "Child", Instance: "order-1::sub::10", Input: "{}"}),
	jtEvent(11, jtPtr(uint64(10)), 1, 1767225702000, SubOrchestrationCompleted{Result: `"child ok"`}),
	jtEvent(12, nil, 1, 1767225702001, CustomStatusUpdated{Status: jtPtr("50%")}),
	jtEvent(13, nil, 1, 1767225702002, CustomStatusUpdated{}),
	jtEvent(14, nil, 1, 1767225702003, KeyValueSet{Key: "counter", Value: "1", LastUpdatedAtMs: 1767225702003}),
	jtEvent(15, nil, 1, 1767225702004, KeyValueCleared{Key: "counter"}),
	jtEvent(16, nil, 1, 1767225702005, KeyValuesCleared{}),
	jtEvent(17, nil, 1, 1767225702006, QueueEventDelivered{Name: "ConfigUpdate", Data: "v3"}),
	jtEvent(18, nil, 1, 1767225702007, OrchestrationContinuedAsNew{Input: `{"page":2}`}),
	jtEvent(19, nil, 1, 1767225702008, OrchestrationCompleted{Output: `"done"`}),
	jtEvent(99999, nil, 1, 1767225702009, OrchestrationFailed{Details: PoisonError{
		AttemptCount: 11, MaxAttempts: 10,
		MessageType: PoisonMessageType{Kind: "FailedDeserialization", Instance: "order-1", ExecutionID: 1, Error: "Failed to deserialize history: ..."},
		Message:     "Failed to deserialize history: ...",
	}}),
}

// The expected Go values of testdata/errordetails.jsonl, line by line.
var goldenErrorDetails = []ErrorDetails{
	ApplicationError{Kind: AppCancelled("user"), Message: ""},
	ConfigurationError{Kind: ConfigNondeterminism, Resource: "MyOrch"},
	InfrastructureError{Operation: "ack_orchestration_item", Message: "Database locked: ...", Retryable: true},
}

func TestWorkItemGolden(t *testing.T) {
	lines := jtLines(t, "workitems.jsonl")
	if len(lines) != len(goldenWorkItems) {
		t.Fatalf("workitems.jsonl has %d lines, want %d", len(lines), len(goldenWorkItems))
	}
	seen := map[string]bool{}
	for i, line := range lines {
		want := goldenWorkItems[i]
		seen[want.Kind()] = true
		got, err := UnmarshalWorkItem(line)
		if err != nil {
			t.Errorf("line %d: UnmarshalWorkItem: %v", i+1, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line %d: decoded\n %#v\nwant\n %#v", i+1, got, want)
		}
		for name, enc := range map[string]func() ([]byte, error){
			"MarshalWorkItem(decoded)":  func() ([]byte, error) { return MarshalWorkItem(got) },
			"MarshalWorkItem(expected)": func() ([]byte, error) { return MarshalWorkItem(want) },
			"MarshalJSON(expected)":     want.(json.Marshaler).MarshalJSON,
		} {
			b, err := enc()
			if err != nil {
				t.Errorf("line %d: %s: %v", i+1, name, err)
				continue
			}
			if !bytes.Equal(b, line) {
				t.Errorf("line %d: %s\n got %s\nwant %s", i+1, name, b, line)
			}
		}
	}
	// Every variant except ExternalRaised2 (feature-gated, not ported) appears.
	if len(seen) != 11 {
		t.Errorf("golden work items cover %d variants, want 11: %v", len(seen), seen)
	}
}

func TestEventGolden(t *testing.T) {
	lines := jtLines(t, "events.jsonl")
	if len(lines) != len(goldenEvents) {
		t.Fatalf("events.jsonl has %d lines, want %d", len(lines), len(goldenEvents))
	}
	for i, line := range lines {
		want := goldenEvents[i]
		var got Event
		if err := json.Unmarshal(line, &got); err != nil {
			t.Errorf("line %d: Unmarshal: %v", i+1, err)
			continue
		}
		if !bytes.Equal(got.Raw, line) {
			t.Errorf("line %d: Raw = %s, want the input", i+1, got.Raw)
		}
		if !reflect.DeepEqual(got.WithoutRaw(), want) {
			t.Errorf("line %d: decoded\n %#v\nwant\n %#v", i+1, got.WithoutRaw(), want)
		}
		if got.Kind.Type() != want.Kind.Type() {
			t.Errorf("line %d: Type() = %q, want %q", i+1, got.Kind.Type(), want.Kind.Type())
		}
		for name, ev := range map[string]Event{"decoded": got, "decoded without Raw": got.WithoutRaw(), "expected": want} {
			b, err := ev.MarshalJSON()
			if err != nil {
				t.Errorf("line %d: MarshalJSON(%s): %v", i+1, name, err)
				continue
			}
			if !bytes.Equal(b, line) {
				t.Errorf("line %d: MarshalJSON(%s)\n got %s\nwant %s", i+1, name, b, line)
			}
		}
	}
}

func TestErrorDetailsGolden(t *testing.T) {
	lines := jtLines(t, "errordetails.jsonl")
	if len(lines) != len(goldenErrorDetails) {
		t.Fatalf("errordetails.jsonl has %d lines, want %d", len(lines), len(goldenErrorDetails))
	}
	for i, line := range lines {
		want := goldenErrorDetails[i]
		got, err := UnmarshalErrorDetails(line)
		if err != nil {
			t.Errorf("line %d: %v", i+1, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("line %d: decoded %#v, want %#v", i+1, got, want)
		}
		b, err := MarshalErrorDetails(want)
		if err != nil {
			t.Errorf("line %d: MarshalErrorDetails: %v", i+1, err)
			continue
		}
		if !bytes.Equal(b, line) {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, b, line)
		}
	}
}

// jtAllErrorDetails has every ErrorDetails shape.
var jtAllErrorDetails = []ErrorDetails{
	InfrastructureError{Operation: "fetch", Message: "disk <full> & sad", Retryable: true},
	InfrastructureError{},
	ConfigurationError{Kind: ConfigNondeterminism, Resource: "R", Message: jtPtr("m")},
	ConfigurationError{Kind: ConfigNondeterminism, Resource: "R", Message: jtPtr("")},
	ConfigurationError{Kind: ConfigNondeterminism},
	ApplicationError{Kind: AppActivityFailed, Message: "a", Retryable: true},
	ApplicationError{Kind: AppOrchestrationFailed, Message: "o"},
	ApplicationError{Kind: AppPanicked, Message: "p"},
	ApplicationError{Kind: AppCancelled("why"), Message: "c"},
	ApplicationError{Kind: AppCancelled("")},
	PoisonError{AttemptCount: 4294967295, MaxAttempts: 3, MessageType: PoisonMessageType{Kind: "Orchestration", Instance: "i", ExecutionID: 2}, Message: "{}"},
	PoisonError{AttemptCount: 5, MaxAttempts: 3, MessageType: PoisonMessageType{Kind: "Activity", Instance: "i", ExecutionID: 1, ActivityName: "Act", ActivityID: 7}, Message: "m"},
	PoisonError{AttemptCount: 5, MaxAttempts: 3, MessageType: PoisonMessageType{Kind: "FailedDeserialization", Instance: "i", ExecutionID: 1, Error: "e"}, Message: "m"},
}

func TestErrorDetailsRoundTrip(t *testing.T) {
	for _, d := range jtAllErrorDetails {
		b, err := MarshalErrorDetails(d)
		if err != nil {
			t.Errorf("%#v: marshal: %v", d, err)
			continue
		}
		got, err := UnmarshalErrorDetails(b)
		if err != nil {
			t.Errorf("%s: unmarshal: %v", b, err)
			continue
		}
		if !reflect.DeepEqual(got, d) {
			t.Errorf("%s: round trip gave %#v, want %#v", b, got, d)
		}
	}
}

func TestErrorDetailsShapes(t *testing.T) {
	tests := []struct {
		d    ErrorDetails
		want string
	}{
		{ApplicationError{Kind: AppPanicked, Message: "boom"}, `{"Application":{"kind":"Panicked","message":"boom","retryable":false}}`},
		{ConfigurationError{Kind: ConfigNondeterminism, Resource: "R", Message: jtPtr("x")}, `{"Configuration":{"kind":"Nondeterminism","resource":"R","message":"x"}}`},
		{PoisonError{AttemptCount: 2, MaxAttempts: 1, MessageType: PoisonMessageType{Kind: "Orchestration", Instance: "i", ExecutionID: 3}, Message: "m"},
			`{"Poison":{"attempt_count":2,"max_attempts":1,"message_type":{"Orchestration":{"instance":"i","execution_id":3}},"message":"m"}}`},
		{PoisonError{AttemptCount: 2, MaxAttempts: 1, MessageType: PoisonMessageType{Kind: "Activity", Instance: "i", ExecutionID: 3, ActivityName: "A", ActivityID: 9}, Message: "m"},
			`{"Poison":{"attempt_count":2,"max_attempts":1,"message_type":{"Activity":{"instance":"i","execution_id":3,"activity_name":"A","activity_id":9}},"message":"m"}}`},
		{&InfrastructureError{Operation: "o", Message: "m"}, `{"Infrastructure":{"operation":"o","message":"m","retryable":false}}`},
	}
	for _, tt := range tests {
		b, err := MarshalErrorDetails(tt.d)
		if err != nil {
			t.Errorf("%#v: %v", tt.d, err)
			continue
		}
		if string(b) != tt.want {
			t.Errorf("got  %s\nwant %s", b, tt.want)
		}
	}
}

func TestErrorDetailsErrors(t *testing.T) {
	marshalBad := []ErrorDetails{
		nil,
		(*ApplicationError)(nil),
		ApplicationError{},
		ApplicationError{Kind: AppErrorKind{Name: "Weird"}},
		ConfigurationError{Kind: "Other"},
		PoisonError{MessageType: PoisonMessageType{Kind: "Nope"}},
	}
	for _, d := range marshalBad {
		if b, err := MarshalErrorDetails(d); err == nil {
			t.Errorf("MarshalErrorDetails(%#v) = %s, want error", d, b)
		}
	}
	unmarshalBad := []string{
		``,
		`null`,
		`"Infrastructure"`,
		`{}`,
		`{"Infrastructure":{"operation":"o","message":"m","retryable":true},"Application":{}}`,
		`{"Unknown":{}}`,
		`{"Infrastructure":{"operation":"o","message":"m"}}`,
		`{"Infrastructure":{"operation":"o","message":"m","retryable":"yes"}}`,
		`{"Configuration":{"kind":"Other","resource":"r","message":null}}`,
		`{"Application":{"kind":"Cancelled","message":"","retryable":false}}`,
		`{"Application":{"kind":{"Panicked":{}},"message":"","retryable":false}}`,
		`{"Application":{"kind":{"Cancelled":{}},"message":"","retryable":false}}`,
		`{"Application":{"message":"","retryable":false}}`,
		`{"Poison":{"attempt_count":4294967296,"max_attempts":1,"message_type":{"Orchestration":{"instance":"i","execution_id":1}},"message":"m"}}`,
		`{"Poison":{"attempt_count":1,"max_attempts":1,"message_type":{"Other":{"instance":"i","execution_id":1}},"message":"m"}}`,
		`{"Poison":{"attempt_count":1,"max_attempts":1,"message_type":{"Activity":{"instance":"i","execution_id":1}},"message":"m"}}`,
		`{"Poison":{"attempt_count":1,"max_attempts":1,"message":"m"}}`,
	}
	for _, s := range unmarshalBad {
		if d, err := UnmarshalErrorDetails([]byte(s)); err == nil {
			t.Errorf("UnmarshalErrorDetails(%s) = %#v, want error", s, d)
		}
	}
}

func TestErrorDetailsMethods(t *testing.T) {
	tests := []struct {
		d         ErrorDetails
		category  string
		display   string
		retryable bool
	}{
		{InfrastructureError{Operation: "ack_orchestration_item", Message: "locked", Retryable: true}, "infrastructure", "infrastructure:ack_orchestration_item: locked", true},
		{InfrastructureError{Operation: "read", Message: "corrupt"}, "infrastructure", "infrastructure:read: corrupt", false},
		{ConfigurationError{Kind: ConfigNondeterminism, Resource: "MyOrch", Message: jtPtr("history mismatch")}, "configuration", "nondeterministic: history mismatch", false},
		{ConfigurationError{Kind: ConfigNondeterminism, Resource: "MyOrch"}, "configuration", "nondeterministic in MyOrch", false},
		{ApplicationError{Kind: AppCancelled("user"), Message: "ignored"}, "application", "canceled: user", false},
		{ApplicationError{Kind: AppPanicked, Message: "index out of range"}, "application", "orchestration panicked: index out of range", false},
		{ApplicationError{Kind: AppActivityFailed, Message: "card declined", Retryable: true}, "application", "card declined", true},
		{ApplicationError{Kind: AppOrchestrationFailed, Message: "child blew up"}, "application", "child blew up", false},
		{PoisonError{AttemptCount: 11, MaxAttempts: 10, MessageType: PoisonMessageType{Kind: "Orchestration", Instance: "order-1", ExecutionID: 1}},
			"poison", "poison: orchestration order-1 exceeded 11 attempts (max 10)", false},
		{PoisonError{AttemptCount: 4, MaxAttempts: 3, MessageType: PoisonMessageType{Kind: "Activity", Instance: "order-1", ExecutionID: 1, ActivityName: "Charge", ActivityID: 2}},
			"poison", "poison: activity Charge#2 exceeded 4 attempts (max 3)", false},
		{PoisonError{AttemptCount: 11, MaxAttempts: 10, MessageType: PoisonMessageType{Kind: "FailedDeserialization", Instance: "order-1", ExecutionID: 1, Error: "unknown variant"}},
			"poison", "poison: orchestration order-1 history deserialization failed after 11 attempts (max 10): unknown variant", false},
	}
	for _, tt := range tests {
		if got := tt.d.Category(); got != tt.category {
			t.Errorf("%#v: Category() = %q, want %q", tt.d, got, tt.category)
		}
		if got := tt.d.DisplayMessage(); got != tt.display {
			t.Errorf("%#v: DisplayMessage() = %q, want %q", tt.d, got, tt.display)
		}
		if got := tt.d.IsRetryable(); got != tt.retryable {
			t.Errorf("%#v: IsRetryable() = %v, want %v", tt.d, got, tt.retryable)
		}
	}
}

func TestAppErrorKindAndPoisonMessageTypeJSON(t *testing.T) {
	for _, k := range []AppErrorKind{AppActivityFailed, AppOrchestrationFailed, AppPanicked, AppCancelled("r")} {
		b, err := json.Marshal(k)
		if err != nil {
			t.Fatalf("Marshal(%#v): %v", k, err)
		}
		var got AppErrorKind
		if err := json.Unmarshal(b, &got); err != nil || got != k {
			t.Errorf("round trip of %s gave %#v, %v", b, got, err)
		}
	}
	var mt PoisonMessageType
	if err := json.Unmarshal([]byte(`{"Orchestration":{"instance":"i","execution_id":1}}`), &mt); err != nil {
		t.Fatal(err)
	}
	if want := (PoisonMessageType{Kind: "Orchestration", Instance: "i", ExecutionID: 1}); mt != want {
		t.Errorf("got %#v, want %#v", mt, want)
	}
}

// jtAllWorkItems has every WorkItem variant, with optional fields both nil and set.
var jtAllWorkItems = []WorkItem{
	StartOrchestration{},
	StartOrchestration{Instance: "a", Orchestration: "O", Input: "in", Version: jtPtr("2.0.0"), ParentInstance: jtPtr("p"), ParentID: jtPtr(uint64(0)), ExecutionID: 18446744073709551615},
	StartOrchestration{Instance: "a", Orchestration: "O", Input: "in", Version: jtPtr(""), ExecutionID: 1},
	ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "N", Input: "x"},
	ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "N", Input: "x", SessionID: jtPtr("s")},
	ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "N", Input: "x", Tag: jtPtr("t")},
	ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "N", Input: "x", SessionID: jtPtr(""), Tag: jtPtr("")},
	ActivityCompleted{Instance: "a", ExecutionID: 3, ID: 4, Result: "r"},
	TimerFired{Instance: "a", ExecutionID: 1, ID: 5, FireAtMs: 99},
	ExternalRaised{Instance: "a", Name: "n", Data: "d"},
	SubOrchCompleted{ParentInstance: "p", ParentExecutionID: 2, ParentID: 3, Result: "r"},
	CancelInstance{Instance: "a", Reason: "r"},
	ContinueAsNew{Instance: "a", Orchestration: "O", Input: "i"},
	ContinueAsNew{Instance: "a", Orchestration: "O", Input: "i", Version: jtPtr("1"), CarryForwardEvents: [][2]string{{"a", "b"}, {"", ""}}, InitialCustomStatus: jtPtr("")},
	QueueMessage{Instance: "a", Name: "n", Data: "d"},
}

func TestWorkItemRoundTrip(t *testing.T) {
	items := append([]WorkItem(nil), jtAllWorkItems...)
	for _, d := range jtAllErrorDetails {
		items = append(items,
			ActivityFailed{Instance: "a", ExecutionID: 1, ID: 2, Details: d},
			SubOrchFailed{ParentInstance: "p", ParentExecutionID: 1, ParentID: 2, Details: d})
	}
	for _, w := range items {
		b, err := MarshalWorkItem(w)
		if err != nil {
			t.Errorf("%#v: marshal: %v", w, err)
			continue
		}
		got, err := UnmarshalWorkItem(b)
		if err != nil {
			t.Errorf("%s: unmarshal: %v", b, err)
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s: round trip gave\n %#v\nwant\n %#v", b, got, w)
		}
		if got.Kind() != w.Kind() || !strings.HasPrefix(string(b), `{"`+w.Kind()+`":{`) {
			t.Errorf("%s: not tagged with %q", b, w.Kind())
		}
	}
}

func TestWorkItemShapes(t *testing.T) {
	tests := []struct {
		w    WorkItem
		want string
	}{
		{ContinueAsNew{Instance: "a", Orchestration: "O", Input: "i", CarryForwardEvents: [][2]string{}},
			`{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":[]}}`},
		{ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "N", Input: "x", Tag: jtPtr("t")},
			`{"ActivityExecute":{"instance":"a","execution_id":1,"id":2,"name":"N","input":"x","tag":"t"}}`},
		{StartOrchestration{Instance: "a", ParentID: jtPtr(uint64(0))},
			`{"StartOrchestration":{"instance":"a","orchestration":"","input":"","version":null,"parent_instance":null,"parent_id":0,"execution_id":0}}`},
		// Pointers to variants are accepted too.
		{&CancelInstance{Instance: "a", Reason: "r"}, `{"CancelInstance":{"instance":"a","reason":"r"}}`},
	}
	for _, tt := range tests {
		b, err := MarshalWorkItem(tt.w)
		if err != nil {
			t.Errorf("%#v: %v", tt.w, err)
			continue
		}
		if string(b) != tt.want {
			t.Errorf("got  %s\nwant %s", b, tt.want)
		}
	}
}

func TestWorkItemDecodeLenient(t *testing.T) {
	tests := []struct {
		in   string
		want WorkItem
	}{
		// carry_forward_events missing -> empty; Option fields missing -> nil.
		{`{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i"}}`,
			ContinueAsNew{Instance: "a", Orchestration: "O", Input: "i"}},
		{`{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":[],"initial_custom_status":null}}`,
			ContinueAsNew{Instance: "a", Orchestration: "O", Input: "i"}},
		{`{"StartOrchestration":{"instance":"a","orchestration":"O","input":"i","execution_id":1}}`,
			StartOrchestration{Instance: "a", Orchestration: "O", Input: "i", ExecutionID: 1}},
		// Unknown fields are ignored; order and whitespace do not matter.
		{` { "QueueMessage" : { "data" : "d", "future" : {"x":[1,2]}, "name":"n", "instance":"a" } } `,
			QueueMessage{Instance: "a", Name: "n", Data: "d"}},
		{`{"ActivityExecute":{"instance":"a","execution_id":1,"id":2,"name":"N","input":"x","session_id":null,"tag":null,"extra":true}}`,
			ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "N", Input: "x"}},
		// Escapes are decoded.
		{`{"ExternalRaised":{"instance":"a\u00e9","name":"\"n\"","data":"\u003c\/\u2028"}}`,
			ExternalRaised{Instance: "aé", Name: `"n"`, Data: "</\u2028"}},
	}
	for _, tt := range tests {
		got, err := UnmarshalWorkItem([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestWorkItemDecodeErrors(t *testing.T) {
	bad := map[string]string{
		"empty input":        ``,
		"malformed":          `{"CancelInstance":{"instance":"a","reason":"r"}`,
		"trailing garbage":   `{"CancelInstance":{"instance":"a","reason":"r"}} x`,
		"two values":         `{"CancelInstance":{"instance":"a","reason":"r"}}{}`,
		"not an object":      `["CancelInstance"]`,
		"null":               `null`,
		"unit variant form":  `"CancelInstance"`,
		"no key":             `{}`,
		"unknown variant":    `{"Frobnicate":{"instance":"a"}}`,
		"feature variant":    `{"ExternalRaised2":{"instance":"a","name":"n","topic":"t","data":"d"}}`,
		"two keys":           `{"CancelInstance":{"instance":"a","reason":"r"},"QueueMessage":{"instance":"a","name":"n","data":"d"}}`,
		"duplicate variant":  `{"CancelInstance":{"instance":"a","reason":"r"},"CancelInstance":{"instance":"a","reason":"r"}}`,
		"body not object":    `{"CancelInstance":["a","r"]}`,
		"body null":          `{"CancelInstance":null}`,
		"missing field":      `{"CancelInstance":{"instance":"a"}}`,
		"null required":      `{"CancelInstance":{"instance":null,"reason":"r"}}`,
		"wrong type":         `{"CancelInstance":{"instance":1,"reason":"r"}}`,
		"duplicate field":    `{"CancelInstance":{"instance":"a","instance":"b","reason":"r"}}`,
		"negative number":    `{"TimerFired":{"instance":"a","execution_id":-1,"id":1,"fire_at_ms":1}}`,
		"float number":       `{"TimerFired":{"instance":"a","execution_id":1.0,"id":1,"fire_at_ms":1}}`,
		"exponent":           `{"TimerFired":{"instance":"a","execution_id":1e2,"id":1,"fire_at_ms":1}}`,
		"u64 overflow":       `{"TimerFired":{"instance":"a","execution_id":18446744073709551616,"id":1,"fire_at_ms":1}}`,
		"string number":      `{"TimerFired":{"instance":"a","execution_id":"1","id":1,"fire_at_ms":1}}`,
		"carry null":         `{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":null}}`,
		"carry triple":       `{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":[["a","b","c"]]}}`,
		"carry single":       `{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":[["a"]]}}`,
		"carry object":       `{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":[{"a":"b"}]}}`,
		"carry number":       `{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i","version":null,"carry_forward_events":[["a",1]]}}`,
		"details missing":    `{"ActivityFailed":{"instance":"a","execution_id":1,"id":2}}`,
		"details bad":        `{"ActivityFailed":{"instance":"a","execution_id":1,"id":2,"details":{"Nope":{}}}}`,
		"optional wrongtype": `{"ActivityExecute":{"instance":"a","execution_id":1,"id":2,"name":"N","input":"x","tag":5}}`,
	}
	for name, in := range bad {
		if w, err := UnmarshalWorkItem([]byte(in)); err == nil {
			t.Errorf("%s: UnmarshalWorkItem(%s) = %#v, want error", name, in, w)
		}
	}
}

func TestWorkItemMarshalErrors(t *testing.T) {
	bad := []WorkItem{
		nil,
		(*StartOrchestration)(nil),
		ActivityFailed{Instance: "a"},
		SubOrchFailed{ParentInstance: "p"},
		ActivityFailed{Instance: "a", Details: ApplicationError{}},
	}
	for _, w := range bad {
		if b, err := MarshalWorkItem(w); err == nil {
			t.Errorf("MarshalWorkItem(%#v) = %s, want error", w, b)
		}
	}
}

// jtAllEventKinds has every EventKind variant, with optional fields both nil and set.
var jtAllEventKinds = []EventKind{
	OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "i"},
	OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "i", ParentInstance: jtPtr("p"), ParentID: jtPtr(uint64(3)),
		CarryForwardEvents: [][2]string{{"n", "d"}}, InitialCustomStatus: jtPtr("s")},
	OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "i", CarryForwardEvents: [][2]string{}},
	OrchestrationCompleted{Output: "o"},
	OrchestrationFailed{Details: ApplicationError{Kind: AppPanicked, Message: "m"}},
	ActivityScheduled{Name: "A", Input: "i"},
	ActivityScheduled{Name: "A", Input: "i", SessionID: jtPtr("s"), Tag: jtPtr("t")},
	ActivityScheduled{Name: "A", Input: "i", Tag: jtPtr("t")},
	ActivityCompletedEvent{Result: "r"},
	ActivityFailedEvent{Details: InfrastructureError{Operation: "o", Message: "m", Retryable: true}},
	ActivityCancelRequested{Reason: "r"},
	TimerCreated{FireAtMs: 1},
	TimerFiredEvent{FireAtMs: 2},
	ExternalSubscribed{Name: "n"},
	ExternalEvent{Name: "n", Data: "d"},
	OrchestrationChained{Name: "n", Instance: "i", Input: "x"},
	SubOrchestrationScheduled{Name: "n", Instance: "i", Input: "x"},
	SubOrchestrationCompleted{Result: "r"},
	SubOrchestrationFailed{Details: ConfigurationError{Kind: ConfigNondeterminism, Resource: "r"}},
	SubOrchestrationCancelRequested{Reason: "r"},
	OrchestrationContinuedAsNew{Input: "i"},
	OrchestrationCancelRequested{Reason: "r"},
	ExternalSubscribedCancelled{Reason: "r"},
	QueueSubscribed{Name: "n"},
	QueueEventDelivered{Name: "n", Data: "d"},
	QueueSubscriptionCancelled{Reason: "r"},
	CustomStatusUpdated{Status: jtPtr("s")},
	CustomStatusUpdated{},
	KeyValueSet{Key: "k", Value: "v", LastUpdatedAtMs: 5},
	KeyValueSet{Key: "k", Value: "v"},
	KeyValueCleared{Key: "k"},
	KeyValuesCleared{},
}

func TestEventKindRoundTrip(t *testing.T) {
	kinds := append([]EventKind(nil), jtAllEventKinds...)
	for _, d := range jtAllErrorDetails {
		kinds = append(kinds, OrchestrationFailed{Details: d}, ActivityFailedEvent{Details: d}, SubOrchestrationFailed{Details: d})
	}
	types := map[string]bool{}
	for i, k := range kinds {
		types[k.Type()] = true
		for _, src := range []*uint64{nil, jtPtr(uint64(i))} {
			e := Event{EventID: uint64(i + 1), SourceEventID: src, InstanceID: "inst", ExecutionID: 2, TimestampMs: 1700000000000, DuroxideVersion: "0.1.26", Kind: k}
			b, err := e.MarshalJSON()
			if err != nil {
				t.Errorf("%#v: marshal: %v", k, err)
				continue
			}
			var got Event
			if err := got.UnmarshalJSON(b); err != nil {
				t.Errorf("%s: unmarshal: %v", b, err)
				continue
			}
			if !bytes.Equal(got.Raw, b) {
				t.Errorf("%s: Raw = %s", b, got.Raw)
			}
			if !reflect.DeepEqual(got.WithoutRaw(), e) {
				t.Errorf("%s: round trip gave\n %#v\nwant\n %#v", b, got.WithoutRaw(), e)
			}
			if !strings.Contains(string(b), `,"type":"`+k.Type()+`"`) {
				t.Errorf("%s: type tag %q not found", b, k.Type())
			}
		}
	}
	if len(types) != 26 {
		t.Errorf("covered %d event types, want 26", len(types))
	}
}

func TestEventShapes(t *testing.T) {
	e := Event{EventID: 1, InstanceID: "i", ExecutionID: 1, DuroxideVersion: "0.1.26", Kind: QueueSubscribed{Name: "n"}}
	tests := []struct {
		k    EventKind
		want string
	}{
		{QueueSubscribed{Name: "n"}, `"type":"ExternalSubscribedPersistent","name":"n"}`},
		{QueueSubscriptionCancelled{Reason: "r"}, `"type":"ExternalSubscribedPersistentCancelled","reason":"r"}`},
		{QueueEventDelivered{Name: "n", Data: "d"}, `"type":"ExternalEventPersistent","name":"n","data":"d"}`},
		{OrchestrationStarted{Name: "n", Version: "v", Input: "i", CarryForwardEvents: [][2]string{}}, `"type":"OrchestrationStarted","name":"n","version":"v","input":"i","parent_instance":null,"parent_id":null,"carry_forward_events":[]}`},
		{ActivityScheduled{Name: "n", Input: "i", SessionID: jtPtr("s")}, `"type":"ActivityScheduled","name":"n","input":"i","session_id":"s"}`},
		{&KeyValuesCleared{}, `"type":"KeyValuesCleared"}`},
	}
	const prefix = `{"event_id":1,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":0,"duroxide_version":"0.1.26",`
	for _, tt := range tests {
		e.Kind = tt.k
		b, err := e.MarshalJSON()
		if err != nil {
			t.Errorf("%#v: %v", tt.k, err)
			continue
		}
		if want := prefix + tt.want; string(b) != want {
			t.Errorf("got  %s\nwant %s", b, want)
		}
	}
}

func TestEventRawPreservation(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Event
	}{
		{
			name: "unknown type",
			in:   `{"event_id":20,"source_event_id":null,"instance_id":"order-1","execution_id":1,"timestamp_ms":1767225702010,"duroxide_version":"0.9.0","type":"FutureThing","x":[1,2]}`,
			want: Event{EventID: 20, InstanceID: "order-1", ExecutionID: 1, TimestampMs: 1767225702010, DuroxideVersion: "0.9.0", Kind: UnknownEvent{TypeName: "FutureThing"}},
		},
		{
			name: "known type, unknown fields, odd spacing and order",
			in: "{ \"type\" : \"ActivityCompleted\",\n\t\"result\":\"\\u0022ok\\u0022 <&>\", \"event_id\":4,\"source_event_id\" : 2 ,\"future_field\":{\"a\":null}," +
				"\"instance_id\":\"order-1\",\"execution_id\":1,\"timestamp_ms\":1767225601000,\"duroxide_version\":\"0.2.0\" }",
			want: Event{EventID: 4, SourceEventID: jtPtr(uint64(2)), InstanceID: "order-1", ExecutionID: 1, TimestampMs: 1767225601000, DuroxideVersion: "0.2.0",
				Kind: ActivityCompletedEvent{Result: `"ok" <&>`}},
		},
		{
			name: "missing optional fields",
			in:   `{"event_id":14,"instance_id":"order-1","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.1.20","type":"KeyValueSet","key":"k","value":"v"}`,
			want: Event{EventID: 14, InstanceID: "order-1", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.20", Kind: KeyValueSet{Key: "k", Value: "v"}},
		},
		{
			name: "custom status missing",
			in:   `{"event_id":1,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.1.26","type":"CustomStatusUpdated"}`,
			want: Event{EventID: 1, InstanceID: "i", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: CustomStatusUpdated{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Event
			if err := e.UnmarshalJSON([]byte(tt.in)); err != nil {
				t.Fatalf("UnmarshalJSON: %v", err)
			}
			if !reflect.DeepEqual(e.WithoutRaw(), tt.want) {
				t.Errorf("decoded\n %#v\nwant\n %#v", e.WithoutRaw(), tt.want)
			}
			out, err := e.MarshalJSON()
			if err != nil {
				t.Fatalf("MarshalJSON: %v", err)
			}
			if string(out) != tt.in {
				t.Errorf("round trip changed the bytes:\n got %s\nwant %s", out, tt.in)
			}
			// Through json.Unmarshal of a slice, too.
			var evs []Event
			if err := json.Unmarshal([]byte("["+tt.in+"]"), &evs); err != nil || len(evs) != 1 {
				t.Fatalf("json.Unmarshal slice: %v", err)
			}
			if out, _ := evs[0].MarshalJSON(); string(out) != tt.in {
				t.Errorf("slice round trip:\n got %s\nwant %s", out, tt.in)
			}
			// MarshalJSON returns a copy: changing it does not change Raw.
			out[0] = 'X'
			if e.Raw[0] != tt.in[0] {
				t.Error("MarshalJSON aliases Raw")
			}
		})
	}
}

func TestEventWithoutRaw(t *testing.T) {
	var e Event
	in := `{"event_id":3,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":5,"duroxide_version":"0.1.26","type":"TimerCreated","fire_at_ms":10,"extra":1}`
	if err := e.UnmarshalJSON([]byte(in)); err != nil {
		t.Fatal(err)
	}
	e.EventID = 4
	stale, _ := e.MarshalJSON()
	if string(stale) != in {
		t.Errorf("with Raw set, MarshalJSON should write Raw; got %s", stale)
	}
	fresh, err := e.WithoutRaw().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"event_id":4,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":5,"duroxide_version":"0.1.26","type":"TimerCreated","fire_at_ms":10}`
	if string(fresh) != want {
		t.Errorf("got  %s\nwant %s", fresh, want)
	}
	if e.Raw == nil {
		t.Error("WithoutRaw modified the receiver")
	}
}

func TestEventDecodeErrors(t *testing.T) {
	const common = `"event_id":1,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.1.26"`
	bad := map[string]string{
		"empty":               ``,
		"malformed":           `{` + common + `,"type":"TimerCreated","fire_at_ms":1`,
		"trailing":            `{` + common + `,"type":"TimerCreated","fire_at_ms":1} {}`,
		"null":                `null`,
		"array":               `[]`,
		"no type":             `{` + common + `,"fire_at_ms":1}`,
		"type number":         `{` + common + `,"type":7}`,
		"type null":           `{` + common + `,"type":null}`,
		"missing event_id":    `{"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.1.26","type":"KeyValuesCleared"}`,
		"missing version":     `{"event_id":1,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"KeyValuesCleared"}`,
		"unknown type no ids": `{"type":"FutureThing"}`,
		"bad source id":       `{"event_id":1,"source_event_id":"2","instance_id":"i","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.1.26","type":"KeyValuesCleared"}`,
		"missing kind field":  `{` + common + `,"type":"TimerCreated"}`,
		"bad details":         `{` + common + `,"type":"OrchestrationFailed","details":{"Application":{"kind":"Nope","message":"","retryable":false}}}`,
		"bad carry":           `{` + common + `,"type":"OrchestrationStarted","name":"n","version":"v","input":"i","parent_instance":null,"parent_id":null,"carry_forward_events":[["a"]]}`,
		"kv null timestamp":   `{` + common + `,"type":"KeyValueSet","key":"k","value":"v","last_updated_at_ms":null}`,
		"duplicate field":     `{` + common + `,"type":"TimerCreated","fire_at_ms":1,"fire_at_ms":2}`,
		"duplicate type":      `{` + common + `,"type":"TimerCreated","type":"TimerFired","fire_at_ms":1}`,
	}
	for name, in := range bad {
		orig := Event{EventID: 42, Raw: json.RawMessage(`{"keep":true}`)}
		e := orig
		if err := e.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s: UnmarshalJSON(%s) = %#v, want error", name, in, e)
		} else if !reflect.DeepEqual(e, orig) {
			t.Errorf("%s: failed UnmarshalJSON modified the event", name)
		}
	}
	var e Event
	if err := json.Unmarshal([]byte(`{"type":1}`), &e); err == nil {
		t.Error("json.Unmarshal accepted a non-string type")
	}
}

func TestEventMarshalErrors(t *testing.T) {
	base := Event{EventID: 1, InstanceID: "i", ExecutionID: 1, DuroxideVersion: "0.1.26"}
	bad := map[string]Event{
		"nil kind":             base,
		"nil pointer kind":     func() Event { e := base; e.Kind = (*TimerCreated)(nil); return e }(),
		"unknown without raw":  func() Event { e := base; e.Kind = UnknownEvent{TypeName: "X"}; return e }(),
		"invalid raw":          func() Event { e := base; e.Kind = TimerCreated{}; e.Raw = json.RawMessage(`{"a":`); return e }(),
		"nil details":          func() Event { e := base; e.Kind = OrchestrationFailed{}; return e }(),
		"bad details":          func() Event { e := base; e.Kind = ActivityFailedEvent{Details: ConfigurationError{}}; return e }(),
		"nil sub-orch details": func() Event { e := base; e.Kind = SubOrchestrationFailed{}; return e }(),
	}
	for name, e := range bad {
		if b, err := e.MarshalJSON(); err == nil {
			t.Errorf("%s: MarshalJSON = %s, want error", name, b)
		}
	}
}

// TestStringEscaping checks that strings are written as serde_json writes
// them: only '"', '\\' and control characters are escaped, with \u00xx in
// lowercase hex; HTML characters, '/', DEL, U+2028/U+2029 and non-ASCII text
// stay verbatim. Invalid UTF-8 becomes U+FFFD.
func TestStringEscaping(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"<script>&amp;</script>", `"<script>&amp;</script>"`},
		{"a/b", `"a/b"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1f\x0b", `"\u0000\u0001\u001f\u000b"`},
		{"\x7f", "\"\x7f\""},
		{"é日本\U0001F600", "\"é日本\U0001F600\""},
		{"\u2028\u2029", "\"\u2028\u2029\""},
		{"a\xffb", "\"a\uFFFDb\""},
	}
	for _, tt := range tests {
		got := string(appendJSONString(nil, tt.in))
		if got != tt.want {
			t.Errorf("appendJSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("appendJSONString(%q) = %s is not valid JSON", tt.in, got)
			continue
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Errorf("decode %s: %v", got, err)
		} else if want := strings.ToValidUTF8(tt.in, "\uFFFD"); back != want {
			t.Errorf("decode %s = %q, want %q", got, back, want)
		}
	}
	// And through a work item, end to end.
	b, err := MarshalWorkItem(ExternalRaised{Instance: "a", Name: "<n>", Data: `{"x":"a&b"}`})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"ExternalRaised":{"instance":"a","name":"<n>","data":"{\"x\":\"a&b\"}"}}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func FuzzUnmarshalWorkItem(f *testing.F) {
	for _, l := range jtLines(f, "workitems.jsonl") {
		f.Add(l)
	}
	f.Add([]byte(`{"ContinueAsNew":{"instance":"a","orchestration":"O","input":"i"}}`))
	f.Add([]byte(`{"ActivityFailed":{"instance":"a","execution_id":1,"id":2,"details":{"Poison":{"attempt_count":1,"max_attempts":1,"message_type":{"Activity":{"instance":"i","execution_id":1,"activity_name":"A","activity_id":2}},"message":"m"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := UnmarshalWorkItem(data)
		if err != nil {
			return
		}
		b, err := MarshalWorkItem(w)
		if err != nil {
			t.Fatalf("decoded %#v but cannot encode it: %v", w, err)
		}
		w2, err := UnmarshalWorkItem(b)
		if err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", b, err)
		}
		if !reflect.DeepEqual(w, w2) {
			t.Fatalf("re-decode differs:\n %#v\n %#v", w, w2)
		}
		b2, err := MarshalWorkItem(w2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding not stable: %s vs %s (%v)", b, b2, err)
		}
	})
}

func FuzzUnmarshalEvent(f *testing.F) {
	for _, l := range jtLines(f, "events.jsonl") {
		f.Add(l)
	}
	f.Add([]byte(`{"event_id":20,"source_event_id":null,"instance_id":"order-1","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.9.0","type":"FutureThing","x":[1,2]}`))
	f.Add([]byte(` {"type":"KeyValueSet","key":"k","value":"v","event_id":1,"instance_id":"i","execution_id":1,"timestamp_ms":1,"duroxide_version":"x"} `))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Event
		if err := e.UnmarshalJSON(data); err != nil {
			return
		}
		out, err := e.MarshalJSON()
		if err != nil {
			t.Fatalf("decoded but cannot re-encode: %v", err)
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("Raw round trip changed the bytes:\n %q\n %q", data, out)
		}
		canon, err := e.WithoutRaw().MarshalJSON()
		if _, unknown := e.Kind.(UnknownEvent); unknown {
			if err == nil {
				t.Fatalf("encoded an UnknownEvent without Raw: %s", canon)
			}
			return
		}
		if err != nil {
			t.Fatalf("decoded %#v but cannot encode it: %v", e.WithoutRaw(), err)
		}
		var e2 Event
		if err := e2.UnmarshalJSON(canon); err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", canon, err)
		}
		if !reflect.DeepEqual(e.WithoutRaw(), e2.WithoutRaw()) {
			t.Fatalf("re-decode differs:\n %#v\n %#v", e.WithoutRaw(), e2.WithoutRaw())
		}
		canon2, err := e2.WithoutRaw().MarshalJSON()
		if err != nil || !bytes.Equal(canon, canon2) {
			t.Fatalf("encoding not stable: %s vs %s (%v)", canon, canon2, err)
		}
	})
}
