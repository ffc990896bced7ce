//go:build linux

package fsqueue_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

func openVolatile(t testing.TB, fsys vfs.FS, dir string, clk clock.Clock) *fsqueue.Queue {
	t.Helper()
	q, err := fsqueue.Open(fsys, dir, fsqueue.Options{Clock: clk, VolatileClaims: true, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

// TestClaimsWrittenInPlace: with VolatileClaims a message's claim keeps one
// inode through every change (claim, renew, abandon, claim again, a write
// with data), padded to 512 bytes, and every version reads back; a durable
// queue replaces the file (a new inode) at every change.
func TestClaimsWrittenInPlace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		volatile  bool
		wantSame  bool
		wantBlock bool
	}{
		{"volatile claims: in place", true, true, true},
		{"durable claims: atomic replace", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			clk := clock.NewManual(time.Now())
			fsys := vfs.NoFollow(dir, vfs.Perm{})
			q, err := fsqueue.Open(fsys, dir, fsqueue.Options{Clock: clk, VolatileClaims: tc.volatile})
			if err != nil {
				t.Fatal(err)
			}
			name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
			path := filepath.Join(dir, "claims", name+".json")
			// Each version's file is kept open, so that its inode number
			// cannot be reused by a later file.
			var files []fs.FileInfo
			check := func(step string, want fsqueue.Claim) {
				t.Helper()
				f, err := os.Open(path)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				t.Cleanup(func() { f.Close() })
				fi, err := f.Stat()
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				files = append(files, fi)
				if tc.wantBlock && fi.Size()%vfs.InPlaceBlock != 0 {
					t.Fatalf("%s: claim file is %d bytes, want a multiple of %d", step, fi.Size(), vfs.InPlaceBlock)
				}
				got, ok, err := q.PeekClaim(name)
				if err != nil || !ok || got.Token != want.Token || got.LockedUntilMs != want.LockedUntilMs ||
					got.Attempt != want.Attempt || string(got.Data) != string(want.Data) {
					t.Fatalf("%s: claim = %+v, %v, %v; want %+v", step, got, ok, err, want)
				}
			}
			c := mustClaim(t, q, time.Minute, nil)
			check("claim", c.Claim)
			r, err := q.Renew(ctx, c.Claim.Token, 2*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			check("renew", r)
			if err := q.Abandon(ctx, c.Claim.Token, 0, false); err != nil {
				t.Fatal(err)
			}
			check("abandon", fsqueue.Claim{Attempt: 1})
			c2 := mustClaim(t, q, time.Minute, nil)
			check("claim again", c2.Claim)
			withData := c2.Claim
			withData.Data = json.RawMessage(`{"mark":"0123456789abcdef0123456789abcdef"}`)
			if err := q.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error { return g.Write(withData) }); err != nil {
				t.Fatal(err)
			}
			check("write with data", withData)
			for i, fi := range files[1:] {
				if same := os.SameFile(fi, files[i]); same != tc.wantSame {
					t.Fatalf("change %d: same file as before = %v, want %v", i+1, same, tc.wantSame)
				}
			}
		})
	}
}

// TestInPlaceClaimSeenByOtherProcess: a claim another process changes in
// place (an abandon: same inode, same size, nothing added to or removed
// from claims/) is seen by this process's next ClaimNext, although its
// pre-filter cache had the claim as held and claims/ had not changed for
// longer than the cache's margin: the writer touches claims/. Without the
// touch the message stays skipped.
func TestInPlaceClaimSeenByOtherProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(dir string) vfs.FS
	}{
		{"memfs", func(string) vfs.FS { return vfs.NewStrictMem() }},
		{"os", func(string) vfs.FS { return vfs.OS{} }},
		{"nofollow", func(dir string) vfs.FS { return vfs.NoFollow(dir, vfs.Perm{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			fsys := tc.fs(dir)
			if err := fsys.MkdirAll(dir, vfs.DirPerm); err != nil {
				t.Fatal(err)
			}
			clk := clock.NewManual(time.Now())
			q1 := openVolatile(t, fsys, dir, clk)
			q2 := openVolatile(t, fsys, dir, clk) // another process: its own caches
			name := enqueue(t, q1, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
			c := mustClaim(t, q1, time.Minute, nil)
			time.Sleep(70 * time.Millisecond) // past the caches' mtime margin
			mustNotClaim(t, q2, nil)          // caches the claim as held
			mustNotClaim(t, q2, nil)          // now from the cache alone
			if err := q1.Abandon(ctx, c.Claim.Token, 0, true); err != nil {
				t.Fatal(err)
			}
			got := mustClaim(t, q2, time.Minute, nil)
			if got.Message.Name != name {
				t.Fatalf("claimed %s, want %s", got.Message.Name, name)
			}
		})
	}
}

// TestClaimReadAcrossADrainIsNotCached: with a watch of claims/, a claim
// read while another goroutine of the process drained the watch - and with
// it the event of a write that overlapped the read - must not be cached: the
// cache would keep the old claim with no event left to drop it. Here the
// other process abandons the message while this process's pass is between
// reading its held claim and caching it, and a second pass of this process
// drains the abandon's event meanwhile; the next pass must claim the
// message. Caching regardless of the drain (c.gen ignored) leaves it skipped.
func TestClaimReadAcrossADrainIsNotCached(t *testing.T) {
	dir := t.TempDir()
	if _, ok := vfs.WatchDirContents(vfs.OS{}, dir); !ok {
		t.Skip("no directory watch on this OS")
	}
	ctx := context.Background()
	fsys := vfs.NoFollow(dir, vfs.Perm{})
	clk := clock.NewManual(time.Now())
	q1 := openVolatile(t, fsys, dir, clk)
	q2 := openVolatile(t, fsys, dir, clk) // another process: its own caches
	name := enqueue(t, q1, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
	c := mustClaim(t, q1, time.Minute, nil)
	fired := false
	undo := fsqueue.SetClaimReadHook(func(read string) {
		if fired || read != name {
			return
		}
		fired = true
		if err := q1.Abandon(ctx, c.Claim.Token, 0, true); err != nil {
			t.Error(err)
		}
		mustNotClaim(t, q2, func(fsqueue.Entry, *fsqueue.Claim) bool { return false }) // drains the abandon's event
	})
	mustNotClaim(t, q2, nil) // reads the held claim; the hook runs between read and cache
	undo()
	if !fired {
		t.Fatal("the hook did not run: the claim was not read through the watched cache")
	}
	got := mustClaim(t, q2, time.Minute, nil)
	if got.Message.Name != name {
		t.Fatalf("claimed %s, want %s", got.Message.Name, name)
	}
}

// coarseFS reports modification and change times truncated to g, as a file
// system with coarse timestamps does (ext4 without multigrain timestamps:
// one kernel tick).
type coarseFS struct {
	vfs.FS
	g time.Duration
}

func (c coarseFS) Lstat(name string) (fs.FileInfo, error) {
	fi, err := c.FS.Lstat(name)
	if err != nil {
		return nil, err
	}
	return coarseInfo{fi, c.g}, nil
}

func (c coarseFS) Stat(name string) (fs.FileInfo, error) {
	fi, err := c.FS.Stat(name)
	if err != nil {
		return nil, err
	}
	return coarseInfo{fi, c.g}, nil
}

type coarseInfo struct {
	fs.FileInfo
	g time.Duration
}

func (i coarseInfo) ModTime() time.Time { return i.FileInfo.ModTime().Truncate(i.g) }

func (i coarseInfo) Sys() any {
	st, ok := i.FileInfo.Sys().(*syscall.Stat_t)
	if !ok {
		return i.FileInfo.Sys()
	}
	c := *st
	ct := time.Unix(st.Ctim.Unix()).Truncate(i.g)
	c.Ctim = syscall.NsecToTimespec(ct.UnixNano())
	mt := time.Unix(st.Mtim.Unix()).Truncate(i.g)
	c.Mtim = syscall.NsecToTimespec(mt.UnixNano())
	return &c
}

// TestInPlaceClaimWithinOneTimestampTick: on a file system whose timestamps
// are coarser than two writes (40 ms ticks here, under the caches' 50 ms
// margin), a claim rewritten in place in the tick in which another process
// read it keeps its inode, size, mtime and ctime; that process must not
// trust its cached copy (it read the content less than the margin after the
// file's last change), or it skips a message that is free.
func TestInPlaceClaimWithinOneTimestampTick(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fsys := coarseFS{vfs.NoFollow(dir, vfs.Perm{}), 40 * time.Millisecond}
	clk := clock.NewManual(time.Now())
	q1 := openVolatile(t, fsys, dir, clk)
	q2 := openVolatile(t, fsys, dir, clk)
	for i := range 10 {
		enqueue(t, q1, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
		c := mustClaim(t, q1, time.Minute, nil)
		mustNotClaim(t, q2, nil) // reads the held claim right after it was written
		if err := q1.Abandon(ctx, c.Claim.Token, 0, true); err != nil {
			t.Fatal(err)
		}
		got, err := q2.ClaimNext(ctx, "owner", time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || got.Message.Name != c.Message.Name {
			t.Fatalf("round %d: ClaimNext = %+v, want the abandoned %s", i, got, c.Message.Name)
		}
		if err := q2.Delete(got.Message.Name); err != nil {
			t.Fatal(err)
		}
	}
}
