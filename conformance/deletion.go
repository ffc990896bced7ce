package conformance

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/durofs/durofs/provider"
)

// L. deletion: deleting instances and their trees, the hierarchy
// primitives, and the guarantees that deleted instances cannot be revived by
// outstanding locks or stale workers.

// 88. Completed, failed and cancelled instances can be deleted without force.
func testDeleteTerminalInstances(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const (
		completed = "delete-term-completed"
		failed    = "delete-term-failed"
		cancelled = "delete-term-cancelled"
	)
	h.createCompletedInstance(completed)
	h.createTerminalInstance(failed, stFailed, "error: something went wrong")
	// A cancelled orchestration is stored as Failed with a cancellation message.
	h.createTerminalInstance(cancelled, stFailed, "cancelled: user requested cancellation")
	for _, inst := range []string{completed, failed, cancelled} {
		h.info(inst)
	}

	res := h.deleteOK(completed, false)
	if res.InstancesDeleted < 1 || res.ExecutionsDeleted < 1 || res.EventsDeleted < 1 {
		t.Errorf("DeleteInstance(%q, false) = %+v, want instances, executions and events deleted each ≥ 1", completed, res)
	}
	h.wantGone(completed, "it was deleted")

	for _, inst := range []string{failed, cancelled} {
		if res := h.deleteOK(inst, false); res.InstancesDeleted < 1 {
			t.Errorf("DeleteInstance(%q, false) = %+v, want instances_deleted ≥ 1", inst, res)
		}
		h.wantGone(inst, "it was deleted")
	}
}

// 89. Deleting a running instance needs force.
func testDeleteRunningRejectedForceSucceeds(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "delete-running-force"
	h.createInstance(inst) // status Running

	err := h.deleteErr(inst, false, "the instance is still running and force is false")
	h.wantPermanent(err, "DeleteInstance of a running instance without force")
	if !lowerMentions(err, "running") {
		t.Errorf("DeleteInstance of a running instance without force: error %q, want it to mention %q", err.Error(), "running")
	}
	h.wantExists(inst, "the rejected delete must not remove it")

	h.deleteOK(inst, true)
	h.wantGone(inst, "it was force-deleted")
}

// 90. Deleting an unknown instance is a permanent "not found" error.
func testDeleteNonexistentInstance(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "does-not-exist-12345"

	err := h.deleteErr(inst, false, "the instance does not exist")
	h.wantPermanent(err, "DeleteInstance of an unknown instance")
	if !lowerMentions(err, "not found") {
		t.Errorf("DeleteInstance of an unknown instance: error %q, want it to mention %q", err.Error(), "not found")
	}
}

// 91. Deleting removes queued work and the lock, so the id can be reused
// with no stale state.
func testDeleteCleansQueuesAndLocks(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "delete-queues-locks"

	h.enqueue(startItem(inst), 0)
	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	md := mdNameVersion(testOrchName, testOrchVersion)
	md.Status = ptr(stCompleted)
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, md)

	if res := h.deleteOK(inst, false); res.QueueMessagesDeleted < 1 {
		t.Errorf("DeleteInstance(%q, false) = %+v, want queue_messages_deleted ≥ 1 (the queued ActivityExecute)", inst, res)
	}

	const newName, newVersion, newInput = "ReusedOrch", "2.0.0", `{"reused": true}`
	h.enqueue(provider.StartOrchestration{
		Instance:      inst,
		Orchestration: newName,
		Input:         newInput,
		Version:       ptr(newVersion),
		ExecutionID:   provider.InitialExecutionID,
	}, 0)
	item = h.fetchSome(longLock, inst, "a new start for the deleted id was enqueued")
	if item.Item.OrchestrationName != newName {
		t.Errorf("fetch after delete and re-start: orchestration name %q, want %q (no stale instance metadata)",
			item.Item.OrchestrationName, newName)
	}
	ev := event(inst, 1, provider.InitialEventID, provider.OrchestrationStarted{Name: newName, Version: newVersion, Input: newInput})
	if err := h.ack(item.LockToken, 1, []provider.Event{ev}, nil, nil, mdNameVersion(newName, newVersion)); err != nil {
		t.Fatalf("ack recreating the deleted id: unexpected error: %s (no stale lock or history may block it)", describeErr(err))
	}
	if info := h.info(inst); info.OrchestrationName != newName {
		t.Errorf("GetInstanceInfo(%q).OrchestrationName = %q after recreation, want %q", inst, info.OrchestrationName, newName)
	}

	h.deleteOK(inst, true) // cleanup, as duroxide does
}

// 92. Sub-orchestrations cannot be deleted directly; deleting the root
// deletes the whole tree.
func testCascadeDeleteHierarchy(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const (
		root       = "cascade-root"
		child1     = "cascade-child1"
		child2     = "cascade-child2"
		grandchild = "cascade-grandchild"
	)
	h.createCompletedInstance(root)
	h.createCompletedInstanceWithParent(child1, root)
	h.createCompletedInstanceWithParent(child2, root)
	h.createCompletedInstanceWithParent(grandchild, child1)
	all := []string{root, child1, child2, grandchild}
	for _, inst := range all {
		h.info(inst)
	}

	err := h.deleteErr(child1, false, "a sub-orchestration cannot be deleted directly")
	if !lowerMentions(err, "sub-orchestration", "root", "parent") {
		t.Errorf("DeleteInstance of a sub-orchestration: error %q, want it to mention %q, %q or %q",
			err.Error(), "sub-orchestration", "root", "parent")
	}
	if !errors.Is(err, provider.ErrNotAllowed) || provider.IsRetryable(err) {
		t.Errorf("DeleteInstance of a sub-orchestration: error %v, want a permanent error wrapping provider.ErrNotAllowed", err)
	}
	h.deleteErr(child1, true, "a sub-orchestration cannot be deleted directly, even with force")
	h.deleteErr(grandchild, false, "a nested sub-orchestration cannot be deleted directly")

	res := h.deleteOK(root, false)
	if res.InstancesDeleted < 1 || res.ExecutionsDeleted < 4 {
		t.Errorf("DeleteInstance(%q, false) = %+v, want instances_deleted ≥ 1 and executions_deleted ≥ 4 (the whole tree)", root, res)
	}
	for _, inst := range all {
		h.wantGone(inst, "deleting the root deletes its whole tree")
	}
}

// 93. A force delete invalidates the instance lock, so an ack in flight
// fails and cannot recreate the instance.
func testForceDeletePreventsAckRecreation(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "zombie-prevention"
	h.createInstance(inst)

	h.enqueue(provider.ExternalRaised{Instance: inst, Name: "test-event", Data: "{}"}, 0)
	item := h.fetchSome(longLock, inst, "an ExternalRaised was just enqueued")

	if res := h.deleteOK(inst, true); res.InstancesDeleted < 1 {
		t.Errorf("DeleteInstance(%q, true) = %+v, want instances_deleted ≥ 1", inst, res)
	}

	ev := event(inst, 1, 2, provider.ExternalEvent{Name: "test-event", Data: "{}"})
	if err := h.ack(item.LockToken, 1, []provider.Event{ev}, nil, nil, provider.ExecutionMetadata{}); err == nil {
		t.Errorf("ack with a lock token of a force-deleted instance succeeded, want an error (deleting an instance must invalidate its lock)")
	}
	h.wantGone(inst, "an ack after the force delete must not recreate it")
}

// The hierarchy of tests 94 and 96: root → child1, root → child2 →
// grandchild, with children named the way the runtime names sub-orchestrations.
func (h *adminHarness) createChildTree(root string) (child1, child2, grandchild string) {
	h.t.Helper()
	child1, child2 = root+"::sub::2", root+"::sub::3"
	grandchild = child2 + "::sub::4"
	h.createCompletedInstance(root)
	h.createChildInstance(child1, root)
	h.createChildInstance(child2, root)
	h.createChildInstance(grandchild, child2)
	return child1, child2, grandchild
}

// 94. ListChildren returns the direct children only.
func testListChildren(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const root = "list-children-root"
	child1, child2, grandchild := h.createChildTree(root)

	got := h.children(root)
	if len(got) != 2 || !slices.Contains(got, child1) || !slices.Contains(got, child2) || slices.Contains(got, grandchild) {
		t.Errorf("ListChildren(%q) = %q, want exactly %q and %q (direct children, not the grandchild %q)",
			root, got, child1, child2, grandchild)
	}
	if got := h.children(child2); !slices.Equal(got, []string{grandchild}) {
		t.Errorf("ListChildren(%q) = %q, want [%q]", child2, got, grandchild)
	}
	if got := h.children(grandchild); len(got) != 0 {
		t.Errorf("ListChildren(%q) = %q, want none (a leaf)", grandchild, got)
	}
	if got := h.children("non-existent"); len(got) != 0 {
		t.Errorf("ListChildren(%q) = %q, want none (an unknown instance is not an error)", "non-existent", got)
	}

	h.deleteOK(root, true) // cleanup
}

// 95. GetParentID: none for a root, the parent for a child, an error for an
// unknown instance.
func testDeleteGetParentID(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const root = "parent-id-root"
	child := root + "::sub::2"
	h.createCompletedInstance(root)
	h.createChildInstance(child, root)

	parent, ok, err := h.adm.GetParentID(h.ctx, root)
	if err != nil {
		t.Fatalf("GetParentID(%q): unexpected error: %s", root, describeErr(err))
	}
	if ok {
		t.Errorf("GetParentID(%q) = %q, want no parent (a root)", root, parent)
	}
	parent, ok, err = h.adm.GetParentID(h.ctx, child)
	if err != nil {
		t.Fatalf("GetParentID(%q): unexpected error: %s", child, describeErr(err))
	}
	if !ok || parent != root {
		t.Errorf("GetParentID(%q) = (%q, %v), want (%q, true)", child, parent, ok, root)
	}
	if parent, ok, err := h.adm.GetParentID(h.ctx, "non-existent"); err == nil {
		t.Errorf("GetParentID(%q) = (%q, %v), want an error for an unknown instance", "non-existent", parent, ok)
	}

	h.deleteOK(root, true) // cleanup, as duroxide does
}

// 96. GetInstanceTree returns the instance and all its descendants.
func testDeleteGetInstanceTree(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const root = "tree-root"
	child1, child2, grandchild := h.createChildTree(root)

	tree, err := h.adm.GetInstanceTree(h.ctx, root)
	if err != nil {
		t.Fatalf("GetInstanceTree(%q): unexpected error: %s", root, describeErr(err))
	}
	if tree.RootID != root {
		t.Errorf("GetInstanceTree(%q).RootID = %q, want %q", root, tree.RootID, root)
	}
	if tree.Size() != 4 || tree.IsRootOnly() {
		t.Errorf("GetInstanceTree(%q) has %d ids %q, want 4 (not root-only)", root, tree.Size(), tree.AllIDs)
	}
	for _, inst := range []string{root, child1, child2, grandchild} {
		if !slices.Contains(tree.AllIDs, inst) {
			t.Errorf("GetInstanceTree(%q).AllIDs = %q, want it to include %q", root, tree.AllIDs, inst)
		}
	}

	leaf, err := h.adm.GetInstanceTree(h.ctx, grandchild)
	if err != nil {
		t.Fatalf("GetInstanceTree(%q): unexpected error: %s", grandchild, describeErr(err))
	}
	if leaf.Size() != 1 || !leaf.IsRootOnly() {
		t.Errorf("GetInstanceTree(%q) has %d ids %q, want 1 (root-only)", grandchild, leaf.Size(), leaf.AllIDs)
	}

	h.deleteOK(root, true) // cleanup, as duroxide does
}

// 97. DeleteInstancesAtomic deletes several instances at once.
func testDeleteInstancesAtomic(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	ids := []string{"atomic-del-1", "atomic-del-2", "atomic-del-3"}
	for _, inst := range ids {
		h.createCompletedInstance(inst)
	}
	for _, inst := range ids {
		h.info(inst)
	}

	res := h.deleteAtomicOK(ids, false)
	if res.InstancesDeleted < 1 || res.ExecutionsDeleted < 3 {
		t.Errorf("DeleteInstancesAtomic(%q, false) = %+v, want instances_deleted ≥ 1 and executions_deleted ≥ 3", ids, res)
	}
	for _, inst := range ids {
		h.wantGone(inst, "it was deleted")
	}
}

// 98. DeleteInstancesAtomic is all-or-nothing: a running instance without
// force fails the whole call.
func testDeleteInstancesAtomicForce(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const completed, running = "atomic-force-completed", "atomic-force-running"
	h.createCompletedInstance(completed)
	h.createInstance(running)
	ids := []string{completed, running}

	h.deleteAtomicErr(ids, false, "one of the instances is still running and force is false")
	for _, inst := range ids {
		h.wantExists(inst, "a failed DeleteInstancesAtomic deletes nothing")
	}

	h.deleteAtomicOK(ids, true)
	for _, inst := range ids {
		h.wantGone(inst, "it was force-deleted")
	}
}

// 99. DeleteInstancesAtomic refuses to orphan a child not in the list.
func testDeleteInstancesAtomicOrphanDetection(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const root = "orphan-detect-root"
	child := root + "::sub::2"
	h.createCompletedInstance(root)
	h.createChildInstance(child, root)
	h.info(root)
	h.info(child)

	err := h.deleteAtomicErr([]string{root}, false, "deleting the root alone would orphan its child")
	if !errors.Is(err, provider.ErrNotAllowed) || provider.IsRetryable(err) {
		t.Errorf("DeleteInstancesAtomic of a root without its child: error %v, want a permanent error wrapping provider.ErrNotAllowed", err)
	}
	if !lowerMentions(err, "child", "orphan", "tree") {
		t.Errorf("DeleteInstancesAtomic of a root without its child: error %q, want it to mention %q, %q or %q",
			err.Error(), "child", "orphan", "tree")
	}
	h.wantExists(root, "a failed DeleteInstancesAtomic deletes nothing")
	h.wantExists(child, "a failed DeleteInstancesAtomic deletes nothing")

	h.deleteAtomicOK([]string{root, child}, false)
	h.wantGone(root, "the whole tree was deleted")
	h.wantGone(child, "the whole tree was deleted")
}

// 100. Deleting an instance removes its worker rows even while locked, so a
// stale worker cannot complete into a recreated instance.
func testStaleActivityAfterDeleteRecreate(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "stale-activity-recreate"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	scheduled := event(inst, 1, 2, provider.ActivityScheduled{Name: "OldActivity", Input: "old-input"})
	scheduled.SourceEventID = ptr[uint64](2)
	work := activityExecute(inst, 1, 2, "OldActivity")
	work.Input = "old-input"
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst), scheduled}, []provider.WorkItem{work}, nil,
		mdNameVersion(testOrchName, testOrchVersion))

	stale, _ := h.wfetchSome(longLock, "the ack enqueued OldActivity")

	if res := h.deleteOK(inst, true); res.InstancesDeleted < 1 {
		t.Errorf("DeleteInstance(%q, true) = %+v, want instances_deleted ≥ 1", inst, res)
	}
	h.wantGone(inst, "it was force-deleted")

	h.createInstance(inst) // the same id, name, version and input
	if info := h.info(inst); info.OrchestrationName != testOrchName {
		t.Errorf("GetInstanceInfo(%q).OrchestrationName = %q after recreation, want %q", inst, info.OrchestrationName, testOrchName)
	}

	staleResult := provider.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "stale-result-from-old-instance"}
	if err := h.wack(stale.LockToken, staleResult); err == nil {
		t.Errorf("AckWorkItem with the token of a deleted instance's activity succeeded, want an error " +
			"(deleting an instance must remove its worker rows, even locked ones)")
	}

	h.enqueue(provider.ExternalRaised{Instance: inst, Name: "probe-event", Data: "{}"}, 0)
	probe := h.fetchSome(longLock, inst, "a probe ExternalRaised was just enqueued")
	for _, msg := range probe.Item.Messages {
		if ac, ok := itemAs[provider.ActivityCompleted](msg); ok && strings.Contains(ac.Result, "stale-result") {
			t.Errorf("fetch of the recreated instance: messages %v include the stale completion %q from the deleted instance",
				itemKinds(probe.Item.Messages), ac.Result)
		}
	}

	// Cleanup, as duroxide does; errors are ignored.
	_ = h.ack(probe.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{Status: ptr(stCompleted)})
	_, _ = h.adm.DeleteInstance(h.ctx, inst, true)
}
