package vfs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// scanAll collects a ScanDir listing (copying each name: ScanDir reuses its
// buffer).
func scanAll(t *testing.T, fsys vfs.FS, dir string) ([]string, error) {
	t.Helper()
	var out []string
	err := vfs.ScanDir(fsys, dir, func(name []byte) error {
		out = append(out, string(name))
		return nil
	})
	slices.Sort(out)
	return out, err
}

// TestScanDir: ScanDir lists exactly what ReadDirNames lists ("." and ".."
// never), on a directory larger than one getdents buffer, through the OS,
// NoFollow, a wrapper that has no DirScanner (ReadDirNames is used) and
// MemFS; an error from the callback stops the scan and is returned as is.
func TestScanDir(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 3000 { // ~60 bytes a dirent: several 32 KiB buffers
		n := fmt.Sprintf("%05d-%s.json", i, strings.Repeat("x", 40))
		want = append(want, n)
		must(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	want = append(want, "sub")
	slices.Sort(want)
	mem := vfs.NewStrictMem()
	must(t, mem.MkdirAll("/d", 0o700))
	for _, n := range want[:50] {
		must(t, vfs.WriteFile(mem, "/d/"+n, nil))
	}
	for _, c := range []struct {
		name string
		fsys vfs.FS
		dir  string
		want []string
	}{
		{"OS", vfs.OS{}, dir, want},
		{"NoFollow", vfs.NoFollow(dir, vfs.Perm{}), dir, want},
		{"no DirScanner", struct{ vfs.FS }{vfs.OS{}}, dir, want},
		{"NoSync", vfs.NoSync(vfs.OS{}), dir, want},
		{"Counting", vfs.Counting(vfs.OS{}), dir, want},
		{"MemFS", mem, "/d", want[:50]},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := scanAll(t, c.fsys, c.dir)
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("ScanDir = %d names, %v; want the %d of the directory", len(got), err, len(c.want))
			}
			stop := errors.New("stop")
			n := 0
			err = vfs.ScanDir(c.fsys, c.dir, func([]byte) error {
				if n++; n == 7 {
					return stop
				}
				return nil
			})
			if err != stop || n != 7 {
				t.Fatalf("ScanDir with a callback failing at 7 = %v after %d names", err, n)
			}
			if _, err := scanAll(t, c.fsys, filepath.Join(c.dir, "missing")); !vfs.IsNotExist(err) {
				t.Fatalf("ScanDir of a missing directory = %v", err)
			}
		})
	}
}

// TestScanDirRefusesLinks: NoFollow's ScanDir does not list through a
// symbolic link to a directory.
func TestScanDirRefusesLinks(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(out, "secret"), nil, 0o600))
	must(t, os.Symlink(out, filepath.Join(root, "lnk")))
	_, err := scanAll(t, vfs.NoFollow(root, vfs.Perm{}), filepath.Join(root, "lnk"))
	if !errors.Is(err, vfs.ErrSymlink) {
		t.Fatalf("ScanDir through a link = %v, want ErrSymlink", err)
	}
}

// TestMemFSScanDirFault: MemFS's ScanDir fails with an injected "readdir"
// fault, as ReadDirNames does.
func TestMemFSScanDirFault(t *testing.T) {
	mem := vfs.NewStrictMem()
	must(t, mem.MkdirAll("/d", 0o700))
	mem.InjectError("readdir", 1, syscall.EIO)
	if _, err := scanAll(t, mem, "/d"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("ScanDir with a readdir fault = %v, want EIO", err)
	}
}
