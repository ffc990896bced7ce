package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

func ExampleStore_Acquire() {
	dir, err := os.MkdirTemp("", "lease-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	clk := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := lease.NewStore(vfs.OS{}, clk)
	ctx := context.Background()
	lockPath := filepath.Join(dir, "instances", "order-42", "lock")
	leasePath := filepath.Join(dir, "instances", "order-42", "lease.json")

	a, err := s.Acquire(ctx, lockPath, leasePath, "worker-a", 30*time.Second)
	fmt.Println("a acquires: fence", a.Fence, "err", err)

	_, err = s.Acquire(ctx, lockPath, leasePath, "worker-b", 30*time.Second)
	fmt.Println("b while a holds it: held =", errors.Is(err, lease.ErrHeld))

	clk.Advance(31 * time.Second) // a stops renewing (it crashed, say)
	b, err := s.Acquire(ctx, lockPath, leasePath, "worker-b", 30*time.Second)
	fmt.Println("b after a's lease expired: fence", b.Fence, "err", err)

	_, err = s.Renew(ctx, lockPath, leasePath, a.Token, 30*time.Second)
	fmt.Println("a tries to renew: not holder =", errors.Is(err, lease.ErrNotHolder))

	err = s.Release(ctx, lockPath, leasePath, b.Token)
	l, _, _ := s.Inspect(ctx, lockPath, leasePath)
	fmt.Printf("b releases: err %v, free %v, fence %d\n", err, !l.HeldAt(clock.Ms(clk.Now())), l.Fence)
	// Output:
	// a acquires: fence 1 err <nil>
	// b while a holds it: held = true
	// b after a's lease expired: fence 2 err <nil>
	// a tries to renew: not holder = true
	// b releases: err <nil>, free true, fence 2
}

func ExampleGuard_Acquire() {
	dir, err := os.MkdirTemp("", "lease-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	s := lease.NewStore(vfs.NoSync(vfs.OS{}), clock.NewManual(time.Unix(1_700_000_000, 0)))
	ctx := context.Background()

	// One flock section: read, decide, write. The highest fence the caller
	// recorded durably (say, in a history file) is passed as minFence, so the
	// fence stays monotonic even if a power loss reverted the lease file.
	g, err := s.Lock(ctx, filepath.Join(dir, "lock"), filepath.Join(dir, "lease.json"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Unlock()
	const lastDurableFence = 17
	l, err := g.Acquire("worker-a", time.Minute, lastDurableFence)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("fence", l.Fence, "ttl", time.Duration(l.ExpiresAtMs-l.AcquiredAtMs)*time.Millisecond)
	// Output:
	// fence 18 ttl 1m0s
}
