package conformance

import (
	"sync"
	"testing"

	"github.com/durofs/durofs/provider"
)

// B. atomicity: an ack commits everything or nothing, and a failed ack keeps
// the lock.

// 5. A failed ack (duplicate event id) rolls back everything, including the
// lock release.
func testAtomicityFailureRollback(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	// md{} has no name: the provider stores history and the execution record
	// but need not create an instance record.
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})
	if hist := h.read(inst); len(hist) != 1 {
		t.Fatalf("Read after the first ack: %d events %v, want 1", len(hist), kinds(hist))
	}

	h.enqueue(startItem(inst), 0)
	item = h.fetchSome(longLock, inst, "a fetch must work without an instance record (name from the stored OrchestrationStarted)")
	dup := activityScheduledEvent(inst, 1, 1, "DuplicateActivity")
	h.ackErr(item.LockToken, 1, []provider.Event{dup}, provider.ExecutionMetadata{}, "event id 1 already exists in execution 1")

	if hist := h.read(inst); len(hist) != 1 {
		t.Errorf("Read after the failed ack: %d events %v, want 1 (the failed ack must not append)", len(hist), kinds(hist))
	}
	h.fetchNone(longLock, "a failed ack must roll back everything, including the lock release, so the instance stays locked")
}

// 6. One ack stores history and enqueues worker and orchestrator items; the
// orchestrator batch keeps enqueue order and a past-due TimerFired is visible.
func testMultiOperationAtomicAck(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"
	const fireAt = 1234567890

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	delta := []provider.Event{
		started(inst),
		activityScheduledEvent(inst, 1, 2, "Activity1"),
		activityScheduledEvent(inst, 1, 3, "Activity2"),
		activityScheduledEvent(inst, 1, 4, "Activity3"),
		event(inst, 1, 5, provider.TimerCreated{FireAtMs: fireAt}),
	}
	worker := []provider.WorkItem{
		activityExecute(inst, 1, 1, "Activity1"),
		activityExecute(inst, 1, 2, "Activity2"),
		activityExecute(inst, 1, 3, "Activity3"),
	}
	orch := []provider.WorkItem{
		provider.TimerFired{Instance: inst, ExecutionID: 1, ID: 1, FireAtMs: fireAt},
		provider.ExternalRaised{Instance: inst, Name: "TestEvent", Data: "{}"},
	}
	h.ackOK(item.LockToken, 1, delta, worker, orch, provider.ExecutionMetadata{})

	if hist := h.read(inst); len(hist) != 5 {
		t.Errorf("Read: %d events %v, want 5", len(hist), kinds(hist))
	}
	for range 3 {
		h.wfetchSome(longLock, "the ack enqueued 3 worker items")
	}
	h.wfetchNone(longLock, "the ack enqueued exactly 3 worker items")

	item = h.fetchSome(longLock, inst, "the ack enqueued a TimerFired (fire time in the past) and an ExternalRaised")
	msgs := item.Item.Messages
	if len(msgs) != 2 {
		t.Fatalf("fetch: %d messages %v, want 2 [TimerFired ExternalRaised]", len(msgs), itemKinds(msgs))
	}
	if _, ok := itemAs[provider.TimerFired](msgs[0]); !ok {
		t.Errorf("fetch: message[0] is %s, want TimerFired (batch order is enqueue order)", itemKind(msgs[0]))
	}
	if _, ok := itemAs[provider.ExternalRaised](msgs[1]); !ok {
		t.Errorf("fetch: message[1] is %s, want ExternalRaised (batch order is enqueue order)", itemKind(msgs[1]))
	}
}

// 7. An ack with an invalid token does not release the real lock.
func testLockReleasedOnlyOnSuccessfulAck(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	h.fetchSome(h.lt, inst, "the start was just enqueued")
	h.fetchNone(h.lt, "the instance is locked")
	h.ackErr("invalid-lock-token", 1, []provider.Event{started(inst)}, provider.ExecutionMetadata{}, "the token is invalid")
	h.fetchNone(h.lt, "a failed ack with an invalid token must not release the lock")

	sleep(h.lt + 100*ms)
	h.fetchSome(h.lt, inst, "the lock expired")
}

// 8. Two concurrent acks with one token: exactly one succeeds.
func testConcurrentAckPrevention(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")

	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  [2]error
	)
	for i := range errs {
		wg.Go(func() {
			<-start
			errs[i] = h.ack(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})
		})
	}
	close(start)
	wg.Wait()

	oks := 0
	for _, err := range errs {
		if err == nil {
			oks++
		}
	}
	if oks != 1 {
		t.Errorf("concurrent acks with one token: %d succeeded (errors: %s, %s), want exactly 1 Ok and 1 Err",
			oks, describeErr(errs[0]), describeErr(errs[1]))
	}
}
