package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// This file splits JSON objects into their members without encoding/json's
// Decoder, which tokenizes with an allocation per token and was most of the
// cost of reading a history (every fetch reads the whole execution's
// history, so a fan-out's turns parse thousands of events).

// jsonObject is a decoded JSON object: each member's raw value by key.
type jsonObject map[string]json.RawMessage

// parseObject decodes one JSON object into its members. data must be valid
// JSON (callers check json.Valid at the top level); on other input it
// returns an error or members that are themselves invalid, never panics.
// Duplicate keys and trailing values are errors. The members' raw values
// share one copy of data (callers may keep them; data may be reused).
func parseObject(data []byte) (jsonObject, error) {
	s := jsonScanner{buf: bytes.Clone(data)} // the members alias this copy
	s.space()
	if !s.consume('{') {
		return nil, errors.New("expected a JSON object")
	}
	obj := jsonObject{}
	s.space()
	if s.consume('}') {
		return obj, s.end()
	}
	for {
		s.space()
		rawKey, err := s.stringToken()
		if err != nil {
			return nil, fmt.Errorf("reading object key: %w", err)
		}
		key, ok := plainJSONString(rawKey)
		if !ok {
			if err := json.Unmarshal(rawKey, &key); err != nil {
				return nil, fmt.Errorf("reading object key: %w", err)
			}
		}
		s.space()
		if !s.consume(':') {
			return nil, fmt.Errorf("reading field %q: expected ':'", key)
		}
		s.space()
		start := s.i
		if err := s.skipValue(0); err != nil {
			return nil, fmt.Errorf("reading field %q: %w", key, err)
		}
		if _, dup := obj[key]; dup {
			return nil, fmt.Errorf("duplicate field %q", key)
		}
		obj[key] = json.RawMessage(s.buf[start:s.i:s.i])
		s.space()
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return obj, s.end()
		}
		return nil, errors.New("reading end of object: expected ',' or '}'")
	}
}

// plainJSONString returns the text of a JSON string token that needs no
// unescaping: quoted, valid UTF-8, without escapes or control characters.
// For such a token the result equals json.Unmarshal's; ok is false for
// every other input (which the caller then decodes the slow way).
func plainJSONString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c < 0x20 || c == '"' || c == '\\' {
			return "", false
		}
	}
	if !utf8.Valid(body) {
		return "", false // json.Unmarshal replaces bad bytes with U+FFFD
	}
	return string(body), true
}

// jsonScanner walks a byte slice of (presumably valid) JSON.
type jsonScanner struct {
	buf []byte
	i   int
}

// maxJSONDepth bounds nesting inside a member value (encoding/json allows
// 10,000 levels; duroxide's values are far shallower).
const maxJSONDepth = 10000

func (s *jsonScanner) space() {
	for s.i < len(s.buf) {
		switch s.buf[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips c if it is the next byte.
func (s *jsonScanner) consume(c byte) bool {
	if s.i < len(s.buf) && s.buf[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports an error unless only whitespace follows.
func (s *jsonScanner) end() error {
	s.space()
	if s.i != len(s.buf) {
		return errors.New("trailing data after JSON object")
	}
	return nil
}

// stringToken skips one string token and returns it, quotes included.
func (s *jsonScanner) stringToken() ([]byte, error) {
	start := s.i
	if !s.consume('"') {
		return nil, errors.New("expected a string")
	}
	for s.i < len(s.buf) {
		switch s.buf[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return s.buf[start:s.i], nil
		default:
			s.i++
		}
	}
	return nil, errors.New("unterminated string")
}

// skipValue skips one value: a string, an object or array (with everything
// in it), or a literal or number (up to the next delimiter).
func (s *jsonScanner) skipValue(depth int) error {
	if s.i >= len(s.buf) {
		return errors.New("unexpected end of JSON")
	}
	switch c := s.buf[s.i]; c {
	case '"':
		_, err := s.stringToken()
		return err
	case '{', '[':
		if depth >= maxJSONDepth {
			return errors.New("JSON nested too deeply")
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		for {
			s.space()
			if s.consume(closer) {
				return nil
			}
			if s.i >= len(s.buf) {
				return errors.New("unexpected end of JSON")
			}
			switch s.buf[s.i] {
			case ',', ':':
				s.i++
			default:
				if err := s.skipValue(depth + 1); err != nil {
					return err
				}
			}
		}
	case '}', ']', ',', ':':
		return fmt.Errorf("unexpected %q", c)
	default:
		start := s.i
		for s.i < len(s.buf) {
			switch s.buf[s.i] {
			case ',', '}', ']', ':', ' ', '\t', '\n', '\r', '"', '{', '[':
				if s.i == start {
					return fmt.Errorf("unexpected %q", s.buf[s.i])
				}
				return nil
			}
			s.i++
		}
		return nil
	}
}
