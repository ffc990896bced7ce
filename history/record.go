package history

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// Sentinel errors. Errors returned by this package wrap one of them (or the
// underlying I/O error) and name the log's path.
var (
	// ErrCorrupt reports a complete ('\n'-terminated) line that fails its CRC
	// or the record format. Read and Stat return it as a *CorruptError.
	ErrCorrupt = errors.New("corrupt record")
	// ErrDuplicateID reports that Append was given an id twice, or an id
	// already present in the log.
	ErrDuplicateID = errors.New("duplicate record id")
	// ErrConflict reports that AppendAt found the log inconsistent with the
	// requested position or records, or that the file changed between being
	// read and being written (appends not serialized by the caller).
	ErrConflict = errors.New("history conflict")
	// ErrInvalid reports an argument that can never be stored, such as a
	// payload containing '\n' or a negative base.
	ErrInvalid = errors.New("invalid record")
	// ErrTruncated reports a log holding fewer valid records than its
	// caller committed to it: committed records were lost (the file was
	// cut, emptied, removed or replaced). ReadCommitted returns it as a
	// *TruncatedError, for which errors.Is(err, ErrCorrupt) holds too.
	ErrTruncated = errors.New("committed records missing")
)

// castagnoli is the CRC-32C table used for every record.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcLen is the width of the hex CRC field.
const crcLen = 8

// Record is one entry of a log: an id, an epoch and an opaque payload.
type Record struct {
	// ID identifies the record. Append rejects an id that is already in the
	// log or repeated within a batch.
	ID uint64
	// Epoch is an opaque number stored with the record (the provider stores
	// the lease fence in it).
	Epoch uint64
	// Payload is opaque; it may hold any bytes except '\n'.
	Payload []byte
}

// equal reports whether r and o have the same ID, Epoch and Payload bytes.
func (r Record) equal(o Record) bool {
	return r.ID == o.ID && r.Epoch == o.Epoch && bytes.Equal(r.Payload, o.Payload)
}

// EncodeRecord returns r as one line, "<crc> <id> <epoch> <payload>\n", where
// crc is the CRC-32C of "<id> <epoch> <payload>" as 8 lowercase hex digits. It
// fails with ErrInvalid if the payload contains '\n'.
func EncodeRecord(r Record) ([]byte, error) {
	if err := checkRecord(r); err != nil {
		return nil, err
	}
	return appendRecord(make([]byte, 0, encodedLen(r)), r), nil
}

// checkRecord reports whether r can be encoded.
func checkRecord(r Record) error {
	if i := bytes.IndexByte(r.Payload, '\n'); i >= 0 {
		return fmt.Errorf("history: record id %d: payload has a newline at byte %d: %w", r.ID, i, ErrInvalid)
	}
	return nil
}

// EncodedSize returns the number of bytes recs take in a log file: the
// offset after them of a log that holds them alone, and what appending them
// adds to a log's size.
func EncodedSize(recs []Record) int64 {
	var n int64
	for _, r := range recs {
		n += int64(encodedLen(r))
	}
	return n
}

// encodedLen is the length of r's line, including the '\n'.
func encodedLen(r Record) int {
	return crcLen + 1 + decimalLen(r.ID) + 1 + decimalLen(r.Epoch) + 1 + len(r.Payload) + 1
}

func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// appendRecord appends r's line to dst. The payload must not contain '\n'.
func appendRecord(dst []byte, r Record) []byte {
	start := len(dst)
	dst = append(dst, "00000000 "...)
	body := len(dst)
	dst = strconv.AppendUint(dst, r.ID, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, r.Epoch, 10)
	dst = append(dst, ' ')
	dst = append(dst, r.Payload...)
	const hexDigits = "0123456789abcdef"
	sum := crc32.Checksum(dst[body:], castagnoli)
	for i := crcLen - 1; i >= 0; i-- {
		dst[start+i] = hexDigits[sum&0xf]
		sum >>= 4
	}
	return append(dst, '\n')
}

// encodeAll validates recs and encodes them into one buffer.
func encodeAll(recs []Record) ([]byte, error) {
	n := 0
	for _, r := range recs {
		if err := checkRecord(r); err != nil {
			return nil, err
		}
		n += encodedLen(r)
	}
	buf := make([]byte, 0, n)
	for _, r := range recs {
		buf = appendRecord(buf, r)
	}
	return buf, nil
}

// DecodeLine parses one line (without its '\n') written by EncodeRecord. It
// fails with an error wrapping ErrCorrupt if the CRC does not match or the
// line is not in canonical form (8 lowercase hex digits, a space, an unsigned
// decimal id without leading zeros, a space, the epoch likewise, a space, a
// payload without '\n'). The returned payload is a copy.
func DecodeLine(line []byte) (Record, error) {
	r, reason := decode(line)
	if reason != "" {
		return Record{}, fmt.Errorf("history: %s: %w", reason, ErrCorrupt)
	}
	r.Payload = bytes.Clone(r.Payload)
	return r, nil
}

// decode parses line; the payload aliases line. It returns a non-empty reason
// if the line is not a valid record.
func decode(line []byte) (Record, string) {
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		return Record{}, fmt.Sprintf("newline at byte %d", i)
	}
	if len(line) < crcLen+1 || line[crcLen] != ' ' {
		return Record{}, "missing crc field"
	}
	want, ok := parseHex32(line[:crcLen])
	if !ok {
		return Record{}, "crc is not 8 lowercase hex digits"
	}
	body := line[crcLen+1:]
	if got := crc32.Checksum(body, castagnoli); got != want {
		return Record{}, fmt.Sprintf("crc mismatch: stored %08x, computed %08x", want, got)
	}
	id, rest, reason := parseField(body, "id")
	if reason != "" {
		return Record{}, reason
	}
	epoch, payload, reason := parseField(rest, "epoch")
	if reason != "" {
		return Record{}, reason
	}
	return Record{ID: id, Epoch: epoch, Payload: payload}, ""
}

// parseHex32 parses exactly 8 lowercase hex digits.
func parseHex32(b []byte) (uint32, bool) {
	var v uint32
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint32(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, len(b) == crcLen
}

// parseField parses a canonical unsigned decimal followed by a space and
// returns the value and the bytes after the space.
func parseField(b []byte, name string) (uint64, []byte, string) {
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		return 0, nil, "missing " + name + " field"
	}
	digits := b[:sp]
	if len(digits) == 0 {
		return 0, nil, "empty " + name
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, nil, name + " has a leading zero"
	}
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, nil, name + " is not decimal"
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, nil, name + " overflows uint64"
		}
		v = v*10 + d
	}
	return v, b[sp+1:], ""
}
