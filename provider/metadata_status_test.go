package provider

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAckValidatesStatus: an ack whose metadata status is not an execution
// status fails permanently with ErrInvalidMetadata, writes nothing and keeps
// the lock (the same token then acks); every execution status is accepted.
func TestAckValidatesStatus(t *testing.T) {
	cases := []struct {
		status string
		ok     bool
	}{
		{StatusRunning, true},
		{StatusCompleted, true},
		{StatusFailed, true},
		{StatusContinuedAsNew, true},
		{"", false},
		{"completed", false},
		{"Done", false},
		{"Terminated", false},
		{"Pending", false},
	}
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1})
	for i, c := range cases {
		t.Run(c.status, func(t *testing.T) {
			inst := "status-" + string(rune('a'+i))
			v := "1.0.0"
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}, 0))
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil || it.Item.Instance != inst {
				t.Fatalf("fetch: %+v, %v", it, err)
			}
			m := md("TestOrch", "1.0.0")
			st := c.status
			m.Status = &st
			err = p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(inst)}, nil, nil, m, nil)
			if c.ok {
				if err != nil {
					t.Fatalf("ack with status %q: %v", c.status, err)
				}
				info, err := p.GetExecutionInfo(ctx, inst, 1)
				if err != nil || info.Status != c.status {
					t.Fatalf("execution status %q, %v; want %q", info.Status, err, c.status)
				}
				return
			}
			if !errors.Is(err, ErrInvalidMetadata) || IsRetryable(err) {
				t.Fatalf("ack with status %q = %v, want a permanent ErrInvalidMetadata", c.status, err)
			}
			if h, err := p.Read(ctx, inst); err != nil || len(h) != 0 {
				t.Fatalf("a refused ack wrote history: %d events, %v", len(h), err)
			}
			// Nothing written, the lock kept: the same token acks.
			mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(inst)}, nil, nil, md("TestOrch", "1.0.0"), nil))
		})
	}
}
