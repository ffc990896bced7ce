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
	want, body, ok := split(data)
	if !ok || crc32.Checksum(body, table) != want {
		return nil, true, ErrMismatch
	}
	return body, true, nil
}

// split parses sealed data (trimmed) into its sum and its object without
// the seal.
func split(data []byte) (sum uint32, body []byte, ok bool) {
	const h = len(Prefix) + 8 // the hex sum ends here
	if len(data) < h+2 {
		return 0, nil, false
	}
	v, err := strconv.ParseUint(string(data[len(Prefix):h]), 16, 32)
	if err != nil {
		return 0, nil, false
	}
	switch string(data[h : h+2]) {
	case `"}`:
		if len(data) != h+2 {
			return 0, nil, false
		}
		return uint32(v), []byte("{}"), true
	case `",`:
		return uint32(v), append([]byte{'{'}, data[h+2:]...), true
	}
	return 0, nil, false
}

// Reseal returns sealed data whose object was edited (bytes replaced by
// others of the same length, say) sealed again over its new content,
// followed by as much white space as data had. Data that is not sealed, or
// not well formed, is returned as it is.
func Reseal(data []byte) []byte {
	t := bytes.TrimRight(data, " \n\r\t")
	if !bytes.HasPrefix(t, []byte(Prefix)) {
		return data
	}
	_, body, ok := split(t)
	if !ok {
		return data
	}
	out := Seal(body)
	return append(out, data[len(t):]...)
}
