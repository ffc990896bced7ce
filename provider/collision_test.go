package provider

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/route"
)

// TestRouteCollisionIsHarmless: with two instances on one route (every
// key's route forced equal), each is served, acked, cancelled, inspected
// and deleted as if alone: a fetch batches only its instance's messages, a
// cancellation deletes only its instance's work item, an abandon with a
// delay delays only its instance, a deletion removes only its instance's
// messages. Not parallel: the route hash is process-wide.
func TestRouteCollisionIsHarmless(t *testing.T) {
	defer route.SetForTest(func(string) uint64 { return 7 })()
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	ev := func(inst string, id uint64, kind EventKind) Event {
		return Event{EventID: id, InstanceID: inst, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26", Kind: kind}
	}
	// Both started, each first turn scheduling one activity.
	for _, inst := range []string{"a", "b"} {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
	}
	for range 2 {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil || len(it.Item.Messages) != 1 {
			t.Fatalf("fetch = %+v, %v; want one instance's start", it, err)
		}
		inst := it.Item.Instance
		if st, ok := it.Item.Messages[0].(StartOrchestration); !ok || st.Instance != inst {
			t.Fatalf("the batch of %s holds %+v", inst, it.Item.Messages[0])
		}
		act := ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "act", Input: inst}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1,
			[]Event{started(inst), ev(inst, 2, ActivityScheduled{Name: "act", Input: inst})}, []WorkItem{act}, nil, md("TestOrch", "1.0.0"), nil))
	}
	work, err := allQueued(p.workQ)
	mustNoErr(t, err)
	if len(work) != 2 || work[0].Entry.Route != work[1].Entry.Route {
		t.Fatalf("worker queue = %+v, want two items on one route", work)
	}
	// Cancelling a's activity deletes a's item only.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "stop", Data: "a"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "a" || len(it.Item.Messages) != 1 {
		t.Fatalf("fetch = %+v, %v; want a's one message", it, err)
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev("a", 3, ActivityCancelRequested{Reason: "stop"})}, nil, nil, md("TestOrch", "1.0.0"),
		[]ScheduledActivityIdentifier{{Instance: "a", ExecutionID: 1, ActivityID: 2}}))
	if work, _ := allQueued(p.workQ); len(work) != 1 || work[0].Attrs[attrInstance] != "b" {
		t.Fatalf("after cancelling a's activity the worker queue = %+v, want b's item", work)
	}
	// An abandon with a delay delays the abandoned instance only.
	for _, inst := range []string{"a", "b"} {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "more", Data: inst}, 0))
	}
	it, err = p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "a" {
		t.Fatalf("fetch = %+v, %v; want a", it, err)
	}
	mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, time.Hour, false))
	it, err = p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "b" || len(it.Item.Messages) != 1 || it.Item.Messages[0].(ExternalRaised).Data != "b" {
		t.Fatalf("fetch after a's delayed abandon = %+v, %v; want b's message", it, err)
	}
	mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, false))
	// Inspection lists each instance's messages only.
	for _, inst := range []string{"a", "b"} {
		d, err := p.InstanceDetail(ctx, inst)
		mustNoErr(t, err)
		for _, m := range d.Messages {
			if m.Instance != inst {
				t.Fatalf("InstanceDetail(%s) lists %+v", inst, m)
			}
		}
	}
	// Deleting a removes a's messages, not b's.
	if _, err := p.DeleteInstance(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, q := range []*FSProvider{p} {
		orch, err := allQueued(q.orchQ)
		mustNoErr(t, err)
		for _, m := range orch {
			left = append(left, m.Attrs[attrInstance])
		}
		work, err := allQueued(q.workQ)
		mustNoErr(t, err)
		for _, m := range work {
			left = append(left, "w:"+m.Attrs[attrInstance])
		}
	}
	if slices.Sort(left); !slices.Equal(left, []string{"b", "w:b"}) {
		t.Fatalf("after deleting a the queues hold messages of %v, want b's (one each)", left)
	}
}
