package lease_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// TestInPlaceWrites: a Store with in-place writes replaces a new or
// outgrown lease file atomically (padded to a multiple of 512 bytes) and
// overwrites one that fits in place, padding with spaces; every version
// reads back exactly. A failed or short write in place puts the old content
// back and fails; a failed rename of a new file leaves no file. Without
// WithInPlaceWrites every write is an atomic replace.
func TestInPlaceWrites(t *testing.T) {
	ctx := context.Background()
	const lockPath, leasePath = "/d/l.lock", "/d/l.json"
	big := `{"pad":"` + strings.Repeat("x", 700) + `"}`
	// Longer than a page: never written in place, so a kill -9 cannot tear
	// it between pages (the package doc's "kill -9 during the write").
	huge := `{"pad":"` + strings.Repeat("x", os.Getpagesize()) + `"}`
	type step struct {
		data        string // lease Data
		fault       func(m *vfs.MemFS)
		wantErr     error
		wantReplace bool // a rename happened (new or outgrown file)
		wantSize    int64
	}
	for _, tc := range []struct {
		name    string
		inPlace bool
		steps   []step
	}{
		{"in place", true, []step{
			{data: `{"a":1}`, wantReplace: true, wantSize: 512},
			{data: `{"a":2,"b":[1,2,3]}`, wantSize: 512},
			{data: ``, wantSize: 512},
			{data: big, wantReplace: true, wantSize: 1024},
			{data: `{"a":3}`, wantSize: 1024},
			{data: huge, wantReplace: true},
			{data: huge, wantReplace: true},
			{data: `{"a":4}`, wantReplace: true},
		}},
		{"faults", true, []step{
			{data: `{"rename":"fails"}`, fault: func(m *vfs.MemFS) { m.InjectError("rename", 1, syscall.EIO) }, wantErr: syscall.EIO},
			{data: `{"a":1}`, wantReplace: true, wantSize: 512},
			{data: `{"short":"write"}`, fault: func(m *vfs.MemFS) { m.InjectShortWrite(1, 100, syscall.ENOSPC) }, wantErr: syscall.ENOSPC},
			{data: `{"write":"fails"}`, fault: func(m *vfs.MemFS) { m.InjectError("write", 1, syscall.EIO) }, wantErr: syscall.EIO},
			{data: `{"open":"fails"}`, fault: func(m *vfs.MemFS) { m.InjectError("open", 1, syscall.EIO) }, wantErr: syscall.EIO},
			{data: `{"a":2}`, wantSize: 512},
		}},
		{"atomic replace (default)", false, []step{
			{data: `{"a":1}`, wantReplace: true},
			{data: `{"a":2}`, wantReplace: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			if err := mem.MkdirAll("/d", vfs.DirPerm); err != nil {
				t.Fatal(err)
			}
			rc := &renameCounter{FS: vfs.NoSync(mem)}
			s := lease.NewStore(rc, clock.NewManual(t0))
			if tc.inPlace {
				s = s.WithInPlaceWrites()
			}
			for i, st := range tc.steps {
				g, err := s.Lock(ctx, lockPath, leasePath)
				if err != nil {
					t.Fatal(err)
				}
				before, _ := mem.ReadFile(leasePath)
				renames := rc.n
				l := lease.Lease{Token: "00000000-0000-4000-8000-000000000001", Owner: "o", Fence: uint64(i + 1), ExpiresAtMs: int64(i)}
				if st.data != "" {
					l.Data = []byte(st.data)
				}
				if st.fault != nil {
					st.fault(mem)
				}
				err = g.Write(l)
				mem.ClearFaults()
				if st.wantErr != nil {
					if !errors.Is(err, st.wantErr) {
						t.Fatalf("step %d: Write = %v, want %v", i, err, st.wantErr)
					}
					after, rerr := mem.ReadFile(leasePath)
					if string(after) != string(before) || (before == nil) != errors.Is(rerr, fs.ErrNotExist) {
						t.Fatalf("step %d: failed Write changed the file:\n%q\nwas\n%q", i, after, before)
					}
					g.Unlock()
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Write: %v", i, err)
				}
				got, _, err := g.Read()
				if err != nil || got.Fence != l.Fence || string(got.Data) != string(l.Data) {
					t.Fatalf("step %d: Read = %+v, %v; want %+v", i, got, err, l)
				}
				info, err := mem.Stat(leasePath)
				if err != nil {
					t.Fatal(err)
				}
				if replaced := rc.n > renames; replaced != st.wantReplace {
					t.Fatalf("step %d: replaced = %v, want %v", i, replaced, st.wantReplace)
				}
				if st.wantSize != 0 && info.Size() != st.wantSize {
					t.Fatalf("step %d: size %d, want %d", i, info.Size(), st.wantSize)
				}
				g.Unlock()
			}
			names, _ := mem.ReadDirNames("/d")
			for _, n := range names {
				if vfs.IsTemp(n) {
					t.Errorf("temporary file left: %s", n)
				}
			}
		})
	}
}

// renameCounter counts renames: a lease write that renames replaced the file.
type renameCounter struct {
	vfs.FS
	n int
}

func (r *renameCounter) Rename(from, to string) error {
	r.n++
	return r.FS.Rename(from, to)
}
