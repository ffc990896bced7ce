//go:build !linux

package vfs

import (
	"context"
	"io/fs"
)

// Without openat2(2), NoFollow checks every component below root with Lstat
// before each call (see nofollow_generic.go).

// OpenFile implements FS.
func (n *noFollowFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return n.gOpenFile(name, flag, perm)
}

// ReadFile implements FS.
func (n *noFollowFS) ReadFile(name string) ([]byte, error) { return n.gReadFile(name) }

// ReadDirNames implements FS.
func (n *noFollowFS) ReadDirNames(name string) ([]string, error) { return n.gReadDirNames(name) }

// Stat implements FS; a final symbolic link is refused, not followed.
func (n *noFollowFS) Stat(name string) (fs.FileInfo, error) { return n.gStat(name) }

// Lstat implements FS.
func (n *noFollowFS) Lstat(name string) (fs.FileInfo, error) { return n.gLstat(name) }

// Rename implements FS.
func (n *noFollowFS) Rename(oldpath, newpath string) error { return n.gRename(oldpath, newpath) }

// Link implements FS.
func (n *noFollowFS) Link(oldpath, newpath string) error { return n.gLink(oldpath, newpath) }

// Remove implements FS.
func (n *noFollowFS) Remove(name string) error { return n.gRemove(name) }

// RemoveAll implements FS.
func (n *noFollowFS) RemoveAll(name string) error { return n.gRemoveAll(name) }

// MkdirAll implements FS; directories get the configured mode.
func (n *noFollowFS) MkdirAll(name string, _ fs.FileMode) error {
	if _, ok := n.rel(name); !ok {
		return n.gMkdirRoot(name)
	}
	if err := n.gMkdirRoot(n.root); err != nil {
		return err
	}
	return n.gMkdirAll(name)
}

// SyncDir implements FS.
func (n *noFollowFS) SyncDir(name string) error { return n.gSyncDir(name) }

// Touch implements FS.
func (n *noFollowFS) Touch(name string) error { return n.gTouch(name) }

// Lock implements FS.
func (n *noFollowFS) Lock(ctx context.Context, name string) (Unlocker, error) {
	return n.gLock(ctx, name)
}

// TryLock implements FS.
func (n *noFollowFS) TryLock(name string) (Unlocker, bool, error) { return n.gTryLock(name) }

// LockExisting implements FS.
func (n *noFollowFS) LockExisting(ctx context.Context, name string, wait bool) (Unlocker, bool, error) {
	return n.gLockExisting(ctx, name, wait)
}

// ScanDir implements DirScanner.
func (n *noFollowFS) ScanDir(name string, fn func(name []byte) error) error {
	return n.gScanDir(name, fn)
}
