package provider

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestChangesWakeTheFetchesOfTheirSide: a long-polling fetch of this
// process is woken by this process's changes that give it work - an
// enqueue, or an ack publishing to its side's queue - and not only by the
// poll interval (an hour here: a fetch that is not woken returns nothing at
// its poll timeout). notify wakes only the side a change concerns.
func TestChangesWakeTheFetchesOfTheirSide(t *testing.T) {
	ctx := context.Background()
	const pollTimeout = 20 * time.Second
	act := ActivityExecute{Instance: "w", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}
	ev := func(id uint64, kind EventKind) Event {
		return Event{EventID: id, InstanceID: "w", ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26", Kind: kind}
	}
	// turn1 runs w's first turn, scheduling act, and returns the work item.
	turn1 := func(t *testing.T, p *FSProvider) {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("w"), 0))
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch = %+v, %v", it, err)
		}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("w"), ev(2, ActivityScheduled{Name: "act", Input: "x"})},
			[]WorkItem{act}, nil, md("TestOrch", "1.0.0"), nil))
	}
	// gwTurn1 creates workflow g and completes its first task, which
	// schedules an activity of queue "acts".
	gwTurn1 := func(t *testing.T, p *FSProvider) {
		mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"g", "e1"}, WorkflowStart{Queue: "default", Name: "G"}, gwEv("start", "WorkflowExecutionStarted", 0)))
		task := gwFetchOf(t, p, "g")
		mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
			State:      WorkflowActive,
			Executed:   []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("act", "ActivityScheduled", 3)},
			Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: json.RawMessage(`{"a":1}`)}},
			Worker:     "w", Sticky: time.Minute,
		}))
	}
	const (
		orch  = iota // the waiting fetch fetches orchestration items
		work         // work items
		gwWF         // workflow tasks
		gwAct        // activity tasks
	)
	for _, tc := range []struct {
		name  string
		fetch int
		setup func(t *testing.T, p *FSProvider)
		wake  func(t *testing.T, p *FSProvider) // run once the fetch waits
	}{
		{"enqueue for the worker", work, nil, func(t *testing.T, p *FSProvider) {
			mustNoErr(t, p.EnqueueForWorker(ctx, act))
		}},
		{"enqueue for the orchestrator", orch, nil, func(t *testing.T, p *FSProvider) {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("w"), 0))
		}},
		{"an orchestration ack scheduling an activity", work, nil, func(t *testing.T, p *FSProvider) {
			turn1(t, p)
		}},
		{"a workflow created", gwWF, nil, func(t *testing.T, p *FSProvider) {
			mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"g", "e1"}, WorkflowStart{Queue: "default", Name: "G"}, gwEv("start", "WorkflowExecutionStarted", 0)))
		}},
		{"a workflow task scheduling an activity", gwAct, nil, gwTurn1},
		{"an activity task completed", gwWF, gwTurn1, func(t *testing.T, p *FSProvider) {
			at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
			if err != nil || at == nil {
				t.Fatalf("fetch activity = %+v, %v", at, err)
			}
			mustNoErr(t, p.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0)))
		}},
		{"a work item ack completing an activity", orch, func(t *testing.T, p *FSProvider) {
			turn1(t, p)
		}, func(t *testing.T, p *FSProvider) {
			w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, TagFilter{})
			if err != nil || w == nil {
				t.Fatalf("fetch work = %+v, %v", w, err)
			}
			mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "w", ExecutionID: 1, ID: 2, Result: "r"}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{PollInterval: time.Hour, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			if tc.setup != nil {
				tc.setup(t, p)
			}
			waiting := make(chan struct{}, 1)
			testHookWaitForWork = func() {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
			t.Cleanup(func() { testHookWaitForWork = nil })
			got := make(chan bool, 1)
			go func() {
				switch tc.fetch {
				case orch:
					it, err := p.FetchOrchestrationItem(ctx, time.Minute, pollTimeout, nil)
					got <- err == nil && it != nil
				case work:
					w, err := p.FetchWorkItem(ctx, time.Minute, pollTimeout, nil, TagFilter{})
					got <- err == nil && w != nil
				case gwWF:
					task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", time.Minute, pollTimeout)
					got <- err == nil && task != nil
				case gwAct:
					at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, pollTimeout)
					got <- err == nil && at != nil
				}
			}()
			<-waiting
			tc.wake(t, p)
			if !<-got {
				t.Fatalf("the waiting fetch returned nothing at its poll timeout: the change did not wake it")
			}
		})
	}
}
