package history

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// TestReadAfter: reading only what follows a mark gives the records a
// whole read gives after it, with marks that chain, and refuses (ErrMoved)
// every log that visibly does not reach the mark.
func TestReadAfter(t *testing.T) {
	first := encode(t, recs(1, 2, 3)...)
	grow := func(extra ...byte) []byte { return append(first[:len(first):len(first)], extra...) }
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
		{"appended", grow(encode(t, recs(4, 5)...)...), []uint64{4, 5}, nil, 0, 0, 5},
		{"appended with a torn tail", append(grow(encode(t, rec(4))...), "12ab"...), []uint64{4}, nil, 4, 0, 4},
		{"only a torn tail", grow([]byte("00000")...), nil, nil, 5, 0, 3},
		{"corrupt line after", append(grow(encode(t, rec(4))...), "deadbeef 5 1 x\n"...), []uint64{4}, ErrCorrupt, 0, 5, 3},
		{"cut", first[:len(first)-3], nil, ErrMoved, 0, 0, 3},
		{"emptied", []byte{}, nil, ErrMoved, 0, 0, 3},
		{"removed", nil, nil, ErrMoved, 0, 0, 3},
		{"no line end before the mark", append([]byte("0"), first...), nil, ErrMoved, 0, 0, 3},
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
			if m != (Mark{Size: int64(len(first)), Records: 3}) {
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

// readCountFS counts the bytes read from files through it.
type readCountFS struct {
	vfs.FS
	read int64
}

func (f *readCountFS) ReadFile(name string) ([]byte, error) {
	data, err := f.FS.ReadFile(name)
	f.read += int64(len(data))
	return data, err
}

func (f *readCountFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &readCountFile{File: file, fs: f}, nil
}

type readCountFile struct {
	vfs.File
	fs *readCountFS
}

func (f *readCountFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.fs.read += int64(n)
	return n, err
}

func (f *readCountFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.read += int64(n)
	return n, err
}

// TestAfterMarkReadsOnlyTheTail: ReadAfter and AppendAtMark read the bytes
// after the mark (and the one before it), not the prefix: a prefix of 2,000
// records costs nothing more than an empty one. The prefix is trusted, not
// read: one overwritten with other bytes of the same length goes unseen.
func TestAfterMarkReadsOnlyTheTail(t *testing.T) {
	var many []uint64
	for id := uint64(1); id <= 2000; id++ {
		many = append(many, id)
	}
	prefix := encode(t, recs(many...)...)
	tail := encode(t, recs(2001, 2002)...)
	path := filepath.Join(t.TempDir(), "h.jsonl")
	writeFile(t, path, append(prefix[:len(prefix):len(prefix)], tail...))
	cfs := &readCountFS{FS: osFS}
	l := Open(cfs, path)
	m := Mark{Size: int64(len(prefix)), Records: 2000}

	s, next, err := l.ReadAfter(m)
	if err != nil || !sameRecords(s.Records, recs(2001, 2002)) || next.Records != 2002 {
		t.Fatalf("ReadAfter = %v, %+v, %v", ids(s.Records), next, err)
	}
	if want := int64(len(tail) + 1); cfs.read != want {
		t.Fatalf("ReadAfter read %d bytes, want %d (the tail and the line end before it)", cfs.read, want)
	}

	cfs.read = 0
	if n, err := l.AppendAtMark(next, recs(2003)); err != nil || n != 1 {
		t.Fatalf("AppendAtMark = %d, %v", n, err)
	}
	if cfs.read != 1 {
		t.Fatalf("AppendAtMark at the end read %d bytes, want 1", cfs.read)
	}

	// The trust: a prefix overwritten with other bytes of the same length
	// is not looked at.
	garbage := bytes.Repeat([]byte("x"), len(prefix)-1)
	data := readFile(t, path)
	copy(data, append(garbage, '\n'))
	writeFile(t, path, data)
	if s, _, err := l.ReadAfter(m); err != nil || !sameRecords(s.Records, recs(2001, 2002, 2003)) {
		t.Fatalf("ReadAfter over an overwritten prefix = %v, %v", ids(s.Records), err)
	}
	if _, err := l.Read(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a whole read of the overwritten log: %v, want ErrCorrupt", err)
	}
}

// TestMarkValidation: a mark whose size and record count disagree is
// refused.
func TestMarkValidation(t *testing.T) {
	l := Open(osFS, filepath.Join(t.TempDir(), "h.jsonl"))
	for _, m := range []Mark{{Size: -1}, {Records: -1}, {Size: 10}, {Records: 2}} {
		if _, _, err := l.ReadAfter(m); !errors.Is(err, ErrInvalid) {
			t.Errorf("ReadAfter(%+v) = %v, want ErrInvalid", m, err)
		}
		if _, err := l.AppendAtMark(m, recs(1)); !errors.Is(err, ErrInvalid) {
			t.Errorf("AppendAtMark(%+v) = %v, want ErrInvalid", m, err)
		}
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
