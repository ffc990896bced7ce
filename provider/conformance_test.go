package provider_test

import (
	"testing"
	"time"

	"github.com/durofs/durofs/conformance"
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
