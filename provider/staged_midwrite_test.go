package provider

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// midWriteFS splits, once armed, the next write of a staged message in two
// and runs hook between the halves: another process looking at the file
// then reads a prefix of it, as it can while a writer's write is in
// progress on a real file system.
type midWriteFS struct {
	vfs.FS
	armed atomic.Bool
	hook  func()
}

func (m *midWriteFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := m.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasPrefix(filepath.Base(name), ".staged-") {
		return f, err
	}
	return &midWriteFile{File: f, m: m}, nil
}

type midWriteFile struct {
	vfs.File
	m *midWriteFS
}

func (f *midWriteFile) Write(b []byte) (int, error) {
	if len(b) < 2 || !f.m.armed.CompareAndSwap(true, false) {
		return f.File.Write(b)
	}
	n, err := f.File.Write(b[:len(b)/2])
	if err != nil {
		return n, err
	}
	f.m.hook()
	k, err := f.File.Write(b[len(b)/2:])
	return n + k, err
}

// TestSweepKeepsAStagedFileBeingWritten: the staged-file sweep removes an
// unparseable staged file without its writer's lock only once it is older
// than the minimum age (fs_recovery.go, tornStaged: "a partial read of a
// write in progress finds the file younger than minAge"). Here B's
// recovery runs while A is writing the staged work item of its ack, and
// reads half of it; the ack then commits and must publish the item.
func TestSweepKeepsAStagedFileBeingWritten(t *testing.T) {
	ctx := context.Background()
	mw := newMidWritePair(t)
	a, b := mw.a, mw.b
	mustNoErr(t, b.EnqueueForOrchestrator(ctx, startItem("s"), 0))
	it, err := a.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %v %v", it, err)
	}
	mw.arm()
	mustNoErr(t, a.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("s")},
		[]WorkItem{ActivityExecute{Instance: "s", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}}, nil, md("TestOrch", "1.0.0"), nil))
	mw.checkSwept(t)
	wi, err := b.FetchWorkItem(ctx, time.Second, 0, nil, DefaultOnlyTags())
	if err != nil || wi == nil {
		t.Fatalf("the work item of an ack that returned OK is gone (%v, %v): a sweep removed its staged file while it was being written", wi, err)
	}
}

// midWritePair is two providers (processes) on one directory: a writes
// through a midWriteFS whose hook runs b's Recover between the halves of
// the next staged write after arm.
type midWritePair struct {
	a, b  *FSProvider
	spy   *midWriteFS
	swept bool
}

func newMidWritePair(t *testing.T) *midWritePair {
	dir := t.TempDir()
	mw := &midWritePair{spy: &midWriteFS{FS: vfs.OS{}}}
	mw.a = openT(t, dir, Options{fs: mw.spy, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mw.b = openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mw.spy.hook = func() {
		mustNoErr(t, mw.b.Recover(context.Background()))
		mw.swept = true
	}
	return mw
}

// arm cuts the next staged write, with b's Recover between the halves.
func (mw *midWritePair) arm() { mw.spy.armed.Store(true) }

// checkSwept fails the test if b's Recover did not run inside a write.
func (mw *midWritePair) checkSwept(t *testing.T) {
	t.Helper()
	if !mw.swept {
		t.Fatal("the sweep did not run in the middle of the staged write")
	}
}
