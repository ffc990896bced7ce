package conformance_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
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
// ask for a provider; test_fetch_filter_boundary_versions asks for a second,
// isolated one).
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
	providers := map[string]int{ // tests that need more than one provider
		"test_fetch_filter_boundary_versions": 2,
	}
	want := map[string]bool{}
	for _, e := range conformance.Catalog() {
		if skipped[e.Name] {
			continue
		}
		name := t.Name() + "/" + e.Category + "/" + e.Name
		want[name] = true
		wantCalls := max(providers[e.Name], 1)
		if n := f.calls[name]; n != wantCalls {
			t.Errorf("catalog test %d %s: NewProvider called %d times, want %d (the test must run exactly once)", e.Number, name, n, wantCalls)
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

	51: {"management", "test_list_instances"},
	52: {"management", "test_list_instances_by_status"},
	53: {"management", "test_list_executions"},
	54: {"management", "test_get_instance_info"},
	55: {"management", "test_get_execution_info"},
	56: {"management", "test_get_system_metrics"},
	57: {"management", "test_get_queue_depths"},

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

	72: {"cancellation", "test_fetch_returns_running_state_for_active_orchestration"},
	73: {"cancellation", "test_fetch_returns_terminal_state_when_orchestration_completed"},
	74: {"cancellation", "test_fetch_returns_terminal_state_when_orchestration_failed"},
	75: {"cancellation", "test_fetch_returns_terminal_state_when_orchestration_continued_as_new"},
	76: {"cancellation", "test_fetch_returns_missing_state_when_instance_deleted"},
	77: {"cancellation", "test_renew_returns_running_when_orchestration_active"},
	78: {"cancellation", "test_renew_returns_terminal_when_orchestration_completed"},
	79: {"cancellation", "test_renew_returns_missing_when_instance_deleted"},
	80: {"cancellation", "test_ack_work_item_none_deletes_without_enqueue"},
	81: {"cancellation", "test_cancelled_activities_deleted_from_worker_queue"},
	82: {"cancellation", "test_ack_work_item_fails_when_entry_deleted"},
	83: {"cancellation", "test_renew_fails_when_entry_deleted"},
	84: {"cancellation", "test_cancelling_nonexistent_activities_is_idempotent"},
	85: {"cancellation", "test_batch_cancellation_deletes_multiple_activities"},
	86: {"cancellation", "test_same_activity_in_worker_items_and_cancelled_is_noop"},
	87: {"cancellation", "test_orphan_activity_after_instance_force_deletion"},

	88:  {"deletion", "test_delete_terminal_instances"},
	89:  {"deletion", "test_delete_running_rejected_force_succeeds"},
	90:  {"deletion", "test_delete_nonexistent_instance"},
	91:  {"deletion", "test_delete_cleans_queues_and_locks"},
	92:  {"deletion", "test_cascade_delete_hierarchy"},
	93:  {"deletion", "test_force_delete_prevents_ack_recreation"},
	94:  {"deletion", "test_list_children"},
	95:  {"deletion", "test_delete_get_parent_id"},
	96:  {"deletion", "test_delete_get_instance_tree"},
	97:  {"deletion", "test_delete_instances_atomic"},
	98:  {"deletion", "test_delete_instances_atomic_force"},
	99:  {"deletion", "test_delete_instances_atomic_orphan_detection"},
	100: {"deletion", "test_stale_activity_after_delete_recreate"},

	101: {"prune", "test_prune_options_combinations"},
	102: {"prune", "test_prune_safety"},
	103: {"prune", "test_prune_bulk"},
	104: {"prune", "test_prune_bulk_includes_running_instances"},

	105: {"bulk_deletion", "test_delete_instance_bulk_filter_combinations"},
	106: {"bulk_deletion", "test_delete_instance_bulk_safety_and_limits"},
	107: {"bulk_deletion", "test_delete_instance_bulk_completed_before_filter"},
	108: {"bulk_deletion", "test_delete_instance_bulk_cascades_to_children"},

	109: {"capability_filtering", "test_fetch_with_filter_none_returns_any_item"},
	110: {"capability_filtering", "test_fetch_with_compatible_filter_returns_item"},
	111: {"capability_filtering", "test_fetch_with_incompatible_filter_skips_item"},
	112: {"capability_filtering", "test_fetch_filter_skips_incompatible_selects_compatible"},
	113: {"capability_filtering", "test_fetch_filter_does_not_lock_skipped_instances"},
	114: {"capability_filtering", "test_fetch_filter_null_pinned_version_always_compatible"},
	115: {"capability_filtering", "test_fetch_filter_boundary_versions"},
	116: {"capability_filtering", "test_pinned_version_stored_via_ack_metadata"},
	117: {"capability_filtering", "test_pinned_version_immutable_across_ack_cycles"},
	118: {"capability_filtering", "test_continue_as_new_execution_gets_own_pinned_version"},
	119: {"capability_filtering", "test_filter_with_empty_supported_versions_returns_nothing"},
	120: {"capability_filtering", "test_concurrent_filtered_fetch_no_double_lock"},
	121: {"capability_filtering", "test_ack_stores_pinned_version_via_metadata_update"},
	122: {"capability_filtering", "test_provider_updates_pinned_version_when_told"},
	123: {"capability_filtering", "test_fetch_corrupted_history_filtered_vs_unfiltered"},
	124: {"capability_filtering", "test_fetch_deserialization_error_increments_attempt_count"},
	125: {"capability_filtering", "test_fetch_deserialization_error_eventually_reaches_poison"},
	126: {"capability_filtering", "test_fetch_filter_applied_before_history_deserialization"},
	127: {"capability_filtering", "test_fetch_single_range_only_uses_first_range"},
	128: {"capability_filtering", "test_ack_appends_event_to_corrupted_history"},

	129: {"sessions", "test_non_session_items_fetchable_by_any_worker"},
	130: {"sessions", "test_session_item_claimable_when_no_session"},
	131: {"sessions", "test_session_affinity_same_worker"},
	132: {"sessions", "test_session_affinity_blocks_other_worker"},
	133: {"sessions", "test_different_sessions_different_workers"},
	134: {"sessions", "test_mixed_session_and_non_session_items"},
	135: {"sessions", "test_session_claimable_after_lock_expiry"},
	136: {"sessions", "test_none_session_skips_session_items"},
	137: {"sessions", "test_some_session_returns_all_items"},
	138: {"sessions", "test_renew_session_lock_active"},
	139: {"sessions", "test_renew_session_lock_skips_idle"},
	140: {"sessions", "test_renew_session_lock_no_sessions"},
	141: {"sessions", "test_cleanup_removes_expired_no_items"},
	142: {"sessions", "test_cleanup_keeps_sessions_with_pending_items"},
	143: {"sessions", "test_cleanup_keeps_active_sessions"},
	144: {"sessions", "test_ack_updates_session_last_activity"},
	145: {"sessions", "test_renew_work_item_updates_session_last_activity"},
	146: {"sessions", "test_session_items_processed_in_order"},
	147: {"sessions", "test_non_session_items_returned_with_session_config"},
	148: {"sessions", "test_shared_worker_id_any_caller_can_fetch_owned_session"},
	149: {"sessions", "test_concurrent_session_claim_only_one_wins"},
	150: {"sessions", "test_session_takeover_after_lock_expiry"},
	151: {"sessions", "test_cleanup_then_new_item_recreates_session"},
	152: {"sessions", "test_abandoned_session_item_retryable"},
	153: {"sessions", "test_abandoned_session_item_ignore_attempt"},
	154: {"sessions", "test_renew_session_lock_after_expiry_returns_zero"},
	155: {"sessions", "test_original_worker_reclaims_expired_session"},
	156: {"sessions", "test_activity_lock_expires_session_lock_valid_same_worker_refetches"},
	157: {"sessions", "test_session_lock_expires_new_owner_gets_redelivery"},
	158: {"sessions", "test_session_lock_expires_same_worker_reacquires"},
	159: {"sessions", "test_both_locks_expire_different_worker_claims"},
	160: {"sessions", "test_session_lock_expires_activity_lock_valid_ack_succeeds"},
	161: {"sessions", "test_session_lock_renewal_extends_past_original_timeout"},

	162: {"custom_status", "test_custom_status_set"},
	163: {"custom_status", "test_custom_status_clear"},
	164: {"custom_status", "test_custom_status_none_preserves"},
	165: {"custom_status", "test_custom_status_version_increments"},
	166: {"custom_status", "test_custom_status_polling_no_change"},
	167: {"custom_status", "test_custom_status_nonexistent_instance"},
	168: {"custom_status", "test_custom_status_default_on_new_instance"},

	169: {"tag_filtering", "test_default_only_fetches_untagged"},
	170: {"tag_filtering", "test_tags_fetches_only_matching"},
	171: {"tag_filtering", "test_default_and_fetches_untagged_and_matching"},
	172: {"tag_filtering", "test_none_filter_returns_nothing"},
	173: {"tag_filtering", "test_multi_tag_filter"},
	174: {"tag_filtering", "test_tag_round_trip_preservation"},
	175: {"tag_filtering", "test_any_filter_fetches_everything"},
	176: {"tag_filtering", "test_tag_survives_abandon_and_refetch"},
	177: {"tag_filtering", "test_multi_runtime_tag_isolation"},
	178: {"tag_filtering", "test_tag_preserved_through_ack_orchestration_item"},
}

// TestCatalog checks that the registry holds exactly the catalog numbers of
// catalogWant, each once, with the catalog's names and categories, and that
// the categories come in catalog order.
func TestCatalog(t *testing.T) {
	cat := conformance.Catalog()
	if len(cat) != len(catalogWant) {
		t.Errorf("Catalog() has %d entries, want %d", len(cat), len(catalogWant))
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
	for n := range catalogWant {
		if numbers[n] != 1 {
			t.Errorf("catalog number %d registered %d times, want 1", n, numbers[n])
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
		"management": 7, "deletion": 13, "prune": 4, "bulk_deletion": 4,
		"cancellation": 16, "capability_filtering": 20, "sessions": 33, "custom_status": 7, "tag_filtering": 10,
	}
	// The categories in catalog order: the order of their lowest numbers.
	var wantOrder []string
	for _, n := range slices.Sorted(maps.Keys(catalogWant)) {
		if c := catalogWant[n][0]; !slices.Contains(wantOrder, c) {
			wantOrder = append(wantOrder, c)
		}
	}
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
