package history

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
)

func FuzzDecodeLine(f *testing.F) {
	for _, r := range recs(0, 1, 2, 10, 123456789) {
		b, _ := EncodeRecord(r)
		f.Add(b[:len(b)-1])
	}
	f.Add(line("1 1 "))
	f.Add(line("01 1 x"))
	f.Add(line("18446744073709551615 18446744073709551616 x"))
	f.Add([]byte("00000000 1 1 x"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeLine(in)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// The encoding is canonical: a decoded line re-encodes to itself.
		b, err := EncodeRecord(r)
		if err != nil {
			t.Fatalf("EncodeRecord(%+v) of a decoded line: %v", r, err)
		}
		if !bytes.Equal(b, append(bytes.Clone(in), '\n')) {
			t.Fatalf("DecodeLine(%q) = %+v, re-encoded as %q", in, r, b)
		}
	})
}

func FuzzRead(f *testing.F) {
	good := encode(f, recs(1, 2, 3)...)
	f.Add([]byte{})
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add(append(bytes.Clone(good), make([]byte, 64)...))
	f.Add(append(bytes.Clone(good), '\n'))
	f.Add(append(bytes.Clone(good[:40]), good...))
	f.Add([]byte("\n\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "log")
		writeFile(t, path, data)
		s, err := Open(osFS, path).Read()
		var re []byte
		for _, r := range s.Records {
			b, eerr := EncodeRecord(r)
			if eerr != nil {
				t.Fatalf("EncodeRecord(%+v) of a read record: %v", r, eerr)
			}
			re = append(re, b...)
		}
		if s.ValidSize < 0 || s.TornBytes < 0 || s.ValidSize+s.TornBytes > int64(len(data)) {
			t.Fatalf("ValidSize %d, TornBytes %d for %d bytes", s.ValidSize, s.TornBytes, len(data))
		}
		if !bytes.Equal(re, data[:s.ValidSize]) {
			t.Fatalf("records re-encode as %q, want the valid prefix %q", re, data[:s.ValidSize])
		}
		rest := data[s.ValidSize:]
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read error %v is not a *CorruptError", err)
			}
			if ce.Offset != s.ValidSize || ce.Line != len(s.Records)+1 || s.TornBytes != 0 {
				t.Fatalf("CorruptError %+v with scan valid %d torn %d, %d records", ce, s.ValidSize, s.TornBytes, len(s.Records))
			}
			if bytes.IndexByte(rest, '\n') < 0 {
				t.Fatalf("corruption reported in a tail without a complete line: %q", rest)
			}
			return
		}
		if s.ValidSize+s.TornBytes != int64(len(data)) {
			t.Fatalf("ValidSize %d + TornBytes %d != %d", s.ValidSize, s.TornBytes, len(data))
		}
		if bytes.IndexByte(rest, '\n') >= 0 {
			t.Fatalf("torn tail holds a complete line: %q", rest)
		}
	})
}
