//go:build linux

package vfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux, NoFollow resolves every path below root with openat2(2) and
// RESOLVE_NO_SYMLINKS (no component, the last one included, may be a
// symbolic link), and changes names relative to a parent directory
// descriptor resolved that way.

// generic reports whether this FS must use the check-then-use fallback:
// openat2 is missing (ENOSYS before Linux 5.6; seccomp filters may answer
// ENOSYS or EPERM) or a test forced it. It is decided once, by probing root.
func (n *noFollowFS) generic() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.useGeneric
}

// resolveRoot returns the resolved root, probing openat2 on first success.
func (n *noFollowFS) resolveRoot() (string, error) {
	base, err := n.real()
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.probed {
		n.probed = true
		fd, err := unix.Openat2(unix.AT_FDCWD, base, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
		switch {
		case err == nil:
			_ = unix.Close(fd)
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
			n.useGeneric = true
		}
	}
	return base, nil
}

// openat2 opens rel (relative to root, "." for root) with flags, allowing
// no symbolic link anywhere below root. mode is used with O_CREAT.
func (n *noFollowFS) openat2(rel string, flags int, mode fs.FileMode) (int, error) {
	base, err := n.resolveRoot()
	if err != nil {
		return -1, err
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode.Perm())
	}
	path := base
	if rel != "." {
		path = base + "/" + rel
	}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// pathErr wraps an errno of an operation on name; ELOOP (a refused link)
// becomes an error wrapping ErrSymlink.
func pathErr(op, name string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return symlinkError(op, name, nil)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// linkErr is pathErr for two-path operations.
func linkErr(op, oldpath, newpath string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		err = ErrSymlink
	}
	return &os.LinkError{Op: op, Old: oldpath, New: newpath, Err: err}
}

// parent opens the directory containing rel (O_PATH) and returns it with
// rel's last component.
func (n *noFollowFS) parent(rel string) (fd int, base string, err error) {
	dir, base := filepath.Split(rel)
	dir = strings.TrimRight(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err = n.openat2(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// OpenFile implements FS. A created file gets the configured file mode.
// Only a regular file is opened: the open is non-blocking (O_NONBLOCK, no
// effect on a regular file's reads and writes), so that a FIFO planted in
// its place blocks neither the open nor a later read, and anything but a
// regular file fails wrapping ErrNotRegular.
func (n *noFollowFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gOpenFile(name, flag, perm)
	}
	fd, err := n.openat2(r, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, n.perm.File)
	if err == unix.ENXIO || err == unix.EISDIR {
		// ENXIO: a FIFO opened for writing with no reader, or a socket;
		// EISDIR: a directory opened for writing.
		err = fmt.Errorf("%w: %w", ErrNotRegular, err)
	}
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, pathErr("stat", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// ReadFile implements FS. It reads through the bare descriptor: an
// *os.File would cost an fcntl, an allocation and a cleanup per file, and
// leases, claims and messages are read this way many times per task. The
// file is opened with O_NONBLOCK (no effect on a regular file), so that a
// FIFO planted in its place blocks neither the open nor the read: a FIFO
// without data fails wrapping ErrNotRegular (EAGAIN, or no writer: an empty
// read is checked with fstat), as do a directory (EISDIR) and a socket
// (ENXIO).
func (n *noFollowFS) ReadFile(name string) ([]byte, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gReadFile(name)
	}
	fd, err := n.openat2(r, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err == unix.ENXIO {
		err = fmt.Errorf("%w: %w", ErrNotRegular, err)
	}
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 1024)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		m, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EISDIR || err == unix.EAGAIN:
			return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %w", ErrNotRegular, err)}
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		case m == 0 && len(buf) == 0:
			// Empty: a regular file, or a FIFO with no writer.
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return nil, &fs.PathError{Op: "read", Path: name, Err: ErrNotRegular}
			}
			return buf, nil
		case m == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+m]
	}
}

// ReadDirNames implements FS.
func (n *noFollowFS) ReadDirNames(name string) ([]string, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gReadDirNames(name)
	}
	fd, err := n.openat2(r, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.Readdirnames(-1)
}

// ScanDir implements DirScanner.
func (n *noFollowFS) ScanDir(name string, fn func(name []byte) error) error {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gScanDir(name, fn)
	}
	fd, err := n.openat2(r, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return pathErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return scanDirFile(f, fn)
}

// statAt fstats rel opened with O_PATH (and flags).
func (n *noFollowFS) statAt(op, name, rel string, flags int) (fs.FileInfo, error) {
	fd, err := n.openat2(rel, unix.O_PATH|flags, 0)
	if err != nil {
		return nil, pathErr(op, name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.Stat()
}

// Stat implements FS. A final symbolic link is refused, not followed.
func (n *noFollowFS) Stat(name string) (fs.FileInfo, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gStat(name)
	}
	return n.statAt("stat", name, r, 0)
}

// Lstat implements FS: it describes a final symbolic link itself.
func (n *noFollowFS) Lstat(name string) (fs.FileInfo, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gLstat(name)
	}
	return n.statAt("lstat", name, r, unix.O_NOFOLLOW)
}

// twoAt runs fn with the parent descriptors of two paths below root.
func (n *noFollowFS) twoAt(op, oldpath, newpath, ro, rn string, fn func(ofd int, ob string, nfd int, nb string) error) error {
	ofd, ob, err := n.parent(ro)
	if err != nil {
		return linkErr(op, oldpath, newpath, err)
	}
	defer unix.Close(ofd)
	nfd, nb, err := n.parent(rn)
	if err != nil {
		return linkErr(op, oldpath, newpath, err)
	}
	defer unix.Close(nfd)
	if err := fn(ofd, ob, nfd, nb); err != nil {
		return linkErr(op, oldpath, newpath, err)
	}
	return nil
}

// Rename implements FS. It renames a symbolic link itself, never its target.
func (n *noFollowFS) Rename(oldpath, newpath string) error {
	ro, ok1 := n.rel(oldpath)
	rn, ok2 := n.rel(newpath)
	if !ok1 || !ok2 || n.generic() {
		return n.gRename(oldpath, newpath)
	}
	return n.twoAt("rename", oldpath, newpath, ro, rn, func(ofd int, ob string, nfd int, nb string) error {
		return unix.Renameat(ofd, ob, nfd, nb)
	})
}

// Link implements FS (linkat without AT_SYMLINK_FOLLOW: a link is never
// followed).
func (n *noFollowFS) Link(oldpath, newpath string) error {
	ro, ok1 := n.rel(oldpath)
	rn, ok2 := n.rel(newpath)
	if !ok1 || !ok2 || n.generic() {
		return n.gLink(oldpath, newpath)
	}
	return n.twoAt("link", oldpath, newpath, ro, rn, func(ofd int, ob string, nfd int, nb string) error {
		return unix.Linkat(ofd, ob, nfd, nb, 0)
	})
}

// Remove implements FS. It removes a symbolic link itself.
func (n *noFollowFS) Remove(name string) error {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gRemove(name)
	}
	fd, base, err := n.parent(r)
	if err != nil {
		return pathErr("remove", name, err)
	}
	defer unix.Close(fd)
	e := unix.Unlinkat(fd, base, 0)
	if e == nil {
		return nil
	}
	e1 := unix.Unlinkat(fd, base, unix.AT_REMOVEDIR)
	if e1 == nil {
		return nil
	}
	// As os.Remove: rmdir of a file says ENOTDIR, so then unlink's error
	// is the real one.
	if e1 != unix.ENOTDIR {
		e = e1
	}
	return pathErr("remove", name, e)
}

// RemoveAll implements FS. The parent directories are checked without
// following links; below that, os.RemoveAll never follows links either
// (it removes a link itself).
func (n *noFollowFS) RemoveAll(name string) error {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gRemoveAll(name)
	}
	fd, _, err := n.parent(r)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return pathErr("removeall", name, err)
	}
	_ = unix.Close(fd)
	return os.RemoveAll(name)
}

// MkdirAll implements FS. Directories get the configured mode; an existing
// component that is a symbolic link is refused.
func (n *noFollowFS) MkdirAll(name string, _ fs.FileMode) error {
	r, ok := n.rel(name)
	if !ok {
		return n.gMkdirRoot(name)
	}
	if !n.generic() {
		// Fast path, the common case (every apply makes sure its
		// directories exist): the whole chain is there, with no link in
		// it. One resolution instead of three system calls per component.
		if fd, err := n.openat2(r, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
			return unix.Close(fd)
		}
	}
	if err := n.gMkdirRoot(n.root); err != nil {
		return err
	}
	if n.generic() {
		return n.gMkdirAll(name)
	}
	fd, err := n.openat2(".", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	for _, c := range strings.Split(r, "/") {
		if c == "" || c == "." {
			continue
		}
		if err := unix.Mkdirat(fd, c, uint32(n.perm.Dir.Perm())); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return pathErr("mkdir", name, err)
		}
		var nfd int
		for {
			nfd, err = unix.Openat2(fd, c, &unix.OpenHow{
				Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
			if err != unix.EINTR && err != unix.EAGAIN {
				break
			}
		}
		unix.Close(fd)
		if err != nil {
			return pathErr("mkdir", name, err)
		}
		fd = nfd
	}
	return unix.Close(fd)
}

// Touch implements FS: utimensat(UTIME_NOW) of the last component in a
// parent opened without following links; a link there is refused.
func (n *noFollowFS) Touch(name string) error {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gTouch(name)
	}
	fd, base, err := n.parent(r)
	if err != nil {
		return pathErr("touch", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("touch", name, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return pathErr("touch", name, ErrSymlink)
	}
	// A link swapped in since the check is touched itself, never followed.
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(fd, base, now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("touch", name, err)
	}
	return nil
}

// SyncDir implements FS.
func (n *noFollowFS) SyncDir(name string) error {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gSyncDir(name)
	}
	fd, err := n.openat2(r, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return pathErr("open", name, err)
	}
	serr := unix.Fsync(fd)
	cerr := unix.Close(fd)
	if serr != nil {
		return pathErr("sync", name, serr)
	}
	if cerr != nil {
		return pathErr("close", name, cerr)
	}
	return nil
}

// lockRetry is how often a waiting Lock retries flock(2).
const lockRetry = time.Millisecond

// Lock implements FS like OS.Lock (an in-process mutex per path, then an
// exclusive flock, then a check that name still names the locked file),
// but opens the lock file without following links and creates it with the
// configured file mode.
func (n *noFollowFS) Lock(ctx context.Context, name string) (Unlocker, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gLock(ctx, name)
	}
	u, _, err := n.lockAt(ctx, r, name, true, true)
	return u, err
}

// TryLock implements FS.
func (n *noFollowFS) TryLock(name string) (Unlocker, bool, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gTryLock(name)
	}
	return n.lockAt(context.Background(), r, name, false, true)
}

// LockExisting implements FS like OS.LockExisting, opening the file without
// following links.
func (n *noFollowFS) LockExisting(ctx context.Context, name string, wait bool) (Unlocker, bool, error) {
	r, ok := n.rel(name)
	if !ok || n.generic() {
		return n.gLockExisting(ctx, name, wait)
	}
	return n.lockAt(ctx, r, name, wait, false)
}

// lockAt is Lock and TryLock (create) and LockExisting (!create): the
// in-process mutex, the flock, and then lock-then-verify: name must still
// name the locked file (see lockFlock), else LockExisting fails with "not
// exist" and Lock and TryLock lock name again.
func (n *noFollowFS) lockAt(ctx context.Context, r, name string, wait, create bool) (Unlocker, bool, error) {
	pm := procLocks.get(name)
	if wait {
		if err := pm.lock(ctx); err != nil {
			procLocks.put(name)
			return nil, false, fmt.Errorf("vfs: lock %s: %w", name, err)
		}
	} else if !pm.tryLock() {
		procLocks.put(name)
		return nil, false, nil
	}
	fail := func(err error) (Unlocker, bool, error) {
		pm.unlock()
		procLocks.put(name)
		return nil, false, err
	}
	for try := 1; ; try++ {
		u, err := n.flock(ctx, r, name, wait, create)
		if err == nil && u == nil && wait {
			err = ctx.Err()
		}
		if err != nil {
			return fail(fmt.Errorf("vfs: lock %s: %w", name, err))
		}
		if u == nil {
			return fail(nil)
		}
		err = sameFile(name, u.f.Stat, n.Lstat)
		if err == nil {
			u.pm = pm
			return u, true, nil
		}
		u.release()
		if !create || !IsNotExist(err) {
			return fail(err)
		}
		if !wait && try >= maxTryReplaced {
			return fail(nil)
		}
		if err := ctx.Err(); err != nil {
			return fail(fmt.Errorf("vfs: lock %s: %w", name, err))
		}
	}
}

// flock opens the lock file (creating it if create) and takes an exclusive
// flock on it, polling every lockRetry until ctx is done if wait, else once.
// It returns (nil, nil) if the lock is held elsewhere and it did not get it.
func (n *noFollowFS) flock(ctx context.Context, rel, name string, wait, create bool) (*fdUnlocker, error) {
	// O_NONBLOCK: a FIFO planted in place of the lock file must not block
	// the open (which no ctx could end); no effect on a regular file.
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK
	if create {
		flags |= unix.O_CREAT
	}
	fd, err := n.openat2(rel, flags, n.perm.File)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	var t *time.Timer
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &fdUnlocker{f: f, fd: fd, name: name}, nil
		}
		if err == unix.EINTR {
			continue
		}
		if err != unix.EWOULDBLOCK || !wait {
			f.Close()
			if err == unix.EWOULDBLOCK {
				return nil, nil
			}
			return nil, pathErr("flock", name, err)
		}
		if t == nil {
			t = time.NewTimer(lockRetry)
			defer t.Stop()
		} else {
			t.Reset(lockRetry)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, nil
		case <-t.C:
		}
	}
}

// fdUnlocker releases a flock taken by noFollowFS. It keeps the *os.File
// referenced, so no finalizer closes the descriptor (and drops the lock)
// while it is held.
type fdUnlocker struct {
	once sync.Once
	f    *os.File
	fd   int
	pm   *procMutex
	name string
	err  error
}

func (u *fdUnlocker) Unlock() error {
	u.once.Do(func() {
		u.err = u.release()
		u.pm.unlock()
		procLocks.put(u.name)
	})
	return u.err
}

// release drops the flock and closes the file (not the in-process mutex).
func (u *fdUnlocker) release() error {
	err := unix.Flock(u.fd, unix.LOCK_UN)
	if cerr := u.f.Close(); err == nil {
		err = cerr
	}
	return err
}
