package provider

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestCheckpointAfterAnotherProcessPoisoned: process A's checkpoint gets a
// writeback error on one of its file fsyncs (Linux: the pages are marked
// clean without reaching the disk) and poisons the directory. Process B,
// which has not synced the log since, then runs its own checkpoint: it must
// refuse. Were it to look only at its own poisoning, it would fsync the same
// files through new descriptors (which succeed: the error was reported to
// A), move the checkpoint past records whose effects never reached the
// disk, and the replay after the poisoning would start after them: a power
// loss would lose acknowledged turns (found by review; with checkpointOnce
// checking only p.wal.Err(), every case fails).
func TestCheckpointAfterAnotherProcessPoisoned(t *testing.T) {
	for n := 1; n <= 3; n++ {
		t.Run(fmt.Sprintf("file sync %d", n), func(t *testing.T) {
			plWritebackScenario(t, func(s *plWB, a, b, c *FSProvider, _ map[string]*LockedOrchestrationItem) (string, error) {
				before, _ := b.wal.Checkpoint()
				s.mem.InjectWritebackError(n)
				err := a.checkpointOnce(context.Background(), true, true)
				if err == nil {
					return "A's checkpoint", nil
				}
				berr := b.checkpointOnce(context.Background(), true, true)
				after, _ := b.wal.Checkpoint()
				if after != before {
					t.Errorf("B's checkpoint after A poisoned the directory: err %v, checkpoint moved %v -> %v (want it refused with ErrSyncFailed)", berr, before, after)
				}
				return fmt.Sprintf("A's checkpoint (file sync %d)", n), err
			})
		})
	}
}

// noPoisonFS is a MemFS on which the poison mark cannot be created (a full
// or failing disk: the very condition that makes fsyncs fail).
type noPoisonFS struct {
	*vfs.MemFS
	fail     atomic.Bool
	failBoot bool // and the boot id cannot be removed
}

func (f *noPoisonFS) Remove(name string) error {
	if f.fail.Load() && f.failBoot && filepath.Base(name) == "boot" {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.EIO}
	}
	return f.MemFS.Remove(name)
}

func (f *noPoisonFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if f.fail.Load() && strings.Contains(filepath.Base(name), "POISONED") && flag&os.O_CREATE != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	return f.MemFS.OpenFile(name, flag, perm)
}

// TestPoisonWithoutItsMarkFile: a checkpoint fsync fails with a writeback
// error (pages marked clean, never written) and the file POISONED cannot be
// created. The poisoning must still stop every process and make the next
// process that opens the directory alone replay the log:
//   - the shared page's poison word tells the live processes (B's next ack
//     fails) and the next lone opener in the same boot (it replays), even
//     if the boot id cannot be removed either;
//   - if the page is lost too (written back with an error and evicted once
//     every process closed it: here zeroed), the boot id, removed when the
//     mark could not be written, makes the lone opener replay.
//
// Otherwise the lone opener would trust the page cache, its checkpoint
// would fsync the files (succeeding: the error was reported to A) and move
// past the lost bytes, and a power loss would lose acknowledged turns. Found
// by review, when poisoning ignored a failed write of the mark: with no
// poison word, every case fails; with the word but no removal of the boot
// id, the lost page's; with the word cleared when a lone opener sets up the
// page, or not read by fsck's read-only log, the unremovable boot id's.
func TestPoisonWithoutItsMarkFile(t *testing.T) {
	for _, tc := range []struct {
		name               string
		losePage, failBoot bool
	}{
		{"mark not written", false, false},
		{"mark not written, page lost", true, false},
		{"mark not written, boot id not removed", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			losePage := tc.losePage
			mem := plStrictMem(t)
			wfs := &noPoisonFS{MemFS: mem, failBoot: tc.failBoot}
			s := &plWB{t: t, mem: mem, clk: clock.NewManual(plStart)}
			open := func(name string) *FSProvider {
				p, err := Open(plDir, plOptions(wfs, Durable, s.clk, name))
				if err != nil {
					t.Fatalf("open %s: %v", name, err)
				}
				return p
			}
			a, b := open("A"), open("B")
			s.enqueue(a, StartOrchestration{Instance: "w-1", Orchestration: "Orch", Input: "wait=2", ExecutionID: 1})
			s.enqueue(a, StartOrchestration{Instance: "w-2", Orchestration: "Orch", Input: "wait=1", ExecutionID: 1})
			s.ack(a, s.fetch(a), false)
			s.ack(b, s.fetch(b), false)
			s.enqueue(a, ExternalRaised{Instance: "w-1", Name: "x", Data: "e:1"})
			s.enqueue(a, ExternalRaised{Instance: "w-2", Name: "x", Data: "e:2"})

			// A's checkpoint: its first file fsync loses the pages; the
			// mark cannot be written.
			wfs.fail.Store(true)
			mem.InjectWritebackError(1)
			err := a.checkpointOnce(context.Background(), true, true)
			if !errors.Is(err, ErrSyncFailed) {
				t.Fatalf("A's checkpoint: %v, want ErrSyncFailed", err)
			}
			if _, err := mem.Stat(filepath.Join(plDir, "wal", "POISONED")); err == nil {
				t.Fatal("the mark was written: the test does not test what it says")
			}
			it := s.fetch(b)
			if err := s.ackNoCheck(b, it); err == nil {
				t.Errorf("B's ack after A's checkpoint fsync failed: OK, want ErrSyncFailed")
			}
			// fsck, which opens the log read-only (no mapping of the
			// page), reports it too.
			rep, err := fsck(context.Background(), plDir, FsckOptions{Logger: quietLog}, Options{fs: wfs})
			mustNoErr(t, err)
			if !slices.ContainsFunc(rep.Findings, func(f FsckFinding) bool {
				return f.Kind == FsckPendingCommit && f.Severity == SeverityError && strings.Contains(f.Detail, "POISONED")
			}) {
				t.Errorf("fsck beside the poisoned processes: want the poisoning reported as an error, got %+v", rep.Findings)
			}
			a.Close()
			b.Close()
			wfs.fail.Store(false)
			if losePage {
				mustNoErr(t, writeZeros(mem, filepath.Join(plDir, "wal", "group")))
			}
			s.clk.Advance(time.Minute)

			d := open("D")
			if n := d.RecoveryStats().RecordsReplayed; n == 0 {
				t.Errorf("D, alone in the same boot after the poisoning, replayed nothing")
			}
			mustNoErr(t, d.checkpointOnce(context.Background(), true, true))
			d.Close()
			mem.Crash()
			e := open("E")
			defer e.Close()
			if _, v := plCheck(e, s.cut()); len(v) > 0 {
				t.Errorf("after the power loss: %s", strings.Join(v, "; "))
			}
		})
	}
}

// writeZeros overwrites the file at path with zeros, keeping its size.
func writeZeros(mem *vfs.MemFS, path string) error {
	fi, err := mem.Stat(path)
	if err != nil {
		return err
	}
	f, err := mem.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(make([]byte, fi.Size())); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
