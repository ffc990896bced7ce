package provider

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/seal"
	"github.com/durofs/durofs/internal/vfs"
)

// TestRecycledFilesReadWithoutLock: writers replace two instances' files
// through one spare pool (each writer owns its file, as the instance flock
// guarantees), so an inode that held a's file is soon overwritten with
// b's, while readers that hold no lock read both. Every read must return
// a complete version of the file it asked for, and one reader must never
// see a file's version go back. (Without readStable's swap check, a reader
// sees a version go back in about one run of three. Foreign or torn content
// that comes back to the path - an inode that left it, was overwritten and
// returned - is what the seal catches; TestSealedFilesOnDisk and
// internal/seal check that deterministically.)
func TestRecycledFilesReadWithoutLock(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode recycling needs renameat2 (Linux)")
	}
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	if !p.spares.Enabled() {
		t.Skip("file system cannot exchange names")
	}
	type doc struct {
		Instance string `json:"instance"`
		N        int    `json:"n"`
		Pad      string `json:"pad"`
	}
	keys := []string{"a", "b"}
	for _, k := range keys {
		mustNoErr(t, p.fs.MkdirAll(p.instDir(k), vfs.DirPerm))
	}
	const writes = 3000
	afs := vfs.NoSync(p.fs) // as a barrier-mode apply writes
	var wg sync.WaitGroup
	var done atomic.Bool
	for wi, k := range keys {
		wg.Go(func() {
			for n := 1; n <= writes; n++ {
				// Lengths differ per writer and per write, so that mixed
				// versions are not simply aligned copies.
				d := doc{Instance: k, N: n, Pad: strings.Repeat("x", (n*7+wi*131)%300)}
				data, _ := jsonMarshal(d)
				if err := p.replaceSealed(afs, p.instFilePath(k), data, nil, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var reads, errs atomic.Int64
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			last := map[string]int{}
			for !done.Load() {
				for _, k := range keys {
					var d doc
					ok, err := p.readJSON(p.instFilePath(k), &d)
					reads.Add(1)
					switch {
					case err != nil:
						errs.Add(1)
						t.Errorf("read %s: %v", k, err)
					case !ok:
						// not written yet
					case d.Instance != k:
						t.Errorf("read %s's file, got %s's content (n=%d)", k, d.Instance, d.N)
					case d.N < last[k]:
						t.Errorf("read %s: version %d after version %d", k, d.N, last[k])
					default:
						last[k] = d.N
					}
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	readers.Wait()
	t.Logf("%d writes per file, %d lock-free reads, %d errors", writes, reads.Load(), errs.Load())
	for _, k := range keys {
		var d doc
		if _, err := p.readJSON(p.instFilePath(k), &d); err != nil || d.N != writes {
			t.Fatalf("final %s = %+v, %v; want version %d", k, d, err, writes)
		}
	}
	spares, _ := filepath.Glob(filepath.Join(p.tmpDir, vfs.SparePrefix+"*"))
	if len(spares) > 2 {
		t.Errorf("%d spare files for 2 writers: %v", len(spares), spares)
	}
}

// TestSealedFilesOnDisk: the files a commit writes carry a seal for their
// own path, jq-readable, and a file damaged on disk reads as ErrCorrupt.
func TestSealedFilesOnDisk(t *testing.T) {
	for _, mode := range []CommitSync{CommitPerFile, CommitAuto} {
		t.Run(mode.String(), func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CommitSync: mode})
			createInstance(t, p, "sealed")
			key := instanceKey("sealed")
			for _, path := range []string{p.instFilePath(key), p.execStatePath(key, 1)} {
				raw, err := p.fs.ReadFile(path)
				mustNoErr(t, err)
				if _, sealed, err := seal.Open(p.sealID(path), raw); !sealed || err != nil {
					t.Fatalf("%s: sealed=%v err=%v:\n%s", path, sealed, err, raw)
				}
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil || m[seal.Member] == nil {
					t.Fatalf("%s is not one JSON object with its seal: %v", path, err)
				}
				damaged := []byte(strings.Replace(string(raw), `":`, `": `, 1)) // valid JSON, other bytes
				mustNoErr(t, vfs.WriteFile(p.fs, path, damaged))
				var v map[string]any
				if _, err := p.readJSON(path, &v); !errors.Is(err, ErrCorrupt) || !errors.Is(err, seal.ErrMismatch) {
					t.Fatalf("damaged %s: %v, want ErrCorrupt wrapping seal.ErrMismatch", path, err)
				}
				mustNoErr(t, vfs.WriteFile(p.fs, path, raw))
			}
			// Another instance's file moved into place is refused too.
			mustNoErr(t, p.fs.MkdirAll(p.instDir("other"), vfs.DirPerm))
			raw, _ := p.fs.ReadFile(p.instFilePath(key))
			mustNoErr(t, vfs.WriteFile(p.fs, p.instFilePath("other"), raw))
			if _, err := p.readInstanceFile("other"); !errors.Is(err, seal.ErrMismatch) {
				t.Fatalf("foreign instance.json: %v, want seal.ErrMismatch", err)
			}
		})
	}
}

// TestSpareSweep: a sweep removes spares of other pools left untouched -
// neither written nor moved - for spareSweepAge, never its own. A spare
// with an old mtime that was moved recently (a removed message retired as
// a spare) is kept.
func TestSpareSweep(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode recycling needs renameat2 (Linux)")
	}
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	if !p.spares.Enabled() {
		t.Skip("file system cannot exchange names")
	}
	createInstance(t, p, "s")
	own := p.spares.Get()
	p.spares.Put(own)
	mustNoErr(t, vfs.WriteFile(p.fs, own, []byte("x")))
	dead := filepath.Join(p.tmpDir, vfs.SparePrefix+"deadbeef0000-1")
	fresh := filepath.Join(p.tmpDir, vfs.SparePrefix+"deadbeef0000-2")
	for _, f := range []string{dead, fresh} {
		mustNoErr(t, vfs.WriteFile(p.fs, f, []byte("x")))
	}
	old := time.Now().Add(-spareSweepAge - time.Minute)
	for _, f := range []string{own, dead} {
		mustNoErr(t, os.Chtimes(f, old, old)) // an old mtime, but ctime is now
	}
	check := func(when string, want map[string]bool) {
		t.Helper()
		mustNoErr(t, p.sweepTemps(time.Minute))
		for f, want := range want {
			if _, err := p.fs.Lstat(f); (err == nil) != want {
				t.Errorf("%s: %s exists=%v after the sweep, want %v", when, filepath.Base(f), err == nil, want)
			}
		}
	}
	check("old mtime, recent ctime", map[string]bool{own: true, dead: true, fresh: true})
	defer func(orig func() time.Time) { sweepNow = orig }(sweepNow)
	sweepNow = func() time.Time { return time.Now().Add(spareSweepAge + 2*time.Minute) }
	check("both old", map[string]bool{own: true, dead: false, fresh: false})
}

// TestQueueRecyclerHoldsUntilBarrier: a spare held after a move is not
// handed out until a barrier that started after the Hold has completed;
// then it is handed out before any empty name; and once the process keeps
// maxIdleSpares files, Retire refuses (the queue unlinks instead).
func TestQueueRecyclerHoldsUntilBarrier(t *testing.T) {
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/tmp", vfs.DirPerm))
	pool, err := vfs.NewSparePool(mem, "/tmp")
	if err != nil || !pool.Enabled() {
		t.Fatalf("NewSparePool = %v, %v", pool, err)
	}
	var barriers atomic.Int64
	b := newGroupBarrier(func() error { barriers.Add(1); return nil })
	r := &queueRecycler{pool: pool, barrier: b}

	mustNoErr(t, b.Sync()) // a barrier before the move proves nothing about it
	s := r.Retire()
	mustNoErr(t, vfs.WriteFile(mem, s, []byte("a removed message"))) // the retire's rename
	r.Hold(s)
	g := r.Get()
	if g == s {
		t.Fatal("Get handed out a held spare before any barrier after the Hold")
	}
	r.Put(g, false)
	mustNoErr(t, b.Sync())
	if g := r.Get(); g != s {
		t.Fatalf("Get after the barrier = %q, want the released spare %q", g, s)
	}
	r.Put(s, true)

	for range maxIdleSpares {
		if n := r.Retire(); n != "" {
			r.Hold(n)
		}
	}
	mustNoErr(t, b.Sync())
	if n := r.Retire(); n != "" {
		t.Fatalf("Retire with %d spares kept = %q, want refusal", maxIdleSpares, n)
	}
}

// TestQueueFilesRecycled: in barrier mode and in ProcessCrashSafe mode the
// steady state of work items - enqueue, fetch, ack with a completion,
// cleanup - creates and unlinks no queue files: claims and staged
// completions are written into spares, and removed messages and claims
// become spares. Only the enqueue creates its message (through a temporary
// file it unlinks again).
func TestQueueFilesRecycled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode recycling needs renameat2 (Linux)")
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"barrier", Options{CommitSync: CommitBarrier}},
		{"process-crash-safe", Options{Durability: ProcessCrashSafe}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			cfs := vfs.Counting(vfs.OS{})
			opts := tc.opts
			opts.FS, opts.SweepInterval = cfs, -1
			p := openT(t, t.TempDir(), opts)
			if !p.spares.Enabled() {
				t.Skip("file system cannot exchange names")
			}
			const warmup, items = 3, 20
			var base vfs.FileCounts
			for i := range items {
				if i == warmup {
					base = cfs.Files()
				}
				mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wf", ExecutionID: 1, ID: uint64(i + 1), Name: "a"}))
				it, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, TagFilter{})
				if err != nil || it == nil {
					t.Fatal(it, err)
				}
				mustNoErr(t, p.AckWorkItem(ctx, it.LockToken, ActivityCompleted{Instance: "wf", ExecutionID: 1, ID: uint64(i + 1), Result: "r"}))
				if p.barrier != nil {
					p.cleanOnce(true)
				}
			}
			got := cfs.Files()
			n := int64(items - warmup)
			if creates, unlinks := got.Creates-base.Creates, got.Unlinks-base.Unlinks; creates > n || unlinks > n {
				t.Fatalf("%d items created %d files and unlinked %d names; want at most one each per item (the enqueue's)", n, creates, unlinks)
			}
			claims, err := p.workQ.Claims()
			mustNoErr(t, err)
			if len(claims) != 0 {
				t.Fatalf("claims left after the cleanups: %v", claims)
			}
		})
	}
}

// TestUnreadableClaimIsNoClaim: a worker claim that a power loss left
// unreadable - garbage, or (recycled inodes) another message's held or
// acked claim - neither stops Open's recovery nor blocks the item: it is
// delivered again, and the ack of the lost lease is refused.
func TestUnreadableClaimIsNoClaim(t *testing.T) {
	other := func(state string) string {
		b, _ := json.Marshal(map[string]any{"token": "01ARZ3NDEKTSV4RRFFQ69G5FAV.6f1c6b7e-6d51-4b4a-9d1c-6a2a9a3f6d11",
			"locked_until_ms": int64(1) << 50, "attempt": 3, "state": state, "data": map[string]string{"completion": "01ARZ3NDEKTSV4RRFFQ69G5FAW"}})
		return string(b)
	}
	for _, tt := range []struct{ name, content string }{
		{"garbage", "{garbage"},
		{"empty", ""},
		{"another message's held claim", other("")},
		{"another message's acked claim", other(claimStateAcked)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1})
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wf", ExecutionID: 1, ID: 1, Name: "a"}))
			it, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, TagFilter{})
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			mustNoErr(t, p.Close())
			claims, _ := filepath.Glob(filepath.Join(dir, "queues", "worker", "claims", "*.json"))
			if len(claims) != 1 {
				t.Fatalf("claims = %v", claims)
			}
			mustNoErr(t, os.WriteFile(claims[0], []byte(tt.content), 0o600))
			p2 := openT(t, dir, Options{SweepInterval: -1})
			if err := p2.AckWorkItem(ctx, it.LockToken, nil); !errors.Is(err, ErrNotFound) {
				t.Fatalf("ack of the lost lease = %v, want ErrNotFound", err)
			}
			again, err := p2.FetchWorkItem(ctx, time.Minute, 0, nil, TagFilter{})
			if err != nil || again == nil {
				t.Fatalf("fetch after reopening = %+v, %v; want the item again", again, err)
			}
			mustNoErr(t, p2.AckWorkItem(ctx, again.LockToken, nil))
			if orch, _ := p2.orchQ.List(); len(orch) != 0 {
				t.Fatalf("a foreign claim's completion was published: %v", orch)
			}
		})
	}
}
