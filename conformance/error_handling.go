package conformance

import (
	"testing"

	"github.com/durofs/durofs/provider"
)

// C. error_handling: contract failures are errors, never silent successes.

// 9. An ack with an unknown token fails and says so.
func testInvalidLockTokenOnAck(t *testing.T, f Factory) {
	h := setup(t, f)

	err := h.ackErr("invalid-token", 1, nil, provider.ExecutionMetadata{}, "no lock with this token exists")
	if !errorMentions(err, "Invalid lock token", "lock_token") {
		t.Errorf("ack with an invalid token: error %q, want it to contain %q or %q", err.Error(), "Invalid lock token", "lock_token")
	}
}

// 10. An ack whose event id already exists fails and appends nothing.
func testDuplicateEventIDRejection(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})

	h.enqueue(startItem(inst), 0)
	item = h.fetchSome(longLock, inst, "a second start was enqueued")
	h.ackErr(item.LockToken, 1, []provider.Event{activityScheduledEvent(inst, 1, 1, "Activity")},
		provider.ExecutionMetadata{}, "event id 1 already exists in execution 1")

	hist := h.read(inst)
	if len(hist) != 1 {
		t.Fatalf("Read after the rejected ack: %d events %v, want 1", len(hist), kinds(hist))
	}
	if _, ok := kindAs[provider.OrchestrationStarted](hist[0].Kind); !ok {
		t.Errorf("Read after the rejected ack: event[0] is %s, want OrchestrationStarted (it must not be overwritten)", kindName(hist[0]))
	}
}

// 11. Reading an unknown instance gives an empty history.
func testMissingInstanceMetadata(t *testing.T, f Factory) {
	h := setup(t, f)

	if hist := h.read("non-existent-instance"); len(hist) != 0 {
		t.Errorf("Read of an unknown instance: %d events %v, want none", len(hist), kinds(hist))
	}
}

// 12. A fetch on an empty store returns without error (a smoke test).
func testCorruptedSerializationData(t *testing.T, f Factory) {
	h := setup(t, f)

	h.fetch(longLock) // an item or none are both fine; an error fails the test
}

// 13. An ack after the lock expired fails.
func testLockExpirationDuringAck(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(h.lt, inst, "the start was just enqueued")
	sleep(h.lt + 100*ms)
	h.ackErr(item.LockToken, 1, []provider.Event{started(inst)}, provider.ExecutionMetadata{}, "the lock expired before the ack")
}
