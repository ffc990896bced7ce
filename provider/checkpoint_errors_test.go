package provider

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// openThenSyncFS is a strict MemFS whose checkpoint, once armed, meets two
// faults at once: the open (for its fsync) of one file fails with EMFILE,
// and the fsync of another file fails with a writeback error (its pages
// marked clean without reaching the disk, MemFS.InjectWritebackError). The
// failing fsync waits until the open has failed, so that the open's error
// is the one parallelSync records first (when it kept only the first).
type openThenSyncFS struct {
	*vfs.MemFS
	mu        sync.Mutex
	armed     bool
	openPath  string // its O_RDONLY opens fail with EMFILE while armed
	syncPath  string // its next Sync fails with a writeback error while armed
	openDone  chan struct{}
	openOnce  sync.Once
	syncFired bool
}

func (f *openThenSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f.mu.Lock()
	armed := f.armed
	f.mu.Unlock()
	if armed && name == f.openPath && flag == os.O_RDONLY {
		f.openOnce.Do(func() { close(f.openDone) })
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
	}
	file, err := f.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return openThenSyncFile{File: file, fs: f}, nil
}

type openThenSyncFile struct {
	vfs.File
	fs *openThenSyncFS
}

func (f openThenSyncFile) Unwrap() vfs.File { return f.File }

func (f openThenSyncFile) Sync() error {
	o := f.fs
	o.mu.Lock()
	fire := o.armed && !o.syncFired && f.Name() == o.syncPath
	if fire {
		o.syncFired = true
	}
	o.mu.Unlock()
	if fire {
		select {
		case <-o.openDone:
		case <-time.After(5 * time.Second):
		}
		// Let the open's goroutine record its error first.
		time.Sleep(100 * time.Millisecond)
		o.MemFS.InjectWritebackError(1)
	}
	return f.File.Sync()
}

// TestCheckpointOpenFailureDoesNotHideAFailedFsync: when one file's open
// fails (EMFILE, not poison by itself) and, in the same checkpoint,
// another file's fsync fails (a writeback error: the kernel marked its
// pages clean unwritten), the log is poisoned. parallelSync kept only the
// first error of the concurrent syncs and syncFailed decided from it: the
// fsync's error was dropped, the next checkpoint's fsync of that file
// succeeded (nothing dirty was left) and moved past its record, and after
// a power loss the acknowledged turn was gone. (Found by review; the
// failing fsync waits for the open's failure so that the open's error came
// first, as the review's run had it.)
func TestCheckpointOpenFailureDoesNotHideAFailedFsync(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	f := &openThenSyncFS{MemFS: mem, openDone: make(chan struct{})}
	opts := Options{fs: f, SweepInterval: -1, CheckpointInterval: -1, SegmentSize: segmentSize, Logger: quietLog}
	p := openT(t, "/d", opts)
	createInstance(t, p, "a")
	createInstance(t, p, "b")
	f.openPath = p.historyPath(instanceKey("a"), 1)
	f.syncPath = p.historyPath(instanceKey("b"), 1)
	before, err := p.wal.Checkpoint()
	mustNoErr(t, err)

	f.mu.Lock()
	f.armed = true
	f.mu.Unlock()
	err = p.checkpointOnce(ctx, true, true)
	f.mu.Lock()
	f.armed = false
	fired := f.syncFired
	f.mu.Unlock()
	mem.ClearFaults()
	if !fired {
		t.Fatal("the checkpoint never fsynced b's history")
	}
	t.Logf("checkpoint with both faults: %v", err)
	if cp, _ := p.wal.Checkpoint(); cp != before {
		t.Fatalf("the checkpoint moved despite its errors")
	}
	poisoned := p.wal.CheckShared() != nil
	if !poisoned {
		t.Errorf("a failed fsync (writeback error on %s) in the same checkpoint as an open failure did not poison the log", f.syncPath)
	}

	// Without the poison, the next checkpoint syncs everything again (the
	// lost pages are clean now) and moves past b's record.
	if !poisoned {
		mustNoErr(t, p.checkpointOnce(ctx, true, true))
		if cp, _ := p.wal.Checkpoint(); cp == before {
			t.Fatal("the second checkpoint did not move")
		}
	}
	mustNoErr(t, p.Close())

	// Power loss.
	crashed := opts
	crashed.fs = mem.CrashClone()
	r := openT(t, "/d", crashed)
	h, err := r.Read(ctx, "b")
	if err != nil || len(h) != 1 {
		t.Errorf("after the power loss, b's acknowledged history: %d events, %v; want its 1 event", len(h), err)
	}
}

// TestCheckpointPassesFilePlantedAsDirectory: a regular file planted in
// place of an execution's directory is passed like a removed one (syncGone:
// ENOTDIR), as a link, FIFO or directory planted in a file's place is. The
// open for the fsync failed with ENOTDIR, which syncFailed took for a
// transient open failure: the checkpoint stayed where it was - forever,
// since nothing removes the planted file - and one damaged instance held
// back the whole log (found by review).
func TestCheckpointPassesFilePlantedAsDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	createInstance(t, p, "victim")
	createInstance(t, p, "other")
	before, err := p.wal.Checkpoint()
	mustNoErr(t, err)
	execDir := filepath.Dir(p.historyPath(instanceKey("victim"), 1))
	mustNoErr(t, os.RemoveAll(execDir))
	mustNoErr(t, os.WriteFile(execDir, []byte("planted"), 0o600))

	for i := range 3 {
		createInstance(t, p, "later-"+string(rune('a'+i)))
		err := p.Checkpoint(ctx)
		t.Logf("checkpoint %d: %v", i+1, err)
	}
	if err := p.wal.CheckShared(); err != nil {
		t.Fatalf("poisoned: %v", err)
	}
	if cp, _ := p.wal.Checkpoint(); cp == before {
		t.Errorf("a regular file planted in place of one instance's execution directory keeps every checkpoint where it was (%v), for good", cp)
	}
}
