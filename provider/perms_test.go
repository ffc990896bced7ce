//go:build unix

package provider

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

// permWorkload makes the provider create every kind of file and directory it
// has: FORMAT, queue configurations, orchestrator and worker messages,
// claims, instance folders with lock, lease, instance.json,
// executions, state.json and history, the write-ahead log (a segment holding
// a record left pending, the checkpoint, its locks, the process registration
// and the poison mark of a failed sync), session rows and their locks,
// quarantined files with reasons, and tmp/.
func permWorkload(t *testing.T, p *FSProvider) {
	t.Helper()
	ctx := context.Background()
	createInstance(t, p, "perm")
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "perm", Name: "e", Data: "1"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	sid := "sess"
	ev := started("perm")
	ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
	work := []WorkItem{
		ActivityExecute{Instance: "perm", ExecutionID: 1, ID: 2, Name: "a"},
		ActivityExecute{Instance: "perm", ExecutionID: 1, ID: 3, Name: "b", SessionID: &sid},
	}
	timer := TimerFired{Instance: "perm", ExecutionID: 1, ID: 9, FireAtMs: uint64(time.Now().Add(time.Hour).UnixMilli())}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, work, []WorkItem{timer}, ExecutionMetadata{}, nil))
	w, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, TagFilter{})
	if err != nil || w == nil {
		t.Fatal(w, err)
	}
	mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "perm", ExecutionID: 1, ID: 2, Result: "r"}))
	s, err := p.FetchWorkItem(ctx, 30*time.Second, 0, &SessionFetchConfig{OwnerID: "me", LockTimeout: time.Minute}, TagFilter{})
	if err != nil || s == nil {
		t.Fatal(s, err)
	}
	// An undecodable message is quarantined (a copy and a .reason file).
	bad := fsqueue.Message{Attrs: map[string]string{attrInstance: "perm", attrKey: instanceKey("perm")}, Payload: []byte(`{"Bogus":{}}`)}
	_, err = p.orchQ.Enqueue(bad)
	mustNoErr(t, err)
	// A logged record left pending (the apply never ran), as after a crash.
	it, err = p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	mustNoErr(t, p.checkpointOnce(ctx, true, true)) // writes wal/checkpoint
	testHookAfterCommitPoint = func(string) { panic(errStopAfterCommit) }
	func() {
		defer func() {
			testHookAfterCommitPoint = nil
			if r := recover(); r != nil && r != errStopAfterCommit {
				panic(r)
			}
		}()
		ev.EventID, ev.Kind = 3, ExternalEvent{Name: "e", Data: "2"}
		_ = p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
	}()
	if pcs, err := p.PendingCommits(ctx); err != nil || len(pcs) != 1 {
		t.Fatalf("pending commits = %+v, %v; want the one left by the stopped ack", pcs, err)
	}
	// Last (nothing commits after it): the mark a failed sync leaves.
	_ = p.wal.Poison(errors.New("permWorkload: a simulated sync failure"))
}

var errStopAfterCommit = errors.New("stop after the commit point")

// modesOnDisk walks dir and returns the permission bits of every file and
// directory (not of symbolic links), by path relative to dir.
func modesOnDisk(t *testing.T, dir string) (files, dirs map[string]fs.FileMode) {
	t.Helper()
	files, dirs = map[string]fs.FileMode{}, map[string]fs.FileMode{}
	mustNoErr(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case fi.IsDir():
			dirs[rel] = fi.Mode().Perm()
		case fi.Mode().IsRegular():
			files[rel] = fi.Mode().Perm()
		}
		return nil
	}))
	return files, dirs
}

// TestCreatedModes runs a workload that creates every kind of file and
// directory, then checks the mode of each on disk: Options.FileMode and
// Options.DirMode (0600 and 0700 by default) minus the umask, with no
// exception (lock files, temporary files and quarantined copies included).
func TestCreatedModes(t *testing.T) {
	cases := []struct {
		name       string
		file, dir  fs.FileMode
		umask      int
		wantF, wDr fs.FileMode
	}{
		{"defaults", 0, 0, 0o022, 0o600, 0o700},
		{"group readable", 0o640, 0o750, 0o022, 0o640, 0o750},
		{"umask strips group write", 0o660, 0o770, 0o027, 0o640, 0o750},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := syscall.Umask(c.umask)
			defer syscall.Umask(old)
			dir := filepath.Join(t.TempDir(), "durofs")
			p := openT(t, dir, Options{SweepInterval: -1, FileMode: c.file, DirMode: c.dir, Logger: quietLog})
			permWorkload(t, p)
			files, dirs := modesOnDisk(t, dir)

			// Every kind is there, so the check below covers it.
			var kinds []string
			for rel := range files {
				kinds = append(kinds, fileKind(rel))
			}
			for _, want := range []string{"FORMAT", "fsqueue.json", "message", "claim", "instance lock",
				"lease", "instance.json", "state.json", "history", "log segment", "log checkpoint", "log lock", "log process registration",
				"log poison mark", "log group-commit page", "session", "session lock", "quarantined", "reason"} {
				if !slices.Contains(kinds, want) {
					t.Errorf("the workload created no %s (files: %v)", want, files)
				}
			}
			for _, want := range []string{".", "instances", "queues/worker/claims", "tmp", "quarantine", "wal", "wal/procs", "sessions"} {
				if _, ok := dirs[want]; !ok {
					t.Errorf("the workload created no directory %s", want)
				}
			}
			for rel, m := range files {
				if m != c.wantF {
					t.Errorf("file %s (%s) has mode %#o, want %#o", rel, fileKind(rel), m, c.wantF)
				}
			}
			for rel, m := range dirs {
				if m != c.wDr {
					t.Errorf("directory %s has mode %#o, want %#o", rel, m, c.wDr)
				}
			}
		})
	}
}

// fileKind names the kind of a file by its path in the layout.
func fileKind(rel string) string {
	rel = filepath.ToSlash(rel)
	base := filepath.Base(rel)
	switch {
	case rel == "FORMAT":
		return "FORMAT"
	case base == "fsqueue.json":
		return "fsqueue.json"
	case strings.HasPrefix(rel, "queues/worker/claims/"):
		return "claim"
	case strings.HasPrefix(rel, "queues/"):
		return "message"
	case strings.HasPrefix(rel, "wal/procs/"):
		return "log process registration"
	case strings.HasPrefix(rel, "wal/") && strings.HasSuffix(base, ".wal"):
		return "log segment"
	case rel == "wal/checkpoint":
		return "log checkpoint"
	case rel == "wal/POISONED":
		return "log poison mark"
	case rel == "wal/group":
		return "log group-commit page"
	case strings.HasPrefix(rel, "wal/") && strings.HasSuffix(base, ".lock"):
		return "log lock"
	case strings.HasPrefix(rel, "sessions/") && strings.HasSuffix(base, ".lock"):
		return "session lock"
	case strings.HasPrefix(rel, "sessions/"):
		return "session"
	case strings.HasPrefix(rel, "quarantine/") && strings.HasSuffix(base, ".reason"):
		return "reason"
	case strings.HasPrefix(rel, "quarantine/"):
		return "quarantined"
	case base == "lock":
		return "instance lock"
	case base == "lease.json", base == "instance.json", base == "state.json":
		if base == "lease.json" {
			return "lease"
		}
		return base
	case base == "history.jsonl":
		return "history"
	}
	return "other: " + rel
}

// TestInvalidModesRefused: modes that are not permission bits, or that do
// not let the owner use what it creates, are refused before anything is
// created.
func TestInvalidModesRefused(t *testing.T) {
	for _, o := range []Options{
		{FileMode: 0o400},
		{FileMode: 0o1600},
		{FileMode: fs.ModeDir | 0o600},
		{DirMode: 0o600},
		{DirMode: 0o500},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		o.SweepInterval = -1
		if _, err := Open(dir, o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Open with FileMode %v DirMode %v: %v, want ErrInvalidOptions", o.FileMode, o.DirMode, err)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("Open with invalid modes created the directory: %v", err)
		}
	}
}
