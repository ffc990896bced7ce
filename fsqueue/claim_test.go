package fsqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

func mustClaim(t *testing.T, q *fsqueue.Queue, lockFor time.Duration, eligible func(fsqueue.Entry, *fsqueue.Claim) bool) *fsqueue.Claimed {
	t.Helper()
	c, err := q.ClaimNext(context.Background(), "owner", lockFor, eligible)
	if err != nil {
		t.Fatalf("ClaimNext: %v", err)
	}
	if c == nil {
		t.Fatal("ClaimNext: nothing claimed")
	}
	return c
}

func mustNotClaim(t *testing.T, q *fsqueue.Queue, eligible func(fsqueue.Entry, *fsqueue.Claim) bool) {
	t.Helper()
	c, err := q.ClaimNext(context.Background(), "owner", time.Minute, eligible)
	if err != nil {
		t.Fatalf("ClaimNext: %v", err)
	}
	if c != nil {
		t.Fatalf("ClaimNext claimed %s (attempt %d), want nothing", c.Message.Name, c.Claim.Attempt)
	}
}

func TestClaimAttemptsAndExpiry(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, dir, clk)
	other := openQueue(t, vfs.OS{}, dir, clk) // a second "process"
	ctx := context.Background()
	name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)})

	c1 := mustClaim(t, q, 30*time.Second, nil)
	if c1.Message.Name != name || c1.Claim.Attempt != 1 || c1.Claim.Owner != "owner" ||
		c1.Claim.LockedUntilMs != clock.Ms(clk.Now())+30_000 || c1.Claim.State != "" {
		t.Fatalf("first claim = %+v", c1)
	}
	if n, ok := fsqueue.NameFromToken(c1.Claim.Token); !ok || n != name {
		t.Fatalf("NameFromToken(%q) = %q, %v", c1.Claim.Token, n, ok)
	}
	mustNotClaim(t, q, nil)
	mustNotClaim(t, other, nil)
	clk.Advance(30*time.Second - time.Millisecond)
	mustNotClaim(t, other, nil)
	clk.Advance(time.Millisecond) // lease expired (locked_until <= now)
	c2 := mustClaim(t, other, 30*time.Second, nil)
	if c2.Message.Name != name || c2.Claim.Attempt != 2 || c2.Claim.Token == c1.Claim.Token {
		t.Fatalf("second claim = %+v", c2.Claim)
	}
	// The first holder lost its lease.
	if _, err := q.Renew(ctx, c1.Claim.Token, time.Minute); !errors.Is(err, fsqueue.ErrNotHolder) {
		t.Fatalf("Renew by old holder = %v, want ErrNotHolder", err)
	}
	if err := q.Abandon(ctx, c1.Claim.Token, 0, false); !errors.Is(err, fsqueue.ErrNotHolder) {
		t.Fatalf("Abandon by old holder = %v, want ErrNotHolder", err)
	}
}

func TestRenew(t *testing.T) {
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, t.TempDir(), clk)
	ctx := context.Background()
	enqueue(t, q, fsqueue.Message{})
	c := mustClaim(t, q, 10*time.Second, nil)
	clk.Advance(5 * time.Second)
	r, err := q.Renew(ctx, c.Claim.Token, time.Minute)
	if err != nil || r.LockedUntilMs != clock.Ms(clk.Now())+60_000 || r.Token != c.Claim.Token || r.Attempt != 1 {
		t.Fatalf("Renew = %+v, %v", r, err)
	}
	clk.Advance(59 * time.Second)
	mustNotClaim(t, q, nil) // renewed lease still held
	wrong := c.Message.Name + ".00000000-0000-4000-8000-000000000000"
	if _, err := q.Renew(ctx, wrong, time.Minute); !errors.Is(err, fsqueue.ErrNotHolder) {
		t.Fatalf("Renew with wrong token = %v", err)
	}
	for _, bad := range []string{"", "garbage", c.Message.Name, c.Message.Name + ".x"} {
		if _, err := q.Renew(ctx, bad, time.Minute); !errors.Is(err, fsqueue.ErrNotHolder) {
			t.Fatalf("Renew(%q) = %v", bad, err)
		}
	}
	clk.Advance(time.Second)
	if _, err := q.Renew(ctx, c.Claim.Token, time.Minute); !errors.Is(err, fsqueue.ErrExpired) {
		t.Fatalf("Renew after expiry = %v, want ErrExpired", err)
	}
	// Renew of a deleted message.
	c2 := mustClaim(t, q, time.Minute, nil)
	if err := os.Remove(filepath.Join(q.Dir(), c2.Message.Name+".json")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Renew(ctx, c2.Claim.Token, time.Minute); !errors.Is(err, fsqueue.ErrNotFound) {
		t.Fatalf("Renew of deleted message = %v, want ErrNotFound", err)
	}
}

func TestAbandon(t *testing.T) {
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, t.TempDir(), clk)
	ctx := context.Background()
	name := enqueue(t, q, fsqueue.Message{})

	c := mustClaim(t, q, time.Minute, nil)
	if err := q.Abandon(ctx, c.Claim.Token, 5*time.Second, false); err != nil {
		t.Fatal(err)
	}
	mustNotClaim(t, q, nil) // hidden for the delay
	clk.Advance(5*time.Second - time.Millisecond)
	mustNotClaim(t, q, nil)
	clk.Advance(time.Millisecond)
	c = mustClaim(t, q, time.Minute, nil)
	if c.Claim.Attempt != 2 {
		t.Fatalf("attempt after abandon = %d, want 2", c.Claim.Attempt)
	}
	// Abandon does not check expiry: an expired but not taken-over lease can be abandoned.
	clk.Advance(2 * time.Minute)
	if err := q.Abandon(ctx, c.Claim.Token, 0, true); err != nil {
		t.Fatalf("Abandon of expired lease: %v", err)
	}
	if err := q.Abandon(ctx, c.Claim.Token, 0, true); !errors.Is(err, fsqueue.ErrNotHolder) {
		t.Fatalf("second Abandon = %v, want ErrNotHolder", err)
	}
	c = mustClaim(t, q, time.Minute, nil) // visible at once; attempt was decremented to 1
	if c.Claim.Attempt != 2 {
		t.Fatalf("attempt after ignoreAttempt abandon = %d, want 2", c.Claim.Attempt)
	}
	if err := q.Abandon(ctx, c.Claim.Token, 0, true); err != nil {
		t.Fatal(err)
	}

	// ignoreAttempt never goes below zero.
	tok := name + ".11111111-1111-4111-8111-111111111111"
	err := q.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
		cl, ok, err := g.Read()
		if err != nil || !ok || cl.Attempt != 1 || cl.Token != "" {
			t.Errorf("Read = %+v, %v, %v", cl, ok, err)
		}
		if ok, err := g.MessageExists(); err != nil || !ok {
			t.Errorf("MessageExists = %v, %v", ok, err)
		}
		if err := g.Write(fsqueue.Claim{Token: "01ARZ3NDEKTSV4RRFFQ69G5FAV.11111111-1111-4111-8111-111111111111"}); !errors.Is(err, fsqueue.ErrInvalidName) {
			t.Errorf("Write with another message's token = %v", err)
		}
		return g.Write(fsqueue.Claim{Token: tok, LockedUntilMs: clock.Ms(g.Now().Add(time.Minute)), Attempt: 0})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Abandon(ctx, tok, 0, true); err != nil {
		t.Fatal(err)
	}
	c = mustClaim(t, q, time.Minute, nil)
	if c.Claim.Attempt != 1 {
		t.Fatalf("attempt = %d, want 1 (0 after abandon, never below)", c.Claim.Attempt)
	}
}

func TestClaimFilterAndState(t *testing.T) {
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, t.TempDir(), clk)
	ctx := context.Background()
	a := enqueue(t, q, fsqueue.Message{Attrs: map[string]string{"instance": "a"}})
	b := enqueue(t, q, fsqueue.Message{Attrs: map[string]string{"instance": "b"}})
	onlyB := func(e fsqueue.Entry, c *fsqueue.Claim) bool { return e.Name() == b }
	c := mustClaim(t, q, time.Minute, onlyB)
	if c.Message.Name != b {
		t.Fatalf("claimed %s, want %s", c.Message.Name, b)
	}
	mustNotClaim(t, q, onlyB)
	// After expiry, eligible sees the current (expired) claim.
	clk.Advance(2 * time.Minute)
	var seen *fsqueue.Claim
	c = mustClaim(t, q, time.Minute, func(e fsqueue.Entry, cl *fsqueue.Claim) bool {
		if e.Name() == a && cl != nil {
			t.Errorf("message %s was never claimed, eligible got claim %+v", a, cl)
		}
		if e.Name() == b {
			seen = cl
		}
		return e.Name() == b
	})
	if c.Message.Name != b || c.Claim.Attempt != 2 || seen == nil || seen.Attempt != 1 {
		t.Fatalf("claimed %s attempt %d (eligible saw %+v), want %s attempt 2", c.Message.Name, c.Claim.Attempt, seen, b)
	}
	c = mustClaim(t, q, time.Minute, nil)
	if c.Message.Name != a {
		t.Fatalf("claimed %s, want %s", c.Message.Name, a)
	}
	// A claim with a non-empty State is never claimed again, even when
	// expired; Data is kept by the next claim.
	for _, n := range []string{a, b} {
		err := q.WithClaim(ctx, n, func(g *fsqueue.ClaimGuard) error {
			cl, _, err := g.Read()
			if err != nil {
				return err
			}
			if n == a {
				cl.State = "acked"
			}
			cl.Data = json.RawMessage(`{"by":"test"}`)
			return g.Write(cl)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Minute)
	c = mustClaim(t, q, time.Minute, nil)
	if c.Message.Name != b || c.Claim.Attempt != 3 || string(c.Claim.Data) != `{"by":"test"}` {
		t.Fatalf("claimed %s %+v, want %s attempt 3 with data", c.Message.Name, c.Claim, b)
	}
	mustNotClaim(t, q, nil)
}

func TestClaimGuardOutsideCallback(t *testing.T) {
	q := openQueue(t, vfs.OS{}, t.TempDir(), nil)
	name := enqueue(t, q, fsqueue.Message{})
	var kept *fsqueue.ClaimGuard
	if err := q.WithClaim(context.Background(), name, func(g *fsqueue.ClaimGuard) error { kept = g; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := kept.Write(fsqueue.Claim{}); err == nil {
		t.Fatal("Write after WithClaim returned succeeded")
	}
	if _, _, err := kept.Read(); err == nil {
		t.Fatal("Read after WithClaim returned succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// WithClaim waits for the lock with ctx; a held lock and a done ctx fail.
	err := q.WithClaim(context.Background(), name, func(*fsqueue.ClaimGuard) error {
		return q.WithClaim(ctx, name, func(*fsqueue.ClaimGuard) error { return nil })
	})
	if err == nil {
		t.Fatal("nested WithClaim with a cancelled ctx succeeded")
	}
	sentinel := errors.New("x")
	if err := q.WithClaim(context.Background(), name, func(*fsqueue.ClaimGuard) error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("WithClaim error = %v", err)
	}
}

// A message deleted between the scan and the claim write is not handed out,
// and the claim written for it is removed.
func TestClaimVanishedMessage(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, vfs.OS{}, dir, nil)
	first := enqueue(t, q, fsqueue.Message{})
	second := enqueue(t, q, fsqueue.Message{})
	deleted := false
	c := mustClaim(t, q, time.Minute, func(e fsqueue.Entry, _ *fsqueue.Claim) bool {
		if e.Name() == first && !deleted {
			deleted = true
			if err := os.Remove(filepath.Join(dir, first+".json")); err != nil {
				t.Error(err)
			}
		}
		return true
	})
	if c.Message.Name != second {
		t.Fatalf("claimed %s, want %s", c.Message.Name, second)
	}
	if fileExists(t, filepath.Join(dir, "claims", first+".json")) {
		t.Fatal("claim of the vanished message left behind")
	}
}

// A lease that is already expired when the claim write finishes is never
// handed out; the previous claim state is restored.
func TestClaimNeverReturnsExpiredLease(t *testing.T) {
	dir := t.TempDir()
	// Every clock read is one second later: ClaimNext reads the clock once to
	// scan, once under the lock to compute the lease, and once after writing.
	clk := &steppingClock{t: time.Now(), step: time.Second}
	q := openQueue(t, vfs.OS{}, dir, clk)
	ctx := context.Background()
	name := enqueue(t, q, fsqueue.Message{})
	claimPath := filepath.Join(dir, "claims", name+".json")

	if c, err := q.ClaimNext(ctx, "w", 500*time.Millisecond, nil); err != nil || c != nil {
		t.Fatalf("ClaimNext with a lease that expires while claiming = %+v, %v", c, err)
	}
	if fileExists(t, claimPath) {
		t.Fatal("expired claim left behind")
	}
	c, err := q.ClaimNext(ctx, "w", 1500*time.Millisecond, nil)
	if err != nil || c == nil || c.Claim.Attempt != 1 {
		t.Fatalf("ClaimNext = %+v, %v", c, err)
	}
	if err := q.Abandon(ctx, c.Claim.Token, 0, false); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(claimPath)
	if c, err := q.ClaimNext(ctx, "w", 500*time.Millisecond, nil); err != nil || c != nil {
		t.Fatalf("ClaimNext = %+v, %v", c, err)
	}
	if after, _ := os.ReadFile(claimPath); string(after) != string(before) {
		t.Fatalf("claim not restored: before %s, after %s", before, after)
	}
	c, err = q.ClaimNext(ctx, "w", 1500*time.Millisecond, nil)
	if err != nil || c == nil || c.Claim.Attempt != 2 {
		t.Fatalf("ClaimNext = %+v, %v", c, err)
	}
}

// A claim file that is not this message's claim - unparsable (possible
// only after a power loss without fsync), or a held or acked claim of
// another message - does not block the message: it is redelivered as if
// unclaimed.
func TestCorruptClaimRedelivers(t *testing.T) {
	// a claim of message 01ARZ3NDEKTSV4RRFFQ69G5FAV
	tok := func(state string) string {
		c := fsqueue.Claim{Token: "01ARZ3NDEKTSV4RRFFQ69G5FAV.6f1c6b7e-6d51-4b4a-9d1c-6a2a9a3f6d11", LockedUntilMs: 1 << 50, Attempt: 7, State: state}
		b, _ := json.Marshal(c)
		return string(b)
	}
	for _, tt := range []struct {
		name, content string
	}{
		{"empty", ""},
		{"not JSON", "{\"token\":"},
		{"held claim of another message", tok("")},
		{"acked claim of another message", tok("acked")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			q := openQueue(t, vfs.OS{}, dir, nil)
			name := enqueue(t, q, fsqueue.Message{})
			if err := os.WriteFile(filepath.Join(dir, "claims", name+".json"), []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			c := mustClaim(t, q, time.Minute, nil)
			if c.Message.Name != name || c.Claim.Attempt != 1 {
				t.Fatalf("claim = %+v", c.Claim)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, dir, clk)
	ctx := context.Background()
	live := enqueue(t, q, fsqueue.Message{})
	mustClaim(t, q, time.Minute, nil)
	staged := q.NewName(0, "")
	if err := q.Stage(fsqueue.Message{Name: staged}); err != nil {
		t.Fatal(err)
	}
	orphan, acked, corrupt := q.NewName(0, ""), q.NewName(0, ""), q.NewName(0, "")
	for _, n := range []string{orphan, acked, staged} {
		state := ""
		if n == acked {
			state = "acked"
		}
		// Claims of messages that are not published: written by hand (a
		// claim can be written only under a published message's lock).
		data, err := json.Marshal(fsqueue.Claim{Token: n + ".22222222-2222-4222-8222-222222222222", LockedUntilMs: clock.Ms(clk.Now()) + 60_000, State: state})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "claims", n+".json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "claims", corrupt+".json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	oldTemps := []string{
		filepath.Join(dir, vfs.TempPrefix+"a.json-1"),
		filepath.Join(dir, "claims", vfs.TempPrefix+"b.json-2"),
	}
	freshTemp := filepath.Join(dir, vfs.TempPrefix+"c.json-3")
	for _, p := range append(oldTemps, freshTemp) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range oldTemps {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}

	st, err := q.Sweep(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st.TempRemoved != 2 || st.OrphanClaimsRemoved != 2 {
		t.Fatalf("Sweep = %+v, want 2 temps and 2 orphan claims (one corrupt)", st)
	}
	for _, p := range oldTemps {
		if fileExists(t, p) {
			t.Fatalf("old temp %s not removed", p)
		}
	}
	if !fileExists(t, freshTemp) {
		t.Fatal("fresh temp removed")
	}
	claims, err := q.Claims()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{live: true, acked: true, staged: true}
	if len(claims) != len(want) {
		t.Fatalf("Claims = %v", claims)
	}
	for _, n := range claims {
		if !want[n] {
			t.Fatalf("claim %s should have been removed (claims %v)", n, claims)
		}
	}
	if !fileExists(t, filepath.Join(dir, ".staged-"+staged+".json")) {
		t.Fatal("Sweep removed a staged file")
	}
	// Advancing the clock makes the remaining temp old.
	clk.Advance(11 * time.Minute)
	st, err = q.Sweep(ctx, 10*time.Minute)
	if err != nil || st.TempRemoved != 1 || st.OrphanClaimsRemoved != 0 {
		t.Fatalf("second Sweep = %+v, %v", st, err)
	}
	for _, f := range mustReadDir(t, dir) {
		if strings.HasPrefix(f, vfs.TempPrefix) {
			t.Fatalf("temp %s left", f)
		}
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestSweepClaimsLeavesTheDirectory: SweepClaims removes claims/'s old
// temporary files and the orphan claims, and neither lists nor sweeps the
// queue directory (whose listing costs what the queue holds); Indexed
// tells whether Sweep and Staged would find the directory's files in the
// index instead of a listing.
func TestSweepClaimsLeavesTheDirectory(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	cfs := vfs.Counting(vfs.OS{})
	q := openQueue(t, cfs, dir, clk)
	ctx := context.Background()
	enqueue(t, q, fsqueue.Message{})
	orphan := q.NewName(0, "")
	if err := os.WriteFile(filepath.Join(dir, "claims", orphan+".json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	dirTemp := filepath.Join(dir, vfs.TempPrefix+"a.json-1")
	claimTemp := filepath.Join(dir, "claims", vfs.TempPrefix+"b.json-2")
	for _, p := range []string{dirTemp, claimTemp} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if q.Indexed() {
		t.Fatal("Indexed before any read of the index")
	}
	before := cfs.Files().Listings
	st, err := q.SweepClaims(ctx, time.Minute)
	if err != nil || st.TempRemoved != 1 || st.OrphanClaimsRemoved != 1 {
		t.Fatalf("SweepClaims = %+v, %v; want claims/'s temporary file and the orphan claim", st, err)
	}
	if got := cfs.Files().Listings - before; got != 2 {
		t.Fatalf("SweepClaims listed directories %d times, want 2 (claims/: its temporary files, its claims)", got)
	}
	if fileExists(t, claimTemp) || !fileExists(t, dirTemp) {
		t.Fatalf("after SweepClaims: claims/ temp there %v (want false), queue directory temp there %v (want true)",
			fileExists(t, claimTemp), fileExists(t, dirTemp))
	}
	if _, err := q.List(); err != nil {
		t.Fatal(err)
	}
	if !q.Indexed() {
		t.Fatal("not Indexed after List")
	}
	if st, err := q.Sweep(ctx, time.Minute); err != nil || st.TempRemoved != 1 || fileExists(t, dirTemp) {
		t.Fatalf("Sweep = %+v, %v; want the queue directory's temporary file removed", st, err)
	}
}
