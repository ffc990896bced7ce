//go:build unix

package vfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// noFollowImpls are the two resolutions of NoFollow: openat2 (Linux) and
// the portable check-then-use one.
var noFollowImpls = []struct {
	name string
	new  func(root string, perm vfs.Perm) vfs.FS
}{
	{"default", vfs.NoFollow},
	{"portable", vfs.NewNoFollowGeneric},
}

// planted is a directory with symbolic links planted in it, pointing at a
// secret file and a directory outside it.
type planted struct {
	root, outside string
	secret        string // outside/secret
	outDir        string // outside/dir (holds the file "inner")
}

const secretData = "SECRET"

func plant(t *testing.T) planted {
	t.Helper()
	base := t.TempDir()
	p := planted{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	p.secret = filepath.Join(p.outside, "secret")
	p.outDir = filepath.Join(p.outside, "dir")
	for _, d := range []string{filepath.Join(p.root, "d"), p.outDir} {
		must(t, os.MkdirAll(d, 0o700))
	}
	must(t, os.WriteFile(p.secret, []byte(secretData), 0o600))
	must(t, os.WriteFile(filepath.Join(p.outDir, "inner"), []byte(secretData), 0o600))
	must(t, os.WriteFile(filepath.Join(p.root, "d", "f"), []byte("mine"), 0o600))
	must(t, os.Symlink(p.secret, filepath.Join(p.root, "lnkfile")))
	must(t, os.Symlink(p.outDir, filepath.Join(p.root, "lnkdir")))
	must(t, os.Symlink(p.secret, filepath.Join(p.root, "d", "lnk")))
	// A link that stays inside the directory is refused too.
	must(t, os.Symlink(filepath.Join(p.root, "d"), filepath.Join(p.root, "inlink")))
	return p
}

// untouched checks that nothing outside the directory was read into a
// result, changed or created.
func (p planted) untouched(t *testing.T) {
	t.Helper()
	for _, f := range []string{p.secret, filepath.Join(p.outDir, "inner")} {
		b, err := os.ReadFile(f)
		if err != nil || string(b) != secretData {
			t.Errorf("%s = %q, %v: written through a symbolic link", f, b, err)
		}
	}
	for dir, want := range map[string][]string{p.outside: {"dir", "secret"}, p.outDir: {"inner"}} {
		got := dirNames(t, dir)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v: created through a symbolic link", dir, got, want)
		}
	}
}

func wantSymlinkErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, vfs.ErrSymlink) {
		t.Errorf("%s: err = %v, want ErrSymlink", what, err)
		return
	}
	if !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("%s: message %q does not say why", what, err)
	}
}

// TestNoFollowRefusesLinks plants links in place of files and folders and
// tries every FS operation through them: each is refused with ErrSymlink,
// returns none of the target's data, and changes nothing outside.
func TestNoFollowRefusesLinks(t *testing.T) {
	for _, impl := range noFollowImpls {
		t.Run(impl.name, func(t *testing.T) {
			p := plant(t)
			fsys := impl.new(p.root, vfs.Perm{})
			ctx := context.Background()
			j := func(parts ...string) string { return filepath.Join(append([]string{p.root}, parts...)...) }

			refused := []struct {
				what string
				do   func() error
			}{
				{"touch a file link", func() error { return fsys.Touch(j("lnkfile")) }},
				{"touch a folder link", func() error { return fsys.Touch(j("lnkdir")) }},
				{"touch in a folder link", func() error { return fsys.Touch(j("lnkdir", "inner")) }},
				{"open a file link for reading", func() error {
					f, err := fsys.OpenFile(j("lnkfile"), os.O_RDONLY, 0)
					if err == nil {
						f.Close()
					}
					return err
				}},
				{"open a file link for writing", func() error {
					f, err := fsys.OpenFile(j("lnkfile"), os.O_WRONLY|os.O_TRUNC, 0)
					if err == nil {
						f.Write([]byte("x"))
						f.Close()
					}
					return err
				}},
				{"append through a link", func() error {
					f, err := fsys.OpenFile(j("d", "lnk"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, vfs.FilePerm)
					if err == nil {
						f.Write([]byte("x"))
						f.Close()
					}
					return err
				}},
				{"create in a folder link", func() error {
					f, err := fsys.OpenFile(j("lnkdir", "new"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, vfs.FilePerm)
					if err == nil {
						f.Close()
					}
					return err
				}},
				{"create in a link inside the directory", func() error {
					f, err := fsys.OpenFile(j("inlink", "new"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, vfs.FilePerm)
					if err == nil {
						f.Close()
					}
					return err
				}},
				{"read a file link", func() error {
					b, err := fsys.ReadFile(j("lnkfile"))
					if len(b) != 0 {
						t.Errorf("ReadFile leaked %q", b)
					}
					return err
				}},
				{"read through a folder link", func() error {
					b, err := fsys.ReadFile(j("lnkdir", "inner"))
					if len(b) != 0 {
						t.Errorf("ReadFile leaked %q", b)
					}
					return err
				}},
				{"list a folder link", func() error {
					ns, err := fsys.ReadDirNames(j("lnkdir"))
					if len(ns) != 0 {
						t.Errorf("ReadDirNames leaked %v", ns)
					}
					return err
				}},
				{"stat a file link", func() error { _, err := fsys.Stat(j("lnkfile")); return err }},
				{"stat through a folder link", func() error { _, err := fsys.Stat(j("lnkdir", "inner")); return err }},
				{"lstat through a folder link", func() error { _, err := fsys.Lstat(j("lnkdir", "inner")); return err }},
				{"rename into a folder link", func() error { return fsys.Rename(j("d", "f"), j("lnkdir", "f")) }},
				{"rename out of a folder link", func() error { return fsys.Rename(j("lnkdir", "inner"), j("d", "stolen")) }},
				{"link into a folder link", func() error { return fsys.Link(j("d", "f"), j("lnkdir", "h")) }},
				{"remove through a folder link", func() error { return fsys.Remove(j("lnkdir", "inner")) }},
				{"remove a tree through a folder link", func() error { return fsys.RemoveAll(j("lnkdir", "inner")) }},
				{"mkdir in a folder link", func() error { return fsys.MkdirAll(j("lnkdir", "sub"), vfs.DirPerm) }},
				{"mkdir where a link is", func() error { return fsys.MkdirAll(j("lnkdir"), vfs.DirPerm) }},
				{"sync a folder link", func() error { return fsys.SyncDir(j("lnkdir")) }},
				{"lock a file link", func() error {
					u, err := fsys.Lock(ctx, j("lnkfile"))
					if err == nil {
						u.Unlock()
					}
					return err
				}},
				{"lock in a folder link", func() error {
					u, err := fsys.Lock(ctx, j("lnkdir", "lock"))
					if err == nil {
						u.Unlock()
					}
					return err
				}},
				{"trylock in a folder link", func() error {
					u, ok, err := fsys.TryLock(j("lnkdir", "lock"))
					if ok {
						u.Unlock()
					}
					return err
				}},
				{"replace a file in a folder link", func() error { return vfs.WriteFile(fsys, j("lnkdir", "inner"), []byte("x")) }},
				{"create exclusively in a folder link", func() error { return vfs.CreateExclusive(fsys, j("lnkdir", "new"), []byte("x"), false) }},
			}
			for _, c := range refused {
				wantSymlinkErr(t, c.what, c.do())
			}
			p.untouched(t)
			if b, err := os.ReadFile(j("d", "f")); err != nil || string(b) != "mine" {
				t.Errorf("d/f = %q, %v after refused operations", b, err)
			}
		})
	}
}

// TestNoFollowActsOnLinksThemselves: Lstat describes a link, and Rename,
// Remove, RemoveAll and an atomic replace act on the link itself, never its
// target - what a scanner needs to move a planted link aside.
func TestNoFollowActsOnLinksThemselves(t *testing.T) {
	for _, impl := range noFollowImpls {
		t.Run(impl.name, func(t *testing.T) {
			p := plant(t)
			fsys := impl.new(p.root, vfs.Perm{})
			j := func(parts ...string) string { return filepath.Join(append([]string{p.root}, parts...)...) }
			fi, err := fsys.Lstat(j("lnkfile"))
			if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("Lstat of a link = %v, %v; want a symlink", fi, err)
			}
			must(t, fsys.Rename(j("lnkfile"), j("d", "moved")))
			if fi, err := os.Lstat(j("d", "moved")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("renamed link = %v, %v", fi, err)
			}
			// An atomic replace over a link replaces the link.
			must(t, vfs.WriteFile(fsys, j("d", "lnk"), []byte("new")))
			if fi, err := os.Lstat(j("d", "lnk")); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("replaced link = %v, %v; want a regular file", fi, err)
			}
			must(t, fsys.Remove(j("d", "moved")))
			must(t, fsys.RemoveAll(j("lnkdir")))
			if _, err := os.Lstat(j("lnkdir")); !os.IsNotExist(err) {
				t.Fatalf("lnkdir after RemoveAll: %v", err)
			}
			p.untouched(t)
		})
	}
}

// TestNoFollowRootMayBeALink: the root is the caller's choice; reaching it
// through a link is fine, and everything works normally below it.
func TestNoFollowRootMayBeALink(t *testing.T) {
	for _, impl := range noFollowImpls {
		t.Run(impl.name, func(t *testing.T) {
			base := t.TempDir()
			real := filepath.Join(base, "real")
			link := filepath.Join(base, "link")
			must(t, os.MkdirAll(real, 0o700))
			must(t, os.Symlink(real, link))
			fsys := impl.new(link, vfs.Perm{})
			ctx := context.Background()
			dir := filepath.Join(link, "a", "b")
			must(t, fsys.MkdirAll(dir, vfs.DirPerm))
			must(t, vfs.WriteFile(fsys, filepath.Join(dir, "f"), []byte("data")))
			must(t, vfs.CreateExclusive(fsys, filepath.Join(dir, "g"), []byte("g"), false))
			b, err := fsys.ReadFile(filepath.Join(dir, "f"))
			if err != nil || string(b) != "data" {
				t.Fatalf("ReadFile = %q, %v", b, err)
			}
			ns, err := fsys.ReadDirNames(dir)
			slices.Sort(ns)
			if err != nil || !slices.Equal(ns, []string{"f", "g"}) {
				t.Fatalf("ReadDirNames = %v, %v", ns, err)
			}
			if fi, err := fsys.Stat(dir); err != nil || !fi.IsDir() {
				t.Fatalf("Stat = %v, %v", fi, err)
			}
			must(t, fsys.Link(filepath.Join(dir, "f"), filepath.Join(link, "a", "h")))
			must(t, fsys.Rename(filepath.Join(link, "a", "h"), filepath.Join(dir, "h")))
			must(t, fsys.SyncDir(dir))
			f, err := fsys.OpenFile(filepath.Join(dir, "f"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.Write([]byte("+"))
			must(t, err)
			must(t, f.Sync())
			must(t, f.Close())
			if b, _ := os.ReadFile(filepath.Join(real, "a", "b", "f")); string(b) != "data+" {
				t.Fatalf("file through the real path = %q", b)
			}
			u, err := fsys.Lock(ctx, filepath.Join(dir, "lock"))
			must(t, err)
			if _, ok, err := fsys.TryLock(filepath.Join(dir, "lock")); ok || err != nil {
				t.Fatalf("TryLock while held = %v, %v", ok, err)
			}
			// The OS lock on the same file excludes it too (other processes
			// may use either).
			if _, ok, err := osfs.TryLock(filepath.Join(real, "a", "b", "lock")); ok || err != nil {
				t.Fatalf("OS TryLock while held = %v, %v", ok, err)
			}
			must(t, u.Unlock())
			u2, ok, err := fsys.TryLock(filepath.Join(dir, "lock"))
			if !ok || err != nil {
				t.Fatalf("TryLock after unlock = %v, %v", ok, err)
			}
			must(t, u2.Unlock())
			cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			held, err := osfs.Lock(ctx, filepath.Join(real, "a", "b", "lock"))
			must(t, err)
			if _, err := fsys.Lock(cctx, filepath.Join(dir, "lock")); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock while another holds it, ctx expiring: %v", err)
			}
			must(t, held.Unlock())
			must(t, fsys.Remove(filepath.Join(dir, "g")))
			must(t, fsys.RemoveAll(filepath.Join(link, "a")))
			if ns := dirNames(t, real); len(ns) != 0 {
				t.Fatalf("real root holds %v after RemoveAll", ns)
			}
		})
	}
}

// TestNoFollowMissingAndPlainPaths: without links, errors are the usual
// ones (not-exist, exist, not a directory), and paths outside the root are
// not confined.
func TestNoFollowMissingAndPlainPaths(t *testing.T) {
	for _, impl := range noFollowImpls {
		t.Run(impl.name, func(t *testing.T) {
			p := plant(t)
			fsys := impl.new(p.root, vfs.Perm{})
			if _, err := fsys.ReadFile(filepath.Join(p.root, "missing", "x")); !vfs.IsNotExist(err) {
				t.Errorf("ReadFile of a missing path: %v, want not-exist", err)
			}
			if err := fsys.Remove(filepath.Join(p.root, "d", "nope")); !vfs.IsNotExist(err) {
				t.Errorf("Remove of a missing file: %v, want not-exist", err)
			}
			if err := fsys.RemoveAll(filepath.Join(p.root, "missing", "x")); err != nil {
				t.Errorf("RemoveAll of a missing path: %v", err)
			}
			if err := fsys.Rename(filepath.Join(p.root, "d", "nope"), filepath.Join(p.root, "d", "x")); !vfs.IsNotExist(err) {
				t.Errorf("Rename of a missing file: %v, want not-exist", err)
			}
			if err := vfs.CreateExclusive(fsys, filepath.Join(p.root, "d", "f"), []byte("x"), false); !vfs.IsExist(err) {
				t.Errorf("CreateExclusive over an existing file: %v, want exist", err)
			}
			// Paths outside the root get the plain OS behaviour.
			if b, err := fsys.ReadFile(p.secret); err != nil || string(b) != secretData {
				t.Errorf("ReadFile outside root = %q, %v", b, err)
			}
			// A regular file in place of a directory is not a link.
			if err := fsys.MkdirAll(filepath.Join(p.root, "d", "f", "x"), vfs.DirPerm); err == nil || errors.Is(err, vfs.ErrSymlink) {
				t.Errorf("MkdirAll under a regular file: %v, want a not-a-directory error", err)
			}
		})
	}
}

// TestTouch: Touch moves a directory's and a file's modification time
// forward, on every implementation.
func TestTouch(t *testing.T) {
	impls := []struct {
		name string
		new  func(root string) vfs.FS
	}{
		{"os", func(string) vfs.FS { return vfs.OS{} }},
		{"memfs", func(string) vfs.FS { return vfs.NewStrictMem() }},
	}
	for _, impl := range noFollowImpls {
		impls = append(impls, struct {
			name string
			new  func(root string) vfs.FS
		}{"nofollow " + impl.name, func(root string) vfs.FS { return impl.new(root, vfs.Perm{}) }})
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			root := t.TempDir()
			fsys := impl.new(root)
			dir, file := filepath.Join(root, "d"), filepath.Join(root, "d", "f")
			must(t, fsys.MkdirAll(dir, vfs.DirPerm))
			must(t, vfs.WriteFile(fsys, file, []byte("x")))
			for _, name := range []string{dir, file} {
				before, err := fsys.Lstat(name)
				must(t, err)
				time.Sleep(20 * time.Millisecond) // past a coarse timestamp tick
				must(t, fsys.Touch(name))
				after, err := fsys.Lstat(name)
				must(t, err)
				if !after.ModTime().After(before.ModTime()) {
					t.Errorf("Touch(%s): mtime %v, before %v", name, after.ModTime(), before.ModTime())
				}
			}
			if err := fsys.Touch(filepath.Join(root, "missing")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Touch of a missing file: %v, want ErrNotExist", err)
			}
		})
	}
}

// TestNoFollowReadFileSizes: ReadFile returns a file's bytes exactly
// whatever its size (the Linux path reads the bare descriptor into a buffer
// it grows), and fails on a directory.
func TestNoFollowReadFileSizes(t *testing.T) {
	for _, impl := range noFollowImpls {
		t.Run(impl.name, func(t *testing.T) {
			root := t.TempDir()
			fsys := impl.new(root, vfs.Perm{})
			for _, n := range []int{0, 1, 511, 1023, 1024, 1025, 4096, 100_000} {
				want := make([]byte, n)
				for i := range want {
					want[i] = byte('a' + i%26)
				}
				path := filepath.Join(root, fmt.Sprintf("f%d", n))
				must(t, os.WriteFile(path, want, 0o600))
				got, err := fsys.ReadFile(path)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("ReadFile of %d bytes: %d bytes, %v", n, len(got), err)
				}
			}
			if _, err := fsys.ReadFile(root); err == nil {
				t.Errorf("ReadFile of a directory succeeded")
			}
		})
	}
}

// TestNoFollowOpensOnlyRegularFiles: OpenFile and ReadFile of a FIFO, a
// directory or a socket planted in place of a file fail wrapping
// ErrNotRegular, and return at once: a FIFO's open(2) without O_NONBLOCK
// blocks until its other end is opened, whatever a caller's context says
// (a FIFO planted as an instance's history.jsonl did, in history's opens).
func TestNoFollowOpensOnlyRegularFiles(t *testing.T) {
	cases := []struct {
		name  string
		plant func(path string) error
		flag  int // -1: ReadFile
	}{
		{"FIFO read", mkfifo, os.O_RDONLY},
		{"FIFO write", mkfifo, os.O_WRONLY},
		{"FIFO append, create", mkfifo, os.O_WRONLY | os.O_APPEND | os.O_CREATE},
		{"FIFO read-write", mkfifo, os.O_RDWR},
		{"FIFO ReadFile", mkfifo, -1},
		{"directory read", mkdir, os.O_RDONLY},
		{"directory write, create", mkdir, os.O_WRONLY | os.O_CREATE},
		{"socket read", mksock, os.O_RDONLY},
		{"socket ReadFile", mksock, -1},
	}
	for _, impl := range noFollowImpls {
		for _, c := range cases {
			t.Run(impl.name+"/"+c.name, func(t *testing.T) {
				root := t.TempDir()
				fsys := impl.new(root, vfs.Perm{})
				path := filepath.Join(root, "history.jsonl")
				must(t, c.plant(path))
				done := make(chan error, 1)
				go func() {
					if c.flag < 0 {
						_, err := fsys.ReadFile(path)
						done <- err
						return
					}
					f, err := fsys.OpenFile(path, c.flag, 0o600)
					if err == nil {
						f.Close()
					}
					done <- err
				}()
				var err error
				select {
				case err = <-done:
				case <-time.After(time.Minute):
					// Blocked in open(2): open the other end so that the
					// call returns and the test ends.
					for err == nil {
						if f, e := os.OpenFile(path, os.O_RDWR, 0); e == nil {
							f.Close()
						}
						select {
						case <-done:
							err = errors.New("returned only once the FIFO's other end was opened")
						case <-time.After(10 * time.Millisecond):
						}
					}
					t.Fatalf("blocked on a planted %s for a minute; %v", c.name, err)
				}
				if !errors.Is(err, vfs.ErrNotRegular) {
					t.Fatalf("err = %v; want ErrNotRegular", err)
				}
			})
		}
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
func mkdir(path string) error  { return os.Mkdir(path, 0o700) }

// mksock leaves a bound unix socket's file at path.
func mksock(path string) error {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrUnix{Name: path})
}
