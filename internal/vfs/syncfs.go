package vfs

import (
	"errors"
	"fmt"
)

// ErrNoBarrier is returned by [SyncFS] and [BootID] when a file system cannot
// make all of its pending changes durable in one call.
var ErrNoBarrier = errors.New("vfs: file-system barrier (syncfs) not supported")

// BarrierFS is implemented by file systems that can make every completed
// change durable in one call. durofs's commit protocol uses it to replace
// the fsync of each file and directory a commit touches by one barrier
// before the commit point (see provider/fs_commit.go).
type BarrierFS interface {
	// SyncFS makes durable every write, create, rename, link and unlink
	// that completed on the file system holding dir before SyncFS was
	// called (syncfs(2)). An error means some of that data may be lost.
	SyncFS(dir string) error
	// BootID names the current boot of the machine. It changes with every
	// reboot - after a power loss or an OS crash in particular - so a
	// marker written in the page cache can be trusted only while the boot it
	// was written in lasts.
	BootID() (string, error)
}

// SyncFS calls fsys's [BarrierFS.SyncFS], or returns [ErrNoBarrier].
func SyncFS(fsys FS, dir string) error {
	b, ok := fsys.(BarrierFS)
	if !ok {
		return ErrNoBarrier
	}
	if err := b.SyncFS(dir); err != nil {
		return fmt.Errorf("vfs: syncfs %s: %w", dir, err)
	}
	return nil
}

// BootID calls fsys's [BarrierFS.BootID], or returns [ErrNoBarrier].
func BootID(fsys FS) (string, error) {
	b, ok := fsys.(BarrierFS)
	if !ok {
		return "", ErrNoBarrier
	}
	return b.BootID()
}

// SyncFS implements [BarrierFS] on the OS file system where the platform
// has syncfs(2) (Linux); elsewhere it returns [ErrNoBarrier].
func (OS) SyncFS(dir string) error { return syncFS(dir) }

// BootID implements [BarrierFS] on Linux (/proc/sys/kernel/random/boot_id);
// elsewhere it returns [ErrNoBarrier].
func (OS) BootID() (string, error) { return bootID() }

// SyncFS implements [BarrierFS]: like every sync of a NoSync FS it does
// nothing, but only if the wrapped FS has a barrier at all.
func (n noSyncFS) SyncFS(string) error {
	if _, err := BootID(n.FS); err != nil {
		return err
	}
	return nil
}

// BootID implements [BarrierFS] by asking the wrapped FS.
func (n noSyncFS) BootID() (string, error) { return BootID(n.FS) }

// SyncFS implements [BarrierFS], counting the call.
func (c *CountingFS) SyncFS(dir string) error {
	c.fsSyncs.Add(1)
	return SyncFS(c.FS, dir)
}

// BootID implements [BarrierFS] by asking the wrapped FS.
func (c *CountingFS) BootID() (string, error) { return BootID(c.FS) }
