package history

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

// damagedLog writes records 1-3 with record 2's payload damaged (its CRC
// fails, its '\n' stays), followed by tail, and returns the log, the bytes
// of the three lines and the damaged line's offset.
func damagedLog(t *testing.T, tail string) (*Log, []byte, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.jsonl")
	data := encode(t, recs(1, 2, 3)...)
	off := int64(len(encode(t, rec(1))))
	data[off+int64(len(encode(t, rec(2))))-3] ^= 0x01
	writeFile(t, path, append(bytes.Clone(data), tail...))
	return Open(osFS, path), data, off
}

// TestEndGoesPastDamagedLines: End counts complete lines, valid or not,
// and reports each damaged one as Read reports the first; a torn tail is
// not counted.
func TestEndGoesPastDamagedLines(t *testing.T) {
	l, data, off := damagedLog(t, `0badc0de 4 1 {"event_id":4`)
	x, err := l.End()
	if err != nil {
		t.Fatal(err)
	}
	if x.End != (Mark{Size: int64(len(data)), Records: 3}) || x.TornBytes != int64(len(`0badc0de 4 1 {"event_id":4`)) {
		t.Errorf("End = %+v, torn %d; want after the 3 lines (%d bytes)", x.End, x.TornBytes, len(data))
	}
	if !slices.Equal(x.IDs, []uint64{1, 3, 2}) {
		t.Errorf("IDs = %v, want [1 3 2] (the valid records', then the damaged line's id field)", x.IDs)
	}
	if len(x.Damaged) != 1 || x.Damaged[0].Line != 2 || x.Damaged[0].Offset != off || !errors.Is(x.Damaged[0], ErrCorrupt) {
		t.Errorf("Damaged = %+v, want line 2 at offset %d", x.Damaged, off)
	}
	if _, err := l.Read(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Read = %v; want the damaged line reported", err)
	}
	if x, err := Open(osFS, filepath.Join(t.TempDir(), "missing")).End(); err != nil || x.End != (Mark{}) {
		t.Errorf("End of a missing log = %+v, %v; want empty", x, err)
	}
}

// TestAppendAndRewriteAfterDamagedLine: an append at End's mark (the
// provider's poison ack) and its redo and replay keep the damaged line and
// everything before the mark byte for byte; a mark whose line count no
// longer matches is refused.
func TestAppendAndRewriteAfterDamagedLine(t *testing.T) {
	l, data, _ := damagedLog(t, `0badc0de 4 1 {"event_id":4`)
	x, err := l.End()
	if err != nil {
		t.Fatal(err)
	}
	poison := recs(99999)
	want := append(bytes.Clone(data), encode(t, poison...)...)
	for i := 0; i < 2; i++ { // the apply, then its redo
		if _, err := l.AppendAtMark(x.End, poison); err != nil {
			t.Fatalf("AppendAtMark #%d: %v", i+1, err)
		}
		if got := readFile(t, l.Path()); !bytes.Equal(got, want) {
			t.Fatalf("after AppendAtMark #%d:\n%q\nwant\n%q", i+1, got, want)
		}
	}
	if _, err := l.AppendAt(x.End.Records, poison); !errors.Is(err, ErrCorrupt) {
		t.Errorf("AppendAt (a whole read) over the damaged line = %v; want ErrCorrupt (it checks the records before base)", err)
	}
	// The replay: what follows the mark is rewritten, whatever it is.
	writeFile(t, l.Path(), append(bytes.Clone(data), "garbage without a newline"...))
	if err := l.RewriteAtMark(x.End, poison); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, l.Path()); !bytes.Equal(got, want) {
		t.Fatalf("after RewriteAtMark:\n%q\nwant\n%q", got, want)
	}
	if err := l.RewriteAt(x.End.Records, poison); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RewriteAt over the damaged line = %v; want ErrCorrupt", err)
	}
	// A '\n' gained inside the prefix (one more line before the mark), a
	// mark not at a line's end, a log shorter than the mark: refused,
	// nothing written.
	split := bytes.Clone(want)
	split[10] = '\n'
	for name, c := range map[string]struct {
		file []byte
		m    Mark
	}{
		"a line more before the mark": {split, x.End},
		"no line ends at the mark":    {want, Mark{Size: x.End.Size - 1, Records: 3}},
		"shorter than the mark":       {data[:len(data)-4], x.End},
	} {
		writeFile(t, l.Path(), c.file)
		if err := l.RewriteAtMark(c.m, poison); !errors.Is(err, ErrConflict) {
			t.Errorf("%s: RewriteAtMark = %v; want ErrConflict", name, err)
		}
		if got := readFile(t, l.Path()); !bytes.Equal(got, c.file) {
			t.Errorf("%s: RewriteAtMark changed the file", name)
		}
	}
}
