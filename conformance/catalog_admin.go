package conformance

// Category names of the admin tables (duroxide module names).
const (
	catManagement   = "management"
	catDeletion     = "deletion"
	catPrune        = "prune"
	catBulkDeletion = "bulk_deletion"
)

// adminTests are categories H management, L deletion, M prune and
// N bulk_deletion (catalog numbers 51–57, 88–108). They need the provider's
// Admin capability: each test skips itself when Provider.Admin reports none.
var adminTests = []testCase{
	// H. management
	{51, catManagement, "test_list_instances", anyPoll, testListInstances},
	{52, catManagement, "test_list_instances_by_status", anyPoll, testListInstancesByStatus},
	{53, catManagement, "test_list_executions", anyPoll, testListExecutions},
	{54, catManagement, "test_get_instance_info", anyPoll, testGetInstanceInfo},
	{55, catManagement, "test_get_execution_info", anyPoll, testGetExecutionInfo},
	{56, catManagement, "test_get_system_metrics", anyPoll, testGetSystemMetrics},
	{57, catManagement, "test_get_queue_depths", anyPoll, testGetQueueDepths},

	// L. deletion
	{88, catDeletion, "test_delete_terminal_instances", anyPoll, testDeleteTerminalInstances},
	{89, catDeletion, "test_delete_running_rejected_force_succeeds", anyPoll, testDeleteRunningRejectedForceSucceeds},
	{90, catDeletion, "test_delete_nonexistent_instance", anyPoll, testDeleteNonexistentInstance},
	{91, catDeletion, "test_delete_cleans_queues_and_locks", anyPoll, testDeleteCleansQueuesAndLocks},
	{92, catDeletion, "test_cascade_delete_hierarchy", anyPoll, testCascadeDeleteHierarchy},
	{93, catDeletion, "test_force_delete_prevents_ack_recreation", anyPoll, testForceDeletePreventsAckRecreation},
	{94, catDeletion, "test_list_children", anyPoll, testListChildren},
	{95, catDeletion, "test_delete_get_parent_id", anyPoll, testDeleteGetParentID},
	{96, catDeletion, "test_delete_get_instance_tree", anyPoll, testDeleteGetInstanceTree},
	{97, catDeletion, "test_delete_instances_atomic", anyPoll, testDeleteInstancesAtomic},
	{98, catDeletion, "test_delete_instances_atomic_force", anyPoll, testDeleteInstancesAtomicForce},
	{99, catDeletion, "test_delete_instances_atomic_orphan_detection", anyPoll, testDeleteInstancesAtomicOrphanDetection},
	{100, catDeletion, "test_stale_activity_after_delete_recreate", anyPoll, testStaleActivityAfterDeleteRecreate},

	// M. prune
	{101, catPrune, "test_prune_options_combinations", anyPoll, testPruneOptionsCombinations},
	{102, catPrune, "test_prune_safety", anyPoll, testPruneSafety},
	{103, catPrune, "test_prune_bulk", anyPoll, testPruneBulk},
	{104, catPrune, "test_prune_bulk_includes_running_instances", anyPoll, testPruneBulkIncludesRunningInstances},

	// N. bulk_deletion
	{105, catBulkDeletion, "test_delete_instance_bulk_filter_combinations", anyPoll, testDeleteInstanceBulkFilterCombinations},
	{106, catBulkDeletion, "test_delete_instance_bulk_safety_and_limits", anyPoll, testDeleteInstanceBulkSafetyAndLimits},
	{107, catBulkDeletion, "test_delete_instance_bulk_completed_before_filter", anyPoll, testDeleteInstanceBulkCompletedBeforeFilter},
	{108, catBulkDeletion, "test_delete_instance_bulk_cascades_to_children", anyPoll, testDeleteInstanceBulkCascadesToChildren},
}
