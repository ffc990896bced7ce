package conformance

// Category names of the contract tables (duroxide module names).
const (
	catCancellation        = "cancellation"
	catCapabilityFiltering = "capability_filtering"
	catSessions            = "sessions"
	catCustomStatus        = "custom_status"
	catTagFiltering        = "tag_filtering"
)

// contractTests are categories K cancellation, O capability_filtering,
// P sessions, Q custom_status and R tag_filtering (catalog numbers 72–87,
// 109–178).
var contractTests = []testCase{
	// K. cancellation
	{72, catCancellation, "test_fetch_returns_running_state_for_active_orchestration", anyPoll, testFetchReturnsRunningStateForActiveOrchestration},
	{73, catCancellation, "test_fetch_returns_terminal_state_when_orchestration_completed", anyPoll, testFetchReturnsTerminalStateWhenOrchestrationCompleted},
	{74, catCancellation, "test_fetch_returns_terminal_state_when_orchestration_failed", anyPoll, testFetchReturnsTerminalStateWhenOrchestrationFailed},
	{75, catCancellation, "test_fetch_returns_terminal_state_when_orchestration_continued_as_new", anyPoll, testFetchReturnsTerminalStateWhenOrchestrationContinuedAsNew},
	{76, catCancellation, "test_fetch_returns_missing_state_when_instance_deleted", anyPoll, testFetchReturnsMissingStateWhenInstanceDeleted},
	{77, catCancellation, "test_renew_returns_running_when_orchestration_active", anyPoll, testRenewReturnsRunningWhenOrchestrationActive},
	{78, catCancellation, "test_renew_returns_terminal_when_orchestration_completed", anyPoll, testRenewReturnsTerminalWhenOrchestrationCompleted},
	{79, catCancellation, "test_renew_returns_missing_when_instance_deleted", anyPoll, testRenewReturnsMissingWhenInstanceDeleted},
	{80, catCancellation, "test_ack_work_item_none_deletes_without_enqueue", anyPoll, testAckWorkItemNoneDeletesWithoutEnqueue},
	{81, catCancellation, "test_cancelled_activities_deleted_from_worker_queue", anyPoll, testCancelledActivitiesDeletedFromWorkerQueue},
	{82, catCancellation, "test_ack_work_item_fails_when_entry_deleted", anyPoll, testAckWorkItemFailsWhenEntryDeleted},
	{83, catCancellation, "test_renew_fails_when_entry_deleted", anyPoll, testRenewFailsWhenEntryDeleted},
	{84, catCancellation, "test_cancelling_nonexistent_activities_is_idempotent", anyPoll, testCancellingNonexistentActivitiesIsIdempotent},
	{85, catCancellation, "test_batch_cancellation_deletes_multiple_activities", anyPoll, testBatchCancellationDeletesMultipleActivities},
	{86, catCancellation, "test_same_activity_in_worker_items_and_cancelled_is_noop", anyPoll, testSameActivityInWorkerItemsAndCancelledIsNoop},
	{87, catCancellation, "test_orphan_activity_after_instance_force_deletion", anyPoll, testOrphanActivityAfterInstanceForceDeletion},

	// O. capability_filtering
	{109, catCapabilityFiltering, "test_fetch_with_filter_none_returns_any_item", anyPoll, testFetchWithFilterNoneReturnsAnyItem},
	{110, catCapabilityFiltering, "test_fetch_with_compatible_filter_returns_item", anyPoll, testFetchWithCompatibleFilterReturnsItem},
	{111, catCapabilityFiltering, "test_fetch_with_incompatible_filter_skips_item", anyPoll, testFetchWithIncompatibleFilterSkipsItem},
	{112, catCapabilityFiltering, "test_fetch_filter_skips_incompatible_selects_compatible", anyPoll, testFetchFilterSkipsIncompatibleSelectsCompatible},
	{113, catCapabilityFiltering, "test_fetch_filter_does_not_lock_skipped_instances", anyPoll, testFetchFilterDoesNotLockSkippedInstances},
	{114, catCapabilityFiltering, "test_fetch_filter_null_pinned_version_always_compatible", anyPoll, testFetchFilterNullPinnedVersionAlwaysCompatible},
	{115, catCapabilityFiltering, "test_fetch_filter_boundary_versions", anyPoll, testFetchFilterBoundaryVersions},
	{116, catCapabilityFiltering, "test_pinned_version_stored_via_ack_metadata", anyPoll, testPinnedVersionStoredViaAckMetadata},
	{117, catCapabilityFiltering, "test_pinned_version_immutable_across_ack_cycles", anyPoll, testPinnedVersionImmutableAcrossAckCycles},
	{118, catCapabilityFiltering, "test_continue_as_new_execution_gets_own_pinned_version", anyPoll, testContinueAsNewExecutionGetsOwnPinnedVersion},
	{119, catCapabilityFiltering, "test_filter_with_empty_supported_versions_returns_nothing", anyPoll, testFilterWithEmptySupportedVersionsReturnsNothing},
	{120, catCapabilityFiltering, "test_concurrent_filtered_fetch_no_double_lock", anyPoll, testConcurrentFilteredFetchNoDoubleLock},
	{121, catCapabilityFiltering, "test_ack_stores_pinned_version_via_metadata_update", anyPoll, testAckStoresPinnedVersionViaMetadataUpdate},
	{122, catCapabilityFiltering, "test_provider_updates_pinned_version_when_told", anyPoll, testProviderUpdatesPinnedVersionWhenTold},
	{123, catCapabilityFiltering, "test_fetch_corrupted_history_filtered_vs_unfiltered", anyPoll, testFetchCorruptedHistoryFilteredVsUnfiltered},
	{124, catCapabilityFiltering, "test_fetch_deserialization_error_increments_attempt_count", anyPoll, testFetchDeserializationErrorIncrementsAttemptCount},
	{125, catCapabilityFiltering, "test_fetch_deserialization_error_eventually_reaches_poison", anyPoll, testFetchDeserializationErrorEventuallyReachesPoison},
	{126, catCapabilityFiltering, "test_fetch_filter_applied_before_history_deserialization", anyPoll, testFetchFilterAppliedBeforeHistoryDeserialization},
	{127, catCapabilityFiltering, "test_fetch_single_range_only_uses_first_range", anyPoll, testFetchSingleRangeOnlyUsesFirstRange},
	{128, catCapabilityFiltering, "test_ack_appends_event_to_corrupted_history", anyPoll, testAckAppendsEventToCorruptedHistory},

	// P. sessions
	{129, catSessions, "test_non_session_items_fetchable_by_any_worker", anyPoll, testNonSessionItemsFetchableByAnyWorker},
	{130, catSessions, "test_session_item_claimable_when_no_session", anyPoll, testSessionItemClaimableWhenNoSession},
	{131, catSessions, "test_session_affinity_same_worker", anyPoll, testSessionAffinitySameWorker},
	{132, catSessions, "test_session_affinity_blocks_other_worker", anyPoll, testSessionAffinityBlocksOtherWorker},
	{133, catSessions, "test_different_sessions_different_workers", anyPoll, testDifferentSessionsDifferentWorkers},
	{134, catSessions, "test_mixed_session_and_non_session_items", anyPoll, testMixedSessionAndNonSessionItems},
	{135, catSessions, "test_session_claimable_after_lock_expiry", anyPoll, testSessionClaimableAfterLockExpiry},
	{136, catSessions, "test_none_session_skips_session_items", anyPoll, testNoneSessionSkipsSessionItems},
	{137, catSessions, "test_some_session_returns_all_items", anyPoll, testSomeSessionReturnsAllItems},
	{138, catSessions, "test_renew_session_lock_active", anyPoll, testRenewSessionLockActive},
	{139, catSessions, "test_renew_session_lock_skips_idle", anyPoll, testRenewSessionLockSkipsIdle},
	{140, catSessions, "test_renew_session_lock_no_sessions", anyPoll, testRenewSessionLockNoSessions},
	{141, catSessions, "test_cleanup_removes_expired_no_items", anyPoll, testCleanupRemovesExpiredNoItems},
	{142, catSessions, "test_cleanup_keeps_sessions_with_pending_items", anyPoll, testCleanupKeepsSessionsWithPendingItems},
	{143, catSessions, "test_cleanup_keeps_active_sessions", anyPoll, testCleanupKeepsActiveSessions},
	{144, catSessions, "test_ack_updates_session_last_activity", anyPoll, testAckUpdatesSessionLastActivity},
	{145, catSessions, "test_renew_work_item_updates_session_last_activity", anyPoll, testRenewWorkItemUpdatesSessionLastActivity},
	{146, catSessions, "test_session_items_processed_in_order", anyPoll, testSessionItemsProcessedInOrder},
	{147, catSessions, "test_non_session_items_returned_with_session_config", anyPoll, testNonSessionItemsReturnedWithSessionConfig},
	{148, catSessions, "test_shared_worker_id_any_caller_can_fetch_owned_session", anyPoll, testSharedWorkerIDAnyCallerCanFetchOwnedSession},
	{149, catSessions, "test_concurrent_session_claim_only_one_wins", anyPoll, testConcurrentSessionClaimOnlyOneWins},
	{150, catSessions, "test_session_takeover_after_lock_expiry", anyPoll, testSessionTakeoverAfterLockExpiry},
	{151, catSessions, "test_cleanup_then_new_item_recreates_session", anyPoll, testCleanupThenNewItemRecreatesSession},
	{152, catSessions, "test_abandoned_session_item_retryable", anyPoll, testAbandonedSessionItemRetryable},
	{153, catSessions, "test_abandoned_session_item_ignore_attempt", anyPoll, testAbandonedSessionItemIgnoreAttempt},
	{154, catSessions, "test_renew_session_lock_after_expiry_returns_zero", anyPoll, testRenewSessionLockAfterExpiryReturnsZero},
	{155, catSessions, "test_original_worker_reclaims_expired_session", anyPoll, testOriginalWorkerReclaimsExpiredSession},
	{156, catSessions, "test_activity_lock_expires_session_lock_valid_same_worker_refetches", anyPoll, testActivityLockExpiresSessionLockValidSameWorkerRefetches},
	{157, catSessions, "test_session_lock_expires_new_owner_gets_redelivery", anyPoll, testSessionLockExpiresNewOwnerGetsRedelivery},
	{158, catSessions, "test_session_lock_expires_same_worker_reacquires", anyPoll, testSessionLockExpiresSameWorkerReacquires},
	{159, catSessions, "test_both_locks_expire_different_worker_claims", anyPoll, testBothLocksExpireDifferentWorkerClaims},
	{160, catSessions, "test_session_lock_expires_activity_lock_valid_ack_succeeds", anyPoll, testSessionLockExpiresActivityLockValidAckSucceeds},
	{161, catSessions, "test_session_lock_renewal_extends_past_original_timeout", anyPoll, testSessionLockRenewalExtendsPastOriginalTimeout},

	// Q. custom_status
	{162, catCustomStatus, "test_custom_status_set", anyPoll, testCustomStatusSet},
	{163, catCustomStatus, "test_custom_status_clear", anyPoll, testCustomStatusClear},
	{164, catCustomStatus, "test_custom_status_none_preserves", anyPoll, testCustomStatusNonePreserves},
	{165, catCustomStatus, "test_custom_status_version_increments", anyPoll, testCustomStatusVersionIncrements},
	{166, catCustomStatus, "test_custom_status_polling_no_change", anyPoll, testCustomStatusPollingNoChange},
	{167, catCustomStatus, "test_custom_status_nonexistent_instance", anyPoll, testCustomStatusNonexistentInstance},
	{168, catCustomStatus, "test_custom_status_default_on_new_instance", anyPoll, testCustomStatusDefaultOnNewInstance},

	// R. tag_filtering
	{169, catTagFiltering, "test_default_only_fetches_untagged", anyPoll, testDefaultOnlyFetchesUntagged},
	{170, catTagFiltering, "test_tags_fetches_only_matching", anyPoll, testTagsFetchesOnlyMatching},
	{171, catTagFiltering, "test_default_and_fetches_untagged_and_matching", anyPoll, testDefaultAndFetchesUntaggedAndMatching},
	{172, catTagFiltering, "test_none_filter_returns_nothing", anyPoll, testNoneFilterReturnsNothing},
	{173, catTagFiltering, "test_multi_tag_filter", anyPoll, testMultiTagFilter},
	{174, catTagFiltering, "test_tag_round_trip_preservation", anyPoll, testTagRoundTripPreservation},
	{175, catTagFiltering, "test_any_filter_fetches_everything", anyPoll, testAnyFilterFetchesEverything},
	{176, catTagFiltering, "test_tag_survives_abandon_and_refetch", anyPoll, testTagSurvivesAbandonAndRefetch},
	{177, catTagFiltering, "test_multi_runtime_tag_isolation", anyPoll, testMultiRuntimeTagIsolation},
	{178, catTagFiltering, "test_tag_preserved_through_ack_orchestration_item", anyPoll, testTagPreservedThroughAckOrchestrationItem},
}
