package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// G. queue_semantics: FIFO peek-lock queues with delayed visibility.

// 43. The worker queue is FIFO.
func testWorkerQueueFIFOOrdering(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	for id := range uint64(5) {
		h.enqueueWorker(activityExecute(inst, 1, id, fmt.Sprintf("Activity%d", id)))
	}
	for want := range uint64(5) {
		_, ae := h.wfetchSome(longLock, fmt.Sprintf("five activities were enqueued; fetch %d", want+1))
		if ae.ID != want {
			t.Errorf("fetch %d: activity id %d (%q), want %d (FIFO order)", want+1, ae.ID, ae.Name, want)
		}
	}
	h.wfetchNone(longLock, "all five activities are locked")
}

// 44. A fetched work item is invisible until acked, and gone after.
func testWorkerPeekLockSemantics(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wfetchNone(longLock, "the only activity is locked")
	h.wackOK(item.LockToken, activityCompleted(inst, 1))
	h.wfetchNone(longLock, "the only activity was acked")
}

// 45. A work-item ack deletes the item and enqueues the completion atomically.
func testWorkerAckAtomicity(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	witem, _ := h.wfetchSome(longLock, "an activity was just enqueued")
	h.wackOK(witem.LockToken, activityCompleted(inst, 1))
	h.wfetchNone(longLock, "the worker queue is empty after the ack")

	item = h.fetchSome(longLock, inst, "the work-item ack enqueued an ActivityCompleted")
	msgs := item.Item.Messages
	if len(msgs) != 1 {
		t.Fatalf("fetch: %d messages %v, want exactly 1 ActivityCompleted", len(msgs), itemKinds(msgs))
	}
	if _, ok := itemAs[provider.ActivityCompleted](msgs[0]); !ok {
		t.Errorf("fetch: message is %s, want ActivityCompleted", itemKind(msgs[0]))
	}
}

// 46. A standalone enqueue's visibility comes from its delay, not from the
// TimerFired's fire time.
func testTimerDelayedVisibility(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.createInstance(inst)
	h.enqueue(provider.TimerFired{Instance: inst, ExecutionID: 1, ID: 1, FireAtMs: 0}, 5*time.Second)
	h.fetchNone(longLock, "the timer was enqueued with a 5 s delay (its fire_at_ms of 0 must be ignored)")

	sleep(5100 * ms)
	item := h.fetchSome(longLock, inst, "the 5 s delay has passed")
	msgs := item.Item.Messages
	if len(msgs) != 1 {
		t.Fatalf("fetch: %d messages %v, want exactly 1 TimerFired", len(msgs), itemKinds(msgs))
	}
	if _, ok := itemAs[provider.TimerFired](msgs[0]); !ok {
		t.Errorf("fetch: message is %s, want TimerFired", itemKind(msgs[0]))
	}
}

// 47. A work item whose lock expired is redelivered.
func testLostLockTokenHandling(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	_, first := h.wfetchSome(h.lt, "an activity was just enqueued")
	h.wfetchNone(h.lt, "the only activity is locked")

	sleep(h.lt + 100*ms)
	_, again := h.wfetchSome(h.lt, "the lock expired, so the item is redelivered")
	if again.ID != first.ID {
		t.Errorf("redelivered activity id %d, want %d", again.ID, first.ID)
	}
}

// 48. An enqueued work item is visible at once.
func testWorkerItemImmediateVisibility(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "TestActivity"))
	item, ae := h.wfetchSome(longLock, "an enqueued activity is visible at once")
	if ae.Name != "TestActivity" {
		t.Errorf("fetched activity name %q, want %q", ae.Name, "TestActivity")
	}
	h.wackOK(item.LockToken, activityCompleted(inst, 1))
}

// 49. A delayed (abandoned) work item does not block later items.
func testWorkerDelayedVisibilitySkipsFutureItems(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueueWorker(activityExecute(inst, 1, 1, "Activity1"))
	h.enqueueWorker(activityExecute(inst, 1, 2, "Activity2"))

	item1, ae := h.wfetchSome(longLock, "two activities were enqueued")
	if ae.ID != 1 {
		t.Fatalf("first fetch: activity id %d, want 1", ae.ID)
	}
	h.wabandonOK(item1.LockToken, 500*ms, false)

	item2, ae := h.wfetchSome(longLock, "activity 2 is visible while activity 1 is delayed")
	if ae.ID != 2 {
		t.Fatalf("second fetch: activity id %d, want 2 (the delayed item 1 must be skipped)", ae.ID)
	}
	h.wfetchNone(longLock, "item 1 is delayed and item 2 is locked")

	sleep(600 * ms)
	item1, ae = h.wfetchSome(longLock, "the 500 ms delay of item 1 has passed")
	if ae.ID != 1 {
		t.Fatalf("third fetch: activity id %d, want 1", ae.ID)
	}
	h.wackOK(item1.LockToken, activityCompleted(inst, 1))
	h.wackOK(item2.LockToken, activityCompleted(inst, 2))
}

// 50. Queue messages for an instance that was never started are dropped;
// those for an existing instance are delivered.
func testOrphanQueueMessagesDropped(t *testing.T, f Factory) {
	h := setup(t, f)
	const orphan, existing = "orphan-test", "orphan-test-existing"

	h.enqueue(provider.QueueMessage{Instance: orphan, Name: "ConfigUpdate", Data: "v1"}, 0)
	h.enqueue(provider.QueueMessage{Instance: orphan, Name: "ConfigUpdate", Data: "v2"}, 0)
	h.fetchNone(longLock, "queue messages for an instance that was never started are not delivered")
	h.fetchNone(longLock, "orphaned queue messages are dropped")

	h.createInstance(existing)
	h.enqueue(provider.QueueMessage{Instance: existing, Name: "ConfigUpdate", Data: "v3"}, 0)
	item := h.fetchSome(longLock, existing, "a queue message for an existing instance is delivered")
	msgs := item.Item.Messages
	if len(msgs) != 1 {
		t.Fatalf("fetch: %d messages %v, want 1 QueueMessage", len(msgs), itemKinds(msgs))
	}
	if qm, ok := itemAs[provider.QueueMessage](msgs[0]); !ok || qm.Name != "ConfigUpdate" || qm.Data != "v3" {
		t.Errorf("fetch: message %#v, want QueueMessage{Name: %q, Data: %q}", msgs[0], "ConfigUpdate", "v3")
	}
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})
}
