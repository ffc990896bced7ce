package oracle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// Every ack line carries the part of the call spent waiting for the log's
// fdatasync (a Durable provider on a real disk syncs on every ack).
func TestRecorderReportsLogSyncTime(t *testing.T) {
	p, err := provider.Open(t.TempDir(), provider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	var lines []Line
	r := NewRecorder(p, func(l Line) { mu.Lock(); lines = append(lines, l); mu.Unlock() }, 0, 0)
	ctx := context.Background()
	v := "1.0.0"
	if err := r.EnqueueForOrchestrator(ctx, provider.StartOrchestration{Instance: "i1", Orchestration: "O", Version: &v, Input: "{}", ExecutionID: 1}, 0); err != nil {
		t.Fatal(err)
	}
	li, err := r.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || li == nil {
		t.Fatalf("fetch: %v %v", li, err)
	}
	ev := provider.Event{EventID: 1, InstanceID: "i1", ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
		Kind: provider.OrchestrationStarted{Name: "O", Version: v, Input: "{}"}}
	name := "O"
	if err := r.AckOrchestrationItem(ctx, li.LockToken, 1, []provider.Event{ev},
		[]provider.WorkItem{provider.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 2, Name: "A", Input: "1"}}, nil,
		provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &v}, nil); err != nil {
		t.Fatal(err)
	}
	r.OnAck("i1", 1, []provider.Event{ev})
	w, err := r.FetchWorkItem(ctx, time.Minute, 0, nil, provider.DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatalf("fetch work: %v %v", w, err)
	}
	if err := r.AckWorkItem(ctx, w.LockToken, provider.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 2, Result: "1"}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		if l.Type != TypeOK && l.Type != TypeWorkAck {
			continue
		}
		seen[l.Type] = true
		if l.SyncMs <= 0 || l.SyncMs > l.AckMs {
			t.Errorf("%s line: log sync %v ms of an ack of %v ms, want more than 0 and at most the ack", l.Type, l.SyncMs, l.AckMs)
		}
	}
	if !seen[TypeOK] || !seen[TypeWorkAck] {
		t.Fatalf("lines %+v: want an ok and a wok line", lines)
	}
}
