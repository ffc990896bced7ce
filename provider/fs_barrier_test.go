package provider

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupBarrier checks the two kinds of group sync: every successful
// Sync is served by a run that started after the call; concurrent callers
// share runs; a failed file-system barrier is sticky (ErrSyncFailed from
// then on) while a failed directory fsync fails only its round.
func TestGroupBarrier(t *testing.T) {
	errInjected := errors.New("injected")
	for _, tc := range []struct {
		name       string
		mk         func(func() error) *groupBarrier
		wantSticky bool
	}{
		{"barrier", newGroupBarrier, true},
		{"directory sync", newGroupSync, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Uint64
			var mu sync.Mutex
			type span struct{ start, end uint64 }
			var runs []span
			var fail atomic.Bool
			b := tc.mk(func() error {
				start := clock.Add(1)
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				runs = append(runs, span{start, clock.Add(1)})
				mu.Unlock()
				if fail.Load() {
					return errInjected
				}
				return nil
			})

			const callers, calls = 8, 50
			var wg sync.WaitGroup
			var unserved atomic.Int64
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range calls {
						call := clock.Add(1)
						if err := b.Sync(); err != nil {
							t.Error(err)
							return
						}
						ret := clock.Add(1)
						mu.Lock()
						ok := false
						for _, r := range runs {
							ok = ok || (r.start > call && r.end < ret)
						}
						mu.Unlock()
						if !ok {
							unserved.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if n := unserved.Load(); n > 0 {
				t.Fatalf("%d Syncs returned without a run that started after the call", n)
			}
			if len(runs) >= callers*calls {
				t.Fatalf("%d runs for %d concurrent Syncs: nothing was shared", len(runs), callers*calls)
			}
			t.Logf("%d Syncs, %d runs", callers*calls, len(runs))

			fail.Store(true)
			err := b.Sync()
			if !errors.Is(err, errInjected) || errors.Is(err, ErrSyncFailed) != tc.wantSticky {
				t.Fatalf("failed round: Sync = %v (want the run's error, ErrSyncFailed %v)", err, tc.wantSticky)
			}
			fail.Store(false)
			err = b.Sync()
			if tc.wantSticky && !errors.Is(err, ErrSyncFailed) {
				t.Fatalf("after a failed barrier: Sync = %v, want ErrSyncFailed", err)
			}
			if !tc.wantSticky && err != nil {
				t.Fatalf("after a failed directory sync: Sync = %v, want success", err)
			}
		})
	}
}
