package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// E. lock_expiration: locks expire, abandon and ack release them, renewals
// extend only live locks.

// 25. After expiry a new fetch takes over and the stale token can no longer ack.
func testLockExpiresAfterTimeout(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	first := h.fetchSome(h.lt, inst, "the start was just enqueued")
	h.fetchNone(h.lt, "the instance is locked")

	sleep(h.lt + 100*ms)
	second := h.fetchSome(h.lt, inst, "the first lock expired")
	if second.LockToken == first.LockToken {
		t.Errorf("fetch after expiry returned the same lock token %q, want a new one", first.LockToken)
	}
	h.ackErr(first.LockToken, 1, []provider.Event{started(inst)}, provider.ExecutionMetadata{},
		"the stale token's instance was re-locked by another fetch")
}

// 26. Abandon releases the lock at once.
func testAbandonReleasesLockImmediately(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.fetchNone(longLock, "the instance is locked")
	h.abandonOK(item.LockToken, 0, false)
	h.fetchSome(longLock, inst, "abandon without delay releases the lock at once")
}

// 27. A successful ack releases the lock, so a message that arrived during the
// lock is fetchable at once (duroxide's name is historical).
func testLockRenewalOnAck(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(h.lt, inst, "the start was just enqueued")
	h.fetchNone(h.lt, "the instance is locked")
	h.enqueue(startItem(inst), 0)
	h.fetchNone(h.lt, "the instance is still locked although it has a new message")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})

	item = h.fetchSome(h.lt, inst, "the ack released the lock and a new message is waiting")
	if n := len(item.Item.Messages); n != 1 {
		t.Errorf("fetch after ack: %d messages %v, want 1 (the start enqueued during the lock)", n, itemKinds(item.Item.Messages))
	}
}

// 28. Concurrent fetches during the lock all fail to lock; after expiry one succeeds.
func testConcurrentLockAttemptsRespectExpiration(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"
	const tasks = 5

	h.enqueue(startItem(inst), 0)
	h.fetchSome(h.lt, inst, "the start was just enqueued")

	var (
		wg   sync.WaitGroup
		got  [tasks]*provider.LockedOrchestrationItem
		errs [tasks]error
	)
	for i := range tasks {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 50 * ms) // staggered 0..200 ms
			got[i], errs[i] = h.p.FetchOrchestrationItem(h.ctx, h.lt, 0, nil)
		})
	}
	wg.Wait()
	for i := range tasks {
		if errs[i] != nil {
			t.Errorf("task %d: FetchOrchestrationItem: unexpected error: %s", i, describeErr(errs[i]))
		}
		if got[i] != nil {
			t.Errorf("task %d (after %v): got %s, want no item (the lock is held)", i, time.Duration(i)*50*ms, describeItem(got[i]))
		}
	}

	sleep(h.lt - 200*ms + 100*ms)
	h.fetchSome(h.lt, inst, "the lock expired")
}

// 29. A live work-item lock can be renewed and stays exclusive.
func testWorkerLockRenewalSuccess(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(h.lt, "an activity was just enqueued")
	h.wfetchNone(h.lt, "the only activity is locked")

	sleep(100 * ms)
	if err := h.p.RenewWorkItemLock(h.ctx, item.LockToken, h.lt); err != nil {
		t.Fatalf("RenewWorkItemLock of a live lock: unexpected error: %s", describeErr(err))
	}
	h.wfetchNone(h.lt, "the renewed activity is still locked")
}

// 30. Renewing an unknown work-item token fails.
func testWorkerLockRenewalInvalidToken(t *testing.T, f Factory) {
	h := setup(t, f)

	if err := h.p.RenewWorkItemLock(h.ctx, "invalid-token-123", longLock); err == nil {
		t.Errorf("RenewWorkItemLock(%q): succeeded, want an error", "invalid-token-123")
	}
}

// 31. Renewing an expired work-item lock fails.
func testWorkerLockRenewalAfterExpiration(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(time.Second, "an activity was just enqueued")
	sleep(h.lt + 100*ms)
	if err := h.p.RenewWorkItemLock(h.ctx, item.LockToken, h.lt); err == nil {
		t.Errorf("RenewWorkItemLock after the 1 s lock expired: succeeded, want an error")
	}
}

// 32. A renewal extends the lock from the time of renewal.
func testWorkerLockRenewalExtendsTimeout(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "test-lock-renewal-extends"

	h.enqueue(startItem(inst), 0)
	oitem := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(oitem.LockToken, 1, []provider.Event{started(inst)},
		[]provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity")}, nil,
		provider.ExecutionMetadata{OrchestrationName: ptr(testOrchName), Status: ptr("Running")})

	item, _ := h.wfetchSome(h.lt, "the ack enqueued an activity")
	sleep(h.lt * 6 / 10)
	if err := h.p.RenewWorkItemLock(h.ctx, item.LockToken, h.lt); err != nil {
		t.Fatalf("RenewWorkItemLock at 0.6×lock timeout: unexpected error: %s", describeErr(err))
	}
	sleep(h.lt * 4 / 10)
	h.wfetchNone(h.lt, "the renewal extended the lock to about 1.6×lock timeout after the fetch")
}

// 33. A token cannot be renewed after its item was acked.
func testWorkerLockRenewalAfterAck(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wackOK(item.LockToken, activityCompleted(inst, 1))
	if err := h.p.RenewWorkItemLock(h.ctx, item.LockToken, longLock); err == nil {
		t.Errorf("RenewWorkItemLock after the item was acked: succeeded, want an error")
	}
}

// 34. Abandoning a work item releases it at once, under a new token.
func testAbandonWorkItemReleasesLock(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wfetchNone(longLock, "the only activity is locked")
	h.wabandonOK(item.LockToken, 0, false)

	again, _ := h.wfetchSome(longLock, "abandon without delay releases the item at once")
	if again.LockToken == item.LockToken {
		t.Errorf("fetch after abandon returned the same token %q, want a new one", item.LockToken)
	}
	h.wackOK(again.LockToken, activityCompleted(inst, 1))
}

// 35. An abandon with a delay hides the item until the delay passes.
func testAbandonWorkItemWithDelay(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wabandonOK(item.LockToken, 500*ms, false)
	h.wfetchNone(longLock, "the item was abandoned with a 500 ms delay")

	sleep(600 * ms)
	again, _ := h.wfetchSome(longLock, "the 500 ms abandon delay has passed")
	h.wackOK(again.LockToken, activityCompleted(inst, 1))
}

// 36. An ack after the work-item lock expired fails and does not delete the item.
func testWorkerAckFailsAfterLockExpiry(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(time.Second, "an activity was just enqueued")
	sleep(1200 * ms)
	if err := h.wack(item.LockToken, activityCompleted(inst, 1)); err == nil {
		t.Fatalf("AckWorkItem after the 1 s lock expired: succeeded, want an error")
	}
	h.wfetchSome(5*time.Second, "the rejected ack must not delete the item")
}

// 37. Renewing an expired orchestration lock fails.
func testOrchestrationLockRenewalAfterExpiration(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(h.lt, inst, "the start was just enqueued")
	sleep(h.lt + 100*ms)
	if err := h.p.RenewOrchestrationItemLock(h.ctx, item.LockToken, h.lt); err == nil {
		t.Errorf("RenewOrchestrationItemLock after the lock expired: succeeded, want an error")
	}
}
