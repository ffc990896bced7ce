package provider

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestGWSweepKeepsAStagedFileBeingWritten is TestSweepKeepsAStagedFileBeingWritten
// for the go-workflows queues (gwSweepStaged: "a partial read of a write in
// progress finds the file younger than minAge"): B's recovery runs while A
// is writing the staged message of a workflow start, of an activity task a
// workflow task schedules, and of an activity's completion (whose staged
// file names the activity task, "gwa:", and is decided under its claim
// lock), and reads half of it; A's commit then goes on and its message must
// be delivered.
func TestGWSweepKeepsAStagedFileBeingWritten(t *testing.T) {
	type setup struct {
		a, b *FSProvider
		arm  func() // the next staged write is cut, with B's Recover between the halves
	}
	act := []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: json.RawMessage(`{"a":1}`)}}
	schedule := func(t *testing.T, s setup, arm bool) {
		ctx := context.Background()
		mustNoErr(t, s.a.CreateWorkflow(ctx, WorkflowRef{"i", "e1"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("start", "WorkflowExecutionStarted", 0)))
		task := gwFetchOf(t, s.a, "i")
		if arm {
			s.arm()
		}
		mustNoErr(t, s.a.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
			State:      WorkflowActive,
			Executed:   []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("act", "ActivityScheduled", 3)},
			Activities: act,
		}))
	}
	fetchActivity := func(t *testing.T, p *FSProvider) *WorkflowActivityTask {
		t.Helper()
		at, err := p.FetchWorkflowActivity(context.Background(), []string{"acts"}, "w", time.Minute, time.Second)
		mustNoErr(t, err)
		if at == nil {
			t.Fatal("the activity task of a workflow task that completed OK is gone: a sweep removed its staged file while it was being written")
		}
		return at
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s setup) // ends with the armed write done and its message checked
	}{
		{"workflow start", func(t *testing.T, s setup) {
			s.arm()
			mustNoErr(t, s.a.CreateWorkflow(context.Background(), WorkflowRef{"i", "e1"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("start", "WorkflowExecutionStarted", 0)))
			if task := gwFetchOf(t, s.b, "i"); len(task.NewEvents) != 1 {
				t.Fatalf("start task events %+v", task.NewEvents)
			}
		}},
		{"activity task", func(t *testing.T, s setup) {
			schedule(t, s, true)
			fetchActivity(t, s.b)
		}},
		{"activity completion", func(t *testing.T, s setup) {
			schedule(t, s, false)
			at := fetchActivity(t, s.a)
			s.arm()
			mustNoErr(t, s.a.CompleteWorkflowActivity(context.Background(), at.Token, gwEv("done", "ActivityCompleted", 0)))
			if task := gwFetchOf(t, s.b, "i"); len(task.NewEvents) != 1 || task.NewEvents[0].ID != "done" {
				t.Fatalf("the completion of an activity that completed OK is gone (events %+v): a sweep removed its staged file while it was being written", task.NewEvents)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw := newMidWritePair(t)
			tc.run(t, setup{a: mw.a, b: mw.b, arm: mw.arm})
			mw.checkSwept(t)
		})
	}
}
