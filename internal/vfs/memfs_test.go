package vfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// newMem returns a MemFS with a durable directory /d.
func newMem(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewStrictMem()
	must(t, m.MkdirAll("/d", vfs.DirPerm))
	must(t, m.SyncDir("/"))
	return m
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// create writes data to a new file; it syncs the file only if sync is set.
func create(t *testing.T, m vfs.FS, name, data string, sync bool) {
	t.Helper()
	f, err := m.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, vfs.FilePerm)
	must(t, err)
	_, err = f.Write([]byte(data))
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

func appendTo(t *testing.T, m vfs.FS, name, data string, sync bool) {
	t.Helper()
	f, err := m.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.Write([]byte(data))
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

// content returns the file's content, or "<absent>".
func content(t *testing.T, m vfs.FS, name string) string {
	t.Helper()
	b, err := m.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	must(t, err)
	return string(b)
}

func names(t *testing.T, m vfs.FS, dir string) string {
	t.Helper()
	ns, err := m.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	must(t, err)
	slices.Sort(ns)
	return strings.Join(ns, ",")
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want errors.Is(err, %v)", err, target)
	}
}

func TestMemFileOps(t *testing.T) {
	m := newMem(t)

	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	must(t, err)
	if f.Name() != "/d/f" {
		t.Fatalf("Name = %q", f.Name())
	}
	if n, err := f.Write([]byte("hello world")); n != 11 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if off, err := f.Seek(0, io.SeekStart); off != 0 || err != nil {
		t.Fatalf("Seek = %d, %v", off, err)
	}
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "hello world" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	p := make([]byte, 5)
	if n, err := f.ReadAt(p, 6); n != 5 || err != nil || string(p) != "world" {
		t.Fatalf("ReadAt = %d, %v, %q", n, err, p)
	}
	if n, err := f.ReadAt(p, 8); n != 3 || err != io.EOF {
		t.Fatalf("ReadAt past end = %d, %v", n, err)
	}
	// Write after a Seek past the end leaves a zero-filled hole.
	_, err = f.Seek(2, io.SeekEnd)
	must(t, err)
	_, err = f.Write([]byte("!"))
	must(t, err)
	if got := content(t, m, "/d/f"); got != "hello world\x00\x00!" {
		t.Fatalf("content = %q", got)
	}
	must(t, f.Truncate(5))
	fi, err := f.Stat()
	must(t, err)
	if fi.Name() != "f" || fi.Size() != 5 || fi.IsDir() || fi.Mode() != 0o644 {
		t.Fatalf("Stat = %s %d %v %v", fi.Name(), fi.Size(), fi.IsDir(), fi.Mode())
	}
	must(t, f.Truncate(7))
	if got := content(t, m, "/d/f"); got != "hello\x00\x00" {
		t.Fatalf("content after grow = %q", got)
	}
	must(t, f.Close())
	wantErrIs(t, f.Close(), os.ErrClosed)
	_, err = f.Write([]byte("x"))
	wantErrIs(t, err, os.ErrClosed)

	// The logical clock advances per mutation.
	fi1, err := m.Stat("/d/f")
	must(t, err)
	appendTo(t, m, "/d/f", "+", false)
	fi2, err := m.Stat("/d/f")
	must(t, err)
	if !fi2.ModTime().After(fi1.ModTime()) {
		t.Fatalf("ModTime did not advance: %v then %v", fi1.ModTime(), fi2.ModTime())
	}
	if got := content(t, m, "/d/f"); got != "hello\x00\x00+" {
		t.Fatalf("content after append = %q", got)
	}

	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"O_EXCL on existing", func() error {
			_, err := m.OpenFile("/d/f", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0)
			return err
		}, fs.ErrExist},
		{"open missing", func() error { _, err := m.OpenFile("/d/nope", os.O_RDONLY, 0); return err }, fs.ErrNotExist},
		{"create in missing dir", func() error {
			_, err := m.OpenFile("/nope/f", os.O_WRONLY|os.O_CREATE, 0)
			return err
		}, fs.ErrNotExist},
		{"path through a file", func() error { _, err := m.Stat("/d/f/x"); return err }, syscall.ENOTDIR},
		{"write to O_RDONLY", func() error {
			f, err := m.OpenFile("/d/f", os.O_RDONLY, 0)
			must(t, err)
			defer f.Close()
			_, err = f.Write([]byte("x"))
			return err
		}, syscall.EBADF},
		{"read from O_WRONLY", func() error {
			f, err := m.OpenFile("/d/f", os.O_WRONLY, 0)
			must(t, err)
			defer f.Close()
			_, err = f.Read(make([]byte, 1))
			return err
		}, syscall.EBADF},
		{"open dir for writing", func() error { _, err := m.OpenFile("/d", os.O_WRONLY, 0); return err }, syscall.EISDIR},
		{"ReadFile of dir", func() error { _, err := m.ReadFile("/d"); return err }, syscall.EISDIR},
		{"ReadDirNames of file", func() error { _, err := m.ReadDirNames("/d/f"); return err }, syscall.ENOTDIR},
		{"ReadDirNames missing", func() error { _, err := m.ReadDirNames("/x"); return err }, fs.ErrNotExist},
		{"Stat missing", func() error { _, err := m.Stat("/d/x"); return err }, fs.ErrNotExist},
		{"Lstat missing", func() error { _, err := m.Lstat("/d/x"); return err }, fs.ErrNotExist},
		{"Remove missing", func() error { return m.Remove("/d/x") }, fs.ErrNotExist},
		{"Remove non-empty dir", func() error { return m.Remove("/d") }, syscall.ENOTEMPTY},
		{"MkdirAll through file", func() error { return m.MkdirAll("/d/f/sub", vfs.DirPerm) }, syscall.ENOTDIR},
		{"SyncDir of file", func() error { return m.SyncDir("/d/f") }, syscall.ENOTDIR},
		{"SyncDir missing", func() error { return m.SyncDir("/x") }, fs.ErrNotExist},
		{"empty name", func() error { _, err := m.Stat(""); return err }, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			wantErrIs(t, err, tt.want)
			var pe *fs.PathError
			if !errors.As(err, &pe) {
				t.Fatalf("err %T is not an *fs.PathError", err)
			}
		})
	}

	// O_TRUNC empties; O_APPEND appends whatever the offset.
	create(t, m, "/d/g", "abc", false)
	create(t, m, "/d/g", "x", false)
	if got := content(t, m, "/d/g"); got != "x" {
		t.Fatalf("O_TRUNC content = %q", got)
	}
	af, err := m.OpenFile("/d/g", os.O_RDWR|os.O_APPEND, 0)
	must(t, err)
	_, err = af.Seek(0, io.SeekStart)
	must(t, err)
	_, err = af.Write([]byte("yz"))
	must(t, err)
	must(t, af.Close())
	if got := content(t, m, "/d/g"); got != "xyz" {
		t.Fatalf("O_APPEND content = %q", got)
	}

	// Directories, listings, Remove, RemoveAll; relative paths resolve at /.
	must(t, m.MkdirAll("d/sub/deeper", vfs.DirPerm))
	fi, err = m.Stat("/d/sub")
	must(t, err)
	if !fi.IsDir() || fi.Mode() != fs.ModeDir|vfs.DirPerm || fi.Name() != "sub" {
		t.Fatalf("Stat dir = %v %v %q", fi.IsDir(), fi.Mode(), fi.Name())
	}
	must(t, m.MkdirAll("/d/sub", vfs.DirPerm)) // exists: fine
	if got := names(t, m, "/d"); got != "f,g,sub" {
		t.Fatalf("names = %q", got)
	}
	must(t, m.Remove("/d/sub/deeper"))
	must(t, m.Remove("/d/g"))
	create(t, m, "/d/sub/x", "1", false)
	must(t, m.RemoveAll("/d/sub"))
	must(t, m.RemoveAll("/d/sub")) // missing: fine
	must(t, m.RemoveAll("/nope/nope"))
	if got := names(t, m, "/d"); got != "f" {
		t.Fatalf("names after removes = %q", got)
	}
}

func TestMemLinkRename(t *testing.T) {
	tests := []struct {
		name  string
		run   func(t *testing.T, m *vfs.MemFS) error
		want  error             // nil: success
		files map[string]string // expected contents afterwards
	}{
		{"link shares the inode", func(t *testing.T, m *vfs.MemFS) error {
			must(t, m.Link("/d/a", "/d/l"))
			appendTo(t, m, "/d/l", "+", false)
			return nil
		}, nil, map[string]string{"/d/a": "A+", "/d/l": "A+"}},
		{"link survives unlink of the first name", func(t *testing.T, m *vfs.MemFS) error {
			must(t, m.Link("/d/a", "/d/l"))
			return m.Remove("/d/a")
		}, nil, map[string]string{"/d/a": "<absent>", "/d/l": "A"}},
		{"link onto existing", func(t *testing.T, m *vfs.MemFS) error { return m.Link("/d/a", "/d/b") },
			fs.ErrExist, map[string]string{"/d/a": "A", "/d/b": "B"}},
		{"link from missing", func(t *testing.T, m *vfs.MemFS) error { return m.Link("/d/x", "/d/l") },
			fs.ErrNotExist, map[string]string{"/d/l": "<absent>"}},
		{"link into missing dir", func(t *testing.T, m *vfs.MemFS) error { return m.Link("/d/a", "/x/l") },
			fs.ErrNotExist, nil},
		{"link a directory", func(t *testing.T, m *vfs.MemFS) error { return m.Link("/d", "/e") },
			syscall.EPERM, nil},
		{"rename replaces a file", func(t *testing.T, m *vfs.MemFS) error { return m.Rename("/d/a", "/d/b") },
			nil, map[string]string{"/d/a": "<absent>", "/d/b": "A"}},
		{"rename to a new name", func(t *testing.T, m *vfs.MemFS) error { return m.Rename("/d/a", "/d/c") },
			nil, map[string]string{"/d/a": "<absent>", "/d/c": "A"}},
		{"rename over own hard link is a no-op", func(t *testing.T, m *vfs.MemFS) error {
			must(t, m.Link("/d/a", "/d/l"))
			return m.Rename("/d/a", "/d/l")
		}, nil, map[string]string{"/d/a": "A", "/d/l": "A"}},
		{"rename to itself", func(t *testing.T, m *vfs.MemFS) error { return m.Rename("/d/a", "/d/./a") },
			nil, map[string]string{"/d/a": "A"}},
		{"rename missing", func(t *testing.T, m *vfs.MemFS) error { return m.Rename("/d/x", "/d/y") },
			fs.ErrNotExist, nil},
		{"rename into missing dir", func(t *testing.T, m *vfs.MemFS) error { return m.Rename("/d/a", "/x/y") },
			fs.ErrNotExist, map[string]string{"/d/a": "A"}},
		{"rename a directory with its contents", func(t *testing.T, m *vfs.MemFS) error {
			return m.Rename("/d", "/e")
		}, nil, map[string]string{"/d/a": "<absent>", "/e/a": "A", "/e/b": "B"}},
		{"rename a directory into itself", func(t *testing.T, m *vfs.MemFS) error {
			return m.Rename("/d", "/d/sub/x")
		}, syscall.EINVAL, map[string]string{"/d/a": "A"}},
		{"rename over a directory", func(t *testing.T, m *vfs.MemFS) error {
			must(t, m.MkdirAll("/e", vfs.DirPerm))
			return m.Rename("/d/a", "/e")
		}, fs.ErrExist, map[string]string{"/d/a": "A"}},
		{"rename a directory over a file", func(t *testing.T, m *vfs.MemFS) error {
			return m.Rename("/d/sub", "/d/a")
		}, syscall.ENOTDIR, map[string]string{"/d/a": "A"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMem(t)
			create(t, m, "/d/a", "A", true)
			create(t, m, "/d/b", "B", true)
			must(t, m.MkdirAll("/d/sub", vfs.DirPerm))
			err := tt.run(t, m)
			if tt.want == nil {
				must(t, err)
			} else {
				wantErrIs(t, err, tt.want)
				var le *os.LinkError
				if !errors.As(err, &le) {
					t.Fatalf("err %T is not an *os.LinkError", err)
				}
			}
			for name, want := range tt.files {
				if got := content(t, m, name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestMemCrash checks the durability model: what survives Crash.
func TestMemCrash(t *testing.T) {
	const absent = "<absent>"
	tests := []struct {
		name  string
		run   func(t *testing.T, m *vfs.MemFS)
		files map[string]string // path → content after Crash
		dirs  map[string]string // dir → names after Crash
	}{
		{"create+write, no sync: gone", func(t *testing.T, m *vfs.MemFS) {
			create(t, m, "/d/f", "data", false)
		}, map[string]string{"/d/f": absent}, map[string]string{"/d": ""}},
		{"create+write+SyncDir, no Sync: empty", func(t *testing.T, m *vfs.MemFS) {
			create(t, m, "/d/f", "data", false)
			must(t, m.SyncDir("/d"))
		}, map[string]string{"/d/f": ""}, nil},
		{"create+write+Sync, no SyncDir: gone", func(t *testing.T, m *vfs.MemFS) {
			create(t, m, "/d/f", "data", true)
		}, map[string]string{"/d/f": absent}, map[string]string{"/d": ""}},
		{"create+write+Sync+SyncDir: durable", func(t *testing.T, m *vfs.MemFS) {
			create(t, m, "/d/f", "data", true)
			must(t, m.SyncDir("/d"))
		}, map[string]string{"/d/f": "data"}, nil},
		{"SyncDir before the write: empty", func(t *testing.T, m *vfs.MemFS) {
			create(t, m, "/d/f", "", false)
			must(t, m.SyncDir("/d"))
			appendTo(t, m, "/d/f", "data", false)
		}, map[string]string{"/d/f": ""}, nil},
		{"append after Sync, no Sync: truncated to synced length", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "line1\n")
			appendTo(t, m, "/d/f", "line2\n", false)
		}, map[string]string{"/d/f": "line1\n"}, nil},
		{"append after Sync, Sync: kept", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "line1\n")
			appendTo(t, m, "/d/f", "line2\n", true)
		}, map[string]string{"/d/f": "line1\nline2\n"}, nil},
		{"overwrite and truncate without Sync: old content", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "old content")
			f, err := m.OpenFile("/d/f", os.O_RDWR, 0)
			must(t, err)
			_, err = f.Write([]byte("NEW"))
			must(t, err)
			must(t, f.Truncate(5))
			must(t, f.Close())
		}, map[string]string{"/d/f": "old content"}, nil},
		{"O_TRUNC rewrite without Sync: old content", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "old")
			create(t, m, "/d/f", "new", false)
		}, map[string]string{"/d/f": "old"}, nil},
		{"rename without SyncDir: reverts", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/a", "A")
			durable(t, m, "/d/b", "B")
			must(t, m.Rename("/d/a", "/d/b"))
		}, map[string]string{"/d/a": "A", "/d/b": "B"}, nil},
		{"rename with SyncDir: durable", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/a", "A")
			durable(t, m, "/d/b", "B")
			must(t, m.Rename("/d/a", "/d/b"))
			must(t, m.SyncDir("/d"))
		}, map[string]string{"/d/a": absent, "/d/b": "A"}, map[string]string{"/d": "b"}},
		{"unlink without SyncDir: comes back", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "data")
			appendTo(t, m, "/d/f", "more", false)
			must(t, m.Remove("/d/f"))
		}, map[string]string{"/d/f": "data"}, nil},
		{"unlink with SyncDir: gone", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "data")
			must(t, m.Remove("/d/f"))
			must(t, m.SyncDir("/d"))
		}, map[string]string{"/d/f": absent}, nil},
		{"link without SyncDir: only the old name", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "data")
			must(t, m.Link("/d/f", "/d/l"))
		}, map[string]string{"/d/f": "data", "/d/l": absent}, nil},
		{"link with SyncDir: both names, one inode", func(t *testing.T, m *vfs.MemFS) {
			durable(t, m, "/d/f", "data")
			must(t, m.Link("/d/f", "/d/l"))
			must(t, m.SyncDir("/d"))
			appendTo(t, m, "/d/l", "+", true) // synced through the link
		}, map[string]string{"/d/f": "data+", "/d/l": "data+"}, nil},
		{"new subdirectory, parent not synced: gone with its files", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/d/sub", vfs.DirPerm))
			create(t, m, "/d/sub/f", "data", true)
			must(t, m.SyncDir("/d/sub"))
		}, map[string]string{"/d/sub/f": absent}, map[string]string{"/d": "", "/d/sub": absent}},
		{"new subdirectory, parent synced, itself not: empty", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/d/sub", vfs.DirPerm))
			create(t, m, "/d/sub/f", "data", true)
			must(t, m.SyncDir("/d"))
		}, nil, map[string]string{"/d": "sub", "/d/sub": ""}},
		{"MkdirAll deep, every level synced: durable", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/d/x/y", vfs.DirPerm))
			create(t, m, "/d/x/y/f", "data", true)
			must(t, m.SyncDir("/d/x/y"))
			must(t, m.SyncDir("/d/x"))
			must(t, m.SyncDir("/d"))
		}, map[string]string{"/d/x/y/f": "data"}, nil},
		{"directory rename without SyncDir: reverts", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/d/x", vfs.DirPerm))
			durable(t, m, "/d/x/f", "data")
			must(t, m.SyncDir("/d"))
			must(t, m.Rename("/d/x", "/d/y"))
		}, map[string]string{"/d/x/f": "data", "/d/y/f": absent}, nil},
		{"rename across dirs synced only at the target: both names", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/e", vfs.DirPerm))
			must(t, m.SyncDir("/"))
			durable(t, m, "/d/f", "data")
			must(t, m.Rename("/d/f", "/e/f"))
			must(t, m.SyncDir("/e"))
		}, map[string]string{"/d/f": "data", "/e/f": "data"}, nil},
		{"directory named twice after partial syncs: first name kept", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/d/x", vfs.DirPerm))
			must(t, m.MkdirAll("/e", vfs.DirPerm))
			must(t, m.SyncDir("/"))
			durable(t, m, "/d/x/f", "data")
			must(t, m.SyncDir("/d"))
			must(t, m.Rename("/d/x", "/e/x"))
			must(t, m.SyncDir("/e"))
		}, map[string]string{"/d/x/f": "data"}, map[string]string{"/d": "x", "/e": ""}},
		{"RemoveAll without SyncDir: tree comes back", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/d/x", vfs.DirPerm))
			durable(t, m, "/d/x/f", "data")
			must(t, m.SyncDir("/d"))
			must(t, m.RemoveAll("/d/x"))
		}, map[string]string{"/d/x/f": "data"}, nil},
		{"Sync through a directory handle is a SyncDir", func(t *testing.T, m *vfs.MemFS) {
			create(t, m, "/d/f", "data", true)
			dh, err := m.OpenFile("/d", os.O_RDONLY, 0)
			must(t, err)
			must(t, dh.Sync())
			must(t, dh.Close())
		}, map[string]string{"/d/f": "data"}, nil},
		{"MarkAllSynced makes everything durable", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.MkdirAll("/x/y", vfs.DirPerm))
			create(t, m, "/x/y/f", "data", false)
			m.MarkAllSynced()
			appendTo(t, m, "/x/y/f", "+", false)
		}, map[string]string{"/x/y/f": "data"}, nil},
		{"unsynced lock file: gone", func(t *testing.T, m *vfs.MemFS) {
			u, err := m.Lock(context.Background(), "/d/LOCK")
			must(t, err)
			_ = u
		}, map[string]string{"/d/LOCK": absent}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMem(t)
			tt.run(t, m)
			clone := m.CrashClone() // must agree with an in-place Crash
			m.Crash()
			for _, fsys := range []*vfs.MemFS{m, clone} {
				for name, want := range tt.files {
					if got := content(t, fsys, name); got != want {
						t.Errorf("%s = %q, want %q", name, got, want)
					}
				}
				for dir, want := range tt.dirs {
					if got := names(t, fsys, dir); got != want {
						t.Errorf("names(%s) = %q, want %q", dir, got, want)
					}
				}
			}
			// A second crash changes nothing: the crash state is synced.
			before := dump(t, m)
			m.Crash()
			if after := dump(t, m); after != before {
				t.Errorf("second Crash changed the tree:\n%s\nto\n%s", before, after)
			}
		})
	}
}

// durable creates a file and makes it and its entry durable.
func durable(t *testing.T, m vfs.FS, name, data string) {
	t.Helper()
	create(t, m, name, data, true)
	must(t, m.SyncDir(name[:strings.LastIndex(name, "/")]))
}

// dump renders the whole tree, for comparisons.
func dump(t *testing.T, m vfs.FS) string {
	t.Helper()
	var b strings.Builder
	var walk func(dir string)
	walk = func(dir string) {
		ns, err := m.ReadDirNames(dir)
		must(t, err)
		for _, n := range ns {
			p := strings.TrimSuffix(dir, "/") + "/" + n
			fi, err := m.Stat(p)
			must(t, err)
			if fi.IsDir() {
				fmt.Fprintf(&b, "%s/\n", p)
				walk(p)
				continue
			}
			fmt.Fprintf(&b, "%s %q\n", p, content(t, m, p))
		}
	}
	walk("/")
	return b.String()
}

// TestMemCrashCloneWriteback: the written-back image keeps every file's
// current data but only synced directory entries.
func TestMemCrashCloneWriteback(t *testing.T) {
	m := newMem(t)
	durable(t, m, "/d/old", "v1")
	f, err := m.OpenFile("/d/old", os.O_WRONLY, 0)
	must(t, err)
	_, err = f.Write([]byte("v2")) // unsynced overwrite
	must(t, err)
	create(t, m, "/d/new", "n", false) // unsynced entry
	wb, strict := m.CrashCloneWriteback(), m.CrashClone()
	if got := content(t, wb, "/d/old"); got != "v2" {
		t.Fatalf("writeback image: /d/old = %q, want v2", got)
	}
	if got := content(t, strict, "/d/old"); got != "v1" {
		t.Fatalf("strict image: /d/old = %q, want v1", got)
	}
	if got := content(t, wb, "/d/new"); got != "<absent>" {
		t.Fatalf("writeback image: /d/new = %q, want it absent", got)
	}
	_, err = f.Write([]byte("v3")) // the clone is a copy
	must(t, err)
	if got := content(t, wb, "/d/old"); got != "v2" {
		t.Fatalf("writeback image changed with the original: /d/old = %q", got)
	}
	must(t, f.Close())
}

func TestMemCrashInvalidatesHandlesAndLocks(t *testing.T) {
	m := newMem(t)
	durable(t, m, "/d/f", "data")
	f, err := m.OpenFile("/d/f", os.O_RDWR, 0)
	must(t, err)
	u, err := m.Lock(context.Background(), "/d/LOCK")
	must(t, err)
	got := make(chan error, 1)
	go func() {
		u2, err := m.Lock(context.Background(), "/d/LOCK")
		if err == nil {
			err = u2.Unlock()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second Lock returned %v while the lock was held", err)
	case <-time.After(20 * time.Millisecond):
	}

	m.Crash()

	if err := <-got; err != nil {
		t.Fatalf("waiting Lock after Crash: %v", err)
	}
	ops := []func() error{ // Close last: a closed handle reports os.ErrClosed
		func() error { _, err := f.Read(make([]byte, 1)); return err },
		func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		func() error { _, err := f.Write([]byte("x")); return err },
		func() error { _, err := f.Seek(0, io.SeekStart); return err },
		f.Sync,
		func() error { return f.Truncate(0) },
		func() error { _, err := f.Stat(); return err },
		f.Close,
	}
	for i, op := range ops {
		if err := op(); !errors.Is(err, vfs.ErrCrashed) {
			t.Errorf("op %d after Crash: %v, want ErrCrashed", i, err)
		}
	}
	must(t, u.Unlock()) // a lock dropped by Crash: harmless
	u3, ok, err := m.TryLock("/d/LOCK")
	if err != nil || !ok {
		t.Fatalf("TryLock after Crash = %v, %v", ok, err)
	}
	must(t, u3.Unlock())
	if got := content(t, m, "/d/f"); got != "data" {
		t.Fatalf("content = %q", got)
	}
}

// TestMemWriteHelpers runs vfs.WriteFile and vfs.CreateExclusive through a
// MemFS: their results survive Crash only when their fsyncs ran. Through
// vfs.NoSync (the sharpness check) a crash loses them.
func TestMemWriteHelpers(t *testing.T) {
	tests := []struct {
		name   string
		noSync bool
		run    func(fsys vfs.FS) error
		want   string // content of /d/f after Crash
	}{
		{"WriteFile", false, func(fsys vfs.FS) error { return vfs.WriteFile(fsys, "/d/f", []byte("new")) }, "new"},
		{"WriteFile NoSync", true, func(fsys vfs.FS) error { return vfs.WriteFile(fsys, "/d/f", []byte("new")) }, "old"},
		{"WriteFileNoDirSync", false, func(fsys vfs.FS) error {
			return vfs.WriteFileNoDirSync(fsys, "/d/f", []byte("new"))
		}, "old"},
		{"WriteFileNoDirSync then SyncDir", false, func(fsys vfs.FS) error {
			if err := vfs.WriteFileNoDirSync(fsys, "/d/f", []byte("new")); err != nil {
				return err
			}
			return fsys.SyncDir("/d")
		}, "new"},
		{"CreateExclusive", false, func(fsys vfs.FS) error {
			if err := fsys.Remove("/d/f"); err != nil {
				return err
			}
			return vfs.CreateExclusive(fsys, "/d/f", []byte("new"), false)
		}, "new"},
		{"CreateExclusive NoSync", true, func(fsys vfs.FS) error {
			if err := fsys.Remove("/d/f"); err != nil {
				return err
			}
			return vfs.CreateExclusive(fsys, "/d/f", []byte("new"), false)
		}, "old"},
		{"CreateExclusive noDirSync", false, func(fsys vfs.FS) error {
			if err := fsys.Remove("/d/f"); err != nil {
				return err
			}
			return vfs.CreateExclusive(fsys, "/d/f", []byte("new"), true)
		}, "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMem(t)
			durable(t, m, "/d/f", "old")
			var fsys vfs.FS = m
			if tt.noSync {
				fsys = vfs.NoSync(m)
			}
			must(t, tt.run(fsys))
			if got := content(t, m, "/d/f"); got != "new" {
				t.Fatalf("before Crash: %q", got)
			}
			m.Crash()
			if got := content(t, m, "/d/f"); got != tt.want {
				t.Fatalf("after Crash: %q, want %q", got, tt.want)
			}
			if got := names(t, m, "/d"); got != "f" {
				t.Fatalf("after Crash /d holds %q (a temporary file survived?)", got)
			}
		})
	}

	// A fresh file through NoSync: lost entirely.
	m := newMem(t)
	must(t, vfs.CreateExclusive(vfs.NoSync(m), "/d/g", []byte("x"), false))
	m.Crash()
	if got := content(t, m, "/d/g"); got != "<absent>" {
		t.Fatalf("NoSync CreateExclusive survived a crash: %q", got)
	}
}

// TestMemCrashAtEverySyncPoint shows the crash-suite pattern: count the sync
// points of a workload, rerun it taking a crash image at each, and check each
// image with the recovery invariant (here: the file is absent, v1 or v2, and
// never goes backwards).
func TestMemCrashAtEverySyncPoint(t *testing.T) {
	workload := func(m *vfs.MemFS) {
		must(t, m.MkdirAll("/db", vfs.DirPerm))
		must(t, m.SyncDir("/"))
		must(t, vfs.WriteFile(m, "/db/CURRENT", []byte("v1")))
		must(t, vfs.WriteFile(m, "/db/CURRENT", []byte("v2")))
	}
	m := vfs.NewStrictMem()
	workload(m)
	total := m.SyncCount()
	if total != 5 { // SyncDir(/) + 2 × (file + dir)
		t.Fatalf("SyncCount = %d, want 5", total)
	}
	var states []string
	for k := 1; k <= total; k++ {
		m := vfs.NewStrictMem()
		var img *vfs.MemFS
		m.OnSync(func(n int) {
			if n == k {
				img = m.CrashClone()
			}
		})
		workload(m)
		if img == nil {
			t.Fatalf("sync point %d not reached", k)
		}
		states = append(states, content(t, img, "/db/CURRENT"))
		if got := names(t, img, "/db"); got != "<absent>" && got != "" && got != "CURRENT" {
			t.Fatalf("crash at %d: /db holds %q", k, got)
		}
	}
	want := []string{"<absent>", "<absent>", "v1", "v1", "v2"}
	if !slices.Equal(states, want) {
		t.Fatalf("states = %q, want %q", states, want)
	}
}

func TestMemInjectError(t *testing.T) {
	enospc := syscall.ENOSPC
	tests := []struct {
		op   string
		call func(t *testing.T, m *vfs.MemFS) error
	}{
		{"open", func(t *testing.T, m *vfs.MemFS) error {
			_, err := m.OpenFile("/d/f", os.O_RDONLY, 0)
			return err
		}},
		{"read", func(t *testing.T, m *vfs.MemFS) error { _, err := m.ReadFile("/d/f"); return err }},
		{"write", func(t *testing.T, m *vfs.MemFS) error {
			f, err := m.OpenFile("/d/f", os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			defer f.Close()
			_, err = f.Write([]byte("x"))
			return err
		}},
		{"sync", func(t *testing.T, m *vfs.MemFS) error {
			f, err := m.OpenFile("/d/f", os.O_WRONLY, 0)
			must(t, err)
			defer f.Close()
			return f.Sync()
		}},
		{"syncdir", func(t *testing.T, m *vfs.MemFS) error { return m.SyncDir("/d") }},
		{"truncate", func(t *testing.T, m *vfs.MemFS) error {
			f, err := m.OpenFile("/d/f", os.O_WRONLY, 0)
			must(t, err)
			defer f.Close()
			return f.Truncate(0)
		}},
		{"rename", func(t *testing.T, m *vfs.MemFS) error { return m.Rename("/d/f", "/d/f") }},
		{"link", func(t *testing.T, m *vfs.MemFS) error {
			err := m.Link("/d/f", "/d/l")
			if err == nil {
				must(t, m.Remove("/d/l"))
			}
			return err
		}},
		{"remove", func(t *testing.T, m *vfs.MemFS) error { return m.RemoveAll("/d/nope") }},
		{"mkdir", func(t *testing.T, m *vfs.MemFS) error { return m.MkdirAll("/d", vfs.DirPerm) }},
		{"readdir", func(t *testing.T, m *vfs.MemFS) error { _, err := m.ReadDirNames("/d"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			m := newMem(t)
			durable(t, m, "/d/f", "data")
			m.InjectError(tt.op, 3, enospc)
			for i := 1; i <= 4; i++ {
				err := tt.call(t, m)
				if i == 3 {
					wantErrIs(t, err, enospc)
				} else {
					must(t, err)
				}
			}
		})
	}

	t.Run("failed sync makes nothing durable", func(t *testing.T) {
		m := newMem(t)
		m.InjectError("sync", 1, syscall.EIO)
		err := vfs.WriteFile(m, "/d/f", []byte("data"))
		wantErrIs(t, err, syscall.EIO)
		if got := names(t, m, "/d"); got != "" {
			t.Fatalf("WriteFile left %q after a failed sync", got)
		}
		if m.SyncCount() != 1 { // only newMem's SyncDir
			t.Fatalf("SyncCount = %d, want 1", m.SyncCount())
		}
		f, err := m.OpenFile("/d/g", os.O_WRONLY|os.O_CREATE, vfs.FilePerm)
		must(t, err)
		_, err = f.Write([]byte("data"))
		must(t, err)
		m.InjectError("sync", 1, syscall.EIO)
		wantErrIs(t, f.Sync(), syscall.EIO)
		must(t, m.SyncDir("/d"))
		m.Crash()
		if got := content(t, m, "/d/g"); got != "" {
			t.Fatalf("after a failed Sync and a crash: %q, want empty", got)
		}
	})

	t.Run("short write", func(t *testing.T) {
		m := newMem(t)
		m.InjectShortWrite(2, 3, enospc)
		f, err := m.OpenFile("/d/f", os.O_WRONLY|os.O_CREATE, vfs.FilePerm)
		must(t, err)
		_, err = f.Write([]byte("first;"))
		must(t, err)
		n, err := f.Write([]byte("second"))
		if n != 3 {
			t.Fatalf("short write wrote %d bytes, want 3", n)
		}
		wantErrIs(t, err, enospc)
		if got := content(t, m, "/d/f"); got != "first;sec" {
			t.Fatalf("content = %q", got)
		}
		m.InjectShortWrite(1, 0, nil)
		n, err = f.Write([]byte("x"))
		if n != 0 || !errors.Is(err, io.ErrShortWrite) {
			t.Fatalf("Write = %d, %v; want 0, io.ErrShortWrite", n, err)
		}
		must(t, f.Close())
	})

	t.Run("ClearFaults and bad arguments", func(t *testing.T) {
		m := newMem(t)
		m.InjectError("mkdir", 1, enospc)
		m.ClearFaults()
		must(t, m.MkdirAll("/x", vfs.DirPerm))
		for _, bad := range []func(){
			func() { m.InjectError("chmod", 1, enospc) },
			func() { m.InjectError("open", 0, enospc) },
			func() { m.InjectError("open", 1, nil) },
			func() { m.InjectShortWrite(0, 1, nil) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Error("no panic on a bad argument")
					}
				}()
				bad()
			}()
		}
	})
}

func TestMemLock(t *testing.T) {
	m := newMem(t)
	u, err := m.Lock(context.Background(), "/d/LOCK")
	must(t, err)
	if _, err := m.Stat("/d/LOCK"); err != nil {
		t.Fatalf("Lock did not create the lock file: %v", err)
	}
	if _, ok, err := m.TryLock("/d/./LOCK"); ok || err != nil {
		t.Fatalf("TryLock while held = %v, %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = m.Lock(ctx, "/d/LOCK")
	wantErrIs(t, err, context.DeadlineExceeded)

	acquired := make(chan vfs.Unlocker)
	go func() {
		u2, err := m.Lock(context.Background(), "/d/LOCK")
		if err != nil {
			t.Error(err)
		}
		acquired <- u2
	}()
	select {
	case <-acquired:
		t.Fatal("second Lock did not wait")
	case <-time.After(20 * time.Millisecond):
	}
	must(t, u.Unlock())
	u2 := <-acquired
	must(t, u.Unlock()) // twice: harmless, and must not release u2's lock
	if _, ok, _ := m.TryLock("/d/LOCK"); ok {
		t.Fatal("a second Unlock released someone else's lock")
	}
	must(t, u2.Unlock())
	u3, ok, err := m.TryLock("/d/LOCK")
	if !ok || err != nil {
		t.Fatalf("TryLock after Unlock = %v, %v", ok, err)
	}
	must(t, u3.Unlock())

	if _, err := m.Lock(context.Background(), "/nope/LOCK"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lock in a missing dir: %v", err)
	}
	if _, _, err := m.TryLock("/d"); err == nil {
		t.Fatal("TryLock on a directory succeeded")
	}
}

// TestMemCopyOnWrite checks random writes, truncates, syncs and crash images
// of one file (hard-linked) against a model that copies everything: MemFS
// shares arrays between the current data, the synced data and crash clones.
func TestMemCopyOnWrite(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := newMem(t)
		durable(t, m, "/d/f", "")
		must(t, m.Link("/d/f", "/d/g"))
		must(t, m.SyncDir("/d"))
		f, err := m.OpenFile("/d/f", os.O_RDWR, 0)
		must(t, err)
		var cur, synced []byte
		type image struct {
			fs   *vfs.MemFS
			want string
		}
		var images []image
		for step := range 300 {
			switch r := rng.IntN(10); {
			case r < 4: // write at a random offset
				off := rng.Int64N(int64(len(cur)) + 8)
				p := make([]byte, 1+rng.IntN(16))
				for i := range p {
					p[i] = byte('a' + rng.IntN(26))
				}
				_, err := f.Seek(off, io.SeekStart)
				must(t, err)
				_, err = f.Write(p)
				must(t, err)
				if end := int(off) + len(p); end > len(cur) {
					cur = append(cur, make([]byte, end-len(cur))...)
				}
				copy(cur[off:], p)
			case r < 6:
				size := rng.Int64N(int64(len(cur)) + 8)
				must(t, f.Truncate(size))
				if int(size) <= len(cur) {
					cur = cur[:size:size]
				} else {
					cur = append(cur, make([]byte, int(size)-len(cur))...)
				}
			case r < 8:
				must(t, f.Sync())
				synced = bytes.Clone(cur)
			case r < 9:
				images = append(images, image{m.CrashClone(), string(synced)})
			default:
				m.Crash()
				cur = bytes.Clone(synced)
				f, err = m.OpenFile("/d/g", os.O_RDWR, 0)
				must(t, err)
			}
			if got := content(t, m, "/d/f"); got != string(cur) {
				t.Fatalf("seed %d step %d: content %q, want %q", seed, step, got, cur)
			}
		}
		for i, img := range images {
			for _, name := range []string{"/d/f", "/d/g"} {
				if got := content(t, img.fs, name); got != img.want {
					t.Fatalf("seed %d image %d %s: %q, want %q", seed, i, name, got, img.want)
				}
			}
			// Writing to the clone must not disturb anything else.
			appendTo(t, img.fs, "/d/f", "zz", false)
		}
		for i, img := range images {
			if got := content(t, img.fs, "/d/g"); got != img.want+"zz" {
				t.Fatalf("seed %d image %d after its append: %q", seed, i, got)
			}
		}
		if got := content(t, m, "/d/f"); got != string(cur) {
			t.Fatalf("seed %d: clones disturbed the original: %q", seed, got)
		}
	}
}

// TestMemConcurrent exercises MemFS from many goroutines (run with -race).
func TestMemConcurrent(t *testing.T) {
	m := newMem(t)
	var syncs sync.Map
	m.OnSync(func(n int) { syncs.Store(n, true) })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				name := fmt.Sprintf("/d/g%d-%d", g, i%5)
				if err := vfs.WriteFile(m, name, []byte(name)); err != nil {
					t.Error(err)
					return
				}
				u, err := m.Lock(context.Background(), "/LOCK")
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := m.ReadDirNames("/d"); err != nil {
					t.Error(err)
				}
				if err := u.Unlock(); err != nil {
					t.Error(err)
				}
				if i%17 == 0 {
					_ = m.CrashClone()
				}
			}
		})
	}
	wg.Wait()
	n := m.SyncCount()
	if want := 1 + 8*50*2; n != want {
		t.Fatalf("SyncCount = %d, want %d", n, want)
	}
	count := 0
	syncs.Range(func(any, any) bool { count++; return true })
	if count != n-1 { // the hook was registered after newMem's SyncDir
		t.Fatalf("hook saw %d distinct sync numbers, want %d", count, n-1)
	}
	m.Crash()
	ns, err := m.ReadDirNames("/d")
	must(t, err)
	if len(ns) != 8*5 { // 40 files, no temporary file
		t.Fatalf("after Crash /d has %d entries: %v", len(ns), ns)
	}
}
