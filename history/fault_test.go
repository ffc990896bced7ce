package history

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

var errInjected = errors.New("injected fault")

// faultFS wraps an FS and injects errors into File.Write, File.Sync and
// SyncDir. It is used from one goroutine at a time.
type faultFS struct {
	vfs.FS
	// writeLimit >= 0 makes every Write write at most writeLimit bytes and
	// then fail with errInjected (a short write, or a full write reporting
	// an error). Negative: no write fault.
	writeLimit int
	// failSync > 0 makes the failSync-th File.Sync call fail (without
	// syncing).
	failSync int
	// failDirSync makes SyncDir fail.
	failDirSync bool

	writes, syncs, dirSyncs int
}

func newFaultFS() *faultFS { return &faultFS{FS: vfs.OS{}, writeLimit: -1} }

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *faultFS) SyncDir(name string) error {
	f.dirSyncs++
	if f.failDirSync {
		return errInjected
	}
	return f.FS.SyncDir(name)
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.fs.writes++
	if lim := f.fs.writeLimit; lim >= 0 {
		n, err := f.File.Write(p[:min(lim, len(p))])
		if err != nil {
			return n, err
		}
		return n, errInjected
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	f.fs.syncs++
	if f.fs.syncs == f.fs.failSync {
		return errInjected
	}
	return f.File.Sync()
}

// checkPrefixState reads path and checks it holds base followed by a prefix
// of batch and perhaps a torn tail, never a corrupt line. It returns how many
// records of batch are there.
func checkPrefixState(t *testing.T, path string, base, batch []Record) (landed int, torn int64) {
	t.Helper()
	s, err := Open(osFS, path).Read()
	if err != nil {
		t.Fatalf("Read after fault: %v", err)
	}
	if len(s.Records) < len(base) || !sameRecords(s.Records[:len(base)], base) {
		t.Fatalf("old records lost: %v", ids(s.Records))
	}
	landed = len(s.Records) - len(base)
	if landed > len(batch) || !sameRecords(s.Records[len(base):], batch[:landed]) {
		t.Fatalf("records after fault = %v, want %v + a prefix of %v", ids(s.Records), ids(base), ids(batch))
	}
	return landed, s.TornBytes
}

func TestFaultWrite(t *testing.T) {
	base := recs(1, 2, 3)
	batch := recs(4, 5, 6)
	l4, l5 := encodedLen(batch[0]), encodedLen(batch[1])
	total := len(encode(t, batch...))
	for _, limit := range []int{0, 1, l4 - 1, l4, l4 + 1, l4 + l5, total - 1, total} {
		for _, redo := range []bool{false, true} {
			t.Run(fmt.Sprintf("limit=%d/redo=%v", limit, redo), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "log")
				writeFile(t, path, encode(t, base...))
				ffs := newFaultFS()
				ffs.writeLimit = limit
				err := Open(ffs, path).Append(batch)
				if !errors.Is(err, errInjected) {
					t.Fatalf("Append = %v, want the injected error", err)
				}
				if ffs.writes != 1 || ffs.syncs != 0 {
					t.Fatalf("writes = %d, syncs = %d; want 1 write and no sync after a failed write", ffs.writes, ffs.syncs)
				}
				landed, torn := checkPrefixState(t, path, base, batch)
				if wantTorn := int64(limit - len(encode(t, batch[:landed]...))); torn != wantTorn {
					t.Fatalf("TornBytes = %d, want %d", torn, wantTorn)
				}
				l := Open(osFS, path)
				if redo {
					n, err := l.AppendAt(len(base), batch)
					if err != nil || n != len(batch)-landed {
						t.Fatalf("AppendAt = %d, %v, want %d", n, err, len(batch)-landed)
					}
					mustRead(t, l, append(append([]Record(nil), base...), batch...), 0)
					return
				}
				if n, err := l.Repair(); err != nil || n != torn {
					t.Fatalf("Repair = %d, %v, want %d", n, err, torn)
				}
				if err := l.Append(recs(50)); err != nil {
					t.Fatalf("Append after repair: %v", err)
				}
				want := append(append(append([]Record(nil), base...), batch[:landed]...), rec(50))
				mustRead(t, l, want, 0)
			})
		}
	}
}

func TestFaultSync(t *testing.T) {
	base := recs(1, 2, 3)
	batch := recs(4, 5)
	tests := []struct {
		name        string
		initial     []byte // nil: no file
		failSync    int
		failDirSync bool
		wantSyncs   int
		wantWrites  int
	}{
		{"final fsync", encode(t, base...), 1, false, 1, 1},
		{"fsync after truncating torn tail", append(encode(t, base...), encode(t, rec(9))[:12]...), 1, false, 1, 0},
		{"final fsync after repair", append(encode(t, base...), 0, 0, 0), 2, false, 2, 1},
		{"dir fsync of new file", nil, 0, true, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			old := base
			if tt.initial != nil {
				writeFile(t, path, tt.initial)
			} else {
				old = nil
			}
			ffs := newFaultFS()
			ffs.failSync = tt.failSync
			ffs.failDirSync = tt.failDirSync
			err := Open(ffs, path).Append(batch)
			if !errors.Is(err, errInjected) {
				t.Fatalf("Append = %v, want the injected error", err)
			}
			if ffs.syncs != tt.wantSyncs || ffs.writes != tt.wantWrites {
				t.Fatalf("syncs = %d, writes = %d; want %d, %d (an fsync error is never retried)",
					ffs.syncs, ffs.writes, tt.wantSyncs, tt.wantWrites)
			}
			checkPrefixState(t, path, old, batch)
			// The redo completes the append and makes it durable.
			c := vfs.Counting(osFS)
			l := Open(c, path)
			if _, err := l.AppendAt(len(old), batch); err != nil {
				t.Fatalf("AppendAt: %v", err)
			}
			if c.Counts().FileSyncs == 0 {
				t.Fatal("redo did not fsync the file")
			}
			mustRead(t, l, append(append([]Record(nil), old...), batch...), 0)
			if err := l.Append(recs(50)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
