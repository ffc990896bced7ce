package provider

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCustomStatusFromPointerKind: contract §2.5 step 9 / §7.2 - the last
// CustomStatusUpdated of an ack's delta sets the custom status and bumps its
// version. A pointer kind (&CustomStatusUpdated{...}) is stored like its
// value, so it sets the custom status like its value too, and is held to the
// same limits (MaxCustomStatusBytes); a pointer SubOrchestrationScheduled is
// counted for deletion's unstarted-children search like its value.
func TestCustomStatusFromPointerKind(t *testing.T) {
	ctx := context.Background()
	p := openManualQuiet(t)
	createInstance(t, p, "cs-ptr")
	it := pokeAndFetch(t, p, "cs-ptr")
	s := "progress"
	ev := Event{EventID: 2, InstanceID: "cs-ptr", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: &CustomStatusUpdated{Status: &s}}
	sub := Event{EventID: 3, InstanceID: "cs-ptr", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26",
		Kind: &SubOrchestrationScheduled{Name: "Child", Instance: "cs-ptr::child", Input: "{}"}}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev, sub}, nil, nil, ExecutionMetadata{}, nil))

	h, err := p.Read(ctx, "cs-ptr")
	mustNoErr(t, err)
	if _, ok := h[1].Kind.(CustomStatusUpdated); !ok {
		t.Fatalf("stored event reads back as %T, want CustomStatusUpdated", h[1].Kind)
	}
	cs, err := p.GetCustomStatus(ctx, "cs-ptr", 0)
	mustNoErr(t, err)
	if cs == nil || cs.Status == nil || *cs.Status != "progress" || cs.Version != 1 {
		t.Errorf("GetCustomStatus after a CustomStatusUpdated (pointer kind) = %+v, want (\"progress\", 1)", cs)
	}
	inf, err := p.readInstanceFile(instanceKey("cs-ptr"))
	mustNoErr(t, err)
	if inf.SubOrchestrations != 1 {
		t.Errorf("instance.json counts %d scheduled sub-orchestrations, want 1 (a pointer SubOrchestrationScheduled)", inf.SubOrchestrations)
	}

	// The custom-status limit applies to the pointer kind as to the value.
	q := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Limits: Limits{MaxCustomStatusBytes: 4}})
	createInstance(t, q, "cs-big")
	it = pokeAndFetch(t, q, "cs-big")
	ev.InstanceID = "cs-big"
	err = q.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
	if !errors.Is(err, ErrTooLarge) || IsRetryable(err) {
		t.Errorf("ack of an 8-byte custom status (pointer kind) over MaxCustomStatusBytes 4 = %v; want a permanent ErrTooLarge", err)
	}
}

// TestStoredEventIDsStayUnique: contract §2.2 - "A duplicate (instance,
// execution, event_id) must fail the whole ack; it must never overwrite an
// existing event" - and design.md §6.3 (per execution, event ids are
// unique). An event whose Raw (it was decoded from JSON, and is stored as
// those bytes) says another event_id than EventID, the id the ack checks,
// is refused with ErrInvalidEvent, writing nothing; an event whose Raw
// agrees is stored as Raw, and checked as Raw says.
func TestStoredEventIDsStayUnique(t *testing.T) {
	ctx := context.Background()
	p := openManualQuiet(t)
	createInstance(t, p, "raw")
	h, err := p.Read(ctx, "raw")
	mustNoErr(t, err)
	it := pokeAndFetch(t, p, "raw")
	ev := h[0] // decoded: Raw holds event_id 1
	ev.EventID = 2
	ackErr := p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
	if !errors.Is(ackErr, ErrInvalidEvent) || IsRetryable(ackErr) || !strings.Contains(ackErr.Error(), "Raw holds event_id 1") {
		t.Errorf("ack of event 2 whose Raw says event_id 1 = %v; want a permanent ErrInvalidEvent", ackErr)
	}
	appendErr := p.AppendWithExecution(ctx, "raw", 1, []Event{ev})
	if !errors.Is(appendErr, ErrInvalidEvent) {
		t.Errorf("AppendWithExecution of event 2 whose Raw says event_id 1 = %v; want ErrInvalidEvent", appendErr)
	}
	h, err = p.Read(ctx, "raw")
	mustNoErr(t, err)
	seen := map[uint64]bool{}
	for _, e := range h {
		if seen[e.EventID] {
			t.Errorf("the history holds event_id %d twice (%d events)", e.EventID, len(h))
		}
		seen[e.EventID] = true
	}

	// The failed ack kept the lock; a renumbered event without its stale
	// Raw is stored, and a decoded event with its own id is stored as Raw.
	ev = ev.WithoutRaw()
	raw3 := Event{EventID: 3, InstanceID: "raw", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: ExternalEvent{Name: "n", Data: "d"}}
	b, err := raw3.MarshalJSON()
	mustNoErr(t, err)
	var dec Event
	mustNoErr(t, dec.UnmarshalJSON(b))
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev, dec}, nil, nil, ExecutionMetadata{}, nil))
	h, err = p.Read(ctx, "raw")
	mustNoErr(t, err)
	if len(h) != 3 || h[1].EventID != 2 || h[2].EventID != 3 {
		t.Fatalf("history after the ack: %d events %+v, want ids 1, 2, 3", len(h), h)
	}
}
