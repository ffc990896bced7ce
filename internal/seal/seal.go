// Package seal binds a JSON object file to its identity with a checksum, so
// that a reader that does not hold the writer's lock can tell a complete,
// current copy of the file it asked for from anything else it may read.
//
// Why durofs needs it. Files that change on every commit (an instance's
// instance.json and state.json, its commit record) are replaced by writing a
// spare file and exchanging it with the target (vfs.ReplaceVia): the old
// inode becomes the spare and is overwritten by a later replace - of this
// file or of another one (the spares are a per-process pool). Writers hold
// the instance's lock, but readers of status and history (the admin API,
// inspection) do not. Such a reader may open the old inode just before a
// swap and still be reading it when it is overwritten: it can see a mix of
// two versions, a prefix of the next one, or a complete copy of another
// instance's file. A seal catches all three: the checksum covers the
// identity (the file's path below the data directory) and every byte of the
// object, so anything but one complete write of this very file fails the
// check, and the reader retries.
//
// Format. A sealed file is the JSON object with one more member, last:
//
//	{"a":1,"b":"x","crc32c":"1c2d3e4f"}
//
// where the value is the CRC-32C (Castagnoli) of the identity, a newline,
// and the object as it was before sealing ({"a":1,"b":"x"}), in lower-case
// hex. The file stays one JSON object, so jq and cat work as before, and
// decoders that do not know the member ignore it. A file without the member
// (written by a durofs before sealing, or by hand) is accepted unchecked.
package seal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// ErrMismatch is returned by Open when a file carries a seal that does not
// match its identity and content: it is torn, or it is another file's.
var ErrMismatch = errors.New("seal: checksum does not match (torn, or another file's content)")

// Member is the name of the JSON member that holds the checksum.
const Member = "crc32c"

var table = crc32.MakeTable(crc32.Castagnoli)

// suffix is what a sealed object ends with, after the checksum's 8 hex
// digits are cut out: `"crc32c":"` + 8 hex + `"}`.
const (
	head      = `"` + Member + `":"`
	sealedLen = len(head) + 8 + 2
)

func sum(id string, obj []byte) uint32 {
	c := crc32.Update(0, table, []byte(id))
	c = crc32.Update(c, table, []byte{'\n'})
	return crc32.Update(c, table, obj)
}

// Seal returns obj - a JSON object without insignificant whitespace at its
// ends, as json.Marshal writes it - with the checksum member added for id,
// followed by a newline. It returns an error if obj is not an object or
// already has a member named [Member] (a seal inside a seal could make a
// prefix of the file look sealed).
func Seal(id string, obj []byte) ([]byte, error) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, fmt.Errorf("seal: %q is not a JSON object", truncate(obj))
	}
	if isSpace(obj[len(obj)-2]) {
		return nil, fmt.Errorf("seal: %q has white space before its closing brace (not compact JSON)", truncate(obj))
	}
	if bytes.Contains(obj, []byte(`"`+Member+`"`)) {
		return nil, fmt.Errorf("seal: object already has a %q member", Member)
	}
	out := make([]byte, 0, len(obj)+sealedLen+2)
	out = append(out, obj[:len(obj)-1]...)
	if len(obj) > 2 {
		out = append(out, ',')
	}
	out = append(out, head...)
	out = fmt.Appendf(out, "%08x", sum(id, obj))
	out = append(out, '"', '}', '\n')
	return out, nil
}

// Open checks a file's seal for id and returns the object as it was before
// sealing. A file without a seal is returned unchanged with sealed false.
// A seal that does not match gives [ErrMismatch].
func Open(id string, data []byte) (obj []byte, sealed bool, err error) {
	b := bytes.TrimRight(data, " \t\r\n")
	if len(b) < sealedLen+1 || b[len(b)-1] != '}' {
		return data, false, nil
	}
	tail := b[len(b)-sealedLen:]
	if !bytes.HasPrefix(tail, []byte(head)) || tail[sealedLen-2] != '"' {
		return data, false, nil
	}
	want, err := strconv.ParseUint(string(tail[len(head):len(head)+8]), 16, 32)
	if err != nil {
		return data, false, nil
	}
	rest := b[:len(b)-sealedLen] // the object up to the member, ending in ',' or '{'
	switch {
	case len(rest) >= 2 && rest[len(rest)-1] == ',':
		obj = append(append([]byte{}, rest[:len(rest)-1]...), '}')
	case len(rest) >= 1 && rest[len(rest)-1] == '{':
		obj = append(append([]byte{}, rest...), '}')
	default:
		return data, false, nil
	}
	if uint64(sum(id, obj)) != want {
		return nil, true, ErrMismatch
	}
	return obj, true, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
