package fsqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// testRecycler is a vfs.SparePool (as the provider's recycler is) plus the
// Hold rule: held spares come back only at barrier(), the test's stand-in
// for "the move is durable". With full set, Retire refuses (removals
// unlink).
type testRecycler struct {
	pool *vfs.SparePool

	mu   sync.Mutex
	held []string
	full bool
}

func (r *testRecycler) Get() string { return r.pool.Get() }

func (r *testRecycler) Put(s string, hasFile bool) {
	if hasFile {
		r.pool.Put(s)
	} else {
		r.pool.PutEmpty(s)
	}
}

func (r *testRecycler) Retire() string {
	r.mu.Lock()
	full := r.full
	r.mu.Unlock()
	if full {
		return ""
	}
	return r.pool.Reserve()
}

func (r *testRecycler) Hold(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = append(r.held, s)
}

func (r *testRecycler) barrier() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.held {
		r.pool.Put(h)
	}
	r.held = nil
}

// heldInodes returns the files of the held spares.
func (r *testRecycler) heldInodes(t *testing.T) []fs.FileInfo {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []fs.FileInfo
	for _, s := range r.held {
		fi, err := os.Lstat(s)
		if err != nil {
			t.Fatalf("held spare %s: %v", s, err)
		}
		out = append(out, fi)
	}
	return out
}

func lstat(t *testing.T, path string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func sameAsAny(fi fs.FileInfo, set []fs.FileInfo) bool {
	return slices.ContainsFunc(set, func(o fs.FileInfo) bool { return os.SameFile(fi, o) })
}

// TestRecycler follows the inodes of a queue with a Recycler: a claim is a
// spare renamed into place, a replaced claim's inode and a removed
// message's or claim's inode go to the recycler as held spares (not
// unlinked), a held spare is not written again before the recycler
// releases it, and released ones carry the next claims and staged
// messages. When the recycler has spares enough, removals unlink.
func TestRecycler(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("recycling exchanges names (renameat2, Linux)")
	}
	ctx := context.Background()
	base := t.TempDir()
	spares := filepath.Join(base, "spares")
	if err := os.Mkdir(spares, 0o700); err != nil {
		t.Fatal(err)
	}
	pool, err := vfs.NewSparePool(vfs.OS{}, spares)
	if err != nil || !pool.Enabled() {
		t.Skipf("no name exchange in %s: %v", spares, err)
	}
	r := &testRecycler{pool: pool}
	dir := filepath.Join(base, "q")
	q, err := fsqueue.Open(vfs.OS{}, dir, fsqueue.Options{VolatileClaims: true, Recycler: r})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	claimPath := func(n string) string { return filepath.Join(dir, "claims", n+".json") }

	m1 := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`1`)})
	msg1 := lstat(t, filepath.Join(dir, m1+".json"))
	c := mustClaim(t, q, time.Minute, nil)
	claim1 := lstat(t, claimPath(m1))
	if _, err := q.Renew(ctx, c.Claim.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if held := r.heldInodes(t); len(held) != 1 || !os.SameFile(held[0], claim1) {
		t.Fatalf("after a renew, held spares = %d, want the replaced claim's inode", len(held))
	}
	claim2 := lstat(t, claimPath(m1))
	if err := q.Delete(m1); err != nil {
		t.Fatal(err)
	}
	held := r.heldInodes(t)
	for what, fi := range map[string]fs.FileInfo{"message": msg1, "claim": claim2} {
		if !sameAsAny(fi, held) {
			t.Fatalf("the removed %s's inode is not among the held spares", what)
		}
	}
	if _, err := q.Get(m1); !errors.Is(err, fsqueue.ErrNotFound) {
		t.Fatalf("Get of a removed message = %v, want ErrNotFound", err)
	}

	// Before the barrier no held inode is written again.
	m2 := q.NewName()
	if err := q.StageDeferred(fsqueue.Message{Name: m2, Payload: json.RawMessage(`2`)}); err != nil {
		t.Fatal(err)
	}
	if sameAsAny(lstat(t, filepath.Join(dir, ".staged-"+m2+".json")), held) {
		t.Fatal("a staged message was written into a held spare before its move was durable")
	}
	// After it they carry the next writes.
	r.barrier()
	m3 := q.NewName()
	if err := q.StageDeferred(fsqueue.Message{Name: m3, Payload: json.RawMessage(`3`)}); err != nil {
		t.Fatal(err)
	}
	staged3 := lstat(t, filepath.Join(dir, ".staged-"+m3+".json"))
	if !sameAsAny(staged3, held) {
		t.Fatal("a staged message after the barrier did not reuse a released spare")
	}
	if published, err := q.Publish(m3); err != nil || !published {
		t.Fatalf("Publish = %v, %v", published, err)
	}
	if got, err := q.Get(m3); err != nil || string(got.Payload) != "3" {
		t.Fatalf("Get(%s) = %+v, %v", m3, got, err)
	}

	// A recycler with spares enough: removals unlink.
	r.mu.Lock()
	r.full = true
	r.mu.Unlock()
	r.barrier()
	if err := q.Delete(m3); err != nil {
		t.Fatal(err)
	}
	if sameAsAny(staged3, r.heldInodes(t)) {
		t.Fatal("a removal was retired although the recycler refused")
	}
	if _, err := os.Lstat(filepath.Join(dir, m3+".json")); !os.IsNotExist(err) {
		t.Fatalf("removed message still there: %v", err)
	}
}
