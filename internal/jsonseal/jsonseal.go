// Package jsonseal seals a JSON object with a CRC of its content, so that a
// reader can tell a whole version of a file written in place from a mix of
// two versions that it copied while a write was in progress.
//
// A sealed object starts with the key "crc32c": the CRC-32C (Castagnoli) of
// the object as if the key were absent, as eight hex digits:
//
//	{"crc32c":"1a2b3c4d","instance":"order-42",...}
//
// It is still one JSON object (jq reads it as it is), and it may be
// followed by white space (the padding of a file written in place).
package jsonseal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// Prefix starts every sealed object.
const Prefix = `{"crc32c":"`

var table = crc32.MakeTable(crc32.Castagnoli)

// Seal returns the sealed form of body, a JSON object with no leading or
// trailing white space.
func Seal(body []byte) []byte {
	out := make([]byte, 0, len(Prefix)+10+len(body))
	out = append(out, Prefix...)
	out = fmt.Appendf(out, "%08x", crc32.Checksum(body, table))
	if bytes.Equal(body, []byte("{}")) {
		return append(out, `"}`...)
	}
	out = append(out, `",`...)
	return append(out, body[1:]...)
}

// ErrMismatch: a sealed object's content does not match its seal (a mix of
// two versions, or damage).
var ErrMismatch = errors.New("jsonseal: content does not match its crc32c seal")

// Unseal returns the JSON object in data (trailing white space and the seal
// removed) and whether data was sealed; err is ErrMismatch if it is sealed
// and does not match. Unsealed data is returned as it is, trimmed.
func Unseal(data []byte) (body []byte, sealed bool, err error) {
	data = bytes.TrimRight(data, " \n\r\t")
	if !bytes.HasPrefix(data, []byte(Prefix)) {
		return data, false, nil
	}
	const h = len(Prefix) + 8 // the hex sum ends here
	if len(data) < h+2 {
		return nil, true, ErrMismatch
	}
	want, perr := strconv.ParseUint(string(data[len(Prefix):h]), 16, 32)
	if perr != nil {
		return nil, true, ErrMismatch
	}
	switch string(data[h : h+2]) {
	case `"}`:
		if len(data) != h+2 {
			return nil, true, ErrMismatch
		}
		body = []byte("{}")
	case `",`:
		body = append([]byte{'{'}, data[h+2:]...)
	default:
		return nil, true, ErrMismatch
	}
	if crc32.Checksum(body, table) != uint32(want) {
		return nil, true, ErrMismatch
	}
	return body, true, nil
}
