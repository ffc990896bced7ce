//go:build linux

package fsqueue_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// TestPlantedFilesNeverBlockTheQueue: a directory or a FIFO planted in place
// of a message file whose name sorts first, or a FIFO in place of its claim
// file, on the provider's file system (vfs.NoFollow). ClaimNext must hand out
// the valid message behind it, and must return at all: a FIFO opened
// without O_NONBLOCK blocks open(2) until a writer comes, whatever the
// context. (Found by review: the planted directory made every ClaimNext fail
// with EISDIR, the FIFOs made it hang; symbolic links were already skipped,
// symlink.go.)
func TestPlantedFilesNeverBlockTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(dir, msg string) error
	}{
		{"directory as a message", func(dir, msg string) error {
			return os.Mkdir(filepath.Join(dir, msg+".json"), 0o755)
		}},
		{"FIFO as a message", func(dir, msg string) error {
			return syscall.Mkfifo(filepath.Join(dir, msg+".json"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "q")
			q := openQueue(t, vfs.NoFollow(root, vfs.Perm{}), dir, nil)
			defer q.Close()
			planted := q.NewName(0, "")
			good := enqueue(t, q, fsqueue.Message{Payload: []byte("{}")})
			if err := tc.plant(dir, planted); err != nil {
				t.Fatal(err)
			}
			c := claimUnblocking(t, q, dir, planted)
			if c == nil || c.Message.Name != good {
				t.Fatalf("ClaimNext = %+v; want %s (the planted %s skipped)", c, good, planted)
			}
		})
	}
	t.Run("FIFO as a claim", func(t *testing.T) {
		root := t.TempDir()
		dir := filepath.Join(root, "q")
		q := openQueue(t, vfs.NoFollow(root, vfs.Perm{}), dir, nil)
		defer q.Close()
		good := enqueue(t, q, fsqueue.Message{Payload: []byte("{}")})
		if err := syscall.Mkfifo(filepath.Join(dir, "claims", good+".json"), 0o644); err != nil {
			t.Fatal(err)
		}
		// A claim that cannot be read counts as none: the message is
		// claimed, and the FIFO replaced by the claim.
		if c := claimUnblocking(t, q, filepath.Join(dir, "claims"), good); c == nil || c.Message.Name != good {
			t.Fatalf("ClaimNext = %+v; want %s", c, good)
		}
	})
}

// claimUnblocking runs ClaimNext with a short context and returns what it
// claimed. If it has not returned after a minute - blocked in an open(2)
// or read(2) of the FIFO dir/name.json - it opens the FIFO for writing
// until the call returns, so that the test ends, and fails.
func claimUnblocking(t *testing.T, q *fsqueue.Queue, dir, name string) *fsqueue.Claimed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	type result struct {
		c   *fsqueue.Claimed
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := q.ClaimNext(ctx, "o", time.Minute, nil)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("ClaimNext: %v", r.err)
		}
		return r.c
	case <-time.After(time.Minute):
	}
	for {
		if f, err := os.OpenFile(filepath.Join(dir, name+".json"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		select {
		case <-done:
			t.Fatal("ClaimNext with a 200 ms context blocked on a planted FIFO until it was opened for writing")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
