package history

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// rec returns a test record whose payload length grows with id.
func rec(id uint64) Record {
	return Record{
		ID:      id,
		Epoch:   id / 3,
		Payload: fmt.Appendf(nil, `{"event_id":%d,"kind":"x y","pad":"%s"}`, id, strings.Repeat("p", int(id%11)*9)),
	}
}

func recs(ids ...uint64) []Record {
	out := make([]Record, len(ids))
	for i, id := range ids {
		out[i] = rec(id)
	}
	return out
}

func encode(t testing.TB, rs ...Record) []byte {
	t.Helper()
	var b []byte
	for _, r := range rs {
		l, err := EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, l...)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := osFS.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, vfs.FilePerm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := osFS.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameRecords(got, want []Record) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !got[i].equal(want[i]) {
			return false
		}
	}
	return true
}

func ids(rs []Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// mustRead reads l and fails on error or on records other than want.
func mustRead(t testing.TB, l *Log, want []Record, torn int64) Scan {
	t.Helper()
	s, err := l.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !sameRecords(s.Records, want) {
		t.Fatalf("Read records = %v, want %v", ids(s.Records), ids(want))
	}
	if s.TornBytes != torn {
		t.Fatalf("TornBytes = %d, want %d", s.TornBytes, torn)
	}
	return s
}

func TestReadMissingFile(t *testing.T) {
	l := Open(vfs.OS{}, filepath.Join(t.TempDir(), "no", "such", "log"))
	s, err := l.Read()
	if err != nil || len(s.Records) != 0 || s.ValidSize != 0 || s.TornBytes != 0 {
		t.Fatalf("Read = %+v, %v; want empty, nil", s, err)
	}
	if n, err := l.Repair(); n != 0 || err != nil {
		t.Fatalf("Repair = %d, %v", n, err)
	}
	if n, size, err := l.Stat(); n != 0 || size != 0 || err != nil {
		t.Fatalf("Stat = %d, %d, %v", n, size, err)
	}
	if _, err := osFS.Stat(filepath.Dir(l.Path())); !vfs.IsNotExist(err) {
		t.Fatalf("Read/Repair/Stat created the directory: %v", err)
	}
}

func TestAppendAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "history.jsonl")
	l := Open(vfs.OS{}, path)
	if l.Path() != path {
		t.Fatalf("Path = %q", l.Path())
	}
	if err := l.Append(recs(1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(recs(3)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(nil); err != nil {
		t.Fatal(err)
	}
	all := recs(1, 2, 3)
	s := mustRead(t, l, all, 0)
	if want := encode(t, all...); !bytes.Equal(readFile(t, path), want) || s.ValidSize != int64(len(want)) {
		t.Fatalf("file = %q (ValidSize %d), want %q", readFile(t, path), s.ValidSize, want)
	}
	n, size, err := l.Stat()
	if err != nil || n != 3 || size != s.ValidSize {
		t.Fatalf("Stat = %d, %d, %v", n, size, err)
	}
	fi, err := osFS.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != vfs.FilePerm {
		t.Errorf("file mode = %v, want %v", fi.Mode().Perm(), vfs.FilePerm)
	}
	di, err := osFS.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != vfs.DirPerm {
		t.Errorf("dir mode = %v, want %v", di.Mode().Perm(), vfs.DirPerm)
	}
	// The payload of a record read back must not see later edits of the
	// caller's slice nor reach into the next record.
	s.Records[0].Payload = append(s.Records[0].Payload, "XXXX"...)
	mustRead(t, l, all, 0)
	if !sameRecords(s.Records[1:], all[1:]) {
		t.Fatal("appending to a payload overwrote the next record")
	}
}

func TestAppendRejectsNewlinePayload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l := Open(vfs.OS{}, path)
	if err := l.Append(recs(1)); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, path)
	bad := []Record{rec(2), {ID: 3, Payload: []byte("a\nb")}}
	if err := l.Append(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Append = %v, want ErrInvalid", err)
	}
	if n, err := l.AppendAt(1, bad); !errors.Is(err, ErrInvalid) || n != 0 {
		t.Fatalf("AppendAt = %d, %v, want ErrInvalid", n, err)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("file changed")
	}
}

// TestTornTail cuts a 5-record file at every offset inside its last two
// records.
func TestTornTail(t *testing.T) {
	all := recs(1, 2, 3, 4, 5)
	data := encode(t, all...)
	ends := make([]int, len(all)) // ends[i] = offset after record i
	off := 0
	for i, r := range all {
		off += encodedLen(r)
		ends[i] = off
	}
	newRec := rec(100)
	path := filepath.Join(t.TempDir(), "log")
	l := Open(vfs.OS{}, path)
	for _, repairFirst := range []bool{true, false} {
		for cut := ends[2]; cut <= len(data); cut++ {
			complete := 0
			for complete < len(all) && ends[complete] <= cut {
				complete++
			}
			valid := ends[complete-1]
			torn := int64(cut - valid)
			name := fmt.Sprintf("repair=%v/cut=%d", repairFirst, cut)

			writeFile(t, path, data[:cut])
			s, err := l.Read()
			if err != nil {
				t.Fatalf("%s: Read: %v", name, err)
			}
			if !sameRecords(s.Records, all[:complete]) || s.ValidSize != int64(valid) || s.TornBytes != torn {
				t.Fatalf("%s: Read = %v valid %d torn %d, want %v valid %d torn %d",
					name, ids(s.Records), s.ValidSize, s.TornBytes, ids(all[:complete]), valid, torn)
			}
			if repairFirst {
				n, err := l.Repair()
				if err != nil || n != torn {
					t.Fatalf("%s: Repair = %d, %v, want %d", name, n, err, torn)
				}
				if got := readFile(t, path); !bytes.Equal(got, data[:valid]) {
					t.Fatalf("%s: after Repair file has %d bytes, want %d", name, len(got), valid)
				}
				if n, err := l.Repair(); n != 0 || err != nil {
					t.Fatalf("%s: second Repair = %d, %v", name, n, err)
				}
			}
			if err := l.Append([]Record{newRec}); err != nil {
				t.Fatalf("%s: Append: %v", name, err)
			}
			want := append(append([]Record(nil), all[:complete]...), newRec)
			mustRead(t, l, want, 0)
			if got := readFile(t, path); !bytes.Equal(got, append(bytes.Clone(data[:valid]), encode(t, newRec)...)) {
				t.Fatalf("%s: file = %q", name, got)
			}
		}
	}
}

func TestZeroFilledTail(t *testing.T) {
	good := encode(t, recs(1, 2, 3)...)
	partial := encode(t, rec(4))[:20]
	zeros := func(n int) []byte { return make([]byte, n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name  string
		data  []byte
		valid int // number of good records
	}{
		{"page of zeros", cat(good, zeros(4096)), 3},
		{"one zero", cat(good, zeros(1)), 3},
		{"zeros after partial line", cat(good, partial, zeros(4096-len(partial))), 3},
		{"partial line after zeros", cat(good, zeros(100), partial), 3},
		{"zeros only", zeros(4096), 0},
		{"partial line only", partial, 0},
		{"zeros after first record", cat(encode(t, rec(1)), zeros(300)), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			writeFile(t, path, tt.data)
			l := Open(vfs.OS{}, path)
			want := recs(1, 2, 3)[:tt.valid]
			validSize := len(encode(t, want...))
			torn := int64(len(tt.data) - validSize)
			mustRead(t, l, want, torn)
			n, err := l.Repair()
			if err != nil || n != torn {
				t.Fatalf("Repair = %d, %v, want %d", n, err, torn)
			}
			mustRead(t, l, want, 0)
			if err := l.Append(recs(9)); err != nil {
				t.Fatal(err)
			}
			mustRead(t, l, append(want, rec(9)), 0)
		})
	}
}

func TestCorruption(t *testing.T) {
	all := recs(1, 2, 3, 4, 5)
	data := encode(t, all...)
	start := func(i int) int { return len(encode(t, all[:i]...)) }
	flip := func(at int) []byte {
		b := bytes.Clone(data)
		b[at] ^= 1
		return b
	}
	tests := []struct {
		name string
		data []byte
		bad  int // index of the first bad line
	}{
		{"middle record payload", flip(start(2) + 30), 2},
		{"middle record id", flip(start(2) + 9), 2},
		{"first record crc", flip(0), 0},
		{"final record payload", flip(len(data) - 2), 4},
		{"final record epoch", flip(start(4) + 11), 4},
		{"final record followed by torn tail", append(flip(len(data)-2), "0badc0de 6"...), 4},
		{"nul line at end", append(bytes.Clone(data), "\x00\x00\x00\x00\n"...), 5},
		{"empty line", append(bytes.Clone(data), '\n'), 5},
		{"glued fragment", append(append(bytes.Clone(data), encode(t, rec(6))[:15]...), encode(t, rec(7))...), 5},
		{"leading zero", append(bytes.Clone(data), append(line("06 1 {}"), '\n')...), 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			writeFile(t, path, tt.data)
			l := Open(vfs.OS{}, path)
			s, err := l.Read()
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read error = %v, want *CorruptError", err)
			}
			if ce.Path != path || ce.Line != tt.bad+1 || ce.Offset != int64(start(tt.bad)) || ce.Reason == "" {
				t.Fatalf("CorruptError = %+v, want line %d offset %d", ce, tt.bad+1, start(tt.bad))
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q lacks the path", err)
			}
			if !sameRecords(s.Records, all[:tt.bad]) || s.ValidSize != ce.Offset {
				t.Fatalf("Read records = %v (valid %d), want %v", ids(s.Records), s.ValidSize, ids(all[:tt.bad]))
			}
			if n, size, err := l.Stat(); n != tt.bad || size != ce.Offset || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Stat = %d, %d, %v", n, size, err)
			}
			if n, err := l.Repair(); n != 0 || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Repair = %d, %v, want ErrCorrupt", n, err)
			}
			if err := l.Append(recs(50)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Append = %v, want ErrCorrupt", err)
			}
			if n, err := l.AppendAt(tt.bad, recs(50)); n != 0 || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("AppendAt = %d, %v, want ErrCorrupt", n, err)
			}
			if !bytes.Equal(readFile(t, path), tt.data) {
				t.Fatal("file changed")
			}
		})
	}
}

func TestAppendAt(t *testing.T) {
	r := recs(1, 2, 3, 4, 5)
	full3 := encode(t, r[:3]...)
	tests := []struct {
		name     string
		initial  []byte // nil: no file
		base     int
		recs     []Record
		appended int
		want     []Record // records afterwards; nil with wantErr
		wantErr  error
	}{
		{"new file", nil, 0, r[:3], 3, r[:3], nil},
		{"all present", full3, 0, r[:3], 0, r[:3], nil},
		{"tail present", full3, 1, r[1:3], 0, r[:3], nil},
		{"continue", full3, 3, r[3:5], 2, r, nil},
		{"overlap", full3, 2, r[2:5], 2, r, nil},
		{"partial plus torn fragment", append(encode(t, r[0]), encode(t, r[1])[:25]...), 0, r[:3], 2, r[:3], nil},
		{"partial plus zeros", append(encode(t, r[0]), make([]byte, 4096)...), 0, r[:3], 2, r[:3], nil},
		{"only torn fragment", encode(t, r[0])[:10], 0, r[:3], 3, r[:3], nil},
		{"continue after torn fragment", append(encode(t, r[:3]...), encode(t, r[3])[:7]...), 3, r[3:5], 2, r, nil},
		{"empty batch at end", full3, 3, nil, 0, r[:3], nil},
		{"empty batch on missing file", nil, 0, nil, 0, nil, nil},
		{"base beyond end", full3, 4, r[4:5], 0, nil, ErrConflict},
		{"base beyond end of missing file", nil, 1, r[1:3], 0, nil, ErrConflict},
		{"log longer than batch", full3, 0, r[:2], 0, nil, ErrConflict},
		{"empty batch before end", full3, 2, nil, 0, nil, ErrConflict},
		{"different payload", full3, 2, []Record{{ID: 3, Epoch: r[2].Epoch, Payload: []byte("other")}, r[3]}, 0, nil, ErrConflict},
		{"different epoch", full3, 2, []Record{{ID: 3, Epoch: r[2].Epoch + 1, Payload: r[2].Payload}}, 0, nil, ErrConflict},
		{"different id", full3, 0, []Record{r[0], r[4], r[2]}, 0, nil, ErrConflict},
		{"negative base", full3, -1, r[:3], 0, nil, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			if tt.initial != nil {
				writeFile(t, path, tt.initial)
			}
			l := Open(vfs.OS{}, path)
			n, err := l.AppendAt(tt.base, tt.recs)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || n != 0 {
					t.Fatalf("AppendAt = %d, %v, want %v", n, err, tt.wantErr)
				}
				if tt.initial == nil {
					if _, err := osFS.Stat(path); !vfs.IsNotExist(err) {
						t.Fatalf("failed AppendAt created the file: %v", err)
					}
				} else if !bytes.Equal(readFile(t, path), tt.initial) {
					t.Fatal("file changed")
				}
				return
			}
			if err != nil || n != tt.appended {
				t.Fatalf("AppendAt = %d, %v, want %d", n, err, tt.appended)
			}
			mustRead(t, l, tt.want, 0)
			if tt.initial == nil && tt.want == nil {
				if _, err := osFS.Stat(path); !vfs.IsNotExist(err) {
					t.Fatalf("empty AppendAt created the file: %v", err)
				}
			}
			// Redo is idempotent.
			for range 2 {
				if n, err := l.AppendAt(tt.base, tt.recs); err != nil || n != 0 {
					t.Fatalf("repeated AppendAt = %d, %v", n, err)
				}
			}
			mustRead(t, l, tt.want, 0)
		})
		// The same through AppendAtMark, with the mark of record base
		// (where the initial log has that many complete records).
		full := 0
		for full < len(r) && bytes.HasPrefix(tt.initial, encode(t, r[:full+1]...)) {
			full++
		}
		if tt.base <= 0 || tt.base > full {
			continue
		}
		t.Run(tt.name+" at mark", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			writeFile(t, path, tt.initial)
			l := Open(vfs.OS{}, path)
			m := Mark{Size: int64(len(encode(t, r[:tt.base]...))), Records: tt.base}
			n, err := l.AppendAtMark(m, tt.recs)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || n != 0 || !bytes.Equal(readFile(t, path), tt.initial) {
					t.Fatalf("AppendAtMark = %d, %v, want %v and no change", n, err, tt.wantErr)
				}
				return
			}
			if err != nil || n != tt.appended {
				t.Fatalf("AppendAtMark = %d, %v, want %d", n, err, tt.appended)
			}
			mustRead(t, l, tt.want, 0)
			if n, err := l.AppendAtMark(m, tt.recs); err != nil || n != 0 {
				t.Fatalf("repeated AppendAtMark = %d, %v", n, err)
			}
			mustRead(t, l, tt.want, 0)
		})
	}
}

func TestAppendAtThreeTimes(t *testing.T) {
	l := Open(vfs.OS{}, filepath.Join(t.TempDir(), "log"))
	r := recs(1, 2, 3)
	for i, want := range []int{3, 0, 0} {
		n, err := l.AppendAt(0, r)
		if err != nil || n != want {
			t.Fatalf("AppendAt #%d = %d, %v, want %d", i+1, n, err, want)
		}
	}
	mustRead(t, l, r, 0)
}

func TestDuplicateIDs(t *testing.T) {
	tests := []struct {
		name    string
		initial []Record // nil: no file
		batch   []Record
	}{
		{"within batch, new file", nil, recs(1, 2, 1)},
		{"within batch, existing file", recs(1, 2), recs(3, 4, 3)},
		{"vs existing", recs(1, 2, 3), recs(4, 2)},
		{"vs existing, same record", recs(1, 2, 3), recs(3)},
		{"vs existing, other payload", recs(1, 2, 3), []Record{{ID: 1, Payload: []byte("x")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			l := Open(vfs.OS{}, path)
			if tt.initial != nil {
				if err := l.Append(tt.initial); err != nil {
					t.Fatal(err)
				}
			}
			err := l.Append(tt.batch)
			if !errors.Is(err, ErrDuplicateID) {
				t.Fatalf("Append = %v, want ErrDuplicateID", err)
			}
			if tt.initial == nil {
				if _, err := osFS.Stat(path); !vfs.IsNotExist(err) {
					t.Fatalf("rejected Append created the file: %v", err)
				}
				return
			}
			if got := readFile(t, path); !bytes.Equal(got, encode(t, tt.initial...)) {
				t.Fatalf("file changed: %q", got)
			}
		})
	}
}

func TestSyncDiscipline(t *testing.T) {
	tests := []struct {
		name    string
		initial []byte // nil: no file
		sub     string // extra missing directories between TempDir and the file
		op      func(l *Log) error
		want    vfs.Counts
	}{
		{"append to existing", encode(t, rec(1)), "", func(l *Log) error { return l.Append(recs(2, 3)) }, vfs.Counts{FileSyncs: 1}},
		{"append to new file", nil, "", func(l *Log) error { return l.Append(recs(1, 2)) }, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"append to new file in new dirs", nil, "a/b", func(l *Log) error { return l.Append(recs(1)) }, vfs.Counts{FileSyncs: 1, DirSyncs: 3}},
		{"append to empty existing file", []byte{}, "", func(l *Log) error { return l.Append(recs(1)) }, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"append after torn tail", append(encode(t, rec(1)), "abc"...), "", func(l *Log) error { return l.Append(recs(2)) }, vfs.Counts{FileSyncs: 2}},
		{"append rejected", encode(t, rec(1)), "", func(l *Log) error { _ = l.Append(recs(1)); return nil }, vfs.Counts{}},
		{"empty append", encode(t, rec(1)), "", func(l *Log) error { return l.Append(nil) }, vfs.Counts{}},
		{"append at end", encode(t, rec(1)), "", func(l *Log) error { _, err := l.AppendAt(1, recs(2)); return err }, vfs.Counts{FileSyncs: 1}},
		{"append at new file", nil, "", func(l *Log) error { _, err := l.AppendAt(0, recs(1)); return err }, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"append at, nothing to do", encode(t, rec(1)), "", func(l *Log) error { _, err := l.AppendAt(1, nil); return err }, vfs.Counts{}},
		{"append at, all present", encode(t, recs(1, 2)...), "", func(l *Log) error { _, err := l.AppendAt(0, recs(1, 2)); return err }, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"append at, some present", encode(t, recs(1, 2)...), "", func(l *Log) error { _, err := l.AppendAt(1, recs(2, 3)); return err }, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"repair clean", encode(t, rec(1)), "", func(l *Log) error { _, err := l.Repair(); return err }, vfs.Counts{}},
		{"repair torn", append(encode(t, rec(1)), 0, 0), "", func(l *Log) error { _, err := l.Repair(); return err }, vfs.Counts{FileSyncs: 1}},
		{"read", append(encode(t, rec(1)), 0, 0), "", func(l *Log) error { _, err := l.Read(); return err }, vfs.Counts{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, filepath.FromSlash(tt.sub), "log")
			if tt.initial != nil {
				writeFile(t, path, tt.initial)
			}
			c := vfs.Counting(vfs.OS{})
			if err := tt.op(Open(c, path)); err != nil {
				t.Fatal(err)
			}
			if got := c.Counts(); got != tt.want {
				t.Fatalf("syncs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestConcurrentWriterDetected checks the guard against unserialized
// appenders: a file that grew between the read and the write is refused.
func TestConcurrentWriterDetected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	writeFile(t, path, append(encode(t, rec(1)), "torn"...))
	var l *Log
	fsys := &hookFS{FS: vfs.OS{}, beforeOpen: func() {
		// Another "process" completes its append after our read.
		writeFile(t, path, encode(t, recs(1, 2)...))
	}}
	l = Open(fsys, path)
	if err := l.Append(recs(3)); !errors.Is(err, ErrConflict) {
		t.Fatalf("Append = %v, want ErrConflict", err)
	}
	if got := readFile(t, path); !bytes.Equal(got, encode(t, recs(1, 2)...)) {
		t.Fatalf("file = %q", got)
	}
}

// hookFS runs beforeOpen once before the first OpenFile.
type hookFS struct {
	vfs.FS
	beforeOpen func()
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	if f := h.beforeOpen; f != nil {
		h.beforeOpen = nil
		f()
	}
	return h.FS.OpenFile(name, flag, perm)
}

// osFS is the real file system, for test setup and inspection.
var osFS vfs.FS = vfs.OS{}
