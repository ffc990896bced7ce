package provider_test

import (
	"testing"
	"time"

	"github.com/durofs/durofs/conformance"
	"github.com/durofs/durofs/internal/route"
	"github.com/durofs/durofs/provider"
)

// fsFactory runs the conformance suite against the filesystem provider, each
// test on a fresh directory.
type fsFactory struct{ durability provider.Durability }

func (f fsFactory) NewProvider(t testing.TB) provider.Provider {
	p, err := provider.Open(t.TempDir(), provider.Options{Durability: f.durability})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (fsFactory) LockTimeout() time.Duration        { return time.Second }
func (fsFactory) ShortPollThreshold() time.Duration { return 100 * time.Millisecond }
func (fsFactory) LongPolls() bool                   { return true }

func (fsFactory) CorruptInstanceHistory(t testing.TB, p provider.Provider, instance string) {
	if err := provider.CorruptHistoryForTest(p.(*provider.FSProvider), instance); err != nil {
		t.Fatalf("corrupt history: %v", err)
	}
}

func (fsFactory) MaxAttemptCount(t testing.TB, p provider.Provider, instance string) uint32 {
	n, err := provider.MaxAttemptCountForTest(p.(*provider.FSProvider), instance)
	if err != nil {
		t.Fatalf("max attempt count: %v", err)
	}
	return n
}

func TestConformance(t *testing.T) {
	for _, d := range []provider.Durability{provider.Durable, provider.ProcessCrashSafe} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, fsFactory{durability: d})
		})
	}
}

// TestConformanceRouteCollisions runs the conformance catalog with every
// instance key on one route (fsqueue.RouteOf replaced by a constant): a
// route only says "maybe this instance", and every reader that acts on an
// instance's messages - fetches, acks, cancellations, deletions, drains -
// must check the body's key. (By chance two keys share a route about once
// in 2^64 pairs.) Not parallel: the hash is process-wide, and no other
// test's queue may see it change.
func TestConformanceRouteCollisions(t *testing.T) {
	defer route.SetForTest(func(string) uint64 { return 42 })()
	conformance.Run(t, fsFactory{durability: provider.ProcessCrashSafe})
}
