package conformance_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/conformance"
	"github.com/durofs/durofs/conformance/internal/memref"
	"github.com/durofs/durofs/provider"
)

// memFactory runs the suite against the in-memory reference provider and
// records which tests asked for a provider.
type memFactory struct {
	mu    sync.Mutex
	calls map[string]int // test name → NewProvider calls
}

func (f *memFactory) NewProvider(t testing.TB) provider.Provider {
	f.mu.Lock()
	f.calls[t.Name()]++
	f.mu.Unlock()
	return memref.New()
}

func (*memFactory) LockTimeout() time.Duration        { return time.Second }
func (*memFactory) ShortPollThreshold() time.Duration { return 100 * time.Millisecond }
func (*memFactory) LongPolls() bool                   { return true }

func (*memFactory) CorruptInstanceHistory(t testing.TB, p provider.Provider, instance string) {
	memref.CorruptHistory(p, instance)
}

func (*memFactory) MaxAttemptCount(t testing.TB, p provider.Provider, instance string) uint32 {
	return memref.MaxAttemptCount(p, instance)
}

// TestConformance runs the whole suite against memref and then checks that
// every catalog test ran as its own subtest exactly once (skipped tests never
// ask for a provider).
func TestConformance(t *testing.T) {
	f := &memFactory{calls: map[string]int{}}
	conformance.Run(t, f)

	if run := flag.Lookup("test.run"); run != nil && run.Value.String() != "" {
		return // a -run selection: not every test ran
	}
	if t.Failed() {
		return
	}
	skipped := map[string]bool{ // memref long-polls
		"test_short_poll_returns_immediately":           true,
		"test_short_poll_work_item_returns_immediately": true,
	}
	want := map[string]bool{}
	for _, e := range conformance.Catalog() {
		if skipped[e.Name] {
			continue
		}
		name := t.Name() + "/" + e.Category + "/" + e.Name
		want[name] = true
		if n := f.calls[name]; n != 1 {
			t.Errorf("catalog test %d %s: NewProvider called %d times, want 1 (the test must run exactly once)", e.Number, name, n)
		}
	}
	for name, n := range f.calls {
		if !want[name] {
			t.Errorf("NewProvider called %d times by %s, which is not a catalog test that should run", n, name)
		}
	}
}

// TestRunCategory checks RunCategory's subtest naming on a quick category.
func TestRunCategory(t *testing.T) {
	f := &memFactory{calls: map[string]int{}}
	conformance.RunCategory(t, f, "instance_creation")
	if run := flag.Lookup("test.run"); run != nil && run.Value.String() != "" {
		return
	}
	for _, e := range conformance.Catalog() {
		if e.Category != "instance_creation" {
			continue
		}
		if name := t.Name() + "/instance_creation/" + e.Name; f.calls[name] != 1 {
			t.Errorf("%s: NewProvider called %d times, want 1", name, f.calls[name])
		}
	}
	if len(f.calls) != 4 {
		t.Errorf("RunCategory(instance_creation) ran %d tests %v, want 4", len(f.calls), f.calls)
	}
}

// catalogWant is the catalog of duroxide-contract.md §1.5 for the ported
// categories, by number.
var catalogWant = map[int][2]string{
	1: {"instance_creation", "test_instance_creation_via_metadata"},
	2: {"instance_creation", "test_no_instance_creation_on_enqueue"},
	3: {"instance_creation", "test_null_version_handling"},
	4: {"instance_creation", "test_sub_orchestration_instance_creation"},

	5: {"atomicity", "test_atomicity_failure_rollback"},
	6: {"atomicity", "test_multi_operation_atomic_ack"},
	7: {"atomicity", "test_lock_released_only_on_successful_ack"},
	8: {"atomicity", "test_concurrent_ack_prevention"},

	9:  {"error_handling", "test_invalid_lock_token_on_ack"},
	10: {"error_handling", "test_duplicate_event_id_rejection"},
	11: {"error_handling", "test_missing_instance_metadata"},
	12: {"error_handling", "test_corrupted_serialization_data"},
	13: {"error_handling", "test_lock_expiration_during_ack"},

	14: {"instance_locking", "test_exclusive_instance_lock"},
	15: {"instance_locking", "test_lock_token_uniqueness"},
	16: {"instance_locking", "test_invalid_lock_token_rejection"},
	17: {"instance_locking", "test_concurrent_instance_fetching"},
	18: {"instance_locking", "test_completions_arriving_during_lock_blocked"},
	19: {"instance_locking", "test_cross_instance_lock_isolation"},
	20: {"instance_locking", "test_message_tagging_during_lock"},
	21: {"instance_locking", "test_ack_only_affects_locked_messages"},
	22: {"instance_locking", "test_multi_threaded_lock_contention"},
	23: {"instance_locking", "test_multi_threaded_no_duplicate_processing"},
	24: {"instance_locking", "test_multi_threaded_lock_expiration_recovery"},

	25: {"lock_expiration", "test_lock_expires_after_timeout"},
	26: {"lock_expiration", "test_abandon_releases_lock_immediately"},
	27: {"lock_expiration", "test_lock_renewal_on_ack"},
	28: {"lock_expiration", "test_concurrent_lock_attempts_respect_expiration"},
	29: {"lock_expiration", "test_worker_lock_renewal_success"},
	30: {"lock_expiration", "test_worker_lock_renewal_invalid_token"},
	31: {"lock_expiration", "test_worker_lock_renewal_after_expiration"},
	32: {"lock_expiration", "test_worker_lock_renewal_extends_timeout"},
	33: {"lock_expiration", "test_worker_lock_renewal_after_ack"},
	34: {"lock_expiration", "test_abandon_work_item_releases_lock"},
	35: {"lock_expiration", "test_abandon_work_item_with_delay"},
	36: {"lock_expiration", "test_worker_ack_fails_after_lock_expiry"},
	37: {"lock_expiration", "test_orchestration_lock_renewal_after_expiration"},

	38: {"multi_execution", "test_execution_isolation"},
	39: {"multi_execution", "test_latest_execution_detection"},
	40: {"multi_execution", "test_execution_id_sequencing"},
	41: {"multi_execution", "test_continue_as_new_creates_new_execution"},
	42: {"multi_execution", "test_execution_history_persistence"},

	43: {"queue_semantics", "test_worker_queue_fifo_ordering"},
	44: {"queue_semantics", "test_worker_peek_lock_semantics"},
	45: {"queue_semantics", "test_worker_ack_atomicity"},
	46: {"queue_semantics", "test_timer_delayed_visibility"},
	47: {"queue_semantics", "test_lost_lock_token_handling"},
	48: {"queue_semantics", "test_worker_item_immediate_visibility"},
	49: {"queue_semantics", "test_worker_delayed_visibility_skips_future_items"},
	50: {"queue_semantics", "test_orphan_queue_messages_dropped"},

	58: {"long_polling", "test_short_poll_returns_immediately"},
	59: {"long_polling", "test_long_poll_waits_for_timeout"},
	60: {"long_polling", "test_fetch_respects_timeout_upper_bound"},
	61: {"long_polling", "test_short_poll_work_item_returns_immediately"},
	62: {"long_polling", "test_long_poll_work_item_waits_for_timeout"},

	63: {"poison_message", "orchestration_attempt_count_starts_at_one"},
	64: {"poison_message", "orchestration_attempt_count_increments_on_refetch"},
	65: {"poison_message", "worker_attempt_count_starts_at_one"},
	66: {"poison_message", "worker_attempt_count_increments_on_lock_expiry"},
	67: {"poison_message", "attempt_count_is_per_message"},
	68: {"poison_message", "abandon_work_item_ignore_attempt_decrements"},
	69: {"poison_message", "abandon_orchestration_item_ignore_attempt_decrements"},
	70: {"poison_message", "ignore_attempt_never_goes_negative"},
	71: {"poison_message", "max_attempt_count_across_message_batch"},
}

// TestCatalog checks that the registry holds catalog numbers 1–71 except
// 51–57 (management), each once, with the catalog's names and categories.
func TestCatalog(t *testing.T) {
	cat := conformance.Catalog()
	if len(cat) != 64 {
		t.Errorf("Catalog() has %d entries, want 64", len(cat))
	}
	numbers := map[int]int{}
	names := map[string]int{}
	perCategory := map[string]int{}
	for _, e := range cat {
		numbers[e.Number]++
		names[e.Name]++
		perCategory[e.Category]++
		want, ok := catalogWant[e.Number]
		if !ok {
			t.Errorf("Catalog() entry %d %s/%s: number not in the ported catalog", e.Number, e.Category, e.Name)
			continue
		}
		if e.Category != want[0] || e.Name != want[1] {
			t.Errorf("Catalog() entry %d is %s/%s, want %s/%s", e.Number, e.Category, e.Name, want[0], want[1])
		}
	}
	for n := 1; n <= 71; n++ {
		want := 1
		if n >= 51 && n <= 57 {
			want = 0
		}
		if numbers[n] != want {
			t.Errorf("catalog number %d registered %d times, want %d", n, numbers[n], want)
		}
	}
	for name, n := range names {
		if n != 1 {
			t.Errorf("test name %q registered %d times, want 1", name, n)
		}
	}
	wantCounts := map[string]int{
		"instance_creation": 4, "atomicity": 4, "error_handling": 5, "instance_locking": 11,
		"lock_expiration": 13, "multi_execution": 5, "queue_semantics": 8, "long_polling": 5, "poison_message": 9,
	}
	wantOrder := []string{"instance_creation", "atomicity", "error_handling", "instance_locking",
		"lock_expiration", "multi_execution", "queue_semantics", "long_polling", "poison_message"}
	if got := conformance.Categories(); !slices.Equal(got, wantOrder) {
		t.Errorf("Categories() = %v, want %v", got, wantOrder)
	}
	for c, n := range wantCounts {
		if perCategory[c] != n {
			t.Errorf("category %s has %d tests, want %d", c, perCategory[c], n)
		}
	}
	if !slices.IsSortedFunc(cat, func(a, b conformance.CatalogEntry) int { return a.Number - b.Number }) {
		t.Errorf("Catalog() is not in catalog order")
	}
}

// TestMemrefHooks checks the test-only hooks of the reference provider, which
// the suite's later categories rely on.
func TestMemrefHooks(t *testing.T) {
	ctx := context.Background()
	p := memref.New()
	const inst = "hook-instance"
	ev := provider.Event{EventID: 1, InstanceID: inst, ExecutionID: 1, DuroxideVersion: "0.1.26",
		Kind: provider.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"}}
	v := "1.0.0"
	name := "TestOrch"
	md := provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &v}
	start := provider.StartOrchestration{Instance: inst, Orchestration: name, Input: "{}", Version: &v, ExecutionID: 1}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.EnqueueForOrchestrator(ctx, start, 0))
	item, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || item == nil {
		t.Fatalf("fetch: %v, %v", item, err)
	}
	must(p.AckOrchestrationItem(ctx, item.LockToken, 1, []provider.Event{ev}, nil, nil, md, nil))

	memref.CorruptHistory(p, inst)
	must(p.EnqueueForOrchestrator(ctx, start, 0))
	for want := uint32(1); want <= 3; want++ {
		item, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || item == nil {
			t.Fatalf("fetch of corrupted instance: %v, %v; want an item", item, err)
		}
		if item.Item.HistoryError == nil || len(item.Item.History) != 0 {
			t.Fatalf("fetch of corrupted instance: history_error %v, history %d events; want an error and no events",
				item.Item.HistoryError, len(item.Item.History))
		}
		if got := memref.MaxAttemptCount(p, inst); got != want {
			t.Errorf("MaxAttemptCount after fetch %d = %d, want %d", want, got, want)
		}
		must(p.AbandonOrchestrationItem(ctx, item.LockToken, 0, false))
	}
	if _, err := p.Read(ctx, inst); err == nil || !strings.Contains(fmt.Sprint(err), "decoded") {
		t.Errorf("Read of a corrupted history: %v, want a decode error", err)
	}
}
