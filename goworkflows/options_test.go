package goworkflows

import (
	"context"
	"testing"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/history"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durofs/durofs/provider"
)

func openNamed(t *testing.T, dir, name string, opts ...backend.BackendOption) *Backend {
	t.Helper()
	b, err := Open(dir, Options{Provider: provider.Options{Durability: provider.ProcessCrashSafe}, PollTimeout: 50 * time.Millisecond},
		append([]backend.BackendOption{backend.WithWorkerName(name)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

var queues = []workflow.Queue{workflow.QueueDefault, core.QueueSystem}

func startedEvent() *history.Event {
	return history.NewHistoryEvent(1, time.Now(), history.EventType_WorkflowExecutionStarted, &history.ExecutionStartedAttributes{Queue: workflow.QueueDefault})
}

func sendSignal(t *testing.T, b backend.Backend, id string) {
	t.Helper()
	require.NoError(t, b.SignalWorkflow(context.Background(), id,
		history.NewPendingEvent(time.Now(), history.EventType_SignalReceived, &history.SignalReceivedAttributes{Name: "s"})))
}

func complete(t *testing.T, b backend.Backend, task *backend.WorkflowTask) error {
	t.Helper()
	return b.CompleteWorkflowTask(context.Background(), task, core.WorkflowInstanceStateActive, task.NewEvents, nil, nil, nil)
}

// TestWorkflowLockAndStickyTimeouts: two backends (workers "a" and "b") on
// one directory. A fetched task is locked for WorkflowLockTimeout, then
// another worker may take it and the first one's completion fails; a
// completed instance stays with its worker for StickyTimeout.
func TestWorkflowLockAndStickyTimeouts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := []backend.BackendOption{backend.WithWorkflowLockTimeout(400 * time.Millisecond), backend.WithStickyTimeout(time.Second)}
	a, b := openNamed(t, dir, "a", opts...), openNamed(t, dir, "b", opts...)
	require.Equal(t, "a", a.WorkerName())

	id := uuid.NewString()
	require.NoError(t, a.CreateWorkflowInstance(ctx, core.NewWorkflowInstance(id, uuid.NewString()), startedEvent()))
	ta, err := a.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.NotNil(t, ta)
	tb, err := b.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.Nil(t, tb, "a locked task was fetched twice")

	time.Sleep(500 * time.Millisecond) // the lock expires
	tb, err = b.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.NotNil(t, tb, "an expired lock was not taken over")
	require.Error(t, complete(t, a, ta), "the first holder completed after a takeover")
	require.Error(t, a.ExtendWorkflowTask(ctx, ta), "the first holder extended after a takeover")
	require.NoError(t, b.ExtendWorkflowTask(ctx, tb))
	require.NoError(t, complete(t, b, tb))

	// Sticky to "b" for a second: "a" does not get the next task.
	sendSignal(t, a, id)
	ta, err = a.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.Nil(t, ta, "a task of an instance sticky to another worker was fetched")
	tb, err = b.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.NotNil(t, tb)
	require.NoError(t, complete(t, b, tb))

	// After the sticky timeout anyone may.
	time.Sleep(1100 * time.Millisecond)
	sendSignal(t, b, id)
	ta, err = a.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.NotNil(t, ta, "the sticky preference did not expire")
	require.NoError(t, complete(t, a, ta))
}

// TestActivityLockTimeout: an activity task is locked for
// ActivityLockTimeout; after it expires another worker gets it, and the
// first worker's completion fails.
func TestActivityLockTimeout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := []backend.BackendOption{backend.WithActivityLockTimeout(400 * time.Millisecond)}
	a, b := openNamed(t, dir, "a", opts...), openNamed(t, dir, "b", opts...)

	wfi := core.NewWorkflowInstance(uuid.NewString(), uuid.NewString())
	require.NoError(t, a.CreateWorkflowInstance(ctx, wfi, startedEvent()))
	task, err := a.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	sched := history.NewPendingEvent(time.Now(), history.EventType_ActivityScheduled, &history.ActivityScheduledAttributes{Name: "x"}, history.ScheduleEventID(1))
	sched.SequenceID = 2
	task.NewEvents[0].SequenceID = 1
	require.NoError(t, a.CompleteWorkflowTask(ctx, task, core.WorkflowInstanceStateActive, append(task.NewEvents, sched), []*history.Event{sched}, nil, nil))

	aa, err := a.GetActivityTask(ctx, []workflow.Queue{workflow.QueueDefault})
	require.NoError(t, err)
	require.NotNil(t, aa)
	require.Equal(t, sched.ID, aa.ActivityID)
	require.Equal(t, wfi.InstanceID, aa.WorkflowInstance.InstanceID)
	ab, err := b.GetActivityTask(ctx, []workflow.Queue{workflow.QueueDefault})
	require.NoError(t, err)
	require.Nil(t, ab, "a locked activity task was fetched twice")
	require.NoError(t, a.ExtendActivityTask(ctx, aa))

	time.Sleep(500 * time.Millisecond)
	ab, err = b.GetActivityTask(ctx, []workflow.Queue{workflow.QueueDefault})
	require.NoError(t, err)
	require.NotNil(t, ab, "an expired activity lock was not taken over")
	done := history.NewPendingEvent(time.Now(), history.EventType_ActivityCompleted, &history.ActivityCompletedAttributes{}, history.ScheduleEventID(1))
	require.Error(t, a.CompleteActivityTask(ctx, aa, done), "the first holder completed after a takeover")
	require.Error(t, a.ExtendActivityTask(ctx, aa))
	require.NoError(t, b.CompleteActivityTask(ctx, ab, done))

	wt, err := a.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.NotNil(t, wt)
	require.Len(t, wt.NewEvents, 1)
	require.Equal(t, history.EventType_ActivityCompleted, wt.NewEvents[0].Type)
	require.Equal(t, int64(2), wt.LastSequenceID)
}
