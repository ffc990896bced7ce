package goworkflows

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cschleiden/go-workflows/backend/history"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/stretchr/testify/require"

	"github.com/durofs/durofs/provider"
)

// envChaosKills sets TestChaos's number of SIGKILLs (unset: the test is
// skipped; make crashtest runs it with 100).
const envChaosKills = "DUROFS_GW_CHAOS_KILLS"

// TestChaos: three go-workflows worker processes on one directory, one of
// them SIGKILLed at a random moment every 50-250 ms and restarted at once,
// DUROFS_GW_CHAOS_KILLS times in all, while this process starts the
// multi-process workload's workflows (activities, timers, sub-workflows,
// signals, continue-as-new) and signals them. Then the checker proves that
// every workflow finished with its exact result, that every execution's
// history is well formed (sequence ids 1..n, unique event ids, one start,
// a terminal event last, every activity, timer and sub-workflow it
// scheduled resolved exactly once), and that every activity the histories
// scheduled ran at least once (the workers log each run): it reports how
// many ran more than once.
func TestChaos(t *testing.T) {
	kills, _ := strconv.Atoi(os.Getenv(envChaosKills))
	if kills <= 0 {
		t.Skipf("set %s to run the chaos test (make crashtest: 100)", envChaosKills)
	}
	mode := provider.Durable
	if os.Getenv("DUROFS_GW_CHAOS_MODE") == provider.ProcessCrashSafe.String() {
		mode = provider.ProcessCrashSafe
	}
	const n = 100
	dir := t.TempDir()
	logDir := workerLogDir(t, "durofs-gw-chaos-logs-")
	actLog := filepath.Join(logDir, "activities.log")
	env := envActivityLog + "=" + actLog
	workers := make([]*workerProc, 3)
	for i := range workers {
		workers[i] = startWorker(t, dir, logDir, "worker-"+strconv.Itoa(i), mode, env)
	}
	b, err := Open(dir, Options{Provider: provider.Options{Durability: mode}}, mpOptions("client")...)
	require.NoError(t, err)
	defer b.Close()
	c := client.New(b)
	ctx := context.Background()

	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	instances := make([]*workflow.Instance, 0, n)
	for k := 0; k < kills; k++ {
		// Start the workflows while the killing goes on.
		for range max(1, n/kills+1) {
			if i := len(instances); i < n {
				inst, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: mixedID(i)}, Mixed, i)
				require.NoError(t, err)
				require.NoError(t, c.SignalWorkflow(ctx, mixedID(i), "go", i))
				instances = append(instances, inst)
			}
		}
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
		w := rng.IntN(len(workers))
		require.NoError(t, workers[w].cmd.Process.Signal(syscall.SIGKILL))
		<-workers[w].exited
		workers[w] = startWorker(t, dir, logDir, workers[w].name, mode, env)
	}
	for i := len(instances); i < n; i++ {
		inst, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: mixedID(i)}, Mixed, i)
		require.NoError(t, err)
		require.NoError(t, c.SignalWorkflow(ctx, mixedID(i), "go", i))
		instances = append(instances, inst)
	}
	t.Logf("%d SIGKILLs of worker processes in %v", kills, time.Since(start).Round(time.Millisecond))

	// Every workflow finishes with its exact result.
	requireResults(t, b, c, instances, 5*time.Minute, time.Minute)
	for _, w := range workers {
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		<-w.exited
	}

	// Every history is well formed; every scheduled activity ran.
	xs, err := b.Provider().WorkflowExecutions(ctx)
	require.NoError(t, err)
	require.Len(t, xs, 4*n, "mixed, child and two looper executions per workflow")
	scheduled := map[string]int{}
	for _, x := range xs {
		done := x.State == provider.WorkflowFinished || (x.State == provider.WorkflowContinuedAsNew && strings.HasPrefix(x.InstanceID, "loop-"))
		require.True(t, done, "%v is %v", x.WorkflowRef, x.State)
		h, err := b.GetWorkflowInstanceHistory(ctx, &workflow.Instance{InstanceID: x.InstanceID, ExecutionID: x.ExecutionID}, nil)
		require.NoError(t, err)
		for key, k := range checkHistory(t, x, h) {
			scheduled[key] += k
		}
	}
	ran := map[string]int{}
	f, err := os.Open(actLog)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ran[sc.Text()]++
	}
	require.NoError(t, sc.Err())
	var dups []string
	total, again := 0, 0
	for key, k := range scheduled {
		require.GreaterOrEqual(t, ran[key], k, "activity %s scheduled %d times ran %d times", key, k, ran[key])
		total += k
		if ran[key] > k {
			again += ran[key] - k
			dups = append(dups, fmt.Sprintf("%s x%d", key, ran[key]))
		}
	}
	for key := range ran {
		require.Contains(t, scheduled, key, "activity %s ran but no history scheduled it", key)
	}
	sort.Strings(dups)
	t.Logf("checked %d workflows (%d executions): every result exact, every history well formed; %d activities scheduled, each ran at least once, %d extra runs (at-least-once: a worker killed after running one and before completing it) %v",
		n, len(xs), total, again, dups)
}

// checkHistory checks one finished execution's history and returns its
// activities by "Name(args)" with how many times it scheduled each.
func checkHistory(t *testing.T, x provider.WorkflowExecution, h []*history.Event) map[string]int {
	t.Helper()
	label := x.InstanceID + "/" + x.ExecutionID
	require.NotEmpty(t, h, label)
	require.Len(t, h, x.Events, label)
	ids := map[string]bool{}
	open := map[string]int{} // "activity 3" → scheduled minus resolved
	acts := map[string]int{}
	started := 0
	for i, e := range h {
		require.Equal(t, int64(i+1), e.SequenceID, "%s: event #%d", label, i+1)
		require.False(t, ids[e.ID], "%s: event id %s twice", label, e.ID)
		ids[e.ID] = true
		seid := strconv.FormatInt(e.ScheduleEventID, 10)
		switch e.Type {
		case history.EventType_WorkflowExecutionStarted:
			started++
		case history.EventType_ActivityScheduled:
			open["activity "+seid]++
			a := e.Attributes.(*history.ActivityScheduledAttributes)
			var args []string
			for _, in := range a.Inputs {
				args = append(args, string(in))
			}
			acts[a.Name+"("+strings.Join(args, ",")+")"]++
		case history.EventType_ActivityCompleted, history.EventType_ActivityFailed:
			open["activity "+seid]--
		case history.EventType_TimerScheduled:
			open["timer "+seid]++
		case history.EventType_TimerFired, history.EventType_TimerCanceled:
			open["timer "+seid]--
		case history.EventType_SubWorkflowScheduled:
			open["sub-workflow "+seid]++
		case history.EventType_SubWorkflowCompleted, history.EventType_SubWorkflowFailed:
			open["sub-workflow "+seid]--
		}
	}
	require.Equal(t, 1, started, "%s: WorkflowExecutionStarted events", label)
	last := h[len(h)-1].Type
	require.True(t, last == history.EventType_WorkflowExecutionFinished || last == history.EventType_WorkflowExecutionContinuedAsNew,
		"%s: last event %v", label, last)
	for what, k := range open {
		require.Zero(t, k, "%s: %s resolved %d times too few", label, what, k)
	}
	// Only the workload's own activities are logged (not go-workflows'
	// system activity that delivers a signal).
	for key := range acts {
		if !strings.HasPrefix(key, "Double(") && !strings.HasPrefix(key, "Add(") {
			delete(acts, key)
		}
	}
	return acts
}
