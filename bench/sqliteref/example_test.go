package sqliteref_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/durofs/durofs/bench/sqliteref"
	"github.com/durofs/durofs/provider"
)

// One orchestration turn against a SQLite file: enqueue a start, fetch it
// (the instance is locked), and ack the turn, which completes the
// execution and releases the lock in one transaction.
func Example() {
	dir, err := os.MkdirTemp("", "sqliteref-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p, err := sqliteref.Open(filepath.Join(dir, "duroxide.db"), sqliteref.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()

	name, version := "Greet", "1.0.0"
	start := provider.StartOrchestration{Instance: "greet-1", Orchestration: name, Input: `"world"`, Version: &version, ExecutionID: 1}
	if err := p.EnqueueForOrchestrator(ctx, start, 0); err != nil {
		log.Fatal(err)
	}

	item, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil)
	if err != nil || item == nil {
		log.Fatal("fetch: ", item, err)
	}
	fmt.Printf("fetched %s (%s %s): %d message(s), attempt %d\n",
		item.Item.Instance, item.Item.OrchestrationName, item.Item.Version, len(item.Item.Messages), item.AttemptCount)

	now := uint64(time.Now().UnixMilli())
	events := []provider.Event{
		{EventID: 1, InstanceID: "greet-1", ExecutionID: 1, TimestampMs: now, DuroxideVersion: "0.1.26",
			Kind: provider.OrchestrationStarted{Name: name, Version: version, Input: `"world"`}},
		{EventID: 2, InstanceID: "greet-1", ExecutionID: 1, TimestampMs: now, DuroxideVersion: "0.1.26",
			Kind: provider.OrchestrationCompleted{Output: `"hello, world"`}},
	}
	status, output := "Completed", `"hello, world"`
	md := provider.ExecutionMetadata{Status: &status, Output: &output, OrchestrationName: &name, OrchestrationVersion: &version}
	if err := p.AckOrchestrationItem(ctx, item.LockToken, 1, events, nil, nil, md, nil); err != nil {
		log.Fatal(err)
	}

	adm, _ := p.Admin()
	info, err := adm.GetInstanceInfo(ctx, "greet-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.InstanceID, info.Status, *info.Output)
	// Output:
	// fetched greet-1 (Greet 1.0.0): 1 message(s), attempt 1
	// greet-1 Completed "hello, world"
}
