package provider

import (
	"context"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// A read-only or full file system must still allow inspection (issue 19
// item 4): OpenReadOnly and every inspection method on a directory where
// nothing can be changed, and Open on a disk where nothing can be created
// or written.

// lockedFS is a strict MemFS that, once on, refuses what a full disk
// (ENOSPC) refuses - creating a file or directory, writing - or, readOnly,
// what a read-only file system (EROFS) refuses: also opening a file for
// writing, renaming, linking and removing. It counts the refusals.
type lockedFS struct {
	*vfs.MemFS
	err      error
	readOnly bool
	on       atomic.Bool
	refused  atomic.Int64
}

func (l *lockedFS) refuse(op, path string) error {
	l.refused.Add(1)
	return &fs.PathError{Op: op, Path: path, Err: l.err}
}

func (l *lockedFS) exists(path string) bool {
	_, err := l.MemFS.Lstat(path)
	return err == nil
}

func (l *lockedFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if l.on.Load() {
		if flag&os.O_CREATE != 0 && !l.exists(name) {
			return nil, l.refuse("open", name)
		}
		if l.readOnly && flag&(os.O_WRONLY|os.O_RDWR|os.O_TRUNC) != 0 {
			return nil, l.refuse("open", name)
		}
	}
	f, err := l.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return lockedFile{File: f, fs: l}, nil
}

type lockedFile struct {
	vfs.File
	fs *lockedFS
}

// Unwrap lets vfs.MapWords map the log's shared page through the wrapper.
func (f lockedFile) Unwrap() vfs.File { return f.File }

func (f lockedFile) Write(p []byte) (int, error) {
	if f.fs.on.Load() {
		return 0, f.fs.refuse("write", f.Name())
	}
	return f.File.Write(p)
}

func (f lockedFile) Truncate(size int64) error {
	if f.fs.on.Load() {
		return f.fs.refuse("truncate", f.Name())
	}
	return f.File.Truncate(size)
}

func (l *lockedFS) MkdirAll(name string, perm fs.FileMode) error {
	if l.on.Load() && !l.exists(name) {
		return l.refuse("mkdir", name)
	}
	return l.MemFS.MkdirAll(name, perm)
}

func (l *lockedFS) Rename(oldpath, newpath string) error {
	if l.on.Load() && l.readOnly {
		return l.refuse("rename", newpath)
	}
	return l.MemFS.Rename(oldpath, newpath)
}

func (l *lockedFS) Link(oldpath, newpath string) error {
	if l.on.Load() && l.readOnly {
		return l.refuse("link", newpath)
	}
	return l.MemFS.Link(oldpath, newpath)
}

func (l *lockedFS) Remove(name string) error {
	if l.on.Load() && l.readOnly {
		return l.refuse("remove", name)
	}
	return l.MemFS.Remove(name)
}

func (l *lockedFS) RemoveAll(name string) error {
	if l.on.Load() && l.readOnly {
		return l.refuse("remove", name)
	}
	return l.MemFS.RemoveAll(name)
}

// A flock creates a missing lock file.
func (l *lockedFS) Lock(ctx context.Context, name string) (vfs.Unlocker, error) {
	if l.on.Load() && !l.exists(name) {
		return nil, l.refuse("open", name)
	}
	return l.MemFS.Lock(ctx, name)
}

func (l *lockedFS) TryLock(name string) (vfs.Unlocker, bool, error) {
	if l.on.Load() && !l.exists(name) {
		return nil, false, l.refuse("open", name)
	}
	return l.MemFS.TryLock(name)
}

// populated returns a directory with a bit of everything: instances with
// history, queued messages (one for an instance never started), a held
// lease, a claimed work item. Every provider is closed.
func populated(t *testing.T, err error, readOnly bool) (*lockedFS, Options) {
	t.Helper()
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	l := &lockedFS{MemFS: mem, err: err, readOnly: readOnly}
	opts := Options{fs: l, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	p, perr := Open("/d", opts)
	mustNoErr(t, perr)
	createInstance(t, p, "a")
	createInstance(t, p, "b")
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e", Data: "1"}, 0))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "never", Name: "e", Data: "1"}, 0))
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "x", Input: "y"}))
	if w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags()); err != nil || w == nil {
		t.Fatal(w, err)
	}
	mustNoErr(t, p.Close())
	return l, opts
}

// inspectAll runs every inspection the durofs CLI's read-only commands use,
// and fsck without repair.
func inspectAll(t *testing.T, p *FSProvider) {
	t.Helper()
	ctx := context.Background()
	if got, err := p.Instances(ctx, ""); err != nil || len(got) != 2 {
		t.Errorf("Instances = %d, %v", len(got), err)
	}
	if d, err := p.InstanceDetail(ctx, "a"); err != nil || len(d.Messages) != 2 {
		t.Errorf("InstanceDetail(a) = %+v, %v", d, err)
	}
	if _, err := p.HistoryRecords(ctx, "a", 1); err != nil {
		t.Errorf("HistoryRecords: %v", err)
	}
	if st, err := p.QueueStats(ctx); err != nil || st.Orchestrator.Messages != 2 || st.Worker.Messages != 1 {
		t.Errorf("QueueStats = %+v, %v", st, err)
	}
	if _, err := p.Leases(ctx); err != nil {
		t.Errorf("Leases: %v", err)
	}
	if _, err := p.PendingCommits(ctx); err != nil {
		t.Errorf("PendingCommits: %v", err)
	}
	if _, err := p.StuckCommits(ctx); err != nil {
		t.Errorf("StuckCommits: %v", err)
	}
	if _, err := p.DiskUsage(ctx); err != nil {
		t.Errorf("DiskUsage: %v", err)
	}
	if _, err := p.GetSystemMetrics(ctx); err != nil {
		t.Errorf("GetSystemMetrics: %v", err)
	}
	if _, err := p.GetQueueDepths(ctx); err != nil {
		t.Errorf("GetQueueDepths: %v", err)
	}
	if h, err := p.Read(ctx, "a"); err != nil || len(h) != 1 {
		t.Errorf("Read(a) = %d events, %v", len(h), err)
	}
	if o, err := p.OrphanMessages(ctx); err != nil || len(o) != 1 || o[0].Instance != "never" {
		t.Errorf("OrphanMessages = %+v, %v; want the message for never", o, err)
	}
	run := newFsckRun(p, FsckOptions{Logger: quietLog, MinAge: time.Minute, StaleAfter: time.Hour}, false)
	if err := run.scan(ctx); err != nil {
		t.Errorf("fsck: %v", err)
	}
	for _, f := range run.findings {
		if f.Kind == FsckIOError {
			t.Errorf("fsck: %+v", f)
		}
	}
}

// TestInspectReadOnlyFS: on a read-only file system (EROFS on every
// change) OpenReadOnly and every inspection work, and change nothing.
func TestInspectReadOnlyFS(t *testing.T) {
	l, opts := populated(t, syscall.EROFS, true)
	l.on.Store(true)
	p, err := OpenReadOnly("/d", opts)
	if err != nil {
		t.Fatalf("OpenReadOnly on a read-only file system: %v", err)
	}
	inspectAll(t, p)
	mustNoErr(t, p.Close())
	if n := l.refused.Load(); n != 0 {
		t.Errorf("inspection tried %d changes", n)
	}
}

// TestOpenFullDisk: on a full disk (ENOSPC on every file or directory
// creation and every write) Open succeeds - it needs no free space - and
// every inspection works; a commit fails with a retryable error and
// changes nothing.
func TestOpenFullDisk(t *testing.T) {
	ctx := context.Background()
	l, opts := populated(t, syscall.ENOSPC, false)
	l.on.Store(true)
	p, err := Open("/d", opts)
	if err != nil {
		t.Fatalf("Open on a full disk: %v", err)
	}
	inspectAll(t, p)
	err = p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e2", Data: "1"}, 0)
	if err == nil || !IsRetryable(err) {
		t.Errorf("enqueue on a full disk = %v, want a retryable error", err)
	}
	mustNoErr(t, p.Close())
	// And again: the first Open left nothing it needs to create again.
	p, err = Open("/d", opts)
	if err != nil {
		t.Fatalf("second Open on a full disk: %v", err)
	}
	mustNoErr(t, p.Close())
	// And after a reboot (the first Open alone replays and would record
	// the new boot's id).
	rebooted := &lockedFS{MemFS: l.CrashClone(), err: syscall.ENOSPC}
	rebooted.on.Store(true)
	opts.fs = rebooted
	p, err = Open("/d", opts)
	if err != nil {
		t.Fatalf("Open on a full disk after a reboot: %v", err)
	}
	inspectAll(t, p)
	mustNoErr(t, p.Close())
}
