package provider

import (
	"context"
	"errors"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// syncHookFS runs hook, once armed, at the first File.Sync through it.
type syncHookFS struct {
	vfs.FS
	armed atomic.Bool
	hook  func()
}

func (s *syncHookFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &syncHookFile{File: f, s: s}, nil
}

type syncHookFile struct {
	vfs.File
	s *syncHookFS
}

// Unwrap lets vfs.MapWords map the log's shared page through the wrapper.
func (f *syncHookFile) Unwrap() vfs.File { return f.File }

func (f *syncHookFile) Sync() error {
	if f.s.armed.CompareAndSwap(true, false) {
		f.s.hook()
	}
	return f.File.Sync()
}

// TestCheckpointRefusesAPoisoningDuringItsFsyncs: a checkpoint looks for
// another process's poisoning again after its fsyncs, before it moves
// (checkpointOnce: "a process that found a failed sync of its own
// meanwhile marked the log"): that process's failed sync may have been of
// a file the checkpoint then fsynced without error (the pages marked clean
// and never written), so the checkpoint must not pass the records. Here B
// poisons the directory while A's checkpoint is in its first file fsync.
func TestCheckpointRefusesAPoisoningDuringItsFsyncs(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	mem.MarkAllSynced()
	clk := clock.NewManual(time.Now())
	opts := func(fsys vfs.FS) Options {
		return Options{fs: fsys, Durability: Durable, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	}
	hfs := &syncHookFS{FS: mem}
	a := openT(t, "/d", opts(hfs))
	b := openT(t, "/d", opts(mem))
	createInstance(t, b, "s")
	before, err := a.wal.Checkpoint()
	mustNoErr(t, err)
	hfs.hook = func() { _ = b.wal.Poison(errors.New("test: B's fsync failed (writeback error)")) }
	hfs.armed.Store(true)
	err = a.checkpointOnce(ctx, true, true)
	if hfs.armed.Load() {
		t.Fatalf("A's checkpoint made no file fsync (err %v)", err)
	}
	after, cerr := a.wal.Checkpoint()
	mustNoErr(t, cerr)
	if !errors.Is(err, ErrSyncFailed) || after != before {
		t.Fatalf("A's checkpoint with B's poisoning during its fsyncs: err %v, checkpoint %v -> %v; want ErrSyncFailed and the checkpoint where it was", err, before, after)
	}
}
