package conformance_test

import (
	"flag"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/conformance"
	"github.com/durofs/durofs/conformance/internal/memref"
	"github.com/durofs/durofs/provider"
)

// adminCategories are the categories that need the Admin capability.
var adminCategories = []string{"management", "deletion", "prune", "bulk_deletion"}

// noAdmin is memref without its management capability.
type noAdmin struct{ provider.Provider }

func (noAdmin) Admin() (provider.Admin, bool) { return nil, false }

// noAdminFactory makes noAdmin providers and records, per test, whether the
// test skipped itself.
type noAdminFactory struct {
	mu      sync.Mutex
	skipped map[string]bool // test name → skipped
}

func (f *noAdminFactory) NewProvider(t testing.TB) provider.Provider {
	t.Cleanup(func() {
		f.mu.Lock()
		f.skipped[t.Name()] = t.Skipped()
		f.mu.Unlock()
	})
	return noAdmin{memref.New()}
}

func (*noAdminFactory) LockTimeout() time.Duration        { return time.Second }
func (*noAdminFactory) ShortPollThreshold() time.Duration { return 100 * time.Millisecond }
func (*noAdminFactory) LongPolls() bool                   { return true }
func (*noAdminFactory) CorruptInstanceHistory(t testing.TB, p provider.Provider, instance string) {
	t.Fatal("CorruptInstanceHistory: not expected in the admin categories")
}
func (*noAdminFactory) MaxAttemptCount(t testing.TB, p provider.Provider, instance string) uint32 {
	t.Fatal("MaxAttemptCount: not expected in the admin categories")
	return 0
}

// TestAdminCategoriesSkipWithoutAdmin checks that every test of the admin
// categories asks for a provider once and skips itself when the provider
// reports no Admin capability.
func TestAdminCategoriesSkipWithoutAdmin(t *testing.T) {
	f := &noAdminFactory{skipped: map[string]bool{}}
	for _, c := range adminCategories {
		conformance.RunCategory(t, f, c)
	}
	if run := flag.Lookup("test.run"); run != nil && run.Value.String() != "" {
		return
	}
	n := 0
	for _, e := range conformance.Catalog() {
		if !slices.Contains(adminCategories, e.Category) {
			continue
		}
		n++
		name := t.Name() + "/" + e.Category + "/" + e.Name
		skipped, ran := f.skipped[name]
		switch {
		case !ran:
			t.Errorf("catalog test %d %s did not ask for a provider", e.Number, name)
		case !skipped:
			t.Errorf("catalog test %d %s did not skip without the Admin capability", e.Number, name)
		}
	}
	if n != 28 || len(f.skipped) != 28 {
		t.Errorf("admin categories: %d catalog tests, %d providers made; want 28 each", n, len(f.skipped))
	}
}
