package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
)

// parseObjectDecoder is the encoding/json Decoder implementation that
// parseObject replaced; the tests hold parseObject to it.
func parseObjectDecoder(data []byte) (jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("expected a JSON object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("expected a JSON object")
	}
	obj := jsonObject{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("expected an object key")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if _, dup := obj[key]; dup {
			return nil, fmt.Errorf("duplicate field %q", key)
		}
		obj[key] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON object")
	}
	return obj, nil
}

// checkParseObject fails t unless parseObject and parseObjectDecoder agree
// on data (valid JSON): both fail, or both give the same members.
func checkParseObject(t *testing.T, data []byte) {
	t.Helper()
	got, err := parseObject(data)
	want, werr := parseObjectDecoder(data)
	if (err == nil) != (werr == nil) {
		t.Fatalf("parseObject(%q): err %v, Decoder err %v", data, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("parseObject(%q):\n got  %q\n want %q", data, got, want)
	}
}

func TestParseObject(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		wantErr    bool
	}{
		{"empty", `{}`, false},
		{"spaces", " \t\r\n{ \n} \n", false},
		{"members", `{"a":1,"b":"x","c":null,"d":true,"e":false,"f":-1.5e3}`, false},
		{"nested", `{"a":{"b":[1,{"c":[]},"]}"],"d":{}},"e":[[[]]]}`, false},
		{"spaced members", `{ "a" : [ 1 , 2 ] , "b" : { "c" : "d" } }`, false},
		{"string escapes", `{"a":"q\"uo\\te\"}","b\"k":"\u00e9"}`, false},
		{"escaped key equal to another", `{"a":1,"\u0061":2}`, true},
		{"duplicate", `{"a":1,"a":1}`, true},
		{"not an object", `[1]`, true},
		{"string", `"x"`, true},
		{"null", `null`, true},
		{"number", `1`, true},
		{"invalid UTF-8 in a key", "{\"\xff\":1}", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.data)
			if !json.Valid(data) {
				t.Fatalf("test data %q is not valid JSON", data)
			}
			_, err := parseObject(data)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseObject(%q) err = %v, want error %v", data, err, tt.wantErr)
			}
			checkParseObject(t, data)
		})
	}
}

// TestParseObjectInvalid: on input that is not valid JSON (which callers
// never pass) parseObject returns an error or members, and never panics.
func TestParseObjectInvalid(t *testing.T) {
	for _, data := range []string{``, `{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a":"x`, `{"a":[1,`, `{"a":{"b":`,
		`{"a":1}}`, `{"a":1 "b":2}`, `{1:2}`, `{"a"1}`, `{"a":}`, `{"a":,}`, `{"a":"\`, `{"a":]}`} {
		if obj, err := parseObject([]byte(data)); err == nil && json.Valid([]byte(data)) {
			t.Errorf("parseObject(%q) = %q for invalid JSON", data, obj)
		}
	}
}

// TestParseObjectCopies: the members must not alias the caller's buffer.
func TestParseObjectCopies(t *testing.T) {
	data := []byte(`{"a":"x"}`)
	obj, err := parseObject(data)
	if err != nil {
		t.Fatal(err)
	}
	copy(data, `{"a":"y"}`)
	if got := string(obj["a"]); got != `"x"` {
		t.Fatalf("member changed with the input buffer: %s", got)
	}
}

func TestPlainJSONString(t *testing.T) {
	for _, raw := range []string{`""`, `"abc"`, `"é"`, `"a\"b"`, `"a\\b"`, `"\u0041"`, "\"\xff\"", "\"a\x01\"", `"a"b"`, `"a`, `a"`, `"`} {
		s, ok := plainJSONString([]byte(raw))
		var want string
		werr := json.Unmarshal([]byte(raw), &want)
		if ok && (werr != nil || s != want) {
			t.Errorf("plainJSONString(%q) = %q; json.Unmarshal gives %q, %v", raw, s, want, werr)
		}
	}
}

func FuzzParseObject(f *testing.F) {
	for _, l := range jtLines(f, "events.jsonl") {
		f.Add(l)
	}
	for _, l := range jtLines(f, "workitems.jsonl") {
		f.Add(l)
	}
	f.Add([]byte(`{"a":{"b":[1,{"c":[]},"]}"],"d":{}},"e":[[[]]]}`))
	f.Add([]byte(`{"a":"q\"uo\\te\"}","b\"k":"\u00e9"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			parseObject(data) // must not panic
			return
		}
		checkParseObject(t, data)
	})
}

// BenchmarkUnmarshalEvent decodes the events of testdata/events.jsonl, as
// a fetch does for every event of the history it reads.
func BenchmarkUnmarshalEvent(b *testing.B) {
	lines := jtLines(b, "events.jsonl")
	var n int64
	for _, l := range lines {
		n += int64(len(l))
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range lines {
			var ev Event
			if err := ev.UnmarshalJSON(l); err != nil {
				b.Fatal(err)
			}
		}
	}
}
