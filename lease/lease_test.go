package lease_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/google/uuid"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// osfs is the real file system, for test setup.
var osfs vfs.FS = vfs.OS{}

// t0 is the manual clock's start; nowMs is t0 in Unix ms.
var (
	t0    = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	nowMs = clock.Ms(t0)
)

type fixture struct {
	s         *lease.Store
	clk       *clock.Manual
	dir       string
	lockPath  string
	leasePath string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	clk := clock.NewManual(t0)
	return &fixture{
		s:         lease.NewStore(vfs.OS{}, clk),
		clk:       clk,
		dir:       dir,
		lockPath:  filepath.Join(dir, "inst", "lock"),
		leasePath: filepath.Join(dir, "inst", "lease.json"),
	}
}

func (f *fixture) lock(t *testing.T) *lease.Guard {
	t.Helper()
	g, err := f.s.Lock(context.Background(), f.lockPath, f.leasePath)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return g
}

// write replaces the lease file with l under the flock.
func (f *fixture) write(t *testing.T, l lease.Lease) {
	t.Helper()
	g := f.lock(t)
	defer g.Unlock()
	if err := g.Write(l); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// writeRaw replaces the lease file with arbitrary bytes.
func (f *fixture) writeRaw(t *testing.T, b []byte) {
	t.Helper()
	if err := osfs.MkdirAll(filepath.Dir(f.leasePath), vfs.DirPerm); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFile(vfs.OS{}, f.leasePath, b); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) raw(t *testing.T) []byte {
	t.Helper()
	b, err := osfs.ReadFile(f.leasePath)
	if err != nil && !vfs.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

// read returns the lease file under the flock.
func (f *fixture) read(t *testing.T) (lease.Lease, bool) {
	t.Helper()
	g := f.lock(t)
	defer g.Unlock()
	l, ok, err := g.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return l, ok
}

func (f *fixture) acquire(t *testing.T, owner string, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := f.s.Acquire(context.Background(), f.lockPath, f.leasePath, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", owner, err)
	}
	return l
}

func checkToken(t *testing.T, tok string) {
	t.Helper()
	u, err := uuid.Parse(tok)
	if err != nil || u.Version() != 4 || u.String() != tok {
		t.Fatalf("token %q is not a canonical uuid v4 (err %v)", tok, err)
	}
}

func equalLease(a, b lease.Lease) bool {
	return a.Token == b.Token && a.Owner == b.Owner && a.Fence == b.Fence &&
		a.AcquiredAtMs == b.AcquiredAtMs && a.ExpiresAtMs == b.ExpiresAtMs && bytes.Equal(a.Data, b.Data)
}

func TestHeldAt(t *testing.T) {
	tests := []struct {
		name string
		l    lease.Lease
		now  int64
		want bool
	}{
		{"zero", lease.Lease{}, 0, false},
		{"released", lease.Lease{Token: "", ExpiresAtMs: 100}, 50, false},
		{"valid", lease.Lease{Token: "x", ExpiresAtMs: 100}, 99, true},
		{"expires now", lease.Lease{Token: "x", ExpiresAtMs: 100}, 100, false},
		{"expired", lease.Lease{Token: "x", ExpiresAtMs: 100}, 101, false},
	}
	for _, tt := range tests {
		if got := tt.l.HeldAt(tt.now); got != tt.want {
			t.Errorf("%s: HeldAt(%d) = %v, want %v", tt.name, tt.now, got, tt.want)
		}
	}
}

func TestAcquire(t *testing.T) {
	data := json.RawMessage(`{"batch":["a","b"]}`)
	const ttl = 30 * time.Second
	tests := []struct {
		name      string
		old       *lease.Lease // written before Acquire, if set
		raw       []byte       // written raw before Acquire, if set
		minFence  uint64
		wantErr   error
		wantFence uint64
		wantData  json.RawMessage
	}{
		{name: "no lease file", wantFence: 1},
		{name: "no lease file, minFence", minFence: 7, wantFence: 8},
		{name: "released", old: &lease.Lease{Fence: 4, Data: data}, wantFence: 5, wantData: data},
		{name: "expired", old: &lease.Lease{Token: "old", Owner: "a", Fence: 4, AcquiredAtMs: nowMs - 60000, ExpiresAtMs: nowMs - 1, Data: data}, wantFence: 5, wantData: data},
		{name: "expires exactly now", old: &lease.Lease{Token: "old", Owner: "a", Fence: 4, ExpiresAtMs: nowMs}, wantFence: 5},
		{name: "held", old: &lease.Lease{Token: "old", Owner: "a", Fence: 4, ExpiresAtMs: nowMs + 1}, wantErr: lease.ErrHeld},
		{name: "held, minFence does not matter", old: &lease.Lease{Token: "old", Owner: "a", Fence: 4, ExpiresAtMs: nowMs + 1}, minFence: 100, wantErr: lease.ErrHeld},
		{name: "minFence below old fence", old: &lease.Lease{Fence: 9}, minFence: 3, wantFence: 10},
		{name: "minFence above old fence", old: &lease.Lease{Fence: 3}, minFence: 9, wantFence: 10},
		{name: "corrupt: truncated JSON", raw: []byte(`{"token":"x","fence":40`), minFence: 5, wantFence: 6},
		{name: "corrupt: empty file", raw: []byte{}, wantFence: 1},
		{name: "corrupt: JSON null", raw: []byte("null\n"), wantFence: 1},
		{name: "corrupt: wrong field type", raw: []byte(`{"fence":"nine"}`), minFence: 2, wantFence: 3},
		{name: "corrupt: trailing garbage", raw: []byte(`{"fence":9} x`), wantFence: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.old != nil {
				f.write(t, *tt.old)
			}
			if tt.raw != nil {
				f.writeRaw(t, tt.raw)
			}
			before := f.raw(t)
			g := f.lock(t)
			got, err := g.Acquire("me", ttl, tt.minFence)
			if uerr := g.Unlock(); uerr != nil {
				t.Fatal(uerr)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Acquire err = %v, want %v", err, tt.wantErr)
				}
				if after := f.raw(t); !bytes.Equal(before, after) {
					t.Fatalf("failed Acquire changed the lease file:\n%s\n→\n%s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			checkToken(t, got.Token)
			want := lease.Lease{Token: got.Token, Owner: "me", Fence: tt.wantFence,
				AcquiredAtMs: nowMs, ExpiresAtMs: nowMs + ttl.Milliseconds(), Data: tt.wantData}
			if !equalLease(got, want) {
				t.Fatalf("Acquire = %+v, want %+v", got, want)
			}
			onDisk, ok := f.read(t)
			if !ok || !equalLease(onDisk, got) {
				t.Fatalf("lease file = %+v (exists %v), want %+v", onDisk, ok, got)
			}
		})
	}
}

func TestAcquireRejectsTinyTTL(t *testing.T) {
	f := newFixture(t)
	for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond} {
		if _, err := f.s.Acquire(context.Background(), f.lockPath, f.leasePath, "me", ttl); err == nil {
			t.Errorf("Acquire with ttl %v succeeded", ttl)
		}
	}
	if _, ok := f.read(t); ok {
		t.Fatal("a rejected Acquire wrote a lease file")
	}
}

// TestFenceMonotonic changes holders many ways and checks that the fence
// increments on every change of holder and never moves otherwise.
func TestFenceMonotonic(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const ttl = 10 * time.Second
	var fence uint64
	for i := range 30 {
		l := f.acquire(t, "owner", ttl)
		if l.Fence != fence+1 {
			t.Fatalf("step %d: fence %d after %d, want +1", i, l.Fence, fence)
		}
		fence = l.Fence
		f.clk.Advance(time.Second)
		r, err := f.s.Renew(ctx, f.lockPath, f.leasePath, l.Token, ttl)
		if err != nil || r.Fence != fence {
			t.Fatalf("step %d: Renew fence %d err %v, want %d", i, r.Fence, err, fence)
		}
		if _, err := f.s.Acquire(ctx, f.lockPath, f.leasePath, "other", ttl); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("step %d: Acquire of a held lease: %v", i, err)
		}
		switch i % 3 {
		case 0: // released
			if err := f.s.Release(ctx, f.lockPath, f.leasePath, l.Token); err != nil {
				t.Fatal(err)
			}
		case 1: // expired
			f.clk.Advance(ttl)
		case 2: // file reverted to an older version (power loss with NoSync):
			// the caller's minFence keeps the fence monotonic.
			f.write(t, lease.Lease{Fence: 1})
			g := f.lock(t)
			nl, err := g.Acquire("owner", ttl, fence)
			g.Unlock()
			if err != nil || nl.Fence != fence+1 {
				t.Fatalf("step %d: Acquire with minFence: fence %d err %v, want %d", i, nl.Fence, err, fence+1)
			}
			fence = nl.Fence
			f.clk.Advance(ttl)
		}
		if l, _ := f.read(t); l.Fence != fence {
			t.Fatalf("step %d: fence on disk %d, want %d", i, l.Fence, fence)
		}
	}
}

func TestRenew(t *testing.T) {
	const ttl = 10 * time.Second
	ctx := context.Background()
	tests := []struct {
		name string
		// prep runs after "holder" acquired at t0 with ttl; it returns the
		// token to renew with.
		prep    func(t *testing.T, f *fixture, holder lease.Lease) string
		wantErr error
	}{
		{"holder, halfway", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(5 * time.Second)
			return h.Token
		}, nil},
		{"holder, last millisecond", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(ttl - time.Millisecond)
			return h.Token
		}, nil},
		{"holder, expires exactly now", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(ttl)
			return h.Token
		}, lease.ErrExpired},
		{"holder, long expired", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(time.Hour)
			return h.Token
		}, lease.ErrExpired},
		{"stale token after takeover", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(ttl)
			f.acquire(t, "thief", ttl)
			return h.Token
		}, lease.ErrNotHolder},
		{"after release", func(t *testing.T, f *fixture, h lease.Lease) string {
			if err := f.s.Release(ctx, f.lockPath, f.leasePath, h.Token); err != nil {
				t.Fatal(err)
			}
			return h.Token
		}, lease.ErrNotHolder},
		{"empty token on released lease", func(t *testing.T, f *fixture, h lease.Lease) string {
			if err := f.s.Release(ctx, f.lockPath, f.leasePath, h.Token); err != nil {
				t.Fatal(err)
			}
			return ""
		}, lease.ErrNotHolder},
		{"empty token on held lease", func(t *testing.T, f *fixture, h lease.Lease) string { return "" }, lease.ErrNotHolder},
		{"unknown token", func(t *testing.T, f *fixture, h lease.Lease) string { return uuid.NewString() }, lease.ErrNotHolder},
		{"lease file gone", func(t *testing.T, f *fixture, h lease.Lease) string {
			if err := os.Remove(f.leasePath); err != nil {
				t.Fatal(err)
			}
			return h.Token
		}, lease.ErrNotHolder},
		{"lease file corrupt", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.writeRaw(t, []byte("{garbage"))
			return h.Token
		}, lease.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			h := f.acquire(t, "holder", ttl)
			tok := tt.prep(t, f, h)
			before := f.raw(t)
			now := clock.Ms(f.clk.Now())
			got, err := f.s.Renew(ctx, f.lockPath, f.leasePath, tok, ttl)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Renew err = %v, want %v", err, tt.wantErr)
				}
				if errors.Is(tt.wantErr, lease.ErrCorrupt) && !errors.Is(err, lease.ErrNotHolder) {
					t.Fatalf("Renew on a corrupt file = %v, want it to wrap ErrNotHolder too", err)
				}
				if after := f.raw(t); !bytes.Equal(before, after) {
					t.Fatal("failed Renew changed the lease file")
				}
				return
			}
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			want := h
			want.ExpiresAtMs = now + ttl.Milliseconds()
			if !equalLease(got, want) {
				t.Fatalf("Renew = %+v, want %+v", got, want)
			}
			if onDisk, _ := f.read(t); !equalLease(onDisk, want) {
				t.Fatalf("lease file = %+v, want %+v", onDisk, want)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	const ttl = 10 * time.Second
	ctx := context.Background()
	data := json.RawMessage(`{"q":[1,2,3]}`)
	tests := []struct {
		name    string
		prep    func(t *testing.T, f *fixture, holder lease.Lease) string
		wantErr error
	}{
		{"holder", func(t *testing.T, f *fixture, h lease.Lease) string { return h.Token }, nil},
		{"holder, expired but not taken over", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(ttl + time.Hour)
			return h.Token
		}, nil},
		{"stale token after takeover", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.clk.Advance(ttl)
			f.acquire(t, "thief", ttl)
			return h.Token
		}, lease.ErrNotHolder},
		{"twice", func(t *testing.T, f *fixture, h lease.Lease) string {
			if err := f.s.Release(ctx, f.lockPath, f.leasePath, h.Token); err != nil {
				t.Fatal(err)
			}
			return h.Token
		}, lease.ErrNotHolder},
		{"empty token on released lease", func(t *testing.T, f *fixture, h lease.Lease) string {
			if err := f.s.Release(ctx, f.lockPath, f.leasePath, h.Token); err != nil {
				t.Fatal(err)
			}
			return ""
		}, lease.ErrNotHolder},
		{"unknown token", func(t *testing.T, f *fixture, h lease.Lease) string { return uuid.NewString() }, lease.ErrNotHolder},
		{"lease file gone", func(t *testing.T, f *fixture, h lease.Lease) string {
			if err := os.Remove(f.leasePath); err != nil {
				t.Fatal(err)
			}
			return h.Token
		}, lease.ErrNotHolder},
		{"lease file corrupt", func(t *testing.T, f *fixture, h lease.Lease) string {
			f.writeRaw(t, []byte("]"))
			return h.Token
		}, lease.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(t, lease.Lease{Fence: 41, Data: data})
			h := f.acquire(t, "holder", ttl)
			tok := tt.prep(t, f, h)
			before := f.raw(t)
			g := f.lock(t)
			got, err := g.Release(tok)
			g.Unlock()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Release err = %v, want %v", err, tt.wantErr)
				}
				if after := f.raw(t); !bytes.Equal(before, after) {
					t.Fatal("failed Release changed the lease file")
				}
				return
			}
			if err != nil {
				t.Fatalf("Release: %v", err)
			}
			want := lease.Lease{Fence: 42, Data: data}
			if !equalLease(got, want) {
				t.Fatalf("Release = %+v, want %+v", got, want)
			}
			if onDisk, _ := f.read(t); !equalLease(onDisk, want) {
				t.Fatalf("lease file = %+v, want %+v", onDisk, want)
			}
			// A released lease is free at once, with the next fence.
			if n := f.acquire(t, "next", ttl); n.Fence != 43 || !bytes.Equal(n.Data, data) {
				t.Fatalf("Acquire after Release = %+v", n)
			}
		})
	}
}

// TestTakenOverHolderIsFenced: a holder whose lease was taken over cannot
// renew or release, and its attempts leave the new holder's lease untouched.
func TestTakenOverHolderIsFenced(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.acquire(t, "a", 10*time.Second)
	f.clk.Advance(11 * time.Second)
	b := f.acquire(t, "b", 10*time.Second)
	if b.Fence != a.Fence+1 || b.Token == a.Token {
		t.Fatalf("takeover: a=%+v b=%+v", a, b)
	}
	if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, time.Minute); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("stale Renew: %v", err)
	}
	if err := f.s.Release(ctx, f.lockPath, f.leasePath, a.Token); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("stale Release: %v", err)
	}
	// Even after b's lease expires, a's token stays dead.
	f.clk.Advance(time.Hour)
	if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, time.Minute); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("stale Renew after b expired: %v", err)
	}
	if got, _ := f.read(t); !equalLease(got, b) {
		t.Fatalf("lease = %+v, want b's %+v", got, b)
	}
	if err := f.s.Release(ctx, f.lockPath, f.leasePath, b.Token); err != nil {
		t.Fatalf("b's Release of its expired lease: %v", err)
	}
}

func TestDataPreserved(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	data := json.RawMessage(`{"batch":["m1","m2"],"n":3}`)
	f.write(t, lease.Lease{Fence: 2, Data: data})
	check := func(step string, l lease.Lease) {
		t.Helper()
		if !bytes.Equal(l.Data, data) {
			t.Fatalf("%s: returned data %s", step, l.Data)
		}
		if d, _ := f.read(t); !bytes.Equal(d.Data, data) {
			t.Fatalf("%s: data on disk %s", step, d.Data)
		}
	}
	a := f.acquire(t, "a", time.Minute)
	check("acquire", a)
	r, err := f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	check("renew", r)
	g := f.lock(t)
	rel, err := g.Release(a.Token)
	g.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	check("release", rel)
	b := f.acquire(t, "b", time.Minute)
	check("acquire after release", b)
	f.clk.Advance(2 * time.Minute)
	c := f.acquire(t, "c", time.Minute)
	check("acquire after expiry", c)

	// The caller replaces data with Write.
	g = f.lock(t)
	c.Data = json.RawMessage(`{"batch":[]}`)
	if err := g.Write(c); err != nil {
		t.Fatal(err)
	}
	g.Unlock()
	if d, _ := f.read(t); string(d.Data) != `{"batch":[]}` {
		t.Fatalf("replaced data = %s", d.Data)
	}
}

func TestFileFormat(t *testing.T) {
	f := newFixture(t)
	l := f.acquire(t, "worker-1", time.Minute)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(f.raw(t), &m); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"acquired_at_ms", "expires_at_ms", "fence", "owner", "token"}; !slices.Equal(keys, want) {
		t.Fatalf("keys without data = %v, want %v", keys, want)
	}
	if string(m["token"]) != `"`+l.Token+`"` || string(m["fence"]) != "1" || string(m["owner"]) != `"worker-1"` {
		t.Fatalf("file = %s", f.raw(t))
	}
	f.write(t, lease.Lease{Token: "t", Fence: 3, Data: json.RawMessage(`{ "x" : 1 }`)})
	m = nil
	if err := json.Unmarshal(f.raw(t), &m); err != nil {
		t.Fatal(err)
	}
	if string(m["data"]) != `{"x":1}` {
		t.Fatalf("data = %s", m["data"])
	}
	// Invalid data is refused rather than written.
	g := f.lock(t)
	defer g.Unlock()
	if err := g.Write(lease.Lease{Data: json.RawMessage(`{bad`)}); err == nil {
		t.Fatal("Write accepted invalid data")
	}
}

func TestCorruptLeaseFile(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.writeRaw(t, []byte(`{"token":"abc","fence":`))
	g := f.lock(t)
	_, exists, err := g.Read()
	if !errors.Is(err, lease.ErrCorrupt) || !exists {
		t.Fatalf("Read = exists %v, err %v; want ErrCorrupt", exists, err)
	}
	g.Unlock()
	if _, _, err := f.s.Inspect(ctx, f.lockPath, f.leasePath); !errors.Is(err, lease.ErrCorrupt) {
		t.Fatalf("Inspect err = %v, want ErrCorrupt", err)
	}
	l := f.acquire(t, "rescuer", time.Minute)
	if l.Fence != 1 {
		t.Fatalf("fence after corrupt takeover = %d, want 1", l.Fence)
	}
	if got, ok := f.read(t); !ok || !equalLease(got, l) {
		t.Fatalf("lease after takeover = %+v", got)
	}
}

func TestInspect(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, ok, err := f.s.Inspect(ctx, f.lockPath, f.leasePath); ok || err != nil {
		t.Fatalf("Inspect of missing lease = %v, %v", ok, err)
	}
	l := f.acquire(t, "a", time.Minute)
	// Inspect does not need the flock: it works while someone holds it.
	g := f.lock(t)
	got, ok, err := f.s.Inspect(ctx, f.lockPath, f.leasePath)
	g.Unlock()
	if err != nil || !ok || !equalLease(got, l) {
		t.Fatalf("Inspect = %+v, %v, %v", got, ok, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := f.s.Inspect(cctx, f.lockPath, f.leasePath); !errors.Is(err, context.Canceled) {
		t.Fatalf("Inspect with canceled ctx: %v", err)
	}
}

// lockNotifyFS reports every Lock call before it starts waiting.
type lockNotifyFS struct {
	vfs.FS
	entered chan<- struct{}
}

func (n lockNotifyFS) Lock(ctx context.Context, name string) (vfs.Unlocker, error) {
	n.entered <- struct{}{}
	return n.FS.Lock(ctx, name)
}

// TestClockReadAfterFlock: a lease is computed from the time after the flock
// was obtained, not before waiting for it (duroxide issue #46).
func TestClockReadAfterFlock(t *testing.T) {
	f := newFixture(t)
	f.acquire(t, "old", 30*time.Minute)
	holder := f.lock(t)
	entered := make(chan struct{}, 1)
	waiter := lease.NewStore(lockNotifyFS{FS: vfs.OS{}, entered: entered}, f.clk)
	type result struct {
		l   lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(context.Background(), f.lockPath, f.leasePath, "new", 10*time.Minute)
		done <- result{l, err}
	}()
	<-entered // the waiter is about to wait for the flock
	// While it waits, the old lease expires. A time read before the wait would
	// see the old lease held (ErrHeld) or build a lease that expires too soon.
	f.clk.Advance(time.Hour)
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Acquire after waiting: %v", r.err)
	}
	if want := nowMs + time.Hour.Milliseconds(); r.l.AcquiredAtMs != want || r.l.ExpiresAtMs != want+(10*time.Minute).Milliseconds() {
		t.Fatalf("lease times %d..%d, want from %d", r.l.AcquiredAtMs, r.l.ExpiresAtMs, want)
	}
}

func TestLockContextAndTryLock(t *testing.T) {
	f := newFixture(t)
	g := f.lock(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.s.Lock(ctx, f.lockPath, f.leasePath); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with canceled ctx while held: %v", err)
	}
	if _, err := f.s.Acquire(ctx, f.lockPath, f.leasePath, "x", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Store.Acquire with canceled ctx while held: %v", err)
	}
	if g2, ok, err := f.s.TryLock(f.lockPath, f.leasePath); ok || err != nil || g2 != nil {
		t.Fatalf("TryLock while held = %v, %v, %v", g2, ok, err)
	}
	if err := g.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := g.Unlock(); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
	if _, _, err := g.Read(); err == nil {
		t.Fatal("Read after Unlock succeeded")
	}
	if _, err := g.Acquire("x", time.Minute, 0); err == nil {
		t.Fatal("Acquire after Unlock succeeded")
	}
	if err := g.Write(lease.Lease{}); err == nil {
		t.Fatal("Write after Unlock succeeded")
	}
	if _, ok := f.read(t); ok {
		t.Fatal("operations after Unlock wrote a lease file")
	}
	g2, ok, err := f.s.TryLock(f.lockPath, f.leasePath)
	if !ok || err != nil {
		t.Fatalf("TryLock after Unlock = %v, %v", ok, err)
	}
	g2.Unlock()
}

func TestPaths(t *testing.T) {
	dir := t.TempDir()
	s := lease.NewStore(vfs.OS{}, clock.NewManual(t0))
	ctx := context.Background()
	lockPath := filepath.Join(dir, "a", "b", "lock")
	leasePath := filepath.Join(dir, "c", "d", "lease.json")
	if _, err := s.Acquire(ctx, lockPath, leasePath, "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{lockPath, leasePath} {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "a"))
	if err != nil || fi.Mode().Perm() != vfs.DirPerm {
		t.Fatalf("created dir: %v, %v", fi.Mode(), err)
	}
	if _, err := s.Lock(ctx, lockPath, lockPath); err == nil {
		t.Fatal("Lock accepted the same path for lock and lease")
	}
	if _, _, err := s.TryLock(filepath.Join(dir, "x", "..", "lf"), filepath.Join(dir, "lf")); err == nil {
		t.Fatal("TryLock accepted the same path for lock and lease")
	}
}

// TestDurabilityCalls: with a syncing FS every lease change fsyncs the new
// file and the directory once.
func TestDurabilityCalls(t *testing.T) {
	dir := t.TempDir()
	lockPath, leasePath := filepath.Join(dir, "lock"), filepath.Join(dir, "lease.json")
	cfs := vfs.Counting(vfs.OS{})
	s := lease.NewStore(cfs, clock.NewManual(t0))
	ctx := context.Background()
	before := cfs.Counts()
	l, err := s.Acquire(ctx, lockPath, leasePath, "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfs.Counts().Sub(before); c.FileSyncs != 1 || c.DirSyncs != 1 {
		t.Fatalf("Acquire syncs = %+v, want 1 file + 1 dir", c)
	}
	before = cfs.Counts()
	if err := s.Release(ctx, lockPath, leasePath, l.Token); err != nil {
		t.Fatal(err)
	}
	if c := cfs.Counts().Sub(before); c.FileSyncs != 1 || c.DirSyncs != 1 {
		t.Fatalf("Release syncs = %+v, want 1 file + 1 dir", c)
	}
	// A failed operation writes nothing.
	before = cfs.Counts()
	if err := s.Release(ctx, lockPath, leasePath, l.Token); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatal(err)
	}
	if c := cfs.Counts().Sub(before); c.Total() != 0 {
		t.Fatalf("failed Release syncs = %+v", c)
	}
	// NoSync: same semantics, no fsyncs.
	ns := vfs.Counting(vfs.NoSync(vfs.OS{}))
	s = lease.NewStore(ns, clock.NewManual(t0.Add(time.Hour)))
	if _, err := s.Acquire(ctx, lockPath, leasePath, "y", time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestLockFileNeverRemoved runs every operation but Reclaim, successful or not, and checks
// that the lock file keeps its identity (same inode) and that no temporary
// files are left behind.
func TestLockFileNeverRemoved(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	g := f.lock(t)
	g.Unlock()
	orig, err := os.Stat(f.lockPath)
	if err != nil {
		t.Fatal(err)
	}
	a := f.acquire(t, "a", time.Minute)
	f.s.Acquire(ctx, f.lockPath, f.leasePath, "b", time.Minute) // ErrHeld
	f.s.Renew(ctx, f.lockPath, f.leasePath, a.Token, time.Minute)
	f.s.Renew(ctx, f.lockPath, f.leasePath, "nope", time.Minute)
	f.s.Release(ctx, f.lockPath, f.leasePath, a.Token)
	f.s.Release(ctx, f.lockPath, f.leasePath, a.Token)
	f.s.Inspect(ctx, f.lockPath, f.leasePath)
	f.writeRaw(t, []byte("junk"))
	f.acquire(t, "c", time.Minute)
	f.clk.Advance(2 * time.Minute)
	f.acquire(t, "d", time.Minute)
	if g, ok, _ := f.s.TryLock(f.lockPath, f.leasePath); ok {
		g.Write(lease.Lease{Fence: 99})
		g.Unlock()
		g.Unlock()
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	f.s.Lock(cctx, f.lockPath, f.leasePath)
	now, err := os.Stat(f.lockPath)
	if err != nil {
		t.Fatalf("lock file gone: %v", err)
	}
	if !os.SameFile(orig, now) {
		t.Fatal("lock file was replaced")
	}
	if now.Size() != 0 {
		t.Fatalf("lock file has %d bytes of content", now.Size())
	}
	names, err := osfs.ReadDirNames(filepath.Dir(f.lockPath))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"lease.json", "lock"}; !slices.Equal(names, want) {
		t.Fatalf("directory holds %v, want %v", names, want)
	}
}

// TestGuardSurvivesGC: a Guard keeps its flock referenced, so the lock is not
// dropped by the os.File finalizer while the Guard is held (pitfall 5).
func TestGuardSurvivesGC(t *testing.T) {
	f := newFixture(t)
	g, ok, err := f.s.TryLock(f.lockPath, f.leasePath)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	for range 3 {
		runtime.GC()
	}
	other := make(chan bool)
	go func() {
		g2, ok, err := f.s.TryLock(f.lockPath, f.leasePath)
		if err != nil {
			t.Error(err)
		}
		if ok {
			g2.Unlock()
		}
		other <- ok
	}()
	if <-other {
		t.Fatal("a second TryLock succeeded while the first Guard is held")
	}
	// The kernel flock itself is still held (not only the in-process mutex):
	// an independent flock on the path, as another process would use, fails.
	raw := flock.New(f.lockPath)
	if ok, err := raw.TryLock(); ok || err != nil {
		raw.Unlock()
		t.Fatalf("raw flock TryLock while Guard held = %v, %v", ok, err)
	}
	if err := g.Unlock(); err != nil {
		t.Fatal(err)
	}
	if ok, err := raw.TryLock(); !ok || err != nil {
		t.Fatalf("raw flock TryLock after Unlock = %v, %v", ok, err)
	}
	raw.Unlock()
}
