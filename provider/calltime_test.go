package provider

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/calltime"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// An ack's context with a calltime.Times learns how long the ack waited
// for the log's fdatasync (the stall test tells disk time from waits for
// other processes with it): every committing call adds its wait, which is
// at least the (slowed) fdatasync and at most the call.
func TestCallTimeCountsLogSync(t *testing.T) {
	const slow = 20 * time.Millisecond
	clk := clock.NewManual(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	p := openT(t, "/d", Options{fs: vfs.SlowDatasync(vfs.NewStrictMem(), slow), Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	bg := context.Background()
	v := "1.0.0"
	mustNoErr(t, p.EnqueueForOrchestrator(bg, StartOrchestration{Instance: "i1", Orchestration: "O", Version: &v, Input: "{}", ExecutionID: 1}, 0))

	timed := func(name string, call func(ctx context.Context) error) {
		t.Helper()
		var times calltime.Times
		start := time.Now()
		mustNoErr(t, call(calltime.With(bg, &times)))
		took := time.Since(start)
		if got := times.LogSync(); got < slow || got > took {
			t.Errorf("%s: log sync %v, want between the fdatasync's %v and the call's %v", name, got, slow, took)
		}
	}
	li, err := p.FetchOrchestrationItem(bg, time.Minute, 0, nil)
	if err != nil || li == nil {
		t.Fatalf("fetch: %v %v", li, err)
	}
	timed("AckOrchestrationItem", func(ctx context.Context) error {
		return p.AckOrchestrationItem(ctx, li.LockToken, 1, []Event{started("i1")},
			[]WorkItem{ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 2, Name: "A", Input: "1"}}, nil, md("O", "1.0.0"), nil)
	})
	w, err := p.FetchWorkItem(bg, time.Minute, 0, nil, DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatalf("fetch work: %v %v", w, err)
	}
	timed("AckWorkItem", func(ctx context.Context) error {
		return p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 2, Result: "1"})
	})
}
