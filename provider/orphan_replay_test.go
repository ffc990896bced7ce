package provider

import (
	"context"
	"testing"
	"time"
)

// TestReplayDoesNotResurrectDroppedOrphan: an ack publishes a QueueMessage
// to an instance that was never started; a fetch drops it as an orphan
// (contract test 50) - a durable delete that is no log record. The instance
// is then started and runs a turn. After a power loss the replay restores
// the message from the ack's record (no later record deleted it), and it is
// delivered to the instance, which never received it before the crash:
// redo in log order resurrects a message that was consumed outside the log.
func TestReplayDoesNotResurrectDroppedOrphan(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)

	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "p", Orchestration: "o", ExecutionID: 1}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch p: %v %v", it, err)
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("p")}, nil,
		[]WorkItem{QueueMessage{Instance: "c", Name: "cfg", Data: "v1"}}, md("o", "1"), nil))

	// c was never started: its QueueMessage is dropped.
	if it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
		t.Fatalf("fetch of the orphan: %+v %v, want none", it, err)
	}
	// Now c starts and runs a turn.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "c", Orchestration: "o", ExecutionID: 1}, 0))
	it, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "c" {
		t.Fatalf("fetch c: %+v %v", it, err)
	}
	for _, m := range it.Item.Messages {
		if _, ok := m.(QueueMessage); ok {
			t.Fatalf("c's first turn got the dropped message: %+v", it.Item.Messages)
		}
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("c")}, nil, nil, md("o", "1"), nil))
	if it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
		t.Fatalf("before the power loss nothing is left to fetch, got %+v %v", it, err)
	}

	mem.Crash() // power loss before a checkpoint passed the first ack
	p2 := openT(t, "/d", opts)
	it, err = p2.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	mustNoErr(t, err)
	if it != nil {
		t.Fatalf("after the power loss the replay resurrected a message dropped before it: instance %s gets %+v", it.Item.Instance, it.Item.Messages)
	}
}
