package conformance

import (
	"slices"
	"testing"
)

// CatalogEntry names one test of the suite: its category (the duroxide
// module, which is also the category subtest's name), its name (the duroxide
// function, which is also the subtest's name) and its number in the durofs
// contract catalog (duroxide-contract.md §1.5).
type CatalogEntry struct {
	Category string
	Name     string
	Number   int
}

// Catalog returns every test of the suite in catalog order. Run registers
// each of them as the subtest Category/Name exactly once.
func Catalog() []CatalogEntry {
	out := make([]CatalogEntry, len(registry))
	for i, tc := range registry {
		out[i] = CatalogEntry{Category: tc.category, Name: tc.name, Number: tc.number}
	}
	return out
}

// pollMode says for which kind of provider a test applies.
type pollMode int

const (
	anyPoll       pollMode = iota // every provider
	longPollOnly                  // providers whose Factory.LongPolls() is true
	shortPollOnly                 // providers whose Factory.LongPolls() is false
)

// testCase is one registered test. Run and Catalog both derive from the
// registry, so every catalog entry is a subtest.
type testCase struct {
	number   int
	category string
	name     string
	poll     pollMode
	fn       func(t *testing.T, f Factory)
}

// Category names (duroxide module names).
const (
	catInstanceCreation = "instance_creation"
	catAtomicity        = "atomicity"
	catErrorHandling    = "error_handling"
	catInstanceLocking  = "instance_locking"
	catLockExpiration   = "lock_expiration"
	catMultiExecution   = "multi_execution"
	catQueueSemantics   = "queue_semantics"
	catLongPolling      = "long_polling"
	catPoisonMessage    = "poison_message"
)

// registry is the suite in catalog order: the core categories below plus
// the tables of the other catalog files, sorted by catalog number.
var registry = sortedRegistry(coreTests, contractTests, adminTests)

// sortedRegistry concatenates test tables and orders them by catalog number.
func sortedRegistry(tables ...[]testCase) []testCase {
	var all []testCase
	for _, t := range tables {
		all = append(all, t...)
	}
	slices.SortStableFunc(all, func(a, b testCase) int { return a.number - b.number })
	return all
}

// coreTests are categories A–G, I and J (catalog numbers 1–71 except 51–57).
var coreTests = []testCase{
	// A. instance_creation
	{1, catInstanceCreation, "test_instance_creation_via_metadata", anyPoll, testInstanceCreationViaMetadata},
	{2, catInstanceCreation, "test_no_instance_creation_on_enqueue", anyPoll, testNoInstanceCreationOnEnqueue},
	{3, catInstanceCreation, "test_null_version_handling", anyPoll, testNullVersionHandling},
	{4, catInstanceCreation, "test_sub_orchestration_instance_creation", anyPoll, testSubOrchestrationInstanceCreation},

	// B. atomicity
	{5, catAtomicity, "test_atomicity_failure_rollback", anyPoll, testAtomicityFailureRollback},
	{6, catAtomicity, "test_multi_operation_atomic_ack", anyPoll, testMultiOperationAtomicAck},
	{7, catAtomicity, "test_lock_released_only_on_successful_ack", anyPoll, testLockReleasedOnlyOnSuccessfulAck},
	{8, catAtomicity, "test_concurrent_ack_prevention", anyPoll, testConcurrentAckPrevention},

	// C. error_handling
	{9, catErrorHandling, "test_invalid_lock_token_on_ack", anyPoll, testInvalidLockTokenOnAck},
	{10, catErrorHandling, "test_duplicate_event_id_rejection", anyPoll, testDuplicateEventIDRejection},
	{11, catErrorHandling, "test_missing_instance_metadata", anyPoll, testMissingInstanceMetadata},
	{12, catErrorHandling, "test_corrupted_serialization_data", anyPoll, testCorruptedSerializationData},
	{13, catErrorHandling, "test_lock_expiration_during_ack", anyPoll, testLockExpirationDuringAck},

	// D. instance_locking
	{14, catInstanceLocking, "test_exclusive_instance_lock", anyPoll, testExclusiveInstanceLock},
	{15, catInstanceLocking, "test_lock_token_uniqueness", anyPoll, testLockTokenUniqueness},
	{16, catInstanceLocking, "test_invalid_lock_token_rejection", anyPoll, testInvalidLockTokenRejection},
	{17, catInstanceLocking, "test_concurrent_instance_fetching", anyPoll, testConcurrentInstanceFetching},
	{18, catInstanceLocking, "test_completions_arriving_during_lock_blocked", anyPoll, testCompletionsArrivingDuringLockBlocked},
	{19, catInstanceLocking, "test_cross_instance_lock_isolation", anyPoll, testCrossInstanceLockIsolation},
	{20, catInstanceLocking, "test_message_tagging_during_lock", anyPoll, testMessageTaggingDuringLock},
	{21, catInstanceLocking, "test_ack_only_affects_locked_messages", anyPoll, testAckOnlyAffectsLockedMessages},
	{22, catInstanceLocking, "test_multi_threaded_lock_contention", anyPoll, testMultiThreadedLockContention},
	{23, catInstanceLocking, "test_multi_threaded_no_duplicate_processing", anyPoll, testMultiThreadedNoDuplicateProcessing},
	{24, catInstanceLocking, "test_multi_threaded_lock_expiration_recovery", anyPoll, testMultiThreadedLockExpirationRecovery},

	// E. lock_expiration
	{25, catLockExpiration, "test_lock_expires_after_timeout", anyPoll, testLockExpiresAfterTimeout},
	{26, catLockExpiration, "test_abandon_releases_lock_immediately", anyPoll, testAbandonReleasesLockImmediately},
	{27, catLockExpiration, "test_lock_renewal_on_ack", anyPoll, testLockRenewalOnAck},
	{28, catLockExpiration, "test_concurrent_lock_attempts_respect_expiration", anyPoll, testConcurrentLockAttemptsRespectExpiration},
	{29, catLockExpiration, "test_worker_lock_renewal_success", anyPoll, testWorkerLockRenewalSuccess},
	{30, catLockExpiration, "test_worker_lock_renewal_invalid_token", anyPoll, testWorkerLockRenewalInvalidToken},
	{31, catLockExpiration, "test_worker_lock_renewal_after_expiration", anyPoll, testWorkerLockRenewalAfterExpiration},
	{32, catLockExpiration, "test_worker_lock_renewal_extends_timeout", anyPoll, testWorkerLockRenewalExtendsTimeout},
	{33, catLockExpiration, "test_worker_lock_renewal_after_ack", anyPoll, testWorkerLockRenewalAfterAck},
	{34, catLockExpiration, "test_abandon_work_item_releases_lock", anyPoll, testAbandonWorkItemReleasesLock},
	{35, catLockExpiration, "test_abandon_work_item_with_delay", anyPoll, testAbandonWorkItemWithDelay},
	{36, catLockExpiration, "test_worker_ack_fails_after_lock_expiry", anyPoll, testWorkerAckFailsAfterLockExpiry},
	{37, catLockExpiration, "test_orchestration_lock_renewal_after_expiration", anyPoll, testOrchestrationLockRenewalAfterExpiration},

	// F. multi_execution
	{38, catMultiExecution, "test_execution_isolation", anyPoll, testExecutionIsolation},
	{39, catMultiExecution, "test_latest_execution_detection", anyPoll, testLatestExecutionDetection},
	{40, catMultiExecution, "test_execution_id_sequencing", anyPoll, testExecutionIDSequencing},
	{41, catMultiExecution, "test_continue_as_new_creates_new_execution", anyPoll, testContinueAsNewCreatesNewExecution},
	{42, catMultiExecution, "test_execution_history_persistence", anyPoll, testExecutionHistoryPersistence},

	// G. queue_semantics
	{43, catQueueSemantics, "test_worker_queue_fifo_ordering", anyPoll, testWorkerQueueFIFOOrdering},
	{44, catQueueSemantics, "test_worker_peek_lock_semantics", anyPoll, testWorkerPeekLockSemantics},
	{45, catQueueSemantics, "test_worker_ack_atomicity", anyPoll, testWorkerAckAtomicity},
	{46, catQueueSemantics, "test_timer_delayed_visibility", anyPoll, testTimerDelayedVisibility},
	{47, catQueueSemantics, "test_lost_lock_token_handling", anyPoll, testLostLockTokenHandling},
	{48, catQueueSemantics, "test_worker_item_immediate_visibility", anyPoll, testWorkerItemImmediateVisibility},
	{49, catQueueSemantics, "test_worker_delayed_visibility_skips_future_items", anyPoll, testWorkerDelayedVisibilitySkipsFutureItems},
	{50, catQueueSemantics, "test_orphan_queue_messages_dropped", anyPoll, testOrphanQueueMessagesDropped},

	// I. long_polling
	{58, catLongPolling, "test_short_poll_returns_immediately", shortPollOnly, testShortPollReturnsImmediately},
	{59, catLongPolling, "test_long_poll_waits_for_timeout", longPollOnly, testLongPollWaitsForTimeout},
	{60, catLongPolling, "test_fetch_respects_timeout_upper_bound", anyPoll, testFetchRespectsTimeoutUpperBound},
	{61, catLongPolling, "test_short_poll_work_item_returns_immediately", shortPollOnly, testShortPollWorkItemReturnsImmediately},
	{62, catLongPolling, "test_long_poll_work_item_waits_for_timeout", longPollOnly, testLongPollWorkItemWaitsForTimeout},

	// J. poison_message
	{63, catPoisonMessage, "orchestration_attempt_count_starts_at_one", anyPoll, orchestrationAttemptCountStartsAtOne},
	{64, catPoisonMessage, "orchestration_attempt_count_increments_on_refetch", anyPoll, orchestrationAttemptCountIncrementsOnRefetch},
	{65, catPoisonMessage, "worker_attempt_count_starts_at_one", anyPoll, workerAttemptCountStartsAtOne},
	{66, catPoisonMessage, "worker_attempt_count_increments_on_lock_expiry", anyPoll, workerAttemptCountIncrementsOnLockExpiry},
	{67, catPoisonMessage, "attempt_count_is_per_message", anyPoll, attemptCountIsPerMessage},
	{68, catPoisonMessage, "abandon_work_item_ignore_attempt_decrements", anyPoll, abandonWorkItemIgnoreAttemptDecrements},
	{69, catPoisonMessage, "abandon_orchestration_item_ignore_attempt_decrements", anyPoll, abandonOrchestrationItemIgnoreAttemptDecrements},
	{70, catPoisonMessage, "ignore_attempt_never_goes_negative", anyPoll, ignoreAttemptNeverGoesNegative},
	{71, catPoisonMessage, "max_attempt_count_across_message_batch", anyPoll, maxAttemptCountAcrossMessageBatch},
}
