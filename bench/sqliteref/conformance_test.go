package sqliteref_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/durofs/durofs/bench/sqliteref"
	"github.com/durofs/durofs/conformance"
	"github.com/durofs/durofs/provider"
)

// factory runs the conformance suite against the SQLite provider, each test
// on a fresh database file.
type factory struct{}

func (factory) NewProvider(t testing.TB) provider.Provider {
	p, err := sqliteref.Open(filepath.Join(t.TempDir(), "duroxide.db"), sqliteref.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (factory) LockTimeout() time.Duration        { return time.Second }
func (factory) ShortPollThreshold() time.Duration { return 100 * time.Millisecond }
func (factory) LongPolls() bool                   { return true }

func (factory) CorruptInstanceHistory(t testing.TB, p provider.Provider, instance string) {
	if err := sqliteref.CorruptHistoryForTest(p.(*sqliteref.Provider), instance); err != nil {
		t.Fatalf("corrupt history: %v", err)
	}
}

func (factory) MaxAttemptCount(t testing.TB, p provider.Provider, instance string) uint32 {
	n, err := sqliteref.MaxAttemptCountForTest(p.(*sqliteref.Provider), instance)
	if err != nil {
		t.Fatalf("max attempt count: %v", err)
	}
	return n
}

func TestConformance(t *testing.T) {
	conformance.Run(t, factory{})
}
