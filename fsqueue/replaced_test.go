package fsqueue_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// copyTree copies the regular files and directories of src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		o, err := os.Create(out)
		if err != nil {
			return err
		}
		defer o.Close()
		_, err = io.Copy(o, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClaimsWatchFollowsReplacedQueueDir: the queue directory is replaced
// by rename (restored from a copy: cp -a q q.new; mv q q.old; mv q.new q).
// The index follows the replacement (its watch reports the queue directory
// gone), and so must the claims cache: the watch of claims/ is on
// q.old/claims, which was not itself moved and so never reports gone.
// Found by review: with the claims watch kept, the claims of the new
// directory that the pre-filter cached were never dropped again, and a
// message abandoned by another process in the new directory stayed hidden
// from ClaimNext for its old lease's hour.
func TestClaimsWatchFollowsReplacedQueueDir(t *testing.T) {
	if w, ok := vfs.WatchDir(vfs.OS{}, t.TempDir()); !ok {
		t.Skip("no directory watch on this system")
	} else {
		w.Close()
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "q")
	q := openQueue(t, vfs.OS{}, dir, nil)
	defer q.Close()
	other := openQueue(t, vfs.NoSync(vfs.OS{}), dir, nil)
	defer other.Close()

	name := enqueue(t, other, fsqueue.Message{Payload: []byte("{}")})
	held := mustClaim(t, other, time.Hour, nil)
	if held.Message.Name != name {
		t.Fatalf("claimed %s, want %s", held.Message.Name, name)
	}
	// q's pass caches the claim (held for an hour).
	mustNotClaim(t, q, nil)

	// The directory is replaced by a copy of itself.
	copyTree(t, dir, dir+".new")
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".new", dir); err != nil {
		t.Fatal(err)
	}
	// q sees the new directory (its index follows the replacement).
	if l, err := q.List(); err != nil || len(l) != 1 || l[0].Name() != name {
		t.Fatalf("List after replacement = %v, %v", l, err)
	}
	mustNotClaim(t, q, nil) // still held: right

	// The holder gives the message up, in the directory the path names now.
	if err := other.Abandon(ctx, held.Claim.Token, 0, false); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := other.PeekClaim(name); err != nil || !ok || c.Token != "" {
		t.Fatalf("claim after Abandon = %+v, %v, %v", c, ok, err)
	}
	// Any process can claim it now.
	got, err := q.ClaimNext(ctx, "q", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatalf("ClaimNext = nothing: %s was abandoned in the replaced directory but q's claim cache still has the old lease (its claims/ watch is on %s.old/claims)", name, dir)
	}
}
