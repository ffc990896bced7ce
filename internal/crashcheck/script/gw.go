package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durofs/durofs/provider"
)

// The go-workflows script: the engine operations of provider/fs_gw*.go,
// driven directly (the provider does not import go-workflows; events are
// opaque JSON to it). It touches every multi-file operation of the engine:
// create-if-absent, an event to an execution, a workflow task completion
// that appends history, schedules an activity, a due and a future timer and
// creates a sub-workflow (a record of two parts), an activity completion,
// a completion that sends an event to another instance, continue-as-new
// with the old execution removed in the same record, removal of finished
// executions by age, the orchestration deletion of a running instance with
// its pending events (a timer, an activity's result) and a claimed activity
// task, and checkpoints. Activity completions happen twice, so that the
// crash-point sweep's process-crash-safe run, which recovers the first and
// the last hit of a failpoint in different ways, recovers each both ways. Instance P runs in workflow queue "qp", its sub-workflow C in
// gwLongQueue, so each fetch finds exactly the instance it wants;
// activities run in gwLongActs. Both names are long enough for their
// directories to be named by their hashes, so the first activity and the
// sub-workflow's creation make a directory and its name file each
// (failpoint gw.queue_after_mkdir, between the two).

// Script names for ByName.
const (
	// Duroxide is the script of Steps: the duroxide contract.
	Duroxide = "duroxide"
	// GoWorkflows is the script of GWSteps: the go-workflows engine.
	GoWorkflows = "gw"
)

// ByName returns the steps of the script called name (Duroxide or
// GoWorkflows).
func ByName(name string) ([]Step, error) {
	switch name {
	case Duroxide, "":
		return Steps(), nil
	case GoWorkflows:
		return GWSteps(), nil
	}
	return nil, fmt.Errorf("script: no script %q (want %q or %q)", name, Duroxide, GoWorkflows)
}

// RunStep runs step i (1-based) of steps.
func RunStep(ctx context.Context, e *Env, steps []Step, i int) error {
	if i < 1 || i > len(steps) {
		return fmt.Errorf("script: no step %d", i)
	}
	if err := steps[i-1].run(ctx, e); err != nil {
		return fmt.Errorf("step %d (%s): %w", i, steps[i-1].Name, err)
	}
	return nil
}

const gwWorker = "crash-worker"

// gwLongQueue is C's workflow queue, gwLongActs the activity queue:
// upper-case letters encode to three bytes each, so their encodings are
// longer than names.MaxLen (180) and their directories named by hashes.
// There are two, so that a process running the script makes two such
// directories (gw.queue_after_mkdir hit twice: the process-crash-safe
// sweep recovers its first and last hits in different ways).
const (
	gwLongQueue = "QC_LONG_QUEUE_NAME_LONG_QUEUE_NAME_LONG_QUEUE_NAME_LONG_QUEUE_NAME_LONG_QUEUE_NAME"
	gwLongActs  = "ACTS_LONG_QUEUE_NAME_LONG_QUEUE_NAME_LONG_QUEUE_NAME_LONG_QUEUE_NAME_LONG_QUEUE_NAME"
)

// gwEv is an event with distinct JSON: pending events have sequence id 0,
// executed ones their position in the history.
func gwEv(id, typ string, seq int64) provider.WorkflowEvent {
	return provider.WorkflowEvent{ID: id, Type: typ, SequenceID: seq, TimestampMs: baseTimestampMs + seq,
		Data: json.RawMessage(fmt.Sprintf(`{"id":%q,"sid":%d,"t":%q}`, id, seq, typ))}
}

func gwTimer(id string, atMs, scheduleID int64) provider.WorkflowEvent {
	ev := gwEv(id, "TimerFired", 0)
	ev.VisibleAtMs, ev.ScheduleEventID = atMs, scheduleID
	return ev
}

func gwActivity(id string) provider.WorkflowActivity {
	return provider.WorkflowActivity{Queue: gwLongActs, EventID: id, Payload: json.RawMessage(fmt.Sprintf(`{"activity":%q}`, id))}
}

// gwTask fetches a workflow task of queue and checks it is inst's with the
// pending events ids.
func gwTask(ctx context.Context, e *Env, queue, inst string, ids ...string) (*provider.WorkflowTask, error) {
	t, err := e.P.FetchWorkflowTask(ctx, []string{queue}, gwWorker, e.lock(), 0)
	if err != nil {
		return nil, fmt.Errorf("fetch workflow task: %w", err)
	}
	if t == nil {
		return nil, fmt.Errorf("fetch workflow task: none, want %s %v", inst, ids)
	}
	var got []string
	for _, ev := range t.NewEvents {
		got = append(got, ev.ID)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(ids)); t.Execution.InstanceID != inst || !slices.Equal(got, want) {
		return nil, fmt.Errorf("fetch workflow task: got %s %v, want %s %v", t.Execution.InstanceID, got, inst, want)
	}
	return t, nil
}

// gwComplete fetches inst's task with the pending events ids and completes
// it with res (sticky to the script's worker).
func gwComplete(queue, inst string, ids []string, res provider.WorkflowTaskResult) func(context.Context, *Env) error {
	return func(ctx context.Context, e *Env) error {
		t, err := gwTask(ctx, e, queue, inst, ids...)
		if err != nil {
			return err
		}
		res.Worker, res.Sticky = gwWorker, time.Minute
		return e.P.CompleteWorkflowTask(ctx, t, res)
	}
}

// gwActivityTask fetches the next activity task, checks it is eventID's,
// and completes it with result (nil: keeps it locked).
func gwActivityTask(eventID string, result *provider.WorkflowEvent) func(context.Context, *Env) error {
	return func(ctx context.Context, e *Env) error {
		at, err := e.P.FetchWorkflowActivity(ctx, []string{gwLongActs}, gwWorker, e.lock(), 0)
		if err != nil {
			return fmt.Errorf("fetch activity task: %w", err)
		}
		if at == nil || at.EventID != eventID {
			return fmt.Errorf("fetch activity task: got %+v, want %s", at, eventID)
		}
		if result == nil {
			return nil
		}
		return e.P.CompleteWorkflowActivity(ctx, at.Token, *result)
	}
}

// GWSteps returns the go-workflows script.
func GWSteps() []Step {
	const p, c = "P", "C"
	p1, p2, c1 := provider.WorkflowRef{InstanceID: p, ExecutionID: "p1"}, provider.WorkflowRef{InstanceID: p, ExecutionID: "p2"}, provider.WorkflowRef{InstanceID: c, ExecutionID: "c1"}
	p3 := provider.WorkflowRef{InstanceID: p, ExecutionID: "p3"}
	actDone, aDone := gwEv("p1-act-done", "ActivityCompleted", 0), gwEv("p2-a-done", "ActivityCompleted", 0)
	return []Step{
		{"gw: create P", func(ctx context.Context, e *Env) error {
			return e.P.CreateWorkflow(ctx, p1, provider.WorkflowStart{Queue: "qp", Name: "P", Metadata: json.RawMessage(`{"m":"p"}`)},
				gwEv("p1-start", "WorkflowExecutionStarted", 0))
		}},
		{"gw: create P again (exists), signal P", func(ctx context.Context, e *Env) error {
			err := e.P.CreateWorkflow(ctx, provider.WorkflowRef{InstanceID: p, ExecutionID: "p0"}, provider.WorkflowStart{Queue: "qp", Name: "P"},
				gwEv("p0-start", "WorkflowExecutionStarted", 0))
			if !errors.Is(err, provider.ErrWorkflowExists) {
				return fmt.Errorf("second creation: %v, want ErrWorkflowExists", err)
			}
			return e.P.SendWorkflowEvent(ctx, p, "", gwEv("p1-sig", "SignalReceived", 0))
		}},
		{"gw: task P#1: activity, 2 timers, start C", gwComplete("qp", p, []string{"p1-start", "p1-sig"}, provider.WorkflowTaskResult{
			State: provider.WorkflowActive,
			Executed: []provider.WorkflowEvent{
				gwEv("p1-ts1", "WorkflowTaskStarted", 1), gwEv("p1-start", "WorkflowExecutionStarted", 2), gwEv("p1-sig", "SignalReceived", 3),
				gwEv("p1-act", "ActivityScheduled", 4), gwEv("p1-tdue", "TimerScheduled", 5), gwEv("p1-tfut", "TimerScheduled", 6),
				gwEv("p1-sub", "SubWorkflowScheduled", 7),
			},
			Activities: []provider.WorkflowActivity{gwActivity("p1-act")},
			Timers:     []provider.WorkflowEvent{gwTimer("p1-tdue-fired", dueFireAtMs, 5), gwTimer("p1-tfut-fired", futureFireAtMs, 6)},
			Sends: []provider.WorkflowSend{{Target: c1,
				Start:  &provider.WorkflowStart{Queue: gwLongQueue, Name: "C", Parent: &provider.WorkflowParent{InstanceID: p, ExecutionID: "p1", EventID: 7}},
				Events: []provider.WorkflowEvent{gwEv("c1-start", "WorkflowExecutionStarted", 0)}}},
		})},
		{"gw: activity p1-act: complete", gwActivityTask("p1-act", &actDone)},
		{"gw: task C#1: finish, tell P", gwComplete(gwLongQueue, c, []string{"c1-start"}, provider.WorkflowTaskResult{
			State: provider.WorkflowFinished,
			Executed: []provider.WorkflowEvent{gwEv("c1-ts1", "WorkflowTaskStarted", 1), gwEv("c1-start", "WorkflowExecutionStarted", 2),
				gwEv("c1-fin", "WorkflowExecutionFinished", 3)},
			Sends: []provider.WorkflowSend{{Target: p1, Events: []provider.WorkflowEvent{gwEv("p1-subdone", "SubWorkflowCompleted", 0)}}},
		})},
		{"gw: task P#2: cancel a timer, continue as new (old execution removed)", gwComplete("qp", p, []string{"p1-tdue-fired", "p1-act-done", "p1-subdone"}, provider.WorkflowTaskResult{
			State: provider.WorkflowContinuedAsNew,
			Executed: []provider.WorkflowEvent{
				gwEv("p1-ts2", "WorkflowTaskStarted", 8), gwEv("p1-tdue-fired", "TimerFired", 9), gwEv("p1-act-done", "ActivityCompleted", 10),
				gwEv("p1-subdone", "SubWorkflowCompleted", 11), gwEv("p1-tc", "TimerCanceled", 12), gwEv("p1-can", "WorkflowExecutionContinuedAsNew", 13),
			},
			CanceledTimers: []int64{6},
			Sends: []provider.WorkflowSend{{Target: p2, Start: &provider.WorkflowStart{Queue: "qp", Name: "P"},
				Events: []provider.WorkflowEvent{gwEv("p2-start", "WorkflowExecutionStarted", 0)}}},
			RemoveExecution: true,
		})},
		{"checkpoint", checkpoint},
		{"gw: remove finished executions (C)", func(ctx context.Context, e *Env) error {
			n, err := e.P.RemoveWorkflows(ctx, time.UnixMilli(futureFireAtMs), 10)
			if err == nil && n != 1 {
				err = fmt.Errorf("removed %d executions, want 1", n)
			}
			return err
		}},
		{"gw: task P2#1: 2 activities, a timer", gwComplete("qp", p, []string{"p2-start"}, provider.WorkflowTaskResult{
			State: provider.WorkflowActive,
			Executed: []provider.WorkflowEvent{gwEv("p2-ts1", "WorkflowTaskStarted", 1), gwEv("p2-start", "WorkflowExecutionStarted", 2),
				gwEv("p2-a", "ActivityScheduled", 3), gwEv("p2-b", "ActivityScheduled", 4), gwEv("p2-t", "TimerScheduled", 5)},
			Activities: []provider.WorkflowActivity{gwActivity("p2-a"), gwActivity("p2-b")},
			Timers:     []provider.WorkflowEvent{gwTimer("p2-t-fired", futureFireAtMs, 5)},
		})},
		{"gw: activity p2-a: complete", gwActivityTask("p2-a", &aDone)},
		{"gw: task P2#2: continue as new, P2 kept (moved out of instance.json)", gwComplete("qp", p, []string{"p2-a-done"}, provider.WorkflowTaskResult{
			State: provider.WorkflowContinuedAsNew,
			Executed: []provider.WorkflowEvent{gwEv("p2-ts2", "WorkflowTaskStarted", 6), gwEv("p2-a-done", "ActivityCompleted", 7),
				gwEv("p2-can", "WorkflowExecutionContinuedAsNew", 8)},
			Sends: []provider.WorkflowSend{{Target: p3, Start: &provider.WorkflowStart{Queue: "qp", Name: "P"},
				Events: []provider.WorkflowEvent{gwEv("p3-start", "WorkflowExecutionStarted", 0)}}},
		})},
		{"gw: activity p2-b: fetch and keep locked", gwActivityTask("p2-b", nil)},
		{"gw: delete P (force)", func(ctx context.Context, e *Env) error {
			adm, _ := e.P.Admin()
			res, err := adm.DeleteInstance(ctx, p, true)
			if err == nil && (res.InstancesDeleted != 1 || res.QueueMessagesDeleted != 2) {
				err = fmt.Errorf("delete = %+v, want 1 instance and 2 messages (p3's start, p2-b's task)", res)
			}
			return err
		}},
		{"checkpoint", checkpoint},
	}
}

// CheckWorkflowReads reads every go-workflows execution through the
// provider's workflow API and returns a problem for each whose history
// cannot be read, does not hold the execution's event count, or whose
// sequence ids are not contiguous from 1 up to its last sequence id.
func CheckWorkflowReads(ctx context.Context, p *provider.FSProvider) []string {
	xs, err := p.WorkflowExecutions(ctx)
	if err != nil {
		return []string{fmt.Sprintf("list workflow executions: %v", err)}
	}
	var problems []string
	for _, x := range xs {
		h, err := p.WorkflowHistory(ctx, x.WorkflowRef, nil)
		if err != nil {
			problems = append(problems, fmt.Sprintf("workflow history of %v: %v", x.WorkflowRef, err))
			continue
		}
		if len(h) != x.Events {
			problems = append(problems, fmt.Sprintf("workflow history of %v: %d events, its record says %d", x.WorkflowRef, len(h), x.Events))
		}
		for i, ev := range h {
			if ev.SequenceID != int64(i+1) {
				problems = append(problems, fmt.Sprintf("workflow history of %v: event #%d has sequence id %d", x.WorkflowRef, i+1, ev.SequenceID))
				break
			}
		}
		if n := len(h); n > 0 && h[n-1].SequenceID != x.LastSequenceID {
			problems = append(problems, fmt.Sprintf("workflow history of %v: last sequence id %d, its record says %d", x.WorkflowRef, h[n-1].SequenceID, x.LastSequenceID))
		}
	}
	return problems
}
