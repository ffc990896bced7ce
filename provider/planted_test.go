//go:build unix

package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPlantedInstanceFilesNeverBlock: a FIFO or a directory planted in place
// of one of an instance's files is never read through and never blocks a
// call. Before history's opens were non-blocking too, a FIFO planted as a
// history.jsonl read as an empty history, and the ack's append then
// blocked in open(2) until someone opened the FIFO for reading.
func TestPlantedInstanceFilesNeverBlock(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, rel string
		plant     func(string) error
		// want is what a fetch does with the victim: "skip", or
		// "history_error" (fetched, with the reason, and its ack fails).
		want string
	}{
		{"FIFO as history", "executions/1/history.jsonl", mkfifoAt, "history_error"},
		{"directory as history", "executions/1/history.jsonl", mkdirAt, "history_error"},
		{"FIFO as instance.json", "instance.json", mkfifoAt, "skip"},
		{"FIFO as state.json", "executions/1/state.json", mkfifoAt, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// No background checkpoint: the explicit one below must find
			// the victim's records not yet synced.
			p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1})
			instancesWithTurns(t, p, "victim", "other")
			path := filepath.Join(p.instDir(instanceKey("victim")), c.rel)
			mustNoErr(t, os.Remove(path))
			mustNoErr(t, c.plant(path))

			seen := map[string]*LockedOrchestrationItem{}
			unblocking(t, path, func() {
				for range 2 {
					it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
					if err != nil {
						t.Errorf("fetch with a planted %s: %v (one damaged instance must not fail the fetch)", c.name, err)
						return
					}
					if it == nil {
						return
					}
					seen[it.Item.Instance] = it
				}
			})
			if seen["other"] == nil {
				t.Fatalf("the other instance was not fetched")
			}
			v := seen["victim"]
			switch c.want {
			case "skip":
				if v != nil {
					t.Fatalf("the victim was fetched through a planted %s: %+v", c.name, v.Item)
				}
			case "history_error":
				if v == nil || v.Item.HistoryError == nil || len(v.Item.History) != 0 {
					t.Fatalf("victim = %+v, want history_error and no events", v)
				}
				if !strings.Contains(*v.Item.HistoryError, "not a regular file") {
					t.Errorf("history_error %q does not say why", *v.Item.HistoryError)
				}
				ev := started("victim")
				ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
				unblocking(t, path, func() {
					err := p.AckOrchestrationItem(ctx, v.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
					if err == nil || IsRetryable(err) {
						t.Errorf("ack appending to a planted history: %v, want a permanent error", err)
					}
				})
			}
			unblocking(t, path, func() {
				if _, err := p.Read(ctx, "victim"); err == nil && c.want == "history_error" {
					t.Errorf("Read of a planted history succeeded")
				}
			})
			// The checkpoint neither blocks in the FIFO's open nor
			// poisons the directory over it: the file was replaced, as if
			// removed, and its directory's fsync covers that.
			unblocking(t, path, func() {
				if err := p.Checkpoint(ctx); err != nil {
					t.Errorf("checkpoint over a planted %s: %v", c.name, err)
				}
			})
			if err := p.wal.CheckShared(); err != nil {
				t.Errorf("the directory is poisoned over a planted %s: %v", c.name, err)
			}
		})
	}
}

func mkfifoAt(path string) error { return syscall.Mkfifo(path, 0o600) }
func mkdirAt(path string) error  { return os.Mkdir(path, 0o700) }

// unblocking runs fn, which must return by itself. If it has not returned
// after a minute - blocked in an open(2) or read(2) of the FIFO at path - it
// opens the FIFO at both ends until fn returns, so that the test ends, and
// fails.
func unblocking(t *testing.T, path string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
		return
	case <-time.After(time.Minute):
	}
	for {
		if f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		select {
		case <-done:
			t.Fatalf("blocked on a planted file (%s) until it was opened", path)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
