package fsqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// bootOf returns a boot-id function that reports *id.
func bootOf(id *string) func() (string, error) {
	return func() (string, error) { return *id, nil }
}

// openRecycling opens the queue in dir with recycler rec and volatile
// claims (as the provider does).
func openRecycling(t testing.TB, fsys vfs.FS, dir string, clk clock.Clock, rec *fsqueue.Recycler) *fsqueue.Queue {
	t.Helper()
	q, err := fsqueue.Open(fsys, dir, fsqueue.Options{Clock: clk, VolatileClaims: true, Recycler: rec,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// recyclingQueue makes a directory with a Recycler (boot "b") and the
// queue q/ using it.
func recyclingQueue(t testing.TB) (root string, clk *clock.Manual, rec *fsqueue.Recycler, q *fsqueue.Queue) {
	t.Helper()
	root = t.TempDir()
	boot := "b"
	clk = clock.NewManual(time.UnixMilli(1_000_000))
	rec = newRecycler(t, vfs.OS{}, filepath.Join(root, "recycled"), bootOf(&boot))
	return root, clk, rec, openRecycling(t, vfs.OS{}, filepath.Join(root, "q"), clk, rec)
}

func newRecycler(t testing.TB, fsys vfs.FS, dir string, boot func() (string, error)) *fsqueue.Recycler {
	t.Helper()
	r, err := fsqueue.NewRecycler(fsys, dir, fsqueue.RecyclerOptions{BootID: boot, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("NewRecycler: %v", err)
	}
	return r
}

// promote runs rec.Promote, failing the test on an error.
func promote(t testing.TB, rec *fsqueue.Recycler) {
	t.Helper()
	if err := rec.Promote(); err != nil {
		t.Fatalf("Promote: %v", err)
	}
}

// stagePublish stages and publishes a message with payload p, as a commit's
// apply does, and returns its name and file bytes.
func stagePublish(t testing.TB, q *fsqueue.Queue, p string) (string, []byte) {
	t.Helper()
	m := fsqueue.Message{Payload: json.RawMessage(p)}
	data, err := q.Encode(&m)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.StageData(m.Name, data); err != nil {
		t.Fatalf("StageData: %v", err)
	}
	if ok, err := q.Publish(m.Name); err != nil || !ok {
		t.Fatalf("Publish = %v, %v", ok, err)
	}
	return m.Name, data
}

func inoOf(t testing.TB, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestRecyclerReusesFiles: with a Recycler, a message consumed from one
// queue and a claim removed with it give their inodes to the next staged
// message and claim, in any queue sharing the pool; no file is created or
// unlinked once the pool holds enough, and every file holds exactly what
// was written, with a fresh modification time.
func TestRecyclerReusesFiles(t *testing.T) {
	root := t.TempDir()
	boot := "boot-1"
	// A file from the pool must be complete, with a fresh mtime, when it
	// gets its target's name (a sweeper judges a staged file's age by it).
	var mu sync.Mutex
	var notBefore time.Time
	check := &renameHookFS{FS: vfs.OS{}, hook: func(from, to string) {
		if !strings.Contains(from, "recycled") || strings.Contains(to, "recycled") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fi, err := os.Lstat(from)
		if err != nil || fi.ModTime().Before(notBefore) || fi.Size() == 0 {
			t.Errorf("a pooled file becomes %s with mtime %v (want after %v), size %d, %v", to, fi.ModTime(), notBefore, fi.Size(), err)
		}
	}}
	cfs := vfs.Counting(check)
	rec := newRecycler(t, cfs, filepath.Join(root, "recycled"), bootOf(&boot))
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	a := openRecycling(t, cfs, filepath.Join(root, "a"), clk, rec)
	b := openRecycling(t, cfs, filepath.Join(root, "b"), clk, rec)

	// Warm up: a message in a is claimed and consumed; its file and claim
	// go to the pool.
	name, _ := stagePublish(t, a, `{"n":0}`)
	msgIno := inoOf(t, filepath.Join(root, "a", name+".json"))
	c, err := a.ClaimNext(context.Background(), "w", time.Minute, nil)
	if err != nil || c == nil {
		t.Fatalf("ClaimNext = %v, %v", c, err)
	}
	claimIno := inoOf(t, filepath.Join(root, "a", "claims", name+".json"))
	if err := a.Delete(name); err != nil {
		t.Fatal(err)
	}
	if got, waiting := rec.Pooled(), rec.Waiting(); got != 0 || waiting != 2 {
		t.Fatalf("after a Delete %d files are pooled and %d wait, want 0 and 2 (message and claim)", got, waiting)
	}
	promote(t, rec)
	if got := rec.Pooled(); got != 2 {
		t.Fatalf("Pooled after Promote = %d, want 2 (message and claim)", got)
	}

	// Steady state: stage in b, claim in b, consume; nothing is created.
	created, unlinked := cfs.Files().Creates, cfs.Files().Unlinks
	seen := map[uint64]bool{}
	for i := range 20 {
		old := time.Now().Add(-time.Hour)
		pooled, _ := os.ReadDir(filepath.Join(root, "recycled", boot))
		for _, e := range pooled { // make every pooled file look old
			_ = os.Chtimes(filepath.Join(root, "recycled", boot, e.Name()), old, old)
		}
		before := time.Now().Add(-2 * time.Second)
		mu.Lock()
		notBefore = before
		mu.Unlock()
		n, data := stagePublish(t, b, fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i+1, strings.Repeat("x", i*37)))
		path := filepath.Join(root, "b", n+".json")
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(data) {
			t.Fatalf("message %d reads %q, %v; want %q", i, got, err, data)
		}
		if fi, _ := os.Lstat(path); fi.ModTime().Before(before) {
			t.Fatalf("message %d has the pooled file's old mtime %v", i, fi.ModTime())
		}
		seen[inoOf(t, path)] = true
		if m, err := b.Get(n); err != nil || !strings.Contains(string(data), string(m.Payload)) {
			t.Fatalf("Get %d = %s, %v", i, m.Payload, err)
		}
		c, err := b.ClaimNext(context.Background(), "w", time.Minute, nil)
		if err != nil || c == nil || c.Message.Name != n {
			t.Fatalf("ClaimNext %d = %v, %v", i, c, err)
		}
		if _, exists, err := b.PeekClaim(n); err != nil || !exists {
			t.Fatalf("PeekClaim %d = %v, %v", i, exists, err)
		}
		if err := b.Delete(n); err != nil {
			t.Fatal(err)
		}
		promote(t, rec)
	}
	if d := cfs.Files().Creates - created; d != 0 {
		t.Errorf("%d files created in the steady state, want 0", d)
	}
	if d := cfs.Files().Unlinks - unlinked; d != 0 {
		t.Errorf("%d names unlinked in the steady state, want 0", d)
	}
	if !seen[msgIno] && !seen[claimIno] {
		t.Errorf("queue b never used the inodes queue a freed (%d, %d): %v", msgIno, claimIno, seen)
	}
}

// TestRecyclerNeedsABootID: without a boot id nothing is recycled (rule 4
// cannot be kept), and removal is plain unlinking.
func TestRecyclerNeedsABootID(t *testing.T) {
	for _, tc := range []struct {
		name string
		boot func() (string, error)
	}{
		{"nil", nil},
		{"error", func() (string, error) { return "", errors.New("no /proc") }},
		{"empty", func() (string, error) { return "", nil }},
		{"a path", func() (string, error) { return "../x", nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rec := newRecycler(t, vfs.OS{}, filepath.Join(root, "recycled"), tc.boot)
			q := openRecycling(t, vfs.OS{}, filepath.Join(root, "q"), clock.NewManual(time.UnixMilli(1_000_000)), rec)
			n, _ := stagePublish(t, q, `{}`)
			if err := q.Delete(n); err != nil {
				t.Fatal(err)
			}
			if rec.Pooled() != 0 {
				t.Fatalf("Pooled = %d without a boot id", rec.Pooled())
			}
			if _, err := os.Lstat(filepath.Join(root, "recycled")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the pool directory was made without a boot id: %v", err)
			}
		})
	}
}

// TestRecyclerIgnoresOtherBootsAfterPowerLoss: a power loss can leave a
// recycled inode under two names - its rename durable in the queue's
// directory and not in the pool's. The next boot must never write into the
// pool's name of it, which would overwrite the live message: the pool of
// another boot is removed, never used (rule 4). With the pool named by
// anything but the boot (mutation: a fixed name), the message is
// overwritten.
func TestRecyclerIgnoresOtherBootsAfterPowerLoss(t *testing.T) {
	mem := vfs.NewStrictMem()
	if err := mem.MkdirAll("/d", vfs.DirPerm); err != nil {
		t.Fatal(err)
	}
	mem.MarkAllSynced()
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	rec := newRecycler(t, mem, "/d/recycled", mem.BootID)
	q := openRecycling(t, mem, "/d/q", clk, rec)
	// A message consumed: its inode is pooled, and the pool made durable.
	n0, _ := stagePublish(t, q, `{"old":true}`)
	if err := q.Delete(n0); err != nil {
		t.Fatal(err)
	}
	promote(t, rec) // syncs /d/q
	pools, err := mem.ReadDirNames("/d/recycled")
	if err != nil || len(pools) != 1 {
		t.Fatalf("pools = %v, %v", pools, err)
	}
	pool := "/d/recycled/" + pools[0]
	if err := mem.SyncDir(pool); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/d/recycled"); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	// The next message takes that inode; its file and its directory are
	// made durable, the pool's directory is not.
	n1, data := stagePublish(t, q, `{"live":true}`)
	if rec.Pooled() != 0 {
		t.Fatalf("the staged message did not take the pooled file (%d pooled)", rec.Pooled())
	}
	f, err := mem.OpenFile("/d/q/"+n1+".json", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := mem.SyncDir("/d/q"); err != nil {
		t.Fatal(err)
	}
	q.Close()

	// Power loss: the pool still names the live message's inode.
	after := mem.CrashClone()
	if names, _ := after.ReadDirNames(pool); len(names) != 1 {
		t.Fatalf("after the crash the old pool holds %v; the test needs the aliased name", names)
	}
	rec2 := newRecycler(t, after, "/d/recycled", after.BootID)
	q2 := openRecycling(t, after, "/d/q", clk, rec2)
	for i := range 3 { // new messages must not write into the live one's inode
		stagePublish(t, q2, fmt.Sprintf(`{"new":%d,"pad":"%s"}`, i, strings.Repeat("y", 100)))
	}
	got, err := after.ReadFile("/d/q/" + n1 + ".json")
	if err != nil || string(got) != string(data) {
		t.Fatalf("the live message after the power loss reads %q, %v; want %q", got, err, data)
	}
	if boot, _ := mem.BootID(); pools[0] != boot {
		t.Fatalf("the pool is %s, not named by the boot %s", pools[0], boot)
	}
	if names, err := after.ReadDirNames("/d/recycled"); err != nil || len(names) != 1 || names[0] == pools[0] {
		t.Fatalf("pools after reopening: %v, %v; want only the new boot's", names, err)
	}
}

// renameHookFS runs hook(from, to) before every Rename.
type renameHookFS struct {
	vfs.FS
	hook func(from, to string)
}

func (h *renameHookFS) Rename(from, to string) error {
	h.hook(from, to)
	return h.FS.Rename(from, to)
}

// readHookFS runs hook(name) between opening a file for ReadFile and
// reading it, once per name that match selects.
type readHookFS struct {
	vfs.FS
	match func(name string) bool
	hook  func(name string)
	once  sync.Map
}

func (h *readHookFS) ReadFile(name string) ([]byte, error) {
	if !h.match(name) {
		return h.FS.ReadFile(name)
	}
	if _, done := h.once.LoadOrStore(name, true); done {
		return h.FS.ReadFile(name)
	}
	f, err := h.FS.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h.hook(name)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, nil
		}
	}
}

// TestRecycledWhileRead: a reader that opened a message or a claim file
// just before another process consumed the message, recycled the files
// and wrote another message and claim into them, reads the new bytes; it
// must report the message gone and the claim absent, not damaged (rule 1).
// Without the check of the name after a bad read, both are reported as
// damaged (ErrCorrupt).
func TestRecycledWhileRead(t *testing.T) {
	root, clk, writerRec, w := recyclingQueue(t)

	victim, _ := stagePublish(t, w, `{"victim":true}`)
	if c, err := w.ClaimNext(context.Background(), "w", time.Minute, nil); err != nil || c == nil {
		t.Fatalf("ClaimNext = %v, %v", c, err)
	}
	// Consume the victim and reuse both of its files for another message
	// and its claim.
	recycle := func(string) {
		if err := w.Delete(victim); err != nil {
			t.Error(err)
		}
		if err := writerRec.Promote(); err != nil {
			t.Error(err)
		}
		if _, _ = stagePublish(t, w, `{"other":true,"pad":"`+strings.Repeat("z", 200)+`"}`); writerRec.Pooled() != 1 {
			t.Errorf("the other message did not take a pooled file (%d pooled)", writerRec.Pooled())
		}
		if c, err := w.ClaimNext(context.Background(), "w2", time.Minute, nil); err != nil || c == nil {
			t.Errorf("ClaimNext of the other = %v, %v", c, err)
		}
		if writerRec.Pooled() != 0 {
			t.Errorf("the other message's claim did not take the pooled claim (%d pooled)", writerRec.Pooled())
		}
	}

	t.Run("message", func(t *testing.T) {
		h := &readHookFS{FS: vfs.OS{}, match: func(n string) bool { return strings.HasSuffix(n, victim+".json") && !strings.Contains(n, "claims") }, hook: recycle}
		r := openQueue(t, h, filepath.Join(root, "q"), clk)
		_, err := r.Get(victim)
		// Both sentinels, as for a message gone before the read: callers
		// that skip gone messages test either (the provider's readQueued
		// tests fs.ErrNotExist).
		if !errors.Is(err, fsqueue.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fsqueue.ErrCorrupt) {
			t.Fatalf("Get of a message recycled while read = %v; want ErrNotFound and fs.ErrNotExist", err)
		}
	})
	t.Run("claim", func(t *testing.T) {
		// Another victim with a claim, recycled while its claim is read.
		victim, _ = stagePublish(t, w, `{"victim":2}`)
		for {
			c, err := w.ClaimNext(context.Background(), "w", time.Minute, nil)
			if err != nil || c == nil {
				t.Fatalf("ClaimNext = %v, %v", c, err)
			}
			if c.Message.Name == victim {
				break
			}
		}
		h := &readHookFS{FS: vfs.OS{}, match: func(n string) bool { return strings.HasSuffix(n, filepath.Join("claims", victim+".json")) }, hook: recycle}
		r := openQueue(t, h, filepath.Join(root, "q"), clk)
		c, exists, err := r.PeekClaim(victim)
		if err != nil || exists {
			t.Fatalf("PeekClaim of a claim recycled while read = %+v, %v, %v; want no claim", c, exists, err)
		}
	})
}

// TestRecyclerBounds: a Recycler pools at most 1,024 files and none above
// 16 KiB; NewRecycler trims a larger pool, removes a take's private file
// older than a minute and the pools of other boots.
func TestRecyclerBounds(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "recycled")
	boot := "b1"
	rec := newRecycler(t, vfs.OS{}, dir, bootOf(&boot))
	q := openRecycling(t, vfs.OS{}, filepath.Join(root, "q"), clock.NewManual(time.UnixMilli(1_000_000)), rec)

	big, _ := stagePublish(t, q, `{"pad":"`+strings.Repeat("b", 17<<10)+`"}`)
	if err := q.Delete(big); err != nil {
		t.Fatal(err)
	}
	if rec.Pooled() != 0 {
		t.Fatalf("a 17 KiB file was pooled")
	}
	for i := range 1030 {
		path := filepath.Join(root, "q", fmt.Sprintf("f%d", i))
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := fsqueue.RecycleForTest(rec, vfs.OS{}, path); err != nil {
			t.Fatal(err)
		}
	}
	if rec.Waiting() != 1024 {
		t.Fatalf("%d files wait for Promote, want 1024", rec.Waiting())
	}
	promote(t, rec)
	pool := filepath.Join(dir, boot)
	if names, _ := os.ReadDir(pool); len(names) != 1024 || rec.Pooled() != 1024 {
		t.Fatalf("pool holds %d files, the Recycler knows %d; want 1024", len(names), rec.Pooled())
	}
	// Over the bound on disk (other processes' files), a take's file, and
	// a pool of another boot.
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(pool, fmt.Sprintf("extra-%d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	take := filepath.Join(pool, ".w-take")
	if err := os.WriteFile(take, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "b0")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	count := func() (pooled, takes int) {
		names, _ := os.ReadDir(pool)
		for _, e := range names {
			if strings.HasPrefix(e.Name(), ".w-") {
				takes++
			} else {
				pooled++
			}
		}
		return pooled, takes
	}
	rec2 := newRecycler(t, vfs.OS{}, dir, bootOf(&boot)) // another process opens
	if pooled, takes := count(); pooled != 1024 || takes != 1 {
		t.Errorf("after NewRecycler the pool holds %d pooled files and %d takes, want 1024 and the recent take", pooled, takes)
	}
	if _, err := os.Lstat(other); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the pool of another boot was kept: %v", err)
	}
	if err := fsqueue.TrimForTest(rec2, time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, takes := count(); takes != 0 {
		t.Errorf("a take's file older than a minute was kept")
	}
}

// TestRecyclerSharedByProcesses: two Recyclers on one pool (two processes)
// each stage, claim and consume concurrently in two queues of their own;
// no file is ever taken twice (each message and claim reads back exactly as
// written until its owner consumes it).
func TestRecyclerSharedByProcesses(t *testing.T) {
	root := t.TempDir()
	boot := "b"
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	var wg sync.WaitGroup
	for p := range 2 {
		rec := newRecycler(t, vfs.OS{}, filepath.Join(root, "recycled"), bootOf(&boot))
		for _, qn := range []string{fmt.Sprintf("x%d", p), fmt.Sprintf("y%d", p)} {
			q := openRecycling(t, vfs.OS{}, filepath.Join(root, qn), clk, rec)
			wg.Go(func() {
				for i := range 150 {
					m := fsqueue.Message{Payload: json.RawMessage(fmt.Sprintf(`{"p":%d,"i":%d,"pad":"%s"}`, p, i, strings.Repeat("q", (i*13)%300)))}
					data, err := q.Encode(&m)
					if err != nil {
						t.Error(err)
						return
					}
					if err := q.StageData(m.Name, data); err != nil {
						t.Error(err)
						return
					}
					if _, err := q.Publish(m.Name); err != nil {
						t.Error(err)
						return
					}
					got, err := os.ReadFile(filepath.Join(root, qn, m.Name+".json"))
					if err != nil || string(got) != string(data) {
						t.Errorf("message %s reads %q, %v; want %q", m.Name, got, err, data)
						return
					}
					c, err := q.ClaimNext(context.Background(), fmt.Sprint(p), time.Minute, nil)
					if err != nil || c == nil || c.Message.Name != m.Name {
						t.Errorf("ClaimNext = %v, %v; want %s", c, err, m.Name)
						return
					}
					got, err = os.ReadFile(filepath.Join(root, qn, "claims", m.Name+".json"))
					if err != nil || !strings.Contains(string(got), c.Claim.Token) {
						t.Errorf("claim of %s reads %q, %v; want token %s", m.Name, got, err, c.Claim.Token)
						return
					}
					if err := q.Delete(m.Name); err != nil {
						t.Error(err)
						return
					}
					if err := rec.Promote(); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// TestRecyclerSkipsLockedFiles: an ack recycles its message while it
// still holds the message file's flock; a message written into that inode
// meanwhile would be locked by the acker - for as long as the acker is
// stopped, if it is (rule 6). A take must give such a file back. Without
// the lock check, the staged message below takes the locked inode.
func TestRecyclerSkipsLockedFiles(t *testing.T) {
	root, clk, rec, q := recyclingQueue(t)
	boot := "b"
	other := openRecycling(t, vfs.OS{}, filepath.Join(root, "other"), clk, newRecycler(t, vfs.OS{}, filepath.Join(root, "recycled"), bootOf(&boot)))

	x, _ := stagePublish(t, q, `{"x":1}`)
	xIno := inoOf(t, filepath.Join(root, "q", x+".json"))
	var during uint64
	err := q.WithClaim(context.Background(), x, func(g *fsqueue.ClaimGuard) error {
		if err := q.DeleteMessage(x); err != nil {
			return err
		}
		if err := rec.Promote(); err != nil {
			return err
		}
		if rec.Pooled() != 1 {
			t.Errorf("the message was not recycled (%d pooled)", rec.Pooled())
		}
		// Another process stages while the acker still holds the flock.
		y, _ := stagePublish(t, other, `{"y":1}`)
		during = inoOf(t, filepath.Join(root, "other", y+".json"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if during == xIno {
		t.Fatalf("a message staged while the recycled file's flock was held took that inode (%d)", xIno)
	}
	// Unlocked, the file is taken.
	z, _ := stagePublish(t, other, `{"z":1}`)
	if got := inoOf(t, filepath.Join(root, "other", z+".json")); got != xIno {
		t.Errorf("after the flock was released the file was not reused: inode %d, want %d", got, xIno)
	}
}

// TestRecyclerReusesOnlyDurablyRemovedFiles: a consumed message's file is
// written again only after the removal of its name is durable (rule 2).
// The file system writes a file's new bytes back whenever it likes, and
// the new name may be durable in another directory, while the old name's
// removal is not: a power loss then brings the old name back holding the
// new message's bytes. The strict MemFS's writeback crash model shows it:
// with Promote's directory fsync removed (mutation), the consumed message
// comes back as a copy of the new one; with removed files pooled at once,
// without waiting for Promote, the same happens before Promote.
func TestRecyclerReusesOnlyDurablyRemovedFiles(t *testing.T) {
	mem := vfs.NewStrictMem()
	if err := mem.MkdirAll("/d", vfs.DirPerm); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	rec := newRecycler(t, mem, "/d/recycled", mem.BootID)
	a := openRecycling(t, mem, "/d/a", clk, rec)
	b := openRecycling(t, mem, "/d/b", clk, rec)
	mem.MarkAllSynced()
	durable := func(q string, name string) {
		t.Helper()
		f, err := mem.OpenFile("/d/"+q+"/"+name+".json", os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := mem.SyncDir("/d/" + q); err != nil {
			t.Fatal(err)
		}
	}
	// checkOld: after a power loss now, the consumed message is gone or
	// holds its own bytes.
	checkOld := func(when, x string, xData []byte) {
		t.Helper()
		img := mem.CrashCloneWriteback()
		got, err := img.ReadFile("/d/a/" + x + ".json")
		if err == nil && string(got) != string(xData) {
			t.Errorf("%s: after a power loss the consumed message %s holds %q, another message's bytes", when, x, got)
		}
	}
	x, xData := stagePublish(t, a, `{"x":1}`)
	durable("a", x)
	if err := a.Delete(x); err != nil {
		t.Fatal(err)
	}
	// Before Promote: the removed file is not taken.
	y, _ := stagePublish(t, b, `{"y":1,"pad":"`+strings.Repeat("y", 40)+`"}`)
	durable("b", y)
	checkOld("a message staged before Promote", x, xData)
	if rec.Waiting() != 1 {
		t.Fatalf("%d files wait for Promote, want the consumed message's", rec.Waiting())
	}
	// After Promote: it is taken, and the old name's removal is durable.
	promote(t, rec)
	z, _ := stagePublish(t, b, `{"z":1,"pad":"`+strings.Repeat("z", 40)+`"}`)
	if rec.Pooled() != 0 {
		t.Fatalf("the message staged after Promote did not take the pooled file (%d pooled)", rec.Pooled())
	}
	durable("b", z)
	checkOld("a message staged after Promote", x, xData)
}
