package history

import (
	"errors"
	"hash/crc32"
	"path/filepath"
	"testing"
)

// TestReadAfter: reading only what follows a mark gives the records a
// whole read gives after it, with marks that chain, and refuses (ErrMoved)
// every log that no longer begins with the marked prefix.
func TestReadAfter(t *testing.T) {
	first := encode(t, recs(1, 2, 3)...)
	cases := []struct {
		name      string
		file      []byte // the file when ReadAfter runs; nil = missing
		wantIDs   []uint64
		wantErr   error // nil, ErrMoved or ErrCorrupt
		wantTorn  int64
		wantLine  int // for ErrCorrupt: the corrupt line, in the whole file
		wantMarks int // records counted by the next mark
	}{
		{"nothing new", first, nil, nil, 0, 0, 3},
		{"appended", append(first[:len(first):len(first)], encode(t, recs(4, 5)...)...), []uint64{4, 5}, nil, 0, 0, 5},
		{"appended with a torn tail", append(append(first[:len(first):len(first)], encode(t, rec(4))...), "12ab"...), []uint64{4}, nil, 4, 0, 4},
		{"only a torn tail", append(first[:len(first):len(first)], "00000"...), nil, nil, 5, 0, 3},
		{"corrupt line after", append(append(first[:len(first):len(first)], encode(t, rec(4))...), "deadbeef 5 1 x\n"...), []uint64{4}, ErrCorrupt, 0, 5, 3},
		{"cut", first[:len(first)-3], nil, ErrMoved, 0, 0, 3},
		{"emptied", []byte{}, nil, ErrMoved, 0, 0, 3},
		{"removed", nil, nil, ErrMoved, 0, 0, 3},
		{"rewritten with other records", encode(t, recs(7, 8, 9, 10)...), nil, ErrMoved, 0, 0, 3},
		{"first line replaced, same length", append(encode(t, Record{ID: 1, Epoch: 7, Payload: rec(1).Payload}), first[len(encode(t, rec(1))):]...), nil, ErrMoved, 0, 0, 3},
		{"last line replaced, same length", append(first[:len(first)-len(encode(t, rec(3))):len(first)-len(encode(t, rec(3)))], encode(t, Record{ID: 3, Epoch: 9, Payload: rec(3).Payload})...), nil, ErrMoved, 0, 0, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.jsonl")
			writeFile(t, path, first)
			l := Open(osFS, path)
			s, m, err := l.ReadAfter(Mark{})
			if err != nil || !sameRecords(s.Records, recs(1, 2, 3)) {
				t.Fatal(ids(s.Records), err)
			}
			if m.Size != int64(len(first)) || m.Records != 3 || m.Sum != crc32.Checksum(first, castagnoli) {
				t.Fatalf("mark = %+v", m)
			}
			if c.file == nil {
				if err := osFS.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				writeFile(t, path, c.file)
			}
			got, next, err := l.ReadAfter(m)
			switch {
			case c.wantErr == nil && err != nil, c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("ReadAfter error = %v, want %v", err, c.wantErr)
			}
			if !sameRecords(got.Records, recsOrNil(c.wantIDs)) {
				t.Fatalf("records = %v, want %v", ids(got.Records), c.wantIDs)
			}
			if c.wantErr == ErrCorrupt {
				var ce *CorruptError
				whole, werr := l.Read()
				if !errors.As(err, &ce) || !errors.As(werr, new(*CorruptError)) || ce.Line != c.wantLine || ce.Offset != whole.ValidSize {
					t.Fatalf("corrupt error = %+v, whole read %v (valid size %d)", err, werr, whole.ValidSize)
				}
			}
			if got.TornBytes != c.wantTorn {
				t.Errorf("torn bytes = %d, want %d", got.TornBytes, c.wantTorn)
			}
			if next.Records != c.wantMarks {
				t.Errorf("next mark counts %d records, want %d", next.Records, c.wantMarks)
			}
			if c.wantErr != nil {
				return
			}
			// The next mark is the mark of a whole read.
			whole, want, err := l.ReadAfter(Mark{})
			if err != nil {
				t.Fatal(err)
			}
			if next != want {
				t.Fatalf("next mark = %+v, want %+v", next, want)
			}
			if got.ValidSize != whole.ValidSize {
				t.Fatalf("valid size = %d, want %d", got.ValidSize, whole.ValidSize)
			}
		})
	}
}

// TestReadAfterEmptyMark: the mark of an empty or missing log reads the
// whole log.
func TestReadAfterEmptyMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	l := Open(osFS, path)
	if s, next, err := l.ReadAfter(Mark{}); err != nil || len(s.Records) != 0 || next.Records != 0 {
		t.Fatalf("missing log: %+v %+v %v", s, next, err)
	}
	writeFile(t, path, encode(t, recs(1, 2)...))
	s, next, err := l.ReadAfter(Mark{})
	if err != nil || !sameRecords(s.Records, recs(1, 2)) || next.Records != 2 {
		t.Fatalf("ReadAfter(empty mark) = %v %+v %v", ids(s.Records), next, err)
	}
}

func recsOrNil(ids []uint64) []Record {
	if len(ids) == 0 {
		return nil
	}
	return recs(ids...)
}
