package fsqueue

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// readHookFS is an FS without a directory watch (it does not implement
// vfs.Watcher: the polling fallback of a system or file system without
// inotify) that runs onRead once a ReadFile of a path ending in suffix has
// read the file, before it returns.
type readHookFS struct {
	vfs.FS
	mu     sync.Mutex
	suffix string
	onRead func()
}

func (h *readHookFS) ReadFile(name string) ([]byte, error) {
	data, err := h.FS.ReadFile(name)
	h.mu.Lock()
	f := h.onRead
	if f != nil && strings.HasSuffix(name, h.suffix) {
		h.onRead = nil
	} else {
		f = nil
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return data, err
}

// TestOwnClaimWriteRacingPrefilterReadLeavesNoDeferral: a deferral is
// dropped when the message's claim is written through this Queue, also
// when the write lands between the pre-filter's read of the claim and the
// deferral it learns from what it read (deferrals.learn keeps it only if
// no claim was written or removed since the read began). Without a watch
// of claims/, the pre-filter deferred from the old claim after the write
// had dropped nothing, and the claimable message stayed hidden for the old
// delay (an hour here). Found by review.
func TestOwnClaimWriteRacingPrefilterReadLeavesNoDeferral(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	other, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk, VolatileClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hfs := &readHookFS{FS: vfs.NoSync(vfs.OS{})}
	q, err := Open(hfs, dir, Options{Clock: clk, VolatileClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	name, err := other.Enqueue(Message{Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Another process abandoned it with a one-hour delay.
	later := clk.Now().Add(time.Hour).UnixMilli()
	if err := other.WithClaim(ctx, name, func(g *ClaimGuard) error {
		return g.Write(Claim{Attempt: 1, VisibleAtMs: later})
	}); err != nil {
		t.Fatal(err)
	}
	// While q's pre-filter reads that claim, a goroutine of q's process
	// takes the delay back through q (the message is visible at once).
	hfs.mu.Lock()
	hfs.suffix = filepath.Join("claims", name+".json")
	hfs.onRead = func() {
		if err := q.WithClaim(ctx, name, func(g *ClaimGuard) error {
			return g.Write(Claim{Attempt: 1})
		}); err != nil {
			t.Error(err)
		}
	}
	hfs.mu.Unlock()
	if c, err := q.ClaimNext(ctx, "w", time.Minute, nil); err != nil {
		t.Fatal(err)
	} else if c != nil {
		t.Fatalf("the first pass claimed %s: the test does not test what it says", c.Message.Name)
	}
	if c, exists, err := q.PeekClaim(name); err != nil || !exists || c.VisibleAtMs != 0 || c.Token != "" {
		t.Fatalf("claim = %+v, %v, %v; want the delay taken back, no holder", c, exists, err)
	}
	// The clock has not moved: the message is claimable now.
	c, err := q.ClaimNext(ctx, "w", time.Minute, nil)
	if err != nil || c == nil || c.Message.Name != name {
		q.deferred.mu.Lock()
		at, deferred := q.deferred.m[parseNameMust(t, name)]
		q.deferred.mu.Unlock()
		t.Fatalf("ClaimNext after this Queue wrote a claim that makes %s visible now = %v, %v; want it (deferred %v until %d ms from now: hidden for the old delay)",
			name, c, err, deferred, at-clk.Now().UnixMilli())
	}
}

func parseNameMust(t *testing.T, name string) Entry {
	t.Helper()
	e, ok := parseName(name)
	if !ok {
		t.Fatalf("bad name %q", name)
	}
	return e
}
