package provider_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/durofs/durofs/provider"
)

// ExampleOpen runs one orchestration turn and one activity against a durofs
// directory: enqueue a start, fetch the turn, ack it with a scheduled
// activity, run the activity, and read the completion back.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "durofs-example")
	defer os.RemoveAll(dir)
	p, err := provider.Open(dir, provider.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()

	v := "1.0.0"
	_ = p.EnqueueForOrchestrator(ctx, provider.StartOrchestration{Instance: "order-1", Orchestration: "Checkout", Input: "{}", Version: &v, ExecutionID: 1}, 0)

	turn, _ := p.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil)
	fmt.Println("fetched", turn.Item.Instance, turn.Item.OrchestrationName, "attempt", turn.AttemptCount)

	name := "Checkout"
	history := []provider.Event{
		{EventID: 1, InstanceID: "order-1", ExecutionID: 1, DuroxideVersion: "0.1.26", Kind: provider.OrchestrationStarted{Name: "Checkout", Version: v, Input: "{}"}},
		{EventID: 2, InstanceID: "order-1", ExecutionID: 1, DuroxideVersion: "0.1.26", Kind: provider.ActivityScheduled{Name: "Charge", Input: "5"}},
	}
	charge := provider.ActivityExecute{Instance: "order-1", ExecutionID: 1, ID: 2, Name: "Charge", Input: "5"}
	if err := p.AckOrchestrationItem(ctx, turn.LockToken, 1, history, []provider.WorkItem{charge}, nil,
		provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &v}, nil); err != nil {
		log.Fatal(err)
	}

	work, _ := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, provider.DefaultOnlyTags())
	fmt.Println("activity", work.Item.(provider.ActivityExecute).Name)
	_ = p.AckWorkItem(ctx, work.LockToken, provider.ActivityCompleted{Instance: "order-1", ExecutionID: 1, ID: 2, Result: `"ok"`})

	next, _ := p.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil)
	fmt.Println("next turn:", next.Item.Messages[0].Kind(), "history", len(next.Item.History))
	// Output:
	// fetched order-1 Checkout attempt 1
	// activity Charge
	// next turn: ActivityCompleted history 2
}
