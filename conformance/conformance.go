package conformance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// Factory makes providers for the suite.
type Factory interface {
	// NewProvider returns a provider on a fresh, isolated store. Register
	// cleanup with t.Cleanup.
	NewProvider(t testing.TB) provider.Provider
	// LockTimeout is the lock timeout the expiry tests use (≥ 1s; 1s
	// recommended).
	LockTimeout() time.Duration
	// ShortPollThreshold bounds "returns immediately" for short-poll
	// providers (100ms default, used when it returns 0).
	ShortPollThreshold() time.Duration
	// LongPolls reports whether fetches block up to poll_timeout when there
	// is no work.
	LongPolls() bool
	// CorruptInstanceHistory makes every stored history event of instance
	// undecodable, in the store behind p.
	CorruptInstanceHistory(t testing.TB, p provider.Provider, instance string)
	// MaxAttemptCount returns the max attempt count over the instance's
	// orchestrator messages (locked or not), in the store behind p.
	MaxAttemptCount(t testing.TB, p provider.Provider, instance string) uint32
}

// DefaultShortPollThreshold is the bound used when
// Factory.ShortPollThreshold returns zero.
const DefaultShortPollThreshold = 100 * time.Millisecond

// MinLockTimeout is the smallest Factory.LockTimeout the suite accepts.
const MinLockTimeout = time.Second

// Run runs every category of the suite against f, each as a subtest named
// after the category (see Categories), with one subtest per catalog test
// below it. It returns when all tests have finished.
func Run(t *testing.T, f Factory) {
	t.Helper()
	checkFactory(t, f)
	for _, c := range Categories() {
		runCategory(t, f, c)
	}
}

// RunCategory runs one category of the suite, by its duroxide module name
// (for example "atomicity"), as a subtest of that name.
func RunCategory(t *testing.T, f Factory, category string) {
	t.Helper()
	if !slices.Contains(Categories(), category) {
		t.Fatalf("conformance: unknown category %q; want one of %s", category, strings.Join(Categories(), ", "))
	}
	checkFactory(t, f)
	runCategory(t, f, category)
}

// Categories returns the category (duroxide module) names in catalog order.
func Categories() []string {
	var out []string
	for _, tc := range registry {
		if !slices.Contains(out, tc.category) {
			out = append(out, tc.category)
		}
	}
	return out
}

func checkFactory(t *testing.T, f Factory) {
	t.Helper()
	if f == nil {
		t.Fatal("conformance: nil Factory")
	}
	if lt := f.LockTimeout(); lt < MinLockTimeout {
		t.Fatalf("conformance: Factory.LockTimeout() = %v; the suite needs at least %v", lt, MinLockTimeout)
	}
	if th := f.ShortPollThreshold(); th < 0 {
		t.Fatalf("conformance: Factory.ShortPollThreshold() = %v; want ≥ 0", th)
	}
}

func runCategory(t *testing.T, f Factory, category string) {
	t.Run(category, func(t *testing.T) {
		for _, tc := range registry {
			if tc.category != category {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				switch tc.poll {
				case longPollOnly:
					if !f.LongPolls() {
						t.Skip("applies only to long-polling providers; Factory.LongPolls() is false")
					}
				case shortPollOnly:
					if f.LongPolls() {
						t.Skip("applies only to short-polling providers (it asserts the fetch returns within ShortPollThreshold); " +
							"Factory.LongPolls() is true, so the test_long_poll_* variant runs instead")
					}
				}
				tc.fn(t, f)
			})
		}
	})
}

// shortPollThreshold returns f's threshold, or the default when it is zero.
func shortPollThreshold(f Factory) time.Duration {
	if th := f.ShortPollThreshold(); th > 0 {
		return th
	}
	return DefaultShortPollThreshold
}
