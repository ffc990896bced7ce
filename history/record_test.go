package history

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"testing"
)

// line builds "<crc> <body>" with a correct CRC of body, without '\n'.
func line(body string) []byte {
	return fmt.Appendf(nil, "%08x %s", crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)), body)
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
		want string // expected line without the crc
	}{
		{"zero", Record{}, "0 0 "},
		{"json", Record{ID: 1, Epoch: 7, Payload: []byte(`{"kind":"started","name":"x y"}`)}, `1 7 {"kind":"started","name":"x y"}`},
		{"max", Record{ID: math.MaxUint64, Epoch: math.MaxUint64, Payload: []byte("p")}, "18446744073709551615 18446744073709551615 p"},
		{"spaces", Record{ID: 10, Epoch: 100, Payload: []byte("  a  b  ")}, "10 100   a  b  "},
		{"binary", Record{ID: 42, Epoch: 3, Payload: []byte{0, 1, 0xff, '\r', ' ', 0}}, "42 3 \x00\x01\xff\r \x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := EncodeRecord(tt.rec)
			if err != nil {
				t.Fatalf("EncodeRecord: %v", err)
			}
			want := append(line(tt.want), '\n')
			if !bytes.Equal(b, want) {
				t.Fatalf("EncodeRecord = %q, want %q", b, want)
			}
			if len(b) != encodedLen(tt.rec) {
				t.Fatalf("encodedLen = %d, want %d", encodedLen(tt.rec), len(b))
			}
			got, err := DecodeLine(b[:len(b)-1])
			if err != nil {
				t.Fatalf("DecodeLine: %v", err)
			}
			if !got.equal(tt.rec) {
				t.Fatalf("DecodeLine = %+v, want %+v", got, tt.rec)
			}
		})
	}
}

func TestDecodeLineCopiesPayload(t *testing.T) {
	b, _ := EncodeRecord(Record{ID: 1, Epoch: 1, Payload: []byte("abc")})
	r, err := DecodeLine(b[:len(b)-1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] = 'X'
	if string(r.Payload) != "abc" {
		t.Fatalf("payload aliases the input: %q", r.Payload)
	}
}

func TestEncodeRecordRejectsNewline(t *testing.T) {
	for _, p := range []string{"\n", "a\n", "\nb", `{"a":"b"}` + "\n"} {
		_, err := EncodeRecord(Record{ID: 1, Payload: []byte(p)})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("EncodeRecord(%q) error = %v, want ErrInvalid", p, err)
		}
	}
}

func TestDecodeLineRejects(t *testing.T) {
	good := line("12 3 {}")
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	upper := bytes.ToUpper(line("1 1 x")) // hex digits a-f in upper case
	if bytes.Equal(upper, line("1 1 x")) {
		t.Fatal("test setup: crc has no letter")
	}
	tests := []struct {
		name string
		line []byte
		want string // substring of the error
	}{
		{"empty", nil, "missing crc"},
		{"short", []byte("abc"), "missing crc"},
		{"crc only", []byte("00000000"), "missing crc"},
		{"no space after crc", []byte("000000000 1 1 x"), "missing crc"},
		{"bad crc", flipped, "crc mismatch"},
		{"wrong crc value", []byte("00000000 12 3 {}"), "crc mismatch"},
		{"bad hex", append([]byte("0000000g"), good[8:]...), "hex"},
		{"upper hex", upper, "hex"},
		{"short hex", append([]byte("0000000"), line("1 1 x")[8:]...), "missing crc"},
		{"missing id and epoch", line("x"), "missing id"},
		{"missing epoch", line("1"), "missing id"},
		{"missing payload separator", line("1 2"), "missing epoch"},
		{"empty id", line(" 1 x"), "empty id"},
		{"empty epoch", line("1  x"), "empty epoch"},
		{"leading zero id", line("01 1 x"), "id has a leading zero"},
		{"leading zero epoch", line("1 00 x"), "epoch has a leading zero"},
		{"sign", line("+1 1 x"), "id is not decimal"},
		{"negative", line("1 -1 x"), "epoch is not decimal"},
		{"hex id", line("0x1 1 x"), "leading zero"},
		{"id overflow", line("18446744073709551616 1 x"), "id overflows"},
		{"epoch overflow", line("1 99999999999999999999 x"), "epoch overflows"},
		{"newline", append(line("1 1 x"), '\n'), "newline"},
		{"nul line", []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "missing crc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeLine(tt.line)
			if err == nil {
				t.Fatalf("DecodeLine(%q) = %+v, want error", tt.line, r)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %v does not wrap ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestEncodedSize: the size of records is the length of their lines.
func TestEncodedSize(t *testing.T) {
	for _, rs := range [][]Record{nil, recs(1), recs(1, 22, 333), {{ID: 1 << 60, Epoch: 1 << 40, Payload: []byte(`{"x":"ü"}`)}}} {
		if got, want := EncodedSize(rs), int64(len(encode(t, rs...))); got != want {
			t.Errorf("EncodedSize(%v) = %d, want %d", ids(rs), got, want)
		}
	}
}
