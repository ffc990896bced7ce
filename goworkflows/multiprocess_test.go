package goworkflows

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/stretchr/testify/require"

	"github.com/durofs/durofs/provider"
)

// Environment of a worker process (the test binary re-executed).
const (
	envWorkerDir  = "DUROFS_GW_WORKER_DIR"
	envWorkerName = "DUROFS_GW_WORKER_NAME"
	envWorkerMode = "DUROFS_GW_WORKER_MODE"
	// envActivityLog names a file a worker process appends a line to for
	// every activity it runs (chaos_test.go counts them).
	envActivityLog = "DUROFS_GW_ACTIVITY_LOG"
)

// activityLog, in a worker process with envActivityLog set, receives
// "Name(args)" for every activity run, one write each (O_APPEND: a kill
// leaves whole lines).
var activityLog *os.File

func logActivity(format string, args ...any) {
	if activityLog != nil {
		_, _ = fmt.Fprintf(activityLog, format+"\n", args...)
	}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(envWorkerDir); dir != "" {
		os.Exit(runWorkerProcess(dir, os.Getenv(envWorkerName), os.Getenv(envWorkerMode)))
	}
	os.Exit(m.Run())
}

// The multi-process workload. Its results are deterministic, so every
// workflow's result can be checked: Mixed(i) = 2i + (2i+1) + i + 2i.

func Double(ctx context.Context, i int) (int, error) {
	logActivity("Double(%d)", i)
	return 2 * i, nil
}

func Add(ctx context.Context, a, b int) (int, error) {
	logActivity("Add(%d,%d)", a, b)
	return a + b, nil
}

// Mixed runs an activity, a timer, a sub-workflow it signals from the
// workflow (a system activity), a sub-workflow that continues as new, and
// waits for a signal from the client.
func Mixed(ctx workflow.Context, i int) (int, error) {
	a, err := workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, Double, i).Get(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := workflow.ScheduleTimer(ctx, 20*time.Millisecond).Get(ctx); err != nil {
		return 0, err
	}
	child := workflow.CreateSubWorkflowInstance[int](ctx, workflow.SubWorkflowOptions{InstanceID: childID(i)}, Child, i)
	// The signal is delivered by go-workflows' built-in activity, which is
	// at least once: if its worker is killed after delivering the signal
	// and before completing the activity task, the retry finds the child
	// finished - "not found", although the signal was delivered (the child
	// finishes only once it has it). A signal that was never delivered
	// leaves the child waiting and the test times out.
	if _, err := workflow.SignalWorkflow(ctx, childID(i), "ping", i+1).Get(ctx); err != nil &&
		!strings.Contains(err.Error(), backend.ErrInstanceNotFound.Error()) {
		return 0, err
	}
	s, err := child.Get(ctx)
	if err != nil {
		return 0, err
	}
	l, err := workflow.CreateSubWorkflowInstance[int](ctx, workflow.SubWorkflowOptions{InstanceID: loopID(i)}, Looper, i, 0).Get(ctx)
	if err != nil {
		return 0, err
	}
	v, _ := workflow.NewSignalChannel[int](ctx, "go").Receive(ctx)
	return a + s + v + l, nil
}

// Looper continues as new once, then doubles i with an activity.
func Looper(ctx workflow.Context, i, round int) (int, error) {
	if round == 0 {
		return 0, workflow.ContinueAsNew(ctx, i, 1)
	}
	return workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, Double, i).Get(ctx)
}

// Child waits for its parent's signal and adds it with an activity.
func Child(ctx workflow.Context, i int) (int, error) {
	v, _ := workflow.NewSignalChannel[int](ctx, "ping").Receive(ctx)
	return workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, Add, i, v).Get(ctx)
}

func childID(i int) string { return fmt.Sprintf("child-%03d", i) }
func loopID(i int) string  { return fmt.Sprintf("loop-%03d", i) }
func mixedID(i int) string { return fmt.Sprintf("mixed-%03d", i) }

// mpOptions are the backend options of every process of the test: short
// locks, so a killed worker's tasks are taken over within seconds.
func mpOptions(name string) []backend.BackendOption {
	return []backend.BackendOption{
		backend.WithWorkerName(name),
		backend.WithWorkflowLockTimeout(3 * time.Second),
		backend.WithActivityLockTimeout(3 * time.Second),
		backend.WithStickyTimeout(2 * time.Second),
		backend.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
}

func modeOf(s string) provider.Durability {
	if s == provider.ProcessCrashSafe.String() {
		return provider.ProcessCrashSafe
	}
	return provider.Durable
}

// runWorkerProcess is a worker process: it runs a go-workflows worker on
// dir until SIGTERM.
func runWorkerProcess(dir, name, mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if path := os.Getenv(envActivityLog); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "activity log:", err)
			return 1
		}
		defer f.Close()
		activityLog = f
	}
	b, err := Open(dir, Options{Provider: provider.Options{Durability: modeOf(mode)}, PollTimeout: time.Second}, mpOptions(name)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	opts := worker.DefaultOptions
	opts.WorkflowHeartbeatInterval = time.Second
	opts.ActivityHeartbeatInterval = time.Second
	opts.WorkflowPollingInterval = 20 * time.Millisecond
	opts.ActivityPollingInterval = 20 * time.Millisecond
	w := worker.New(b, &opts)
	for _, wf := range []any{Mixed, Child, Looper} {
		if err := w.RegisterWorkflow(wf); err != nil {
			fmt.Fprintln(os.Stderr, "register:", err)
			return 1
		}
	}
	for _, a := range []any{Double, Add} {
		if err := w.RegisterActivity(a); err != nil {
			fmt.Fprintln(os.Stderr, "register:", err)
			return 1
		}
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	fmt.Println("ready")
	<-ctx.Done()
	_ = w.WaitForCompletion()
	if err := b.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	return 0
}

// requireResults requires every Mixed workflow of instances (Mixed(i) is
// instances[i]) to finish within wait with its exact result, and then,
// within drain, nothing to be left over: every child finished too (each
// active execution, ready task and activity task would show in the stats).
func requireResults(t *testing.T, b *Backend, c *client.Client, instances []*workflow.Instance, wait, drain time.Duration) {
	t.Helper()
	ctx := context.Background()
	for i, inst := range instances {
		r, err := client.GetWorkflowResult[int](ctx, c, inst, wait)
		require.NoError(t, err, "workflow %d", i)
		require.Equal(t, 7*i+1, r, "workflow %d", i)
	}
	require.Eventually(t, func() bool {
		st, err := b.GetStats(ctx)
		require.NoError(t, err)
		return st.ActiveWorkflowInstances == 0 && len(st.PendingWorkflowTasks) == 0 && len(st.PendingActivityTasks) == 0
	}, drain, 100*time.Millisecond)
}

// workerLogDir makes a directory for the worker processes' logs, removed
// after the test unless it failed.
func workerLogDir(t *testing.T, prefix string) string {
	t.Helper()
	logDir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(logDir)
		} else {
			t.Logf("worker logs kept in %s", logDir)
		}
	})
	return logDir
}

type workerProc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited; err is then set
	err    error
}

func startWorker(t *testing.T, dir, logDir, name string, mode provider.Durability, env ...string) *workerProc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { logf.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkerDir+"="+dir, envWorkerName+"="+name, envWorkerMode+"="+mode.String())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "worker %s did not start (see %s)", name, logf.Name())
	require.Equal(t, "ready\n", line)
	p := &workerProc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// TestMultiprocess: three worker processes on one directory and this
// process as the client complete 300 workflows (activities, a timer, two
// sub-workflows each - one continues as new -, signals from the client and
// from workflow to workflow); one worker is killed with SIGKILL midway and
// restarted. Every
// workflow must finish with its exact result, and the directory must be
// left with no active execution and no queued task.
func TestMultiprocess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { testMultiprocess(t, mode) })
	}
}

func testMultiprocess(t *testing.T, mode provider.Durability) {
	const n = 300
	dir := t.TempDir()
	logDir := workerLogDir(t, "durofs-gw-mp-logs-")
	workers := make([]*workerProc, 3)
	for i := range workers {
		workers[i] = startWorker(t, dir, logDir, "worker-"+strconv.Itoa(i), mode)
	}
	b, err := Open(dir, Options{Provider: provider.Options{Durability: mode}}, mpOptions("client")...)
	require.NoError(t, err)
	defer b.Close()
	c := client.New(b)
	ctx := context.Background()
	finished := func(insts []*workflow.Instance) int {
		done := 0
		for _, inst := range insts {
			if s, err := c.GetWorkflowInstanceState(ctx, inst); err == nil && s == core.WorkflowInstanceStateFinished {
				done++
			}
		}
		return done
	}

	instances := make([]*workflow.Instance, n)
	for i := range n {
		if i == n/2 {
			// Midway: half the workflows are not even created yet, the
			// others are at every stage.
			t.Logf("%d/%d created, %d finished: kill -9 %s", i, n, finished(instances[:i]), workers[1].name)
			require.NoError(t, workers[1].cmd.Process.Signal(syscall.SIGKILL))
			<-workers[1].exited
		}
		if i == n/2+30 {
			workers[1] = startWorker(t, dir, logDir, workers[1].name, mode)
		}
		instances[i], err = c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: mixedID(i)}, Mixed, i)
		require.NoError(t, err)
		require.NoError(t, c.SignalWorkflow(ctx, mixedID(i), "go", i))
	}

	deadline := time.Now().Add(4 * time.Minute)
	for {
		done := finished(instances)
		if done == n {
			break
		}
		require.True(t, time.Now().Before(deadline), "only %d of %d workflows finished in time (logs in %s)", done, n, logDir)
		time.Sleep(200 * time.Millisecond)
	}

	requireResults(t, b, c, instances, time.Second, 30*time.Second)

	// The directory reads as durofs instances: every workflow and child
	// completed, each looper in its second execution.
	list, err := b.Provider().Instances(ctx, "Completed")
	require.NoError(t, err)
	require.Len(t, list, 3*n)
	for _, s := range list {
		if strings.HasPrefix(s.Instance, "loop-") {
			require.Equal(t, 2, s.Executions, "%s", s.Instance)
		}
	}

	for _, w := range workers {
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-w.exited:
			var ee *exec.ExitError
			if errors.As(w.err, &ee) {
				t.Errorf("worker %s exited with %v (see %s)", w.name, w.err, logDir)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker %s did not stop", w.name)
		}
	}
}
