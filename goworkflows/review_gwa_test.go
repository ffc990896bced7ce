package goworkflows

// Review (branch review-gwa): places where durofs's go-workflows backend
// behaves differently from go-workflows v1.2.0's own SQLite backend
// (backend/sqlite) in ways go-workflows' suites do not test. Each test
// fails on the code it was written against and says why in its comment.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/history"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// reviewFinish completes task as the executor does when the workflow
// returns: its new events, then WorkflowExecutionFinished, numbered from
// the task's LastSequenceID.
func reviewFinish(t *testing.T, b *Backend, task *backend.WorkflowTask) {
	t.Helper()
	seq := task.LastSequenceID
	var executed []*history.Event
	for _, e := range task.NewEvents {
		seq++
		e.SequenceID = seq
		executed = append(executed, e)
	}
	fin := history.NewPendingEvent(time.Now(), history.EventType_WorkflowExecutionFinished, &history.ExecutionCompletedAttributes{})
	fin.SequenceID = seq + 1
	executed = append(executed, fin)
	require.NoError(t, b.CompleteWorkflowTask(context.Background(), task, core.WorkflowInstanceStateFinished, executed, nil, nil, nil))
}

// TestReviewLongQueueNames: a workflow queue whose name encodes to more
// than names.MaxLen (180) bytes cannot be used at all.
//
// SQLite: a queue is a plain TEXT column (db/migrations/000003_AddQueue.up.sql:2,
// "ALTER TABLE `instances` ADD COLUMN `queue` NVARCHAR(128)", which SQLite
// does not enforce); PrepareWorkflowQueues and PrepareActivityQueues are
// no-ops (sqlite.go:436-442), CreateWorkflowInstance inserts any queue name
// (createInstance, sqlite.go:215-225) and GetWorkflowTask selects by
// "i.queue IN (...)" (sqlite.go:483). Checked
// by running the SQLite backend: all three names below work.
//
// durofs: the queue directory is "gw-workflow-" + names.Encode(q); Encode
// hashes encodings longer than 180 bytes ("~<sha256>"), and gwQueue
// (provider/fs_gw.go) rejects any directory name gwQueueName cannot decode,
// so PrepareWorkflowQueues, CreateWorkflowInstance and GetWorkflowTask all
// fail with `durofs: "gw-workflow-~…" is not a workflow queue directory`.
// Upper-case letters and non-ASCII bytes encode to 3 bytes each, so 61
// upper-case letters, or 21 Japanese / 31 Cyrillic characters, are enough
// (also for ASCII, any name over 180 bytes);
// worker.Start then fails (it calls PrepareWorkflowQueues). The same holds
// for activity queues (gwActivityQueue).
func TestReviewLongQueueNames(t *testing.T) {
	for _, q := range []workflow.Queue{
		"注文処理と返金処理のための高優先度ワークフローキュー",                                    // 26 characters: 78 bytes, 234 encoded
		workflow.Queue("ORDERS_" + strings.Repeat("HIGH_PRIORITY_", 5)), // 77 bytes, 209 encoded
	} {
		t.Run(string(q), func(t *testing.T) {
			ctx := context.Background()
			b := openNamed(t, t.TempDir(), "w")
			require.NoError(t, b.PrepareWorkflowQueues(ctx, []workflow.Queue{q, core.QueueSystem}))
			require.NoError(t, b.PrepareActivityQueues(ctx, []workflow.Queue{q, core.QueueSystem}))
			wfi := core.NewWorkflowInstance(uuid.NewString(), uuid.NewString())
			ev := history.NewPendingEvent(time.Now(), history.EventType_WorkflowExecutionStarted, &history.ExecutionStartedAttributes{Queue: q, Name: "wf"})
			require.NoError(t, b.CreateWorkflowInstance(ctx, wfi, ev))
			task, err := b.GetWorkflowTask(ctx, []workflow.Queue{q})
			require.NoError(t, err)
			require.NotNil(t, task)
			require.Equal(t, q, task.Queue)
		})
	}
}

// TestReviewRemoveFinishedBeforeFarFuture: RemoveWorkflowInstances with a
// FinishedBefore after the year 2262 removes nothing.
//
// SQLite: selects "WHERE completed_at < ?" with the time.Time as the
// argument (sqlite.go:285), so any time after an execution's completion
// removes it (a far-future time removes every finished execution).
// Checked by running the SQLite backend: the execution below is removed.
//
// durofs: provider.RemoveWorkflows (provider/fs_gw_admin.go) compares
// "*e.CompletedNs < before.UnixNano()"; UnixNano is undefined outside
// 1678-2262 and for year 3000 returns -4389808147419103232, so no finished
// execution qualifies (and for some dates before 1678 it wraps to a large
// positive value, which would remove every finished execution).
// Compare time.Time values instead (time.Unix(0, ns).Before(before)).
func TestReviewRemoveFinishedBeforeFarFuture(t *testing.T) {
	ctx := context.Background()
	b := openNamed(t, t.TempDir(), "w")
	wfi, task := reviewStart(t, b)
	reviewFinish(t, b, task)
	state, err := b.GetWorkflowInstanceState(ctx, wfi)
	require.NoError(t, err)
	require.Equal(t, core.WorkflowInstanceStateFinished, state)

	require.NoError(t, b.RemoveWorkflowInstances(ctx, backend.RemoveFinishedBefore(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))))
	_, err = b.GetWorkflowInstanceState(ctx, wfi)
	require.True(t, errors.Is(err, backend.ErrInstanceNotFound),
		"an execution finished before the given time was not removed (state err %v)", err)
}

// TestReviewBatchOrderTimerAfterEarlierEvent: when a fired timer and an
// event that arrived before the timer was due are fetched in the same
// workflow task, durofs hands out the timer first.
//
// go-workflows' executor applies a task's NewEvents in order
// (workflow/executor/executor.go:286, executeNewEvents) and resumes the
// workflow after each one, so the order decides races such as the usual
// timeout pattern, workflow.Select over an activity's future and a timer's:
// the first event of the batch wins.
//
// SQLite: the batch is read by getPendingEvents (events.go:76) through the
// index on (instance_id, execution_id, visible_at, schedule_event_id)
// (db/migrations/000001_initial.up.sql:34), which yields the events without
// visible_at (activity results, signals, cancellations) before fired
// timers; checked by running the SQLite backend: [ActivityCompleted,
// TimerFired]. (The redis backend moves a timer into the instance's
// pending events only once it is due, scripts/schedule_future_events.lua,
// so it too delivers the earlier activity result first.)
//
// durofs: gwFetchLocked (provider/fs_gw_task.go) builds the batch in
// message-name order, i.e. by the ULID of when each message was enqueued.
// A timer is enqueued when it is scheduled, so it sorts before an activity
// result that arrived later but well before the timer was due: [TimerFired,
// ActivityCompleted]. Whenever both are in one batch - the worker was busy,
// restarting, or the instance was sticky to a worker that died (30 s by
// default) while the timer came due - a workflow that waits for "activity
// or timeout" takes the timeout although the activity finished in time.
// Ordering the batch by when each event became visible (a timer's
// visible-at, else its enqueue time; the name carries both) would match.
func TestReviewBatchOrderTimerAfterEarlierEvent(t *testing.T) {
	ctx := context.Background()
	b := openNamed(t, t.TempDir(), "w")
	_, task := reviewStart(t, b)

	// The task schedules an activity (event 1) and a timer (event 2) due in
	// 300 ms, as workflow.ExecuteActivity + workflow.ScheduleTimer do.
	due := time.Now().Add(300 * time.Millisecond)
	start := task.NewEvents[0]
	start.SequenceID = 1
	sched := history.NewPendingEvent(time.Now(), history.EventType_ActivityScheduled, &history.ActivityScheduledAttributes{Name: "a"}, history.ScheduleEventID(1))
	sched.SequenceID = 2
	timerSched := history.NewPendingEvent(time.Now(), history.EventType_TimerScheduled, &history.TimerScheduledAttributes{At: due}, history.ScheduleEventID(2))
	timerSched.SequenceID = 3
	fired := history.NewPendingEvent(time.Now(), history.EventType_TimerFired, &history.TimerFiredAttributes{At: due}, history.ScheduleEventID(2), history.VisibleAt(due))
	require.NoError(t, b.CompleteWorkflowTask(ctx, task, core.WorkflowInstanceStateActive,
		[]*history.Event{start, sched, timerSched}, []*history.Event{sched}, []*history.Event{fired}, nil))

	// The activity finishes at once, long before the timer is due.
	at, err := b.GetActivityTask(ctx, []workflow.Queue{workflow.QueueDefault})
	require.NoError(t, err)
	require.NotNil(t, at)
	require.NoError(t, b.CompleteActivityTask(ctx, at,
		history.NewPendingEvent(time.Now(), history.EventType_ActivityCompleted, &history.ActivityCompletedAttributes{}, history.ScheduleEventID(1))))
	require.True(t, time.Now().Before(due), "the activity result must arrive before the timer is due (machine too slow?)")

	// No workflow task runs until the timer is due; then one task gets both.
	time.Sleep(time.Until(due) + 50*time.Millisecond)
	next, err := b.GetWorkflowTask(ctx, queues)
	require.NoError(t, err)
	require.NotNil(t, next)
	var types []history.EventType
	for _, e := range next.NewEvents {
		types = append(types, e.Type)
	}
	require.Equal(t, []history.EventType{history.EventType_ActivityCompleted, history.EventType_TimerFired}, types,
		"the activity result, which arrived before the timer was due, must come first")
}

// reviewStart creates a workflow instance in the default queue and fetches
// its first task.
func reviewStart(t *testing.T, b *Backend) (*workflow.Instance, *backend.WorkflowTask) {
	t.Helper()
	wfi := core.NewWorkflowInstance(uuid.NewString(), uuid.NewString())
	require.NoError(t, b.CreateWorkflowInstance(context.Background(), wfi, startedEvent()))
	task, err := b.GetWorkflowTask(context.Background(), queues)
	require.NoError(t, err)
	require.NotNil(t, task)
	return wfi, task
}
