// Package names turns untrusted strings (instance ids, session ids) into
// single, safe path components.
//
// The encoding keeps the common characters readable and escapes the rest:
//
//   - bytes a–z, 0–9, '-' and '_' are kept; '.' is kept except as the first
//     byte (so "." and ".." cannot appear and names never start with a dot,
//     which durofs reserves for temporary and staged files);
//   - every other byte, including upper-case letters, becomes %XX with
//     upper-case hex. Upper-case letters are escaped so that two ids differing
//     only in case never collide on a case-insensitive file system;
//   - a first segment equal to a Windows device name (con, nul, com1, …) has
//     its first byte escaped;
//   - the empty string encodes as "%";
//   - an encoding longer than MaxLen is replaced by "~" followed by the hex
//     SHA-256 of the id ('~' never appears in a direct encoding, so hashed and
//     direct names cannot collide).
//
// Encode is injective: Decode inverts every direct encoding; hashed names
// cannot be decoded and callers store the original id beside them.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// MaxLen is the longest direct encoding; longer ones are hashed. It leaves
// room under the common 255-byte file-name limit for suffixes such as ".json".
const MaxLen = 180

// ErrNotDecodable is returned by Decode for hashed or malformed names.
var ErrNotDecodable = errors.New("names: not a decodable encoding")

const upperHex = "0123456789ABCDEF"

var reserved = map[string]bool{
	"con": true, "prn": true, "aux": true, "nul": true,
	"com1": true, "com2": true, "com3": true, "com4": true, "com5": true, "com6": true, "com7": true, "com8": true, "com9": true,
	"lpt1": true, "lpt2": true, "lpt3": true, "lpt4": true, "lpt5": true, "lpt6": true, "lpt7": true, "lpt8": true, "lpt9": true,
}

func keep(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		return true
	case c == '.':
		return !first
	}
	return false
}

// Encode returns the path component for id.
func Encode(id string) string {
	if id == "" {
		return "%"
	}
	var b strings.Builder
	b.Grow(len(id))
	seg := id
	if i := strings.IndexByte(id, '.'); i >= 0 {
		seg = id[:i]
	}
	escapeFirst := reserved[seg]
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keep(c, i == 0) && !(i == 0 && escapeFirst) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
		if b.Len() > MaxLen {
			return hashed(id)
		}
	}
	return b.String()
}

func hashed(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "~" + hex.EncodeToString(sum[:])
}

// IsHashed reports whether name is a hashed encoding.
func IsHashed(name string) bool { return strings.HasPrefix(name, "~") }

// hashedLen is the length of a hashed encoding: "~" and 64 hex digits.
const hashedLen = 1 + 2*sha256.Size

// Valid reports whether name is a possible output of Encode: a direct
// encoding that Decode inverts (so at most MaxLen bytes, in canonical form:
// no byte escaped that Encode keeps, upper-case hex), or "~" followed by
// 64 lower-case hex digits. Every valid name is a single, safe path
// component. Valid does not say whether any id with that name was ever
// stored; callers use it to refuse names from untrusted input (such as a
// lock token) before touching the file system.
func Valid(name string) bool {
	if IsHashed(name) {
		if len(name) != hashedLen {
			return false
		}
		for i := 1; i < len(name); i++ {
			if c := name[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	if len(name) > MaxLen {
		return false
	}
	_, err := Decode(name)
	return err == nil
}

// Decode inverts Encode for direct encodings.
func Decode(name string) (string, error) {
	if name == "%" {
		return "", nil
	}
	if name == "" || IsHashed(name) {
		return "", ErrNotDecodable
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			if !keep(c, i == 0) {
				return "", ErrNotDecodable
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", ErrNotDecodable
		}
		hi, lo := unhex(name[i+1]), unhex(name[i+2])
		if hi < 0 || lo < 0 {
			return "", ErrNotDecodable
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	s := b.String()
	if Encode(s) != name {
		return "", ErrNotDecodable
	}
	return s, nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
