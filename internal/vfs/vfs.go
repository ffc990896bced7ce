// Package vfs is the narrow file-system interface every durofs building block
// does its I/O through.
//
// Production code uses [OS]. Tests wrap it to count fsyncs ([Counting]), to
// inject faults, or replace it with an in-memory strict file system that
// forgets unsynced data at a simulated power loss. Keeping the interface small
// (open, read, rename, link, remove, list, sync, lock) is what makes those
// substitutes possible. [MapWords], outside the interface, maps a few words of
// a file shared between processes (the write-ahead log's group commit).
//
// Durability is a property of the FS value, not of its callers: [NoSync] turns
// Sync and SyncDir into no-ops, which is the ProcessCrashSafe mode (survives
// kill -9, not power loss). Callers always call Sync/SyncDir where durability
// needs it and never check the mode themselves.
package vfs

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
)

// File is an open file. It is the subset of *os.File the building blocks use.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.Seeker
	io.Closer
	// Sync flushes the file's data and metadata to stable storage.
	Sync() error
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Stat returns the file's metadata.
	Stat() (fs.FileInfo, error)
	// Name returns the path the file was opened with.
	Name() string
}

// Unlocker releases a lock taken with [FS.Lock] or [FS.TryLock].
type Unlocker interface {
	// Unlock releases the lock. Calling it twice is harmless.
	Unlock() error
}

// FS is the file-system interface. Paths are OS paths (filepath.Join style).
// Implementations must be safe for concurrent use.
type FS interface {
	// OpenFile opens name with os.OpenFile semantics.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// ReadFile reads the whole file.
	ReadFile(name string) ([]byte, error)
	// ReadDirNames lists the names in a directory, in no particular order.
	ReadDirNames(name string) ([]string, error)
	// Stat returns a file's metadata, following symlinks.
	Stat(name string) (fs.FileInfo, error)
	// Lstat returns a file's metadata without following symlinks.
	Lstat(name string) (fs.FileInfo, error)
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	// Link creates newpath as a hard link to oldpath; it fails with
	// fs.ErrExist if newpath exists. It is the create-exclusive publish.
	Link(oldpath, newpath string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a tree. It is not atomic; callers make it idempotent.
	RemoveAll(name string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(name string, perm fs.FileMode) error
	// SyncDir makes the directory's entries (creates, renames, unlinks) durable.
	SyncDir(name string) error
	// Touch sets name's modification time to now, as a change of its entries
	// does for a directory ([NoFollow] refuses a symbolic link). A file
	// rewritten in place leaves its directory's mtime alone; touching the
	// directory tells caches keyed on that mtime to look again.
	Touch(name string) error
	// Lock takes an exclusive advisory lock on the lock file at name,
	// creating it if it is missing (its directory must exist), waiting until
	// ctx is done. It excludes other processes and other goroutines of this
	// process alike. The lock is on the file name names when Lock returns:
	// a lock file that is removed or replaced while the call waits (its
	// holder reclaimed it) is let go and name is locked again, created anew
	// if need be, so a waiter never holds a lock on a file nobody else can
	// find. If name's directory is gone, Lock fails with an error satisfying
	// [IsNotExist]. Removing a lock file is therefore safe only for its
	// holder, and only as the last use of that lock file.
	Lock(ctx context.Context, name string) (Unlocker, error)
	// TryLock is Lock without waiting; ok is false if someone else holds it
	// (or kept replacing it while TryLock retried).
	TryLock(name string) (u Unlocker, ok bool, err error)
	// LockExisting takes the same exclusive lock on a file that must
	// already exist: it never creates name, so a file can be its own lock
	// and the lock lives and dies with it. It fails with an error
	// satisfying [IsNotExist] if name does not exist or if, once locked,
	// name no longer names the file that was locked (it was removed or
	// replaced while the call waited). With wait it waits until ctx is done
	// (then it returns ctx's error); without, ok is false if someone else
	// holds the lock.
	LockExisting(ctx context.Context, name string, wait bool) (u Unlocker, ok bool, err error)
}

// IsNotExist reports whether err says a file does not exist.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// IsExist reports whether err says a file already exists.
func IsExist(err error) bool { return errors.Is(err, fs.ErrExist) }

// Default permissions for files and directories durofs creates.
const (
	FilePerm fs.FileMode = 0o600
	DirPerm  fs.FileMode = 0o700
)

var _ File = (*os.File)(nil)
