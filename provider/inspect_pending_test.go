package provider

import (
	"context"
	"testing"
	"time"
)

// TestInstancesListsPendingStarts: instances whose start is queued but no
// turn was acked (no instance.json) are listed as StatusPending with the
// name and version of their start, and a status filter selects them; once
// a turn is acked the instance is listed from its instance.json instead.
func TestInstancesListsPendingStarts(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1})
	completeForFsck(t, p, "done")
	v := "2.0.0"
	parent := "done"
	for _, s := range []StartOrchestration{
		{Instance: "p-1", Orchestration: "First", Input: "{}", Version: &v, ExecutionID: 1},
		{Instance: "p-2", Orchestration: "Second", Input: "{}", ExecutionID: 1, ParentInstance: &parent},
		{Instance: "p-3", Orchestration: "Third", Input: "{}", ExecutionID: 1},
		{Instance: "p-3", Orchestration: "Third", Input: "{}", ExecutionID: 1},     // a second start: still one instance
		{Instance: "done", Orchestration: "TestOrch", Input: "{}", ExecutionID: 1}, // acked before: not pending
	} {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, s, 0))
	}
	list := func(status string) map[string]InstanceSummary {
		t.Helper()
		l, err := p.Instances(ctx, status)
		mustNoErr(t, err)
		m := map[string]InstanceSummary{}
		for _, s := range l {
			if _, dup := m[s.Instance]; dup {
				t.Errorf("Instances(%q) lists %s twice", status, s.Instance)
			}
			m[s.Instance] = s
		}
		return m
	}
	all := list("")
	if len(all) != 4 || all["done"].Status != StatusCompleted {
		t.Fatalf("Instances() = %+v, want done (Completed) and 3 pending", all)
	}
	for _, c := range []struct{ inst, name, version, parent string }{
		{"p-1", "First", "2.0.0", ""}, {"p-2", "Second", "", "done"}, {"p-3", "Third", "", ""},
	} {
		s := all[c.inst]
		if s.Status != StatusPending || s.Name != c.name || s.Version != c.version || s.CreatedAtMs == 0 ||
			(c.parent == "") != (s.Parent == nil) || (s.Parent != nil && *s.Parent != c.parent) {
			t.Errorf("%s: %+v, want pending %s %s (parent %q)", c.inst, s, c.name, c.version, c.parent)
		}
	}
	if got := list(StatusPending); len(got) != 3 || got["done"].Instance != "" {
		t.Errorf("Instances(Pending) = %+v, want the 3 pending", got)
	}
	if got := list(StatusRunning); len(got) != 0 {
		t.Errorf("Instances(Running) = %+v, want none", got)
	}

	// Acked: listed from instance.json, no longer pending.
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "p-1" {
		t.Fatalf("fetch: %+v, %v", it, err)
	}
	if got := list(StatusPending); len(got) != 3 {
		t.Errorf("a fetched, not yet acked start is still pending: got %d pending", len(got))
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("p-1")}, nil, nil, md("First", "2.0.0"), nil))
	if s := list("")["p-1"]; s.Status != StatusRunning || !s.HasRecord {
		t.Errorf("p-1 after its first ack: %+v, want Running from instance.json", s)
	}
	if got := list(StatusPending); len(got) != 2 {
		t.Errorf("%d pending after p-1's ack, want 2", len(got))
	}
}
