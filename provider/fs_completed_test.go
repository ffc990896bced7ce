package provider

import (
	"context"
	"testing"
	"time"
)

// TestCompletedAtOnlyWhenTerminal: an ack whose metadata says "Running"
// leaves the execution's completed_at empty (contract §2.19); a terminal
// status sets it.
func TestCompletedAtOnlyWhenTerminal(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("ca"), 0))
	for i, status := range []string{"Running", "Completed"} {
		if i > 0 {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "ca", Name: "e", Data: "d"}, 0))
		}
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil)
		if err != nil || it == nil {
			t.Fatal(it, err)
		}
		ev := started("ca")
		ev.EventID = uint64(i + 1)
		if i > 0 {
			ev.Kind = ExternalEvent{Name: "e", Data: "d"}
		}
		m := md("O", "1.0.0")
		st := status
		m.Status = &st
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, m, nil))
		ef, err := p.readExecutionFile(instanceKey("ca"), 1)
		if err != nil || ef == nil {
			t.Fatal(ef, err)
		}
		if got := ef.CompletedAtMs != nil; got != (status != "Running") {
			t.Errorf("status %s: completed_at set = %v", status, got)
		}
	}
}
