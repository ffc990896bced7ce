package provider

import (
	"context"
	"errors"
	"testing"
)

// TestAppendBeforeFirstAckCounted: events appended before an instance's
// first ack are counted in its summary.
func TestAppendBeforeFirstAckCounted(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	e := started("pre")
	e.EventID = 1
	mustNoErr(t, p.AppendWithExecution(ctx, "pre", 1, []Event{e}))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("pre"), 0))
	it, err := p.FetchOrchestrationItem(ctx, 30*1e9, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	e2 := started("pre")
	e2.EventID, e2.Kind = 2, ExternalEvent{Name: "x", Data: "y"}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{e2}, nil, nil, md("TestOrch", "1.0.0"), nil))
	adm, _ := p.Admin()
	m, err := adm.GetSystemMetrics(ctx)
	if err != nil || m.TotalEvents != 2 {
		t.Fatalf("metrics = %+v %v, want 2 events", m, err)
	}
}

func TestAppendWithExecution(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	createInstance(t, p, "ap")
	ev := func(id uint64) Event {
		e := started("ap")
		e.EventID, e.Kind = id, ExternalEvent{Name: "x", Data: "y"}
		return e
	}
	cases := []struct {
		name    string
		events  []Event
		wantErr error
		wantLen int
	}{
		{"append two", []Event{ev(2), ev(3)}, nil, 3},
		{"duplicate of stored", []Event{ev(4), ev(3)}, ErrDuplicateEvent, 3},
		{"duplicate within batch", []Event{ev(5), ev(5)}, ErrDuplicateEvent, 3},
		{"event id zero", []Event{ev(0)}, ErrInvalidEvent, 3},
		{"empty", nil, nil, 3},
	}
	for _, c := range cases {
		err := p.AppendWithExecution(ctx, "ap", 1, c.events)
		if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
			t.Fatalf("%s: err = %v, want %v", c.name, err, c.wantErr)
		}
		if c.wantErr != nil && IsRetryable(err) {
			t.Errorf("%s: error is retryable", c.name)
		}
		h, err := p.ReadWithExecution(ctx, "ap", 1)
		if err != nil || len(h) != c.wantLen {
			t.Fatalf("%s: history len %d (%v), want %d", c.name, len(h), err, c.wantLen)
		}
	}
	adm, _ := p.Admin()
	m, err := adm.GetSystemMetrics(ctx)
	if err != nil || m.TotalEvents != 3 {
		t.Errorf("metrics = %+v %v, want 3 events", m, err)
	}
	info, err := adm.GetExecutionInfo(ctx, "ap", 1)
	if err != nil || info.EventCount != 3 {
		t.Errorf("execution info = %+v %v, want event count 3", info, err)
	}
}
