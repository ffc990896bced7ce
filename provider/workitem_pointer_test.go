package provider

import (
	"context"
	"testing"
	"time"
)

// TestPointerWorkItems: the pointer types implement WorkItem too (through
// the value methods), so a caller may pass &ActivityExecute{...}. The
// routing helpers treat both forms alike, and every entry point accepts
// pointers and stores the same bytes as for values.
func TestPointerWorkItems(t *testing.T) {
	for _, tc := range []struct {
		val, ptr WorkItem
		queue    Queue
		target   string
		visible  int64
	}{
		{ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "n"}, &ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "n"}, WorkerQueue, "a", 100},
		{TimerFired{Instance: "t", ExecutionID: 1, ID: 3, FireAtMs: 500}, &TimerFired{Instance: "t", ExecutionID: 1, ID: 3, FireAtMs: 500}, OrchestratorQueue, "t", 500},
		{SubOrchCompleted{ParentInstance: "p", ParentExecutionID: 1, ParentID: 4, Result: "r"}, &SubOrchCompleted{ParentInstance: "p", ParentExecutionID: 1, ParentID: 4, Result: "r"}, OrchestratorQueue, "p", 100},
	} {
		t.Run(tc.val.Kind(), func(t *testing.T) {
			for _, w := range []WorkItem{tc.val, tc.ptr} {
				if q := QueueOf(w); q != tc.queue {
					t.Errorf("QueueOf(%T) = %v, want %v", w, q, tc.queue)
				}
				if got := TargetInstance(w); got != tc.target {
					t.Errorf("TargetInstance(%T) = %q, want %q", w, got, tc.target)
				}
				if got := VisibleAtMs(w, 100); got != tc.visible {
					t.Errorf("VisibleAtMs(%T) = %d, want %d", w, got, tc.visible)
				}
			}
		})
	}
	if derefItem((*ActivityExecute)(nil)) != nil || QueueOf((*ActivityExecute)(nil)) != OrchestratorQueue {
		t.Error("a nil pointer work item is not treated as nil")
	}

	// End to end: enqueue, ack and work ack with pointers.
	ctx := context.Background()
	p, _, _ := memProvider(t)
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, &StartOrchestration{Instance: "ptr", Orchestration: "O", Input: "{}"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	ev := started("ptr")
	ev.EventID = 1
	act := &ActivityExecute{Instance: "ptr", ExecutionID: 1, ID: 2, Name: "A", Input: "x"}
	timer := &TimerFired{Instance: "ptr", ExecutionID: 1, ID: 3, FireAtMs: 1}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, []WorkItem{act}, []WorkItem{timer}, ExecutionMetadata{}, nil))
	w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatal(w, err)
	}
	if got, ok := w.Item.(ActivityExecute); !ok || got.Name != "A" {
		t.Fatalf("work item = %#v, want the ActivityExecute enqueued through a pointer", w.Item)
	}
	mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, &ActivityCompleted{Instance: "ptr", ExecutionID: 1, ID: 2, Result: "ok"}))
	it, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	kinds := map[string]bool{}
	for _, m := range it.Item.Messages {
		kinds[m.Kind()] = true
	}
	if !kinds["TimerFired"] || !kinds["ActivityCompleted"] {
		t.Fatalf("next turn's messages = %v, want the timer and the completion", it.Item.Messages)
	}
}
