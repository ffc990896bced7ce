package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// corruptLeases are lease file contents the decoder must refuse.
var corruptLeases = []struct {
	name string
	data string
}{
	{"empty file (power loss in process-crash-safe mode)", ""},
	{"NUL bytes", "\x00\x00\x00\x00\x00\x00\x00\x00"},
	{"truncated object", `{"token":"0b9d6b1e-7d5e-4b43-9d55-3e0f7b0d6a41","owner":"a","fen`},
	{"not an object", `["token"]`},
	{"null", `null`},
	{"wrong field types", `{"token":7,"fence":"3"}`},
	{"negative fence", `{"token":"t","fence":-1}`},
	{"trailing garbage", `{"token":"t"}}`},
}

// TestCorruptLeaseRule pins the documented rule for an unparseable lease
// file: nobody can prove ownership of it (Renew and Release refuse every
// token with ErrNotHolder wrapping ErrCorrupt, and change nothing), and
// Acquire, under the flock, treats it as free: the new lease has fence
// minFence+1, no data, and is then held like any other.
func TestCorruptLeaseRule(t *testing.T) {
	const someToken = "0b9d6b1e-7d5e-4b43-9d55-3e0f7b0d6a41"
	for _, c := range corruptLeases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			f.writeRaw(t, []byte(c.data))

			g := f.lock(t)
			_, exists, err := g.Read()
			if !exists || !errors.Is(err, lease.ErrCorrupt) {
				t.Fatalf("Read = exists %v, %v; want ErrCorrupt", exists, err)
			}
			g.Unlock()
			for _, tok := range []string{someToken, ""} {
				if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, tok, time.Minute); !errors.Is(err, lease.ErrNotHolder) {
					t.Errorf("Renew(%q) of a corrupt lease: %v, want ErrNotHolder", tok, err)
				}
				if err := f.s.Release(ctx, f.lockPath, f.leasePath, tok); !errors.Is(err, lease.ErrNotHolder) {
					t.Errorf("Release(%q) of a corrupt lease: %v, want ErrNotHolder", tok, err)
				}
			}
			if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, someToken, time.Minute); !errors.Is(err, lease.ErrCorrupt) {
				t.Errorf("Renew error %v does not say the lease is corrupt", err)
			}
			if got := f.raw(t); !bytes.Equal(got, []byte(c.data)) {
				t.Fatalf("a refused Renew/Release rewrote the corrupt file: %q", got)
			}

			g = f.lock(t)
			l, err := g.Acquire("rescuer", time.Minute, 41)
			g.Unlock()
			if err != nil {
				t.Fatalf("Acquire of a corrupt lease: %v", err)
			}
			if l.Fence != 42 || l.Owner != "rescuer" || len(l.Data) != 0 || l.ExpiresAtMs != nowMs+60_000 {
				t.Fatalf("lease taken over from a corrupt file = %+v, want fence 42, no data", l)
			}
			checkToken(t, l.Token)
			if got, ok := f.read(t); !ok || !equalLease(got, l) {
				t.Fatalf("lease file after takeover = %+v, want %+v", got, l)
			}
			// It is now an ordinary held lease.
			if _, err := f.s.Acquire(ctx, f.lockPath, f.leasePath, "late", time.Minute); !errors.Is(err, lease.ErrHeld) {
				t.Fatalf("Acquire of the rescued lease: %v, want ErrHeld", err)
			}
			if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, l.Token, time.Minute); err != nil {
				t.Fatalf("Renew by the rescuer: %v", err)
			}
		})
	}
}

// TestCorruptLeaseOneRescuer: many goroutines, each with its own Store (so
// each takes its own flock), race to acquire a corrupt lease. Treating
// corrupt as free is safe only because the decision is made under the
// flock: exactly one wins, and the others see its lease as held.
func TestCorruptLeaseOneRescuer(t *testing.T) {
	for _, c := range corruptLeases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.writeRaw(t, []byte(c.data))
			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			leases := make([]lease.Lease, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := lease.NewStore(vfs.OS{}, f.clk)
					leases[i], errs[i] = s.Acquire(context.Background(), f.lockPath, f.leasePath, fmt.Sprint("r", i), time.Minute)
				}()
			}
			wg.Wait()
			var winners []lease.Lease
			for i, err := range errs {
				switch {
				case err == nil:
					winners = append(winners, leases[i])
				case !errors.Is(err, lease.ErrHeld):
					t.Errorf("rescuer %d: %v, want success or ErrHeld", i, err)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("%d rescuers acquired the corrupt lease, want exactly 1", len(winners))
			}
			if got, _ := f.read(t); !equalLease(got, winners[0]) {
				t.Fatalf("lease file = %+v, want the winner's %+v", got, winners[0])
			}
		})
	}
}
