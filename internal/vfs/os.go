package vfs

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/natefinch/atomic"
)

// OS is the real file system. The zero value is ready to use.
type OS struct{}

var _ FS = OS{}

// OpenFile implements FS.
func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ReadFile implements FS.
func (OS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// ReadDirNames implements FS. It uses Readdirnames, which does not lstat each
// entry (readdir of 100k names costs ~40 ms; an lstat per entry costs ~1 s).
func (OS) ReadDirNames(name string) ([]string, error) {
	d, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// Stat implements FS.
func (OS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// Lstat implements FS.
func (OS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }

// Rename implements FS with natefinch/atomic.ReplaceFile: rename(2) on Unix,
// MoveFileEx(REPLACE_EXISTING|WRITE_THROUGH) on Windows. Neither syncs the
// parent directory; callers call SyncDir.
func (OS) Rename(oldpath, newpath string) error { return atomic.ReplaceFile(oldpath, newpath) }

// Link implements FS.
func (OS) Link(oldpath, newpath string) error { return os.Link(oldpath, newpath) }

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FS.
func (OS) RemoveAll(name string) error { return os.RemoveAll(name) }

// MkdirAll implements FS.
func (OS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }

// Touch implements FS (following links: OS is the plain file system).
func (OS) Touch(name string) error {
	now := time.Now()
	return os.Chtimes(name, now, now)
}

// SyncDir implements FS (see syncdir_*.go: a no-op where directories cannot be
// opened for sync, such as Windows).
func (OS) SyncDir(name string) error { return syncDir(name) }

// Lock implements FS. Each call uses a fresh *flock.Flock (one Flock shared by
// goroutines gives no exclusion) and the returned Unlocker keeps it referenced
// (an unreachable Flock is unlocked by the os.File finalizer). An in-process
// mutex per path comes first, so goroutines of this process queue on it
// instead of polling flock(2), and exclusion within the process does not
// depend on flock semantics (fcntl-based platforms do not exclude within a
// process). Once locked, the file is compared with what name names now
// (lock-then-verify), and locked again if it was removed or replaced.
func (OS) Lock(ctx context.Context, name string) (Unlocker, error) {
	u, _, err := lockFlock(ctx, name, true, true, func() *flock.Flock { return flock.New(name, flock.SetPermissions(FilePerm)) }, os.Lstat)
	return u, err
}

// TryLock implements FS.
func (OS) TryLock(name string) (Unlocker, bool, error) {
	return lockFlock(context.Background(), name, false, true, func() *flock.Flock { return flock.New(name, flock.SetPermissions(FilePerm)) }, os.Lstat)
}

// LockExisting implements FS: the file is opened read-only (never created),
// locked, and then compared with what name names now.
func (OS) LockExisting(ctx context.Context, name string, wait bool) (Unlocker, bool, error) {
	return lockFlock(ctx, name, wait, false, func() *flock.Flock { return flock.New(name, flock.SetFlag(os.O_RDONLY)) }, os.Lstat)
}

// maxTryReplaced bounds how often a lock without waiting retries a lock
// file that was removed or replaced while it locked it: its holders keep
// reclaiming it, which counts as held.
const maxTryReplaced = 4

// lockFlock is Lock and TryLock (create) and LockExisting (!create) on top
// of gofrs/flock: newFlock opens name (creating it or not) and lstat is the
// FS's own Lstat. Once the flock is had, name must still name the locked
// file; if it does not, LockExisting fails with "not exist" and Lock and
// TryLock lock name again.
func lockFlock(ctx context.Context, name string, wait, create bool, newFlock func() *flock.Flock, lstat func(string) (fs.FileInfo, error)) (Unlocker, bool, error) {
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
		fl := newFlock()
		var ok bool
		var err error
		if wait {
			ok, err = fl.TryLockContext(ctx, time.Millisecond)
			if err == nil && !ok {
				err = ctx.Err()
			}
		} else {
			ok, err = fl.TryLock()
		}
		if err != nil {
			return fail(fmt.Errorf("vfs: lock %s: %w", name, err))
		}
		if !ok {
			return fail(nil)
		}
		err = sameFile(name, fl.Stat, lstat)
		if err == nil {
			return &osUnlocker{fl: fl, pm: pm, name: name}, true, nil
		}
		_ = fl.Unlock()
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

// sameFile checks that name still names the open file whose stat is given:
// a lock taken on a file that was removed or replaced while waiting is a
// lock on nothing.
func sameFile(name string, stat func() (fs.FileInfo, error), lstat func(string) (fs.FileInfo, error)) error {
	held, err := stat()
	if err != nil {
		return fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	now, err := lstat(name)
	if err != nil {
		return fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	if !os.SameFile(held, now) {
		return fmt.Errorf("vfs: lock %s: replaced while waiting: %w", name, fs.ErrNotExist)
	}
	return nil
}

type osUnlocker struct {
	once sync.Once
	fl   *flock.Flock
	pm   *procMutex
	name string
	err  error
}

func (u *osUnlocker) Unlock() error {
	u.once.Do(func() {
		u.err = u.fl.Unlock()
		u.pm.unlock()
		procLocks.put(u.name)
	})
	return u.err
}

// procMutex is a context-aware mutex (a 1-slot channel).
type procMutex struct {
	ch   chan struct{}
	refs int
}

func (m *procMutex) lock(ctx context.Context) error {
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *procMutex) tryLock() bool {
	select {
	case m.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

func (m *procMutex) unlock() { <-m.ch }

// procLockTable hands out one procMutex per path, reference counted so the
// table does not grow with every path ever locked.
type procLockTable struct {
	mu sync.Mutex
	m  map[string]*procMutex
}

var procLocks = &procLockTable{m: map[string]*procMutex{}}

func (t *procLockTable) get(name string) *procMutex {
	t.mu.Lock()
	defer t.mu.Unlock()
	pm := t.m[name]
	if pm == nil {
		pm = &procMutex{ch: make(chan struct{}, 1)}
		t.m[name] = pm
	}
	pm.refs++
	return pm
}

func (t *procLockTable) put(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pm := t.m[name]
	pm.refs--
	if pm.refs == 0 {
		delete(t.m, name)
	}
}
