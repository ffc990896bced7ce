package fsqueue_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// TestWatchedIndexFollowsReplacedDirectory: the queue directory is replaced
// (renamed away, or removed, and created anew by another process) after q's
// index was built from a directory watch. The watch of the old directory
// reports the replacement (IN_MOVE_SELF, IN_DELETE_SELF), then nothing more
// about the new one: the index must not stay valid on a dead watch, or every
// message added to the new directory afterwards is never listed.
func TestWatchedIndexFollowsReplacedDirectory(t *testing.T) {
	if w, ok := vfs.WatchDir(vfs.OS{}, t.TempDir()); !ok {
		t.Skip("no directory watch on this system")
	} else {
		w.Close()
	}
	for _, how := range []string{"rename", "remove"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "q")
			q := openQueue(t, vfs.OS{}, dir, nil)
			defer q.Close()
			old := openQueue(t, vfs.NoSync(vfs.OS{}), dir, nil)
			defer old.Close()
			enqueue(t, old, fsqueue.Message{Payload: []byte("{}")})
			if l, err := q.List(); err != nil || len(l) != 1 {
				t.Fatalf("first List = %v, %v; want 1 message", l, err)
			}

			// Another process replaces the directory.
			switch how {
			case "rename":
				if err := os.Rename(dir, dir+".old"); err != nil {
					t.Fatal(err)
				}
			case "remove":
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			other := openQueue(t, vfs.NoSync(vfs.OS{}), dir, nil)
			defer other.Close()
			var want []string
			for i := range 3 {
				want = append(want, enqueue(t, other, fsqueue.Message{Payload: []byte("{}")}))
				got, err := q.List()
				if err != nil {
					t.Fatalf("List after enqueue %d: %v", i, err)
				}
				if !slices.Equal(entryNames(got), want) {
					t.Fatalf("after the directory was replaced, enqueue %d: List = %v, want %v", i, entryNames(got), want)
				}
			}
		})
	}
}

// TestNotifyFollowsReplacedDirectory: after the queue directory is
// replaced, ArmQuiet still tells of another process's additions to the
// directory the path names (Options.Notify), rather than waiting on the
// watch of the old one.
func TestNotifyFollowsReplacedDirectory(t *testing.T) {
	if w, ok := vfs.WatchDir(vfs.OS{}, t.TempDir()); !ok {
		t.Skip("no directory watch on this system")
	} else {
		w.Close()
	}
	dir := filepath.Join(t.TempDir(), "q")
	notified := make(chan struct{}, 16)
	q, err := fsqueue.Open(vfs.OS{}, dir, fsqueue.Options{Notify: func() { notified <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	quiet := func(what string) {
		t.Helper()
		if _, ok, err := q.ArmQuiet(0); err != nil || !ok {
			t.Fatalf("ArmQuiet %s = %v, %v; want quiet", what, ok, err)
		}
	}
	quiet("on an empty queue")
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	other := openQueue(t, vfs.NoSync(vfs.OS{}), dir, nil)
	defer other.Close()
	// The replacement itself may be told (the index cannot tell what
	// changed); drain that, then ask again.
	select {
	case <-notified:
	case <-time.After(time.Minute):
		t.Fatal("no Notify after the directory was replaced")
	}
	for len(notified) > 0 {
		<-notified
	}
	quiet("after the replacement")
	name := enqueue(t, other, fsqueue.Message{VisibleAtMs: 1 << 45, Payload: []byte("{}")})
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatalf("no Notify for %s, added to the new directory", name)
	}
}
