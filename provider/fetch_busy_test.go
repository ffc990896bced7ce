package provider

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestFetchWaitsForABrieflyBusyInstance: a fetch that finds no other work
// does not report "nothing" just because the one instance with work had
// its flock held for a moment (the cleaner removing an applied commit
// record, a renewal): it waits up to busyWait and takes the turn. An
// instance still busy after that is skipped.
func TestFetchWaitsForABrieflyBusyInstance(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name            string
		releaseWhenWait bool // the holder lets go once the fetch waits
		wantItem        bool
	}{
		{"released while the fetch waits", true, true},
		{"held past the wait", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1})
			createInstance(t, p, "busy")
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "busy", Name: "e", Data: "1"}, 0))
			key := instanceKey("busy")
			g, err := p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
			mustNoErr(t, err)
			waited := 0
			testHookBusyWait = func(k string) {
				waited++
				if k == key && tc.releaseWhenWait {
					g.Unlock()
				}
			}
			defer func() { testHookBusyWait = nil }()
			start := time.Now()
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			mustNoErr(t, err)
			if !tc.releaseWhenWait {
				g.Unlock()
				if d := time.Since(start); d < busyWait {
					t.Errorf("fetch gave up after %v, before busyWait (%v)", d, busyWait)
				}
			}
			if waited != 1 || (it != nil) != tc.wantItem {
				t.Fatalf("fetch = %+v after %d wait(s); want an item: %v, after 1 wait", it, waited, tc.wantItem)
			}
		})
	}
}

// TestFetchBusyCreatesNoDirectoryForADeletedInstance: a fetch that found an
// instance's flock busy waits for it (fetchBusy). If the holder was the
// instance's deletion, what the fetch saw queued for it is stale, and
// locking must not create the directory again: a kill -9 before the fetch
// took it away would leave it behind (the chaos run's invariant 5 found
// one: a deleted instance's directory holding only its lock file). Only a
// queued start creates it, as in the fetch's pass.
//
// With fetchBusy locking through lockInstance, the first case fails.
func TestFetchBusyCreatesNoDirectoryForADeletedInstance(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		start  bool // a start is queued for the id again
		mkdirs int64
	}{
		{"only stale messages", false, 0},
		{"a start queued again", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			spy := &mkdirSpy{FS: vfs.OS{}, path: filepath.Join(dir, "instances", instanceKey("x"))}
			p := openT(t, dir, Options{fs: spy, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "x", Name: "e", Data: "1"}, 0))
			stale, err := queuedFor(p.orchQ, instanceKey("x"))
			if err != nil || len(stale) != 1 {
				t.Fatalf("queued for x: %v, %v", stale, err)
			}
			if tc.start {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("x"), 0))
			}
			it, err := p.fetchBusy(ctx, stale[0], time.Second, time.Minute, nil)
			mustNoErr(t, err)
			if got := spy.n.Load(); got != tc.mkdirs {
				t.Errorf("fetchBusy made x's directory %d times, want %d (fetched %v)", got, tc.mkdirs, it != nil)
			}
			if tc.start && it == nil {
				t.Errorf("x's start was not fetched")
			}
		})
	}
}

// mkdirSpy counts the MkdirAll calls for path.
type mkdirSpy struct {
	vfs.FS
	path string
	n    atomic.Int64
}

func (s *mkdirSpy) MkdirAll(name string, perm fs.FileMode) error {
	if name == s.path {
		s.n.Add(1)
	}
	return s.FS.MkdirAll(name, perm)
}
