package vfs

import (
	"context"
	"io"

	"github.com/gofrs/flock"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The portable (check-then-use) implementation of NoFollow: every component
// below root is checked with Lstat before the call, and a final component
// that is opened is opened with O_NOFOLLOW where the system has it. Linux
// uses it only when openat2(2) is unavailable (see nofollow_linux.go).

// gOpenFile opens a regular file: like the Linux path, without blocking
// (oNonBlock), and anything but a regular file fails wrapping ErrNotRegular.
func (n *noFollowFS) gOpenFile(name string, flag int, _ fs.FileMode) (File, error) {
	f, err := n.gOpen(name, flag|oNonBlock)
	if err != nil {
		return nil, mapNotRegular(err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
		}
		return nil, err
	}
	return f, nil
}

// gOpen opens name, refusing symbolic links below root.
func (n *noFollowFS) gOpen(name string, flag int) (*os.File, error) {
	if r, ok := n.rel(name); ok {
		if err := checkComponents("open", name, n.root, r, oNoFollow == 0); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(name, flag|oNoFollow, n.perm.File)
	if err != nil {
		return nil, mapNoFollow(err)
	}
	return f, nil
}

func (n *noFollowFS) gReadFile(name string) ([]byte, error) {
	f, err := n.gOpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func (n *noFollowFS) gReadDirNames(name string) ([]string, error) {
	f, err := n.gOpen(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func (n *noFollowFS) gStat(name string) (fs.FileInfo, error) {
	if r, ok := n.rel(name); ok {
		if err := checkComponents("stat", name, n.root, r, true); err != nil {
			return nil, err
		}
	}
	return os.Stat(name)
}

func (n *noFollowFS) gLstat(name string) (fs.FileInfo, error) {
	if r, ok := n.rel(name); ok {
		if err := checkComponents("lstat", name, n.root, r, false); err != nil {
			return nil, err
		}
	}
	return os.Lstat(name)
}

// gCheckParents checks the parent components of every path below root.
func (n *noFollowFS) gCheckParents(op string, names ...string) error {
	for _, name := range names {
		if r, ok := n.rel(name); ok {
			if err := checkComponents(op, name, n.root, r, false); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *noFollowFS) gRename(oldpath, newpath string) error {
	if err := n.gCheckParents("rename", oldpath, newpath); err != nil {
		return err
	}
	return n.OS.Rename(oldpath, newpath)
}

func (n *noFollowFS) gLink(oldpath, newpath string) error {
	if err := n.gCheckParents("link", oldpath, newpath); err != nil {
		return err
	}
	return os.Link(oldpath, newpath)
}

func (n *noFollowFS) gTouch(name string) error {
	if err := n.gCheckParents("touch", name); err != nil {
		return err
	}
	fi, err := os.Lstat(name)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return &fs.PathError{Op: "touch", Path: name, Err: ErrSymlink}
	}
	now := time.Now()
	return os.Chtimes(name, now, now)
}

func (n *noFollowFS) gRemove(name string) error {
	if err := n.gCheckParents("remove", name); err != nil {
		return err
	}
	return os.Remove(name)
}

func (n *noFollowFS) gRemoveAll(name string) error {
	if err := n.gCheckParents("removeall", name); err != nil {
		return err
	}
	return os.RemoveAll(name)
}

func (n *noFollowFS) gMkdirAll(name string) error {
	if r, ok := n.rel(name); ok {
		if err := checkComponents("mkdir", name, n.root, r, true); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(name, n.perm.Dir); err != nil {
		return err
	}
	// A component swapped for a link while MkdirAll ran is caught here.
	if r, ok := n.rel(name); ok {
		return checkComponents("mkdir", name, n.root, r, true)
	}
	return nil
}

func (n *noFollowFS) gSyncDir(name string) error {
	if r, ok := n.rel(name); ok {
		if err := checkComponents("sync", name, n.root, r, true); err != nil {
			return err
		}
	}
	return n.OS.SyncDir(name)
}

// gLockFile checks the lock file's path (every component below root, the
// final one too where open(2) has no O_NOFOLLOW).
func (n *noFollowFS) gLockFile(name string) error {
	if r, ok := n.rel(name); ok {
		return checkComponents("open", name, n.root, r, oNoFollow == 0)
	}
	return nil
}

// gFlock returns a gofrs/flock of name that opens it without following a
// final link (where the system can), creating it with the configured mode
// if create.
func (n *noFollowFS) gFlock(name string, create bool) func() *flock.Flock {
	flag := os.O_RDONLY | oNoFollow
	if create {
		flag |= os.O_CREATE
	}
	return func() *flock.Flock { return flock.New(name, flock.SetFlag(flag), flock.SetPermissions(n.perm.File)) }
}

func (n *noFollowFS) gLock(ctx context.Context, name string) (Unlocker, error) {
	if err := n.gLockFile(name); err != nil {
		return nil, err
	}
	u, _, err := lockFlock(ctx, name, true, true, n.gFlock(name, true), n.gLstat)
	return u, mapNoFollow(err)
}

func (n *noFollowFS) gTryLock(name string) (Unlocker, bool, error) {
	if err := n.gLockFile(name); err != nil {
		return nil, false, err
	}
	u, ok, err := lockFlock(context.Background(), name, false, true, n.gFlock(name, true), n.gLstat)
	return u, ok, mapNoFollow(err)
}

func (n *noFollowFS) gLockExisting(ctx context.Context, name string, wait bool) (Unlocker, bool, error) {
	if err := n.gLockFile(name); err != nil {
		return nil, false, err
	}
	u, ok, err := lockFlock(ctx, name, wait, false, n.gFlock(name, false), n.gLstat)
	return u, ok, mapNoFollow(err)
}

// gMkdirRoot creates root (outside the confinement: it may be a link).
func (n *noFollowFS) gMkdirRoot(name string) error {
	return os.MkdirAll(filepath.Clean(name), n.perm.Dir)
}

func (n *noFollowFS) gScanDir(name string, fn func(name []byte) error) error {
	f, err := n.gOpen(name, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	return scanDirFile(f, fn)
}
