package goworkflows

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/stretchr/testify/require"

	"github.com/durofs/durofs/provider"
)

// The CLI test's workflows: Loop continues as new once, then runs an
// activity, a timer and a sub-workflow; Parked waits for a signal that never
// comes, with a timer pending an hour out and an activity no worker runs.

func Loop(ctx workflow.Context, round int) (int, error) {
	if round == 0 {
		return 0, workflow.ContinueAsNew(ctx, 1)
	}
	a, err := workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, Double, 21).Get(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := workflow.ScheduleTimer(ctx, time.Millisecond).Get(ctx); err != nil {
		return 0, err
	}
	s, err := workflow.CreateSubWorkflowInstance[int](ctx, workflow.SubWorkflowOptions{InstanceID: "loop-child"}, Leaf, 1).Get(ctx)
	return a + s, err
}

func Leaf(ctx workflow.Context, i int) (int, error) { return i, nil }

func Unrun(ctx context.Context) (int, error) { return 0, errors.New("never run") }

func Parked(ctx workflow.Context) (int, error) {
	workflow.ScheduleTimer(ctx, time.Hour)
	opts := workflow.DefaultActivityOptions
	opts.Queue = "nobody"
	workflow.ExecuteActivity[int](ctx, opts, Unrun)
	v, _ := workflow.NewSignalChannel[int](ctx, "never").Receive(ctx)
	return v, nil
}

// buildDurofsCLI builds the durofs command of the module this one replaces.
func buildDurofsCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "durofs")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/durofs/durofs/cmd/durofs").CombinedOutput()
	require.NoError(t, err, "go build durofs: %s", out)
	return bin
}

func durofsCLI(t *testing.T, bin string, want int, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.Equal(t, want, code, "durofs %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	t.Logf("durofs %s:\n%s", strings.Join(args, " "), stdout.String())
	return stdout.String()
}

// TestDurofsCLIReadsWorkflowDirectory: durofs ls, show, history, queues,
// fsck and delete read and change a directory of real go-workflows
// instances sensibly: workflow names and statuses, the go-workflows
// executions with their ids and queues, histories of decoded go-workflows
// events, the gw queues' depths, a clean fsck, and a deletion that leaves
// no workflow queue message behind.
func TestDurofsCLIReadsWorkflowDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the durofs command")
	}
	bin := buildDurofsCLI(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := Open(dir, Options{Provider: provider.Options{Durability: provider.Durable}, PollTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	w := worker.New(b, nil)
	require.NoError(t, w.RegisterWorkflow(Loop))
	require.NoError(t, w.RegisterWorkflow(Leaf))
	require.NoError(t, w.RegisterWorkflow(Parked))
	require.NoError(t, w.RegisterActivity(Double))
	require.NoError(t, w.Start(ctx))
	c := client.New(b)
	loop, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "loop"}, Loop, 0)
	require.NoError(t, err)
	// Its first execution ends continuing as new (result 0); the second
	// returns 42 + 1.
	var second *workflow.Instance
	require.Eventually(t, func() bool {
		xs, err := b.Provider().WorkflowExecutions(ctx)
		require.NoError(t, err)
		for _, x := range xs {
			if x.InstanceID == "loop" && x.ExecutionID != loop.ExecutionID {
				second = &workflow.Instance{InstanceID: "loop", ExecutionID: x.ExecutionID}
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	r, err := client.GetWorkflowResult[int](ctx, c, second, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, 43, r)
	parked, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "parked"}, Parked)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := b.GetWorkflowInstanceHistory(ctx, parked, nil)
		return err == nil && len(h) > 0
	}, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, w.WaitForCompletion())
	require.NoError(t, b.Close())

	// ls: the workflows by name and status.
	out := durofsCLI(t, bin, 0, "ls", "--dir", dir)
	for _, want := range []string{"loop ", "Loop", "loop-child", "Leaf", "parked", "Parked", "Running", "Completed", "3 instance(s)"} {
		require.Contains(t, out, want, "durofs ls")
	}
	out = durofsCLI(t, bin, 0, "ls", "--status", "Running", "--dir", dir)
	require.Contains(t, out, "parked")
	require.Contains(t, out, "1 instance(s)")

	// show: the go-workflows executions, the timer and activity task.
	out = durofsCLI(t, bin, 0, "show", "loop", "--dir", dir)
	require.Contains(t, out, "Loop (go-workflows)")
	require.Contains(t, out, "go-workflows executions:")
	require.Contains(t, out, loop.ExecutionID, "the continued-as-new execution's id")
	require.Contains(t, out, second.ExecutionID)
	require.Contains(t, out, "continued-as-new")
	require.Contains(t, out, "finished")
	require.Contains(t, out, "children")
	require.Contains(t, out, "loop-child")
	out = durofsCLI(t, bin, 0, "show", "parked", "--dir", dir)
	require.Contains(t, out, parked.ExecutionID)
	require.Contains(t, out, "active")
	require.Contains(t, out, "gw-workflow-default")
	require.Contains(t, out, "TimerFired")
	require.Contains(t, out, "gw-activity-nobody")
	require.Contains(t, out, "ActivityTask")
	var detail provider.InstanceDetail
	require.NoError(t, json.Unmarshal([]byte(durofsCLI(t, bin, 0, "show", "parked", "--json", "--dir", dir)), &detail))
	require.Len(t, detail.Workflow, 1)
	require.Equal(t, parked.ExecutionID, detail.Workflow[0].ExecutionID)
	require.Equal(t, "default", detail.Workflow[0].Queue)
	require.Len(t, detail.Messages, 2)

	// history: decoded go-workflows events, every execution.
	out = durofsCLI(t, bin, 0, "history", "loop", "--execution", "1", "--dir", dir)
	for _, want := range []string{"workflow.WorkflowExecutionStarted", "workflow.WorkflowExecutionContinuedAsNew"} {
		require.Contains(t, out, want)
	}
	out = durofsCLI(t, bin, 0, "history", "loop", "--dir", dir)
	for _, want := range []string{"execution 2", "workflow.ActivityScheduled", "workflow.ActivityCompleted", "workflow.TimerFired",
		"workflow.SubWorkflowScheduled", "workflow.SubWorkflowCompleted", "workflow.WorkflowExecutionFinished", "schedule="} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "UNDECODABLE")
	sc := bufio.NewScanner(strings.NewReader(durofsCLI(t, bin, 0, "history", "loop", "--json", "--dir", dir)))
	lines := 0
	for sc.Scan() {
		var line struct {
			Type  string          `json:"type"`
			Event json.RawMessage `json:"event"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		require.True(t, strings.HasPrefix(line.Type, "workflow."), line.Type)
		require.NotEmpty(t, line.Event)
		lines++
	}
	require.Positive(t, lines)

	// queues: the gw queues with the parked workflow's timer and task.
	var qs provider.QueueStats
	require.NoError(t, json.Unmarshal([]byte(durofsCLI(t, bin, 0, "queues", "--json", "--dir", dir)), &qs))
	byName := map[string]provider.QueueStat{}
	for _, q := range qs.Workflow {
		byName[q.Queue] = q
	}
	require.Equal(t, 1, byName["gw-workflow-default"].Timers, "%+v", qs.Workflow)
	require.Equal(t, 1, byName["gw-activity-nobody"].Ready, "%+v", qs.Workflow)
	out = durofsCLI(t, bin, 0, "queues", "--dir", dir)
	require.Contains(t, out, "gw-workflow-default")
	require.Contains(t, out, "gw-activity-nobody")

	// fsck: clean.
	require.Contains(t, durofsCLI(t, bin, 0, "fsck", "--dir", dir), "result: clean")

	// delete: the running workflow with its timer and activity task.
	durofsCLI(t, bin, 1, "delete", "parked", "--dir", dir) // refused: still running
	out = durofsCLI(t, bin, 0, "delete", "parked", "--force", "--json", "--dir", dir)
	var del struct {
		InstancesDeleted     int `json:"instances_deleted"`
		QueueMessagesDeleted int `json:"queue_messages_deleted"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &del), out)
	require.Equal(t, 1, del.InstancesDeleted)
	require.Equal(t, 2, del.QueueMessagesDeleted)
	require.NoError(t, json.Unmarshal([]byte(durofsCLI(t, bin, 0, "queues", "--json", "--dir", dir)), &qs))
	for _, q := range qs.Workflow {
		require.Zero(t, q.Messages, "%s after the deletion", q.Queue)
	}
	require.NotContains(t, durofsCLI(t, bin, 0, "ls", "--dir", dir), "parked")
	require.Contains(t, durofsCLI(t, bin, 0, "fsck", "--dir", dir), "result: clean")

	// The backend agrees.
	b, err = Open(dir, Options{})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.GetWorkflowInstanceState(context.Background(), parked)
	require.Error(t, err)
	s, err := b.GetWorkflowInstanceState(context.Background(), second)
	require.NoError(t, err)
	require.Equal(t, core.WorkflowInstanceStateFinished, s)
}
