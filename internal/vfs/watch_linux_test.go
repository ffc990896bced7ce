//go:build linux

package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchWaitWakesOnEventsAndClose: Wait returns while events are queued
// - also one queued before Wait was called - and parks until the next one
// after they are drained; it fails once the watch is closed while it waits,
// so that a goroutine waiting on a queue's watch ends with it. (Mutations
// that fail it: Close not waking the waits - it then hangs for the bound;
// Wait ignoring the inotify descriptor.)
func TestWatchWaitWakesOnEventsAndClose(t *testing.T) {
	dir := t.TempDir()
	w, err := OS{}.WatchDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	ww, ok := w.(WaitableWatch)
	if !ok {
		t.Fatalf("%T is not a WaitableWatch", w)
	}
	wait := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- ww.Wait() }()
		return done
	}
	const bound = time.Minute // a failure bound, not a timing
	expect := func(what string, done <-chan error, wantErr bool) {
		t.Helper()
		select {
		case err := <-done:
			if (err != nil) != wantErr {
				t.Fatalf("Wait = %v %s", err, what)
			}
		case <-time.After(bound):
			t.Fatalf("Wait did not return %s", what)
		}
	}
	create := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(name string) {
		t.Helper()
		evs, overflow, err := w.Drain()
		if err != nil || overflow || len(evs) != 1 || evs[0] != (DirEvent{Name: name, Added: true}) {
			t.Fatalf("Drain = %v, %v, %v; want the creation of %s", evs, overflow, err, name)
		}
	}
	create("a") // before any Wait
	expect("with an event queued before it", wait(), false)
	drain("a")
	done := wait()
	create("b") // while (or before) it waits
	expect("after an event", done, false)
	drain("b")
	done = wait()
	done2 := wait() // two at once: Close wakes both
	iw := w.(*inotifyWatch)
	for deadline := time.Now().Add(bound); ; { // both in poll(2), so Close must wake them
		iw.mu.Lock()
		n := iw.waits
		iw.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Waits started, want 2", n)
		}
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	expect("after Close", done, true)
	expect("after Close (the second)", done2, true)
	expect("on a closed watch", wait(), true)
}

// TestWatchDrainReportsDirectoryGone: once the watched directory is moved
// away or removed, Drain fails with ErrWatchGone, and keeps failing: the
// watch never reports on what the path names afterwards (after a move it
// would go on reporting the old directory's changes as if they were the
// path's).
func TestWatchDrainReportsDirectoryGone(t *testing.T) {
	for _, how := range []string{"rename", "remove"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			w, err := OS{}.WatchDir(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if how == "rename" {
				err = os.Rename(dir, dir+".old")
			} else {
				err = os.Remove(dir)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if _, overflow, err := w.Drain(); !errors.Is(err, ErrWatchGone) || !overflow {
					t.Fatalf("Drain %d after the directory was replaced = overflow %v, err %v; want ErrWatchGone", i, overflow, err)
				}
			}
		})
	}
}
