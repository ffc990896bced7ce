package fsqueue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestClaimNextWaitsForABrieflyBusyShard: a claimable message whose shard
// lock is held (by an ack, a cleanup, another claimer) is skipped at first;
// when nothing else is claimable ClaimNext waits for it up to busyWait and
// claims it if the lock comes free, else reports nothing.
func TestClaimNextWaitsForABrieflyBusyShard(t *testing.T) {
	for _, tc := range []struct {
		name          string
		releaseOnWait bool
		wantClaim     bool
	}{
		{"released while ClaimNext waits", true, true},
		{"held past the wait", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			q := openQueue(t, vfs.OS{}, t.TempDir(), clock.NewManual(time.Now()))
			name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`"p"`)})
			held, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
			go func() {
				done <- q.WithClaim(ctx, name, func(*fsqueue.ClaimGuard) error {
					close(held)
					<-release
					return nil
				})
			}()
			<-held
			waits := 0
			defer fsqueue.SetBusyWaitHook(func(n string) {
				waits++
				if n == name && tc.releaseOnWait {
					close(release)
					if err := <-done; err != nil {
						t.Error(err)
					}
				}
			})()
			start := time.Now()
			c, err := q.ClaimNext(ctx, "owner", time.Minute, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.releaseOnWait {
				if d := time.Since(start); d < fsqueue.BusyWaitForTest {
					t.Errorf("ClaimNext gave up after %v, before busyWait", d)
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if waits != 1 || (c != nil) != tc.wantClaim {
				t.Fatalf("ClaimNext = %+v after %d wait(s); want a claim: %v, after 1 wait", c, waits, tc.wantClaim)
			}
		})
	}
}
