package vfs

import (
	"context"
	"io/fs"
	"os"
	"sync/atomic"
	"time"
)

// NoSync wraps an FS so that File.Sync and SyncDir do nothing. It is the
// ProcessCrashSafe durability mode: every write still reaches the kernel's page
// cache before the call returns, which survives kill -9 but not power loss.
func NoSync(inner FS) FS { return noSyncFS{inner} }

type noSyncFS struct{ FS }

func (n noSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := n.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ File }

func (noSyncFile) Sync() error { return nil }

// Counts holds the number of durability calls seen by a [Counting] FS.
type Counts struct {
	FileSyncs int64 // File.Sync (and Datasync) calls
	DirSyncs  int64 // SyncDir calls
}

// Total is FileSyncs + DirSyncs: every call that waits for the disk.
func (c Counts) Total() int64 { return c.FileSyncs + c.DirSyncs }

// Sub returns c - o.
func (c Counts) Sub(o Counts) Counts {
	return Counts{FileSyncs: c.FileSyncs - o.FileSyncs, DirSyncs: c.DirSyncs - o.DirSyncs}
}

// CountingFS counts fsyncs of files and directories passing through it,
// the files it creates and unlinks, and the files it opens (see
// [CountingFS.Files]).
type CountingFS struct {
	FS
	fileSyncs atomic.Int64
	dirSyncs  atomic.Int64
	creates   atomic.Int64
	unlinks   atomic.Int64
	opens     atomic.Int64
	listings  atomic.Int64
}

// FileCounts counts the inode churn seen by a [CountingFS].
type FileCounts struct {
	// Creates is how many files OpenFile created (not directories).
	Creates int64
	// Unlinks is how many names Remove removed, or Rename replaced.
	Unlinks int64
	// Opens is how many times a file was opened: OpenFile (directories
	// included), ReadFile and LockExisting calls, successful or not.
	Opens int64
	// Listings is how many times a directory was listed (ReadDirNames,
	// ScanDir).
	Listings int64
}

// Files returns the file counts so far.
func (c *CountingFS) Files() FileCounts {
	return FileCounts{Creates: c.creates.Load(), Unlinks: c.unlinks.Load(), Opens: c.opens.Load(), Listings: c.listings.Load()}
}

// Counting wraps inner and counts its fsyncs exactly.
func Counting(inner FS) *CountingFS { return &CountingFS{FS: inner} }

// Counts returns the counts so far.
func (c *CountingFS) Counts() Counts {
	return Counts{FileSyncs: c.fileSyncs.Load(), DirSyncs: c.dirSyncs.Load()}
}

// OpenFile implements FS.
func (c *CountingFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	c.opens.Add(1)
	create := flag&os.O_CREATE != 0
	if create && flag&os.O_EXCL == 0 {
		_, err := c.FS.Lstat(name)
		create = IsNotExist(err)
	}
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if create {
		c.creates.Add(1)
	}
	return countingFile{File: f, c: c}, nil
}

// ReadFile implements FS.
func (c *CountingFS) ReadFile(name string) ([]byte, error) {
	c.opens.Add(1)
	return c.FS.ReadFile(name)
}

// ReadDirNames implements FS.
func (c *CountingFS) ReadDirNames(name string) ([]string, error) {
	c.listings.Add(1)
	return c.FS.ReadDirNames(name)
}

// LockExisting implements FS.
func (c *CountingFS) LockExisting(ctx context.Context, name string, wait bool) (Unlocker, bool, error) {
	c.opens.Add(1)
	return c.FS.LockExisting(ctx, name, wait)
}

// Remove implements FS.
func (c *CountingFS) Remove(name string) error {
	err := c.FS.Remove(name)
	if err == nil {
		c.unlinks.Add(1)
	}
	return err
}

// Rename implements FS.
func (c *CountingFS) Rename(oldpath, newpath string) error {
	_, lerr := c.FS.Lstat(newpath)
	err := c.FS.Rename(oldpath, newpath)
	if err == nil && lerr == nil {
		c.unlinks.Add(1) // the name newpath had is gone
	}
	return err
}

// SyncDir implements FS.
func (c *CountingFS) SyncDir(name string) error {
	c.dirSyncs.Add(1)
	return c.FS.SyncDir(name)
}

// Lock implements FS (explicit so the embedded FS's method set is clear).
func (c *CountingFS) Lock(ctx context.Context, name string) (Unlocker, error) {
	return c.FS.Lock(ctx, name)
}

type countingFile struct {
	File
	c *CountingFS
}

func (f countingFile) Sync() error {
	f.c.fileSyncs.Add(1)
	return f.File.Sync()
}

// SlowDatasync wraps inner so that every fdatasync ([Datasync]) of a file
// opened through it takes at least delay longer: a disk whose flush costs
// something, for tests and measurements of what waits on one.
func SlowDatasync(inner FS, delay time.Duration) FS { return slowDatasyncFS{inner, delay} }

type slowDatasyncFS struct {
	FS
	delay time.Duration
}

func (s slowDatasyncFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowDatasyncFile{f, s.delay}, nil
}

type slowDatasyncFile struct {
	File
	delay time.Duration
}

// Unwrap implements Unwrapper.
func (f slowDatasyncFile) Unwrap() File { return f.File }

// Datasync implements Datasyncer: it sleeps, then flushes.
func (f slowDatasyncFile) Datasync() error {
	time.Sleep(f.delay)
	return Datasync(f.File)
}
