package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// K. cancellation: activities stay fetchable and renewable whatever the
// orchestration's status, and the runtime cancels an activity by having the
// provider delete its worker row ("lock stealing"), after which its ack and
// renew fail. The "returns … state" names are historical: the ExecutionState
// these tests once checked no longer exists.

// startedV is Started with orchestration version "1.0", as the cancellation
// tests use.
func startedV(instance string) provider.Event {
	return startedEvent(instance, provider.InitialExecutionID, testOrchName, "1.0")
}

// mdNameStatus is md{name TestOrch, status}.
func mdNameStatus(status string) provider.ExecutionMetadata {
	return provider.ExecutionMetadata{OrchestrationName: ptr(testOrchName), Status: ptr(status)}
}

// runningWithActivity starts instance with [Started("1.0")], the worker item
// ActivityExecute{id 1 "TestActivity"} and md{name, status Running}.
func (h *harness) runningWithActivity(instance string) {
	h.t.Helper()
	item := h.startTurn(instance)
	h.ackFull(item.LockToken, 1, []provider.Event{startedV(instance)},
		workItems(namedActivity(instance, 1, "TestActivity")), nil, mdNameStatus("Running"), nil)
}

// 72. An activity of a running orchestration is fetchable.
func testFetchReturnsRunningStateForActiveOrchestration(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-running"

	h.runningWithActivity(inst)
	h.wfetchSome(longLock, "the ack enqueued an activity")
}

// 73. An activity of a completed orchestration is still fetchable: the
// provider does not filter activities by orchestration status.
func testFetchReturnsTerminalStateWhenOrchestrationCompleted(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-completed"

	item := h.startTurn(inst)
	md := mdNameStatus("Completed")
	md.Output = ptr("done")
	h.ackFull(item.LockToken, 1, []provider.Event{
		startedV(inst),
		event(inst, 1, 2, provider.OrchestrationCompleted{Output: "done"}),
	}, workItems(namedActivity(inst, 1, "TestActivity")), nil, md, nil)
	h.wfetchSome(longLock, "the activity of a completed orchestration must still be fetchable")
}

// 74. An activity of a failed orchestration is still fetchable.
func testFetchReturnsTerminalStateWhenOrchestrationFailed(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-failed"

	item := h.startTurn(inst)
	failed := provider.OrchestrationFailed{Details: provider.ApplicationError{
		Kind: provider.AppOrchestrationFailed, Message: "boom", Retryable: false,
	}}
	h.ackFull(item.LockToken, 1, []provider.Event{startedV(inst), event(inst, 1, 2, failed)},
		workItems(namedActivity(inst, 1, "TestActivity")), nil, mdNameStatus("Failed"), nil)
	h.wfetchSome(longLock, "the activity of a failed orchestration must still be fetchable")
}

// 75. An activity of an execution that continued as new is still fetchable.
func testFetchReturnsTerminalStateWhenOrchestrationContinuedAsNew(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-can"

	item := h.startTurn(inst)
	md := mdNameStatus("ContinuedAsNew")
	md.Output = ptr("new-input")
	h.ackFull(item.LockToken, 1, []provider.Event{
		startedV(inst),
		event(inst, 1, 2, provider.OrchestrationContinuedAsNew{Input: "new-input"}),
	}, workItems(namedActivity(inst, 1, "TestActivity")), nil, md, nil)
	h.wfetchSome(longLock, "the activity of an execution that continued as new must still be fetchable")
}

// 76. An activity of an instance that does not exist is fetchable.
func testFetchReturnsMissingStateWhenInstanceDeleted(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-missing"

	h.enqueueWorker(namedActivity(inst, 1, "TestActivity"))
	h.wfetchSome(longLock, "an activity of a missing instance must be fetchable")
}

// 77. The lock of an activity of a running orchestration can be renewed.
func testRenewReturnsRunningWhenOrchestrationActive(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-renew-run"

	h.runningWithActivity(inst)
	item, _ := h.wfetchSome(longLock, "the ack enqueued an activity")
	h.renewWorkOK(item.LockToken, longLock, "the orchestration is running")
}

// 78. The lock of an activity can be renewed after its orchestration
// completed: renewal ignores orchestration status.
func testRenewReturnsTerminalWhenOrchestrationCompleted(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-renew-term"

	h.runningWithActivity(inst)
	witem, _ := h.wfetchSome(longLock, "the ack enqueued an activity")

	item := h.triggerTurn(inst, "Trigger")
	h.ackFull(item.LockToken, 1, []provider.Event{event(inst, 1, 2, provider.OrchestrationCompleted{Output: "done"})}, nil, nil,
		provider.ExecutionMetadata{Status: ptr("Completed"), Output: ptr("done")}, nil)

	h.renewWorkOK(witem.LockToken, longLock, "renewal must not depend on the orchestration's status (it completed)")
}

// 79. The lock of an activity of an instance that does not exist can be renewed.
func testRenewReturnsMissingWhenInstanceDeleted(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-renew-missing"

	h.enqueueWorker(namedActivity(inst, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.renewWorkOK(item.LockToken, longLock, "renewal must not depend on the instance existing")
}

// 80. A work-item ack with no completion deletes the item and enqueues nothing.
func testAckWorkItemNoneDeletesWithoutEnqueue(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-ack-none"

	h.enqueueWorker(namedActivity(inst, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wackOK(item.LockToken, nil)

	h.wfetchNone(100*ms, "the only activity was acked")
	h.fetchNone(100*ms, "an ack with no completion must enqueue nothing for the orchestrator")
}

// 81. An ack's cancelled activities are deleted from the worker queue,
// whatever their lock state.
func testCancelledActivitiesDeletedFromWorkerQueue(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-cancel-delete"

	item := h.startTurn(inst)
	h.ackFull(item.LockToken, 1, []provider.Event{startedV(inst)},
		workItems(namedActivity(inst, 1, "Activity1"), namedActivity(inst, 2, "Activity2"), namedActivity(inst, 3, "Activity3")),
		nil, mdNameStatus("Running"), nil)

	witem, _ := h.wfetchSome(longLock, "the ack enqueued three activities")
	h.wabandonOK(witem.LockToken, 0, false)

	item = h.triggerTurn(inst, "Trigger")
	h.ackFull(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{},
		[]provider.ScheduledActivityIdentifier{scheduledID(inst, 1), scheduledID(inst, 2)})

	_, ae := h.wfetchSome(longLock, "activity 3 was not cancelled")
	if ae.ID != 3 {
		t.Errorf("fetch after cancelling activities 1 and 2: activity id %d (%q), want 3", ae.ID, ae.Name)
	}
	h.wfetchNone(100*ms, "activities 1 and 2 were cancelled and 3 is locked")
}

// 82. Acking a work item whose row is gone fails permanently.
func testAckWorkItemFailsWhenEntryDeleted(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-ack-stolen"

	h.enqueueWorker(namedActivity(inst, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wackOK(item.LockToken, nil)

	err := h.wack(item.LockToken, provider.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 1, Result: "done"})
	if err == nil {
		t.Fatalf("second AckWorkItem of a deleted entry: succeeded, want an error")
	}
	if provider.IsRetryable(err) {
		t.Errorf("second AckWorkItem of a deleted entry: error %s, want a permanent (non-retryable) error", describeErr(err))
	}
}

// 83. Renewing the lock of a work item whose row is gone fails.
func testRenewFailsWhenEntryDeleted(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-renew-stolen"

	h.enqueueWorker(namedActivity(inst, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wackOK(item.LockToken, nil)

	if err := h.p.RenewWorkItemLock(h.ctx, item.LockToken, longLock); err == nil {
		t.Errorf("RenewWorkItemLock of a deleted entry: succeeded, want an error (the cancellation signal)")
	}
}

// 84. Cancelling activities that have no worker row is not an error.
func testCancellingNonexistentActivitiesIsIdempotent(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-cancel-idempotent"

	item := h.startTurn(inst)
	err := h.p.AckOrchestrationItem(h.ctx, item.LockToken, 1, []provider.Event{startedV(inst)}, nil, nil,
		provider.ExecutionMetadata{OrchestrationName: ptr(testOrchName)},
		[]provider.ScheduledActivityIdentifier{scheduledID(inst, 999), scheduledID(inst, 1)})
	if err != nil {
		t.Errorf("AckOrchestrationItem cancelling activities 999 and 1, which do not exist: %s, want success", describeErr(err))
	}
}

// 85. One ack can cancel many activities.
func testBatchCancellationDeletesMultipleActivities(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-batch-cancel"

	item := h.startTurn(inst)
	var acts []provider.ActivityExecute
	var cancelled []provider.ScheduledActivityIdentifier
	for id := uint64(1); id <= 5; id++ {
		acts = append(acts, namedActivity(inst, id, fmt.Sprintf("Activity%d", id)))
		cancelled = append(cancelled, scheduledID(inst, id))
	}
	h.ackFull(item.LockToken, 1, []provider.Event{startedV(inst)}, workItems(acts...), nil, mdNameStatus("Running"), nil)

	item = h.triggerTurn(inst, "Trigger")
	h.ackFull(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{}, cancelled)

	h.wfetchNone(100*ms, "all five activities were cancelled in one ack")
}

// 86. An activity both scheduled and cancelled by the same ack is not left in
// the worker queue: worker items are inserted before cancellations apply.
func testSameActivityInWorkerItemsAndCancelledIsNoop(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-schedule-then-cancel"

	item := h.startTurn(inst)
	h.ackFull(item.LockToken, 1, []provider.Event{startedV(inst)},
		workItems(namedActivity(inst, 2, "DroppedActivity"), namedActivity(inst, 3, "NormalActivity")),
		nil, mdNameStatus("Running"), []provider.ScheduledActivityIdentifier{scheduledID(inst, 2)})

	witem, ae := h.wfetchSome(longLock, "NormalActivity was scheduled and not cancelled")
	if ae.ID != 3 || ae.Name != "NormalActivity" {
		t.Fatalf("fetch: activity id %d %q, want id 3 %q (activity 2 was scheduled and cancelled in the same ack; "+
			"worker items must be inserted before cancellations are applied)", ae.ID, ae.Name, "NormalActivity")
	}
	h.wackOK(witem.LockToken, nil)
	h.wfetchNone(100*ms, "the scheduled-then-cancelled activity must not be in the worker queue")
}

// 87. An activity left over after its instance was force-deleted may or may
// not be fetchable; if it is, its completion can be acked (and becomes an
// orphan in the orchestrator queue). Only an error fails the test.
func testOrphanActivityAfterInstanceForceDeletion(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-orphan-activity"

	admin, ok := h.p.Admin()
	if !ok || admin == nil {
		t.Skip("needs the management capability (Admin().DeleteInstance with force); the provider's Admin() returns ok=false")
	}

	item := h.startTurn(inst)
	act := namedActivity(inst, 1, "TestActivity")
	act.Input = "test-input"
	h.ackFull(item.LockToken, 1, []provider.Event{started(inst)}, workItems(act), nil,
		provider.ExecutionMetadata{OrchestrationName: ptr(testOrchName), OrchestrationVersion: ptr(testOrchVersion), Status: ptr("Running")}, nil)

	res, err := admin.DeleteInstance(h.ctx, inst, true)
	if err != nil {
		t.Fatalf("DeleteInstance(%q, force): unexpected error: %s", inst, describeErr(err))
	}
	if res.InstancesDeleted == 0 {
		t.Fatalf("DeleteInstance(%q, force): instances_deleted = 0, want > 0", inst)
	}
	if _, err := admin.GetInstanceInfo(h.ctx, inst); err == nil {
		t.Fatalf("GetInstanceInfo(%q) after the forced delete: succeeded, want an error (the instance is gone)", inst)
	}

	witem := h.wfetch(5 * time.Second) // Some or None: both are accepted
	if witem == nil {
		return
	}
	if err := h.wack(witem.LockToken, provider.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 1, Result: "orphan-result"}); err != nil {
		t.Errorf("AckWorkItem of the orphaned activity: %s, want success (its completion becomes an orphan)", describeErr(err))
	}
}
