package provider

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
)

// openManualQuiet opens a provider on a fresh directory with a manual clock
// and no background work.
func openManualQuiet(t *testing.T) *FSProvider {
	t.Helper()
	clk := clock.NewManual(time.UnixMilli(1_700_000_000_000))
	return openT(t, t.TempDir(), Options{Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Durability: ProcessCrashSafe, Logger: quietLog})
}

// pokeAndFetch enqueues an ExternalRaised for inst and fetches its turn.
func pokeAndFetch(t *testing.T, p *FSProvider, inst string) *LockedOrchestrationItem {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "poke", Data: "{}"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != inst {
		t.Fatalf("fetch %s = %+v, %v", inst, it, err)
	}
	return it
}
