package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestUnknownInstanceLeavesNothing: deleting or pruning an id that has no
// instance (a mistyped one) reports it not found, or deletes nothing, and
// leaves no instances/<key>/ folder behind; InstanceDetail then reports it
// not found, as it does for an instance whose deletion left only its lock.
func TestUnknownInstanceLeavesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1})
	completeForFsck(t, p, "real")
	noFolder := func(id string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(dir, "instances", instanceKey(id))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("instances/%s: %v, want no such folder", instanceKey(id), err)
		}
	}
	cases := []struct {
		name     string
		call     func() error
		notFound bool // else: succeeds having deleted nothing
	}{
		{"DeleteInstance", func() error { _, err := p.DeleteInstance(ctx, "nope-1", true); return err }, true},
		{"DeleteInstancesAtomic", func() error {
			res, err := p.DeleteInstancesAtomic(ctx, []string{"nope-2"}, true)
			if res != (DeleteInstanceResult{}) {
				t.Errorf("deleted %+v", res)
			}
			return err
		}, false},
		{"PruneExecutions", func() error { _, err := p.PruneExecutions(ctx, "nope-3", PruneOptions{}); return err }, true},
		{"PruneExecutionsBulk", func() error {
			_, err := p.PruneExecutionsBulk(ctx, InstanceFilter{InstanceIDs: []string{"nope-4"}}, PruneOptions{})
			return err
		}, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if c.notFound != errors.Is(err, ErrNotFound) || (!c.notFound && err != nil) {
				t.Fatalf("%s of an unknown id: %v (want not found: %v)", c.name, err, c.notFound)
			}
			id := "nope-" + string(rune('1'+i))
			noFolder(id)
			if _, err := p.InstanceDetail(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("InstanceDetail(%s) = %v, want ErrNotFound", id, err)
			}
		})
	}

	// A deletion of a known and an unknown id deletes the known one only.
	res, err := p.DeleteInstancesAtomic(ctx, []string{"real", "nope-5"}, false)
	if err != nil || res.InstancesDeleted != 1 {
		t.Fatalf("delete real + nope-5: %+v, %v", res, err)
	}
	noFolder("nope-5")
	if _, err := p.InstanceDetail(ctx, "real"); !errors.Is(err, ErrNotFound) {
		t.Errorf("InstanceDetail of a deleted instance = %v, want ErrNotFound", err)
	}

	// An id with only a queued start is not unknown: its message is deleted.
	v := "1.0.0"
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "queued", Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}, 0))
	if d, err := p.InstanceDetail(ctx, "queued"); err != nil || len(d.Messages) != 1 || d.Messages[0].Kind != "StartOrchestration" {
		t.Fatalf("InstanceDetail of a queued start: %+v, %v; want its start message", d.Messages, err)
	}
	noFolder("queued")
	res, err = p.DeleteInstancesAtomic(ctx, []string{"queued"}, true)
	if err != nil || res.QueueMessagesDeleted != 1 {
		t.Fatalf("delete of a queued start: %+v, %v", res, err)
	}
	depths, err := p.GetQueueDepths(ctx)
	mustNoErr(t, err)
	if depths.OrchestratorQueue != 0 {
		t.Errorf("orchestrator queue depth %d after deleting the queued start", depths.OrchestratorQueue)
	}
}
