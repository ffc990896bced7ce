package sqliteref_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/durofs/durofs/bench/sqliteref"
	"github.com/durofs/durofs/provider"
)

// BenchmarkTurn measures one durable orchestration turn on the happy path,
// as durofs's provider.BenchmarkTurn does: fetch a batch of one message, ack
// with one history event, one activity and one orchestrator message; then
// the worker fetch and ack with a completion. Each of the four calls is one
// committed (fsynced) SQLite transaction.
func BenchmarkTurn(b *testing.B) {
	p, err := sqliteref.Open(filepath.Join(b.TempDir(), "bench.db"), sqliteref.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	v, name := "1.0.0", "TestOrch"
	for i := 0; i < b.N; i++ {
		start := provider.StartOrchestration{Instance: fmt.Sprintf("bench-%d", i), Orchestration: name, Input: "{}", Version: &v, ExecutionID: 1}
		if err := p.EnqueueForOrchestrator(ctx, start, 0); err != nil {
			b.Fatal(err)
		}
	}
	md := provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &v}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inst := fmt.Sprintf("bench-%d", i)
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			b.Fatal(it, err)
		}
		started := provider.Event{EventID: 1, InstanceID: inst, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()),
			DuroxideVersion: "0.1.26", Kind: provider.OrchestrationStarted{Name: name, Version: v, Input: "{}"}}
		err = p.AckOrchestrationItem(ctx, it.LockToken, 1, []provider.Event{started},
			[]provider.WorkItem{provider.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}},
			[]provider.WorkItem{provider.ExternalRaised{Instance: inst, Name: "e", Data: "d"}}, md, nil)
		if err != nil {
			b.Fatal(err)
		}
		w, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, provider.DefaultOnlyTags())
		if err != nil || w == nil {
			b.Fatal(w, err)
		}
		if err := p.AckWorkItem(ctx, w.LockToken, provider.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "r"}); err != nil {
			b.Fatal(err)
		}
	}
}
