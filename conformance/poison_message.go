package conformance

import (
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// J. poison_message: attempt counts, which the runtime compares against
// max_attempts to detect poison messages.

// 63. The first orchestration fetch reports attempt 1.
func orchestrationAttemptCountStartsAtOne(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-orch-first"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.wantAttempt("first fetch", item.AttemptCount, 1)
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})
}

// 64. Every re-fetch after an abandon increments the attempt count.
func orchestrationAttemptCountIncrementsOnRefetch(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-orch-refetch"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.wantAttempt("fetch 1", item.AttemptCount, 1)
	h.abandonOK(item.LockToken, 0, false)

	item = h.fetchSome(longLock, inst, "the item was abandoned")
	h.wantAttempt("fetch 2", item.AttemptCount, 2)
	h.abandonOK(item.LockToken, 0, false)

	item = h.fetchSome(longLock, inst, "the item was abandoned again")
	h.wantAttempt("fetch 3", item.AttemptCount, 3)
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})
}

// 65. The first work-item fetch reports attempt 1.
func workerAttemptCountStartsAtOne(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-worker-first"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wantAttempt("first work-item fetch", item.AttemptCount, 1)
	h.wackOK(item.LockToken, activityCompleted(inst, 1))
}

// 66. A re-fetch after the work-item lock expired increments the attempt count.
func workerAttemptCountIncrementsOnLockExpiry(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-worker-expiry"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(time.Second, "an activity was just enqueued")
	h.wantAttempt("first work-item fetch", item.AttemptCount, 1)

	sleep(1100 * ms)
	item, _ = h.wfetchSome(longLock, "the 1 s lock expired")
	h.wantAttempt("work-item fetch after lock expiry", item.AttemptCount, 2)
	h.wackOK(item.LockToken, activityCompleted(inst, 1))
}

// 67. Attempt counts are kept per work item.
func attemptCountIsPerMessage(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-per-message"

	h.enqueueWorker(activityExecute(inst, 1, 1, "Activity1"))
	h.enqueueWorker(activityExecute(inst, 1, 2, "Activity2"))
	item1, ae1 := h.wfetchSome(longLock, "two activities were enqueued")
	item2, ae2 := h.wfetchSome(longLock, "the second activity is unlocked")
	h.wantAttempt("fetch of the first activity", item1.AttemptCount, 1)
	h.wantAttempt("fetch of the second activity", item2.AttemptCount, 1)
	if ae1.ID == ae2.ID {
		t.Errorf("both fetches returned activity id %d, want two different items", ae1.ID)
	}
	h.wackOK(item1.LockToken, activityCompleted(inst, ae1.ID))
	h.wackOK(item2.LockToken, activityCompleted(inst, ae2.ID))
}

// 68. A work-item abandon with ignoreAttempt undoes the fetch's increment.
func abandonWorkItemIgnoreAttemptDecrements(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-worker-ignore"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wantAttempt("fetch 1", item.AttemptCount, 1)
	h.wabandonOK(item.LockToken, 0, false)

	item, _ = h.wfetchSome(longLock, "the activity was abandoned")
	h.wantAttempt("fetch 2 (after a counting abandon)", item.AttemptCount, 2)
	h.wabandonOK(item.LockToken, 0, true) // 2 → 1

	item, _ = h.wfetchSome(longLock, "the activity was abandoned with ignoreAttempt")
	h.wantAttempt("fetch 3 (after an ignoreAttempt abandon)", item.AttemptCount, 2)
}

// 69. An orchestration abandon with ignoreAttempt undoes the fetch's increment.
func abandonOrchestrationItemIgnoreAttemptDecrements(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-orch-ignore"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.wantAttempt("fetch 1", item.AttemptCount, 1)
	h.abandonOK(item.LockToken, 0, false)

	item = h.fetchSome(longLock, inst, "the item was abandoned")
	h.wantAttempt("fetch 2 (after a counting abandon)", item.AttemptCount, 2)
	h.abandonOK(item.LockToken, 0, true) // 2 → 1

	item = h.fetchSome(longLock, inst, "the item was abandoned with ignoreAttempt")
	h.wantAttempt("fetch 3 (after an ignoreAttempt abandon)", item.AttemptCount, 2)
}

// 70. ignoreAttempt never takes the attempt count below zero.
func ignoreAttemptNeverGoesNegative(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-never-negative"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wantAttempt("fetch 1", item.AttemptCount, 1)
	h.wabandonOK(item.LockToken, 0, true) // 1 → 0

	item, _ = h.wfetchSome(longLock, "the activity was abandoned with ignoreAttempt")
	h.wantAttempt("fetch 2", item.AttemptCount, 1)
	h.wabandonOK(item.LockToken, 0, true) // 1 → 0, never -1

	item, _ = h.wfetchSome(longLock, "the activity was abandoned with ignoreAttempt again")
	h.wantAttempt("fetch 3 (the count must not have gone below zero)", item.AttemptCount, 1)
}

// 71. A batch reports the maximum attempt count of its messages.
func maxAttemptCountAcrossMessageBatch(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "poison-max-batch"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.wantAttempt("fetch 1", item.AttemptCount, 1)
	if n := len(item.Item.Messages); n != 1 {
		t.Fatalf("fetch 1: %d messages %v, want 1", n, itemKinds(item.Item.Messages))
	}
	h.abandonOK(item.LockToken, 0, false)

	item = h.fetchSome(longLock, inst, "the item was abandoned")
	h.wantAttempt("fetch 2", item.AttemptCount, 2)
	h.enqueue(activityCompleted(inst, 1), 0) // while locked: attempt 0
	h.abandonOK(item.LockToken, 0, false)

	item = h.fetchSome(longLock, inst, "the item was abandoned and a completion arrived")
	if n := len(item.Item.Messages); n != 2 {
		t.Fatalf("fetch 3: %d messages %v, want 2 (the start and the completion)", n, itemKinds(item.Item.Messages))
	}
	h.wantAttempt("fetch 3 (max over the start at 3 and the completion at 1)", item.AttemptCount, 3)
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})
}
