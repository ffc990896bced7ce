package provider

import (
	"context"
	"testing"
	"time"
)

// TestFetchWaitsForABrieflyBusyInstance: a fetch that finds no other work
// does not report "nothing" just because the one instance with work had
// its flock held for a moment (the cleaner removing an applied commit
// record, a renewal): it waits up to busyWait and takes the turn. An
// instance still busy after that is skipped.
func TestFetchWaitsForABrieflyBusyInstance(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name            string
		releaseWhenWait bool // the holder lets go once the fetch waits
		wantItem        bool
	}{
		{"released while the fetch waits", true, true},
		{"held past the wait", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1})
			createInstance(t, p, "busy")
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "busy", Name: "e", Data: "1"}, 0))
			key := instanceKey("busy")
			g, err := p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
			mustNoErr(t, err)
			waited := 0
			testHookBusyWait = func(k string) {
				waited++
				if k == key && tc.releaseWhenWait {
					g.Unlock()
				}
			}
			defer func() { testHookBusyWait = nil }()
			start := time.Now()
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			mustNoErr(t, err)
			if !tc.releaseWhenWait {
				g.Unlock()
				if d := time.Since(start); d < busyWait {
					t.Errorf("fetch gave up after %v, before busyWait (%v)", d, busyWait)
				}
			}
			if waited != 1 || (it != nil) != tc.wantItem {
				t.Fatalf("fetch = %+v after %d wait(s); want an item: %v, after 1 wait", it, waited, tc.wantItem)
			}
		})
	}
}
