package lease_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// readCounter counts the reads of whole files (how the lease file is read).
type readCounter struct {
	vfs.FS
	n int
}

func (r *readCounter) ReadFile(path string) ([]byte, error) {
	r.n++
	return r.FS.ReadFile(path)
}

// TestGuardReadsTheFileOnce: inside one Guard only the first Read reads the
// lease file; later Reads give what it read or what Write wrote since. A
// Write that fails forgets it: the next Read reads the file, which a failed
// write in place whose undo failed too has left unparseable - a Guard that
// kept the content it tried to write (or the one before) would report a
// lease the file does not hold. An error is not remembered either.
func TestGuardReadsTheFileOnce(t *testing.T) {
	ctx := context.Background()
	const lockPath, leasePath = "/d/l.lock", "/d/l.json"
	tok := "00000000-0000-4000-8000-000000000001"
	for _, tc := range []struct {
		name      string
		steps     func(t *testing.T, g *lease.Guard, mem *vfs.MemFS)
		wantReads int
	}{
		{"reads after a read", func(t *testing.T, g *lease.Guard, _ *vfs.MemFS) {
			for range 3 {
				if l, ok, err := g.Read(); err != nil || !ok || l.Fence != 1 {
					t.Fatalf("Read = %+v, %v, %v; want fence 1", l, ok, err)
				}
			}
		}, 1},
		{"reads after a write", func(t *testing.T, g *lease.Guard, _ *vfs.MemFS) {
			if err := g.Write(lease.Lease{Token: tok, Fence: 7, Data: []byte(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
			l, ok, err := g.Read()
			if err != nil || !ok || l.Fence != 7 || string(l.Data) != `{"n":1}` {
				t.Fatalf("Read = %+v, %v, %v; want fence 7 and the written data", l, ok, err)
			}
			l.Data[0] = 'X' // a caller's copy: the next Read is not changed
			if l, _, _ := g.Read(); string(l.Data) != `{"n":1}` {
				t.Fatalf("Read after changing a returned copy = %s", l.Data)
			}
		}, 0},
		{"a failed write forgets", func(t *testing.T, g *lease.Guard, mem *vfs.MemFS) {
			if _, _, err := g.Read(); err != nil {
				t.Fatal(err)
			}
			// A short write in place, then its undo fails: the file is torn.
			// Cut inside the new owner, which the old content lacks, so the
			// mix does not parse.
			mem.InjectShortWrite(1, 60, syscall.ENOSPC)
			mem.InjectError("write", 2, syscall.EIO)
			if err := g.Write(lease.Lease{Token: tok, Owner: "abcdefghij", Fence: 9}); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Write = %v, want ENOSPC", err)
			}
			if l, _, err := g.Read(); !errors.Is(err, lease.ErrCorrupt) {
				t.Fatalf("Read after a torn write = %+v, %v; want ErrCorrupt", l, err)
			}
			// The error is not remembered: a good write, then a read of it.
			if err := g.Write(lease.Lease{Token: tok, Fence: 10}); err != nil {
				t.Fatal(err)
			}
			if l, _, err := g.Read(); err != nil || l.Fence != 10 {
				t.Fatalf("Read = %+v, %v; want fence 10", l, err)
			}
		}, 2},
		{"reads after RemoveLease", func(t *testing.T, g *lease.Guard, _ *vfs.MemFS) {
			if _, _, err := g.Read(); err != nil {
				t.Fatal(err)
			}
			if err := g.RemoveLease(); err != nil {
				t.Fatal(err)
			}
			if l, ok, err := g.Read(); err != nil || ok || l.Token != "" {
				t.Fatalf("Read after RemoveLease = %+v, %v, %v; want no lease", l, ok, err)
			}
		}, 1},
		{"a failed read is not remembered", func(t *testing.T, g *lease.Guard, mem *vfs.MemFS) {
			mem.InjectError("read", 1, syscall.EIO)
			if _, _, err := g.Read(); !errors.Is(err, syscall.EIO) {
				t.Fatalf("Read = %v, want EIO", err)
			}
			if l, _, err := g.Read(); err != nil || l.Fence != 1 {
				t.Fatalf("Read = %+v, %v; want fence 1", l, err)
			}
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			if err := mem.MkdirAll("/d", vfs.DirPerm); err != nil {
				t.Fatal(err)
			}
			rc := &readCounter{FS: vfs.NoSync(mem)}
			s := lease.NewStore(rc, clock.NewManual(t0)).WithInPlaceWrites()
			g, err := s.Lock(ctx, lockPath, leasePath)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Write(lease.Lease{Token: tok, Fence: 1}); err != nil {
				t.Fatal(err)
			}
			if err := g.Unlock(); err != nil {
				t.Fatal(err)
			}
			g, err = s.Lock(ctx, lockPath, leasePath)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Unlock()
			rc.n = 0
			tc.steps(t, g, mem)
			if rc.n != tc.wantReads {
				t.Errorf("the lease file was read %d times, want %d", rc.n, tc.wantReads)
			}
		})
	}
}
