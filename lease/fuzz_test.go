package lease_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// FuzzLeaseFile feeds arbitrary bytes to the lease file decoder through the
// public API, under the flock, and checks the documented rules on whatever
// it decodes:
//
//   - Read either returns a lease or an error wrapping ErrCorrupt (never a
//     panic, never another error for content it could read);
//   - a decoded lease written back reads back equal (the format is stable);
//   - Acquire on a corrupt file treats it as free (fence minFence+1, no
//     data); on a decoded one it refuses a held lease without writing and
//     otherwise bumps the fence above max(old, minFence) and keeps the data;
//   - after an Acquire nobody else can acquire, and the old token can
//     neither renew nor release: one holder at a time.
//
// The inputs are the file content, the clock as an offset from t0 and the
// caller's minFence.
func FuzzLeaseFile(f *testing.F) {
	seeds := []string{
		``,
		"\x00\x00\x00\x00",
		`{}`,
		`null`,
		`[]`,
		`"token"`,
		`{"token":"","owner":"","fence":7,"acquired_at_ms":0,"expires_at_ms":0}`,
		`{"token":"0b9d6b1e-7d5e-4b43-9d55-3e0f7b0d6a41","owner":"a","fence":3,"acquired_at_ms":1741064767000,"expires_at_ms":1741064797000,"data":{"batch":["01J"]}}`,
		`{"token":"t","fence":18446744073709551615,"expires_at_ms":0}`,
		`{"token":"t","fence":-1}`,
		`{"token":"t","fence":1.5}`,
		`{"token":7}`,
		`{"token":"t","expires_at_ms":9223372036854775807}`,
		`{"token":"t","expires_at_ms":-9223372036854775808}`,
		`{"token":"a","token":"b","fence":1}`,
		`{"token":"t","data":null}`,
		`{"token":"t","data": { "x" : [1, 2] } }`,
		`{"future_field":{"a":1},"fence":2}`,
		`{"token":"t"} trailing`,
		`{"token":"t","fence":`,
		"\ufeff{}",
		"  {\"fence\":4}\n",
	}
	for i, s := range seeds {
		f.Add([]byte(s), int32(i*1000-5000), uint64(i%3))
	}
	f.Fuzz(func(t *testing.T, data []byte, offsetMs int32, minFence uint64) {
		// Both ways of writing: atomic replace and in place (where the
		// file's arbitrary old content must be overwritten entirely).
		for _, inPlace := range []bool{false, true} {
			fuzzLeaseFile(t, data, offsetMs, minFence, inPlace)
		}
	})
}

func fuzzLeaseFile(t *testing.T, data []byte, offsetMs int32, minFence uint64, inPlace bool) {
	const ttl = 30 * time.Second
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	clk := clock.NewManual(t0.Add(time.Duration(offsetMs) * time.Millisecond))
	now := clock.Ms(clk.Now())
	s := lease.NewStore(mem, clk)
	if inPlace {
		s = s.WithInPlaceWrites()
	}
	lockPath, leasePath := "/r/lock", "/r/lease.json"
	if err := mem.MkdirAll("/r", vfs.DirPerm); err != nil {
		t.Fatal(err)
	}
	reset := func() {
		t.Helper()
		if err := vfs.WriteFile(mem, leasePath, data); err != nil {
			t.Fatal(err)
		}
	}
	reset()

	g, err := s.Lock(ctx, lockPath, leasePath)
	if err != nil {
		t.Fatal(err)
	}
	old, exists, rerr := g.Read()
	corrupt := rerr != nil
	if corrupt && (!errors.Is(rerr, lease.ErrCorrupt) || !exists) {
		t.Fatalf("Read error %v (exists %v) for readable content: want ErrCorrupt", rerr, exists)
	}
	if !exists {
		t.Fatal("Read reports an existing lease file as missing")
	}
	if !corrupt {
		// The decoded lease round-trips through Write.
		if err := g.Write(old); err != nil {
			t.Fatalf("Write of a decoded lease %+v: %v", old, err)
		}
		again, _, err := g.Read()
		if err != nil || !sameLease(again, old) {
			t.Fatalf("decoded %+v, wrote and re-read %+v (%v)", old, again, err)
		}
		reset()
	}

	// Acquire follows the rule for what was read.
	before, _ := mem.ReadFile(leasePath)
	l, aerr := g.Acquire("fuzz", ttl, minFence)
	after, _ := mem.ReadFile(leasePath)
	switch {
	case !corrupt && old.HeldAt(now):
		if !errors.Is(aerr, lease.ErrHeld) {
			t.Fatalf("Acquire of held lease %+v at %d: %v, want ErrHeld", old, now, aerr)
		}
	case max(old.Fence, minFence) == math.MaxUint64:
		if aerr == nil {
			t.Fatalf("Acquire overflowed the fence: %+v", l)
		}
	case aerr != nil:
		t.Fatalf("Acquire of free lease (corrupt %v, %+v) at %d: %v", corrupt, old, now, aerr)
	default:
		wantFence := max(old.Fence, minFence) + 1
		wantData := old.Data
		if corrupt {
			wantFence, wantData = minFence+1, nil
		}
		if l.Fence != wantFence || l.Owner != "fuzz" || l.AcquiredAtMs != now ||
			l.ExpiresAtMs != now+ttl.Milliseconds() || !sameJSON(l.Data, wantData) || l.Token == "" || l.Token == old.Token {
			t.Fatalf("Acquire over (corrupt %v) %+v with minFence %d = %+v", corrupt, old, minFence, l)
		}
	}
	if aerr != nil && !bytes.Equal(before, after) {
		t.Fatalf("failed Acquire (%v) changed the file:\n%q\n%q", aerr, before, after)
	}
	if aerr == nil {
		// One holder at a time: no second Acquire, and the previous
		// token (if any) can neither renew nor release.
		if _, err := g.Acquire("other", ttl, 0); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("second Acquire after %+v: %v, want ErrHeld", l, err)
		}
		if old.Token != "" {
			if _, err := g.Renew(old.Token, ttl); !errors.Is(err, lease.ErrNotHolder) {
				t.Fatalf("Renew with the replaced token %q: %v, want ErrNotHolder", old.Token, err)
			}
			if _, err := g.Release(old.Token); !errors.Is(err, lease.ErrNotHolder) {
				t.Fatalf("Release with the replaced token %q: %v, want ErrNotHolder", old.Token, err)
			}
		}
		if got, _, err := g.Read(); err != nil || !sameLease(got, l) {
			t.Fatalf("lease after Acquire = %+v (%v), want %+v", got, err, l)
		}
	}
	g.Unlock()

	// Renew with the file's own token: nobody can prove ownership of a
	// corrupt file; a decoded one renews exactly when it is held.
	reset()
	if old.Token != "" || corrupt {
		tok := old.Token
		if corrupt {
			tok = "0b9d6b1e-7d5e-4b43-9d55-3e0f7b0d6a41"
		}
		r, err := s.Renew(ctx, lockPath, leasePath, tok, ttl)
		switch {
		case corrupt:
			if !errors.Is(err, lease.ErrNotHolder) || !errors.Is(err, lease.ErrCorrupt) {
				t.Fatalf("Renew of a corrupt lease: %v, want ErrNotHolder and ErrCorrupt", err)
			}
		case old.HeldAt(now):
			if err != nil || r.ExpiresAtMs != now+ttl.Milliseconds() || r.Fence != old.Fence {
				t.Fatalf("Renew of held %+v = %+v, %v", old, r, err)
			}
		default:
			if !errors.Is(err, lease.ErrExpired) {
				t.Fatalf("Renew of unheld %+v at %d: %v, want ErrExpired", old, now, err)
			}
		}
	}
}

// sameLease compares leases, with Data compared as JSON values.
func sameLease(a, b lease.Lease) bool {
	return a.Token == b.Token && a.Owner == b.Owner && a.Fence == b.Fence &&
		a.AcquiredAtMs == b.AcquiredAtMs && a.ExpiresAtMs == b.ExpiresAtMs && sameJSON(a.Data, b.Data)
}

// sameJSON reports whether two raw JSON values denote the same value (Write
// compacts Data and escapes <, > and & as json.Marshal does); empty equals
// empty.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, ea := decodeAny(a)
	vb, eb := decodeAny(b)
	if ea != nil || eb != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func decodeAny(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
