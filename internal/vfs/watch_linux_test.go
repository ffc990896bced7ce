//go:build linux

package vfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchWaitWakesOnEventsAndClose: Wait returns when an event is queued
// (and the next Drain has it), and fails once the watch is closed while it
// waits - so that a goroutine waiting on a queue's watch ends with it.
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
	done := wait()
	if err := os.WriteFile(filepath.Join(dir, "a"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait = %v after an event", err)
		}
	case <-time.After(bound):
		t.Fatal("Wait did not return after an event")
	}
	evs, overflow, err := w.Drain()
	if err != nil || overflow || len(evs) != 1 || evs[0] != (DirEvent{Name: "a", Added: true}) {
		t.Fatalf("Drain = %v, %v, %v; want the creation of a", evs, overflow, err)
	}
	done = wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Wait = nil after Close, want an error")
		}
	case <-time.After(bound):
		t.Fatal("Wait did not return after Close")
	}
}
