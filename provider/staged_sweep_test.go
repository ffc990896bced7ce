package provider

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// stallStagedFS stops (once armed) the first writer of a new staged file
// between its create and its write - a process SIGSTOPped inside
// vfs.WriteNew - until resume is closed; created receives the file's path.
type stallStagedFS struct {
	vfs.FS
	armed   atomic.Bool
	created chan string
	resume  chan struct{}
}

func (s *stallStagedFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil || flag&os.O_EXCL == 0 || !strings.HasPrefix(filepath.Base(name), ".staged-") || !s.armed.CompareAndSwap(true, false) {
		return f, err
	}
	return &stallFile{File: f, s: s, path: name}, nil
}

type stallFile struct {
	vfs.File
	s    *stallStagedFS
	path string
	once sync.Once
}

func (f *stallFile) Write(b []byte) (int, error) {
	f.once.Do(func() {
		f.s.created <- f.path
		<-f.s.resume
	})
	return f.File.Write(b)
}

// TestSweepKeepsAnEmptyStagedFileOfALiveWriter: an ack stages its outbound
// messages in place (vfs.WriteNew: create, then write, unsynced). A process
// stopped between the create and the write leaves an empty staged file
// that nobody can read - and a sweep of another process that finds it old
// enough must not take it for a crash's leftover: the writer holds its
// source's lock, resumes, writes it, commits, and its apply publishes it by
// rename. Had the sweep removed it, the write goes to an unlinked file and
// the committed ack publishes nothing: its worker item is lost (the ack
// returned success; the orchestration waits for the activity for ever).
//
// On main the sweep removed an unparseable staged file without any lock.
func TestSweepKeepsAnEmptyStagedFileOfALiveWriter(t *testing.T) {
	ctx := context.Background()
	sfs := &stallStagedFS{FS: vfs.OS{}, created: make(chan string, 1), resume: make(chan struct{})}
	p := openT(t, t.TempDir(), Options{fs: sfs, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("x"), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch = %+v, %v", it, err)
	}
	ev2 := Event{EventID: 2, InstanceID: "x", ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
		Kind: ActivityScheduled{Name: "act", Input: "in"}}

	sfs.armed.Store(true)
	ackDone := make(chan error, 1)
	go func() {
		ackDone <- p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("x"), ev2},
			[]WorkItem{ActivityExecute{Instance: "x", ExecutionID: 1, ID: 2, Name: "act", Input: "in"}}, nil, md("TestOrch", "1.0.0"), nil)
	}()
	path := <-sfs.created
	// The writer stays stopped past the sweep's minimum age.
	old := time.Now().Add(-time.Hour)
	mustNoErr(t, os.Chtimes(path, old, old))
	sweepErr := p.sweepStaged(ctx, 10*time.Second)
	close(sfs.resume)
	mustNoErr(t, sweepErr)
	mustNoErr(t, <-ackDone)

	work, err := allQueued(p.workQ)
	mustNoErr(t, err)
	if len(work) != 1 {
		t.Fatalf("worker queue after the committed ack = %d items, want its 1 activity: the sweep removed the staged file of a live writer", len(work))
	}
	if h, err := p.Read(ctx, "x"); err != nil || len(h) != 2 {
		t.Errorf("history of x = %d events (%v), want 2", len(h), err)
	}
}

// TestOpenAloneRemovesEmptyStagedFiles: the sweep leaves empty staged files
// (a writer may be stopped between its create and its write); a process
// that opens the directory alone removes them - no writer is alive then.
func TestOpenAloneRemovesEmptyStagedFiles(t *testing.T) {
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	path := filepath.Join(p.orchQ.Dir(), stagedName(t, p))
	mustNoErr(t, os.WriteFile(path, nil, 0o644)) // a writer killed between create and write
	old := time.Now().Add(-time.Hour)
	mustNoErr(t, os.Chtimes(path, old, old))
	mustNoErr(t, p.Recover(context.Background()))
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("a live process's sweep removed an empty staged file: %v", err)
	}
	mustNoErr(t, p.Close())

	openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("an empty staged file stays after an Open alone: %v", err)
	}
}

// TestFsckRepairKeepsAnEmptyStagedFileWhileOthersRun: fsck --repair beside
// live processes must not quarantine an empty staged file either: it may be
// a stopped writer's, between its create and its write (see
// TestSweepKeepsAnEmptyStagedFileOfALiveWriter). On main it moved it to
// quarantine/.
func TestFsckRepairKeepsAnEmptyStagedFileWhileOthersRun(t *testing.T) {
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}) // a live process
	path := filepath.Join(p.orchQ.Dir(), stagedName(t, p))
	mustNoErr(t, os.WriteFile(path, nil, 0o644))
	old := time.Now().Add(-time.Hour)
	mustNoErr(t, os.Chtimes(path, old, old))
	if _, err := Fsck(context.Background(), dir, FsckOptions{Repair: true, Logger: quietLog}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("fsck --repair beside a live process removed an empty staged file: %v", err)
	}
}

// TestFsckRepairAloneRemovesAnEmptyStagedFile: a worker killed between
// creating a staged file and writing it leaves an empty .staged-*.json (the
// demo leaves one when it SIGKILLs a worker). With no process using the
// directory, fsck --repair registers as one, finds itself alone, and removes
// that leftover before any other process can open the directory, as the
// first provider Open alone does (TestOpenAloneRemovesEmptyStagedFiles);
// the directory then checks clean. (It once opened the log read-only, never
// alone, and kept it: "not repairable while other processes use the
// directory", with none running.)
func TestFsckRepairAloneRemovesAnEmptyStagedFile(t *testing.T) {
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	staged := stagedName(t, p)
	mustNoErr(t, p.Close()) // no process has the directory open any more
	rel := filepath.Join("queues", "orchestrator", staged)
	path := filepath.Join(dir, rel)
	mustNoErr(t, os.WriteFile(path, nil, 0o600)) // a writer killed between create and write
	old := time.Now().Add(-time.Hour)
	mustNoErr(t, os.Chtimes(path, old, old))

	rep := fsckT(t, dir, true)
	for _, f := range rep.Remaining() {
		t.Errorf("fsck --repair with no other process running left: %s %s %q: %s", f.Kind, f.Path, f.Detail, f.Action)
	}
	if f := findingOf(rep, FsckUnparseable, rel); f == nil || !f.Repaired {
		t.Errorf("fsck --repair does not report the empty staged file removed: %+v", rep.Findings)
	}
	if _, err := os.Lstat(path); err == nil {
		t.Errorf("the dead writer's empty staged file is still there after fsck --repair (no process has the directory open)")
	}
}

// TestFsckRepairIsARegisteredProcess: while a repairing fsck runs, it is
// registered in wal/procs like any provider, so a process that opens the
// directory meanwhile is not alone and does not take an empty staged file
// (a live writer's, or one of fsck's own repairs in progress) for a dead
// writer's.
func TestFsckRepairIsARegisteredProcess(t *testing.T) {
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	staged := stagedName(t, p)
	mustNoErr(t, p.Close())

	reg, _, err := registerForRepair(dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mustNoErr(t, err)
	if reg == nil || !reg.wal.Alone() {
		t.Fatalf("fsck --repair with no other process: registered %v, want registered and alone", reg != nil)
	}
	defer reg.Close()
	path := filepath.Join(dir, "queues", "orchestrator", staged)
	mustNoErr(t, os.WriteFile(path, nil, 0o600)) // a live writer between create and write
	q := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	if q.wal.Alone() {
		t.Errorf("a provider opened while fsck --repair is registered has the directory alone")
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("a provider opened while fsck --repair runs removed an empty staged file: %v", err)
	}
}

// TestFsckRepairLetsWorkersOfEitherModeStart: a repairing fsck registers
// as a process of the directory (registerForRepair) but appends nothing,
// so it sets no durability mode: a ProcessCrashSafe worker starting while
// it runs opens. (It registered in Durable mode, Fsck's default, and set
// the mode when alone: such a worker was refused with ErrModeMismatch for
// as long as the repair ran. Found by review.)
func TestFsckRepairLetsWorkersOfEitherModeStart(t *testing.T) {
	for _, mode := range []Durability{ProcessCrashSafe, Durable} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Durability: mode}
			p := openT(t, dir, opts)
			createInstance(t, p, "a")
			mustNoErr(t, p.Close())

			// What fsck --repair does first (Fsck passes Options{} plus its
			// logger and intervals).
			reg, _, err := registerForRepair(dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			mustNoErr(t, err)
			if reg == nil {
				t.Fatal("fsck --repair did not register")
			}
			defer reg.Close()
			w, err := Open(dir, opts)
			if err != nil {
				t.Fatalf("a %v worker starting while fsck --repair runs: %v", mode, err)
			}
			defer w.Close()
			if w.wal.Alone() {
				t.Fatal("the repair and the worker are not registered together")
			}
		})
	}
}

// stagedName returns the base name a staged orchestrator message (an event
// for instance x) would have: ".staged-<name>.json".
func stagedName(t *testing.T, p *FSProvider) string {
	t.Helper()
	m, err := p.orchMessage(ExternalRaised{Instance: "x", Name: "e", Data: "d"}, p.nowMs(), p.nowMs(), instanceKey("x"))
	mustNoErr(t, err)
	return ".staged-" + named(p.orchQ, m).Name + ".json"
}
