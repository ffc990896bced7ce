// Package gwbench measures go-workflows workflows per second on the durofs
// backend (github.com/durofs/durofs/goworkflows) against go-workflows' own
// SQLite backend (one database file in WAL mode, as that backend configures
// it), in two scenarios - the tree of go-workflows' bench tool (root → mid →
// leaf workflows with activities) and a chain of sequential activities - at
// one process (worker and client together) and at several worker processes
// sharing one store (the measuring process is then only the client).
// bench/cmd/gwbench runs the matrix; BENCHMARKS.md records a run.
package gwbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/monoprocess"
	"github.com/cschleiden/go-workflows/backend/sqlite"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/diag"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"

	"github.com/durofs/durofs/goworkflows"
	"github.com/durofs/durofs/provider"
)

// Backends and scenarios.
const (
	Durofs = "durofs"
	SQLite = "sqlite"
	Tree   = "tree"
	ChainS = "chain"
)

// Config is one measurement.
type Config struct {
	Backend  string // Durofs or SQLite
	Scenario string // Tree or ChainS
	// Processes is the number of worker processes; 1 runs the worker in
	// the measuring process itself.
	Processes int
	// Roots is the number of root workflows (tree) or chains started.
	Roots    int
	Tree     TreeInput
	ChainLen int
	// Dir is an empty directory for the store.
	Dir     string
	Timeout time.Duration
}

// Result is a measurement's outcome.
type Result struct {
	Config
	// Workflows counts every workflow instance that finished (a tree's
	// root, mids and leaves).
	Workflows int
	// Elapsed is from the first start to the moment the client saw the
	// last workflow finish; its wait (go-workflows'
	// WaitForWorkflowInstance) polls the store with a backoff that grows
	// to one second, so it sees a finish up to a second late.
	Elapsed time.Duration
	// Finished is from the first start to the last finish as the store
	// recorded it (the completion time go-workflows' diagnostics report,
	// written by the worker that finished the workflow): the backend's own
	// time, without the client's polling.
	Finished time.Duration
	// Busy counts the client calls that failed because the store was
	// locked by another process (SQLite's "database is locked") and were
	// retried.
	Busy int
	// WorkerCPU is the CPU time (user + system) of each worker process of a
	// multi-process measurement, over its whole life: how the work was
	// shared between them (go-workflows' SQLite backend wakes only the
	// process that committed, so one of its processes may do nearly all).
	WorkerCPU []time.Duration
}

// PerSecond is workflows per second as the client saw them finish.
func (r Result) PerSecond() float64 { return float64(r.Workflows) / r.Elapsed.Seconds() }

// FinishedPerSecond is workflows per second by the store's completion
// times (Finished).
func (r Result) FinishedPerSecond() float64 { return float64(r.Workflows) / r.Finished.Seconds() }

// DefaultTree is go-workflows' bench tool's default scenario.
var DefaultTree = TreeInput{FanOut: 2, LeafFanOut: 2, Depth: 2, Activities: 2, PayloadSizeBytes: 100}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// open opens the store of backend name in dir for one process; stats, if
// not nil, receives go-workflows' metrics. d is the store's diagnostics
// view (the SQLite backend's own: the monoprocess wrapper hides it).
func open(name, dir, workerName string, stats *taskStats) (b backend.Backend, d diag.Backend, err error) {
	opts := []backend.BackendOption{backend.WithLogger(quiet), backend.WithWorkerName(workerName)}
	if stats != nil {
		opts = append(opts, backend.WithMetrics(stats))
	}
	switch name {
	case Durofs:
		gb, err := goworkflows.Open(filepath.Join(dir, "durofs"), goworkflows.Options{Provider: provider.Options{Durability: provider.Durable}}, opts...)
		if err != nil {
			return nil, nil, err
		}
		return gb, gb, nil
	case SQLite:
		// As go-workflows' bench tool runs it: monoprocess wakes this
		// process's pollers on its own commits.
		sb := sqlite.NewSqliteBackend(filepath.Join(dir, "bench.sqlite"), sqlite.WithBackendOptions(opts...))
		return monoprocess.NewMonoprocessBackend(sb), sb, nil
	}
	return nil, nil, fmt.Errorf("gwbench: unknown backend %q", name)
}

// executorCacheSize is the workers' workflow executor cache, for both
// backends. go-workflows v1.2.0's default (128) hangs a worker once more
// workflows are in flight in it than that: the cache closes the executor
// it evicts for room even while another task of that workflow is running
// on it, and that task then waits forever (goroutine dump of a hung
// "-roots 40" run: a task blocked in coState.Execute's channel send for 20
// minutes, the worker's WaitForCompletion behind it). Larger than any
// run's workflows, so nothing is evicted for room.
const executorCacheSize = 1 << 16

func startWorker(ctx context.Context, b backend.Backend) (*worker.Worker, error) {
	opts := worker.DefaultOptions
	opts.WorkflowExecutorCacheSize = executorCacheSize
	w := worker.New(b, &opts)
	for _, wf := range []any{Root, Mid, Leaf, Chain} {
		if err := w.RegisterWorkflow(wf); err != nil {
			return nil, err
		}
	}
	for _, a := range []any{Payload, Step} {
		if err := w.RegisterActivity(a); err != nil {
			return nil, err
		}
	}
	return w, w.Start(ctx)
}

// Worker-process arguments (WorkerMain).
const workerFlag = "-gwbench-worker"

// WorkerProfileEnv names the environment variable that makes every worker
// process of a multi-process run write its CPU profile, to
// "<value>-<store>-<worker name>.prof", the store being the measurement's
// directory (e.g. tree-durofs-4). The 1-process runs' worker is the
// measuring process, which gwbench -cpuprofile profiles.
const WorkerProfileEnv = "GWBENCH_WORKER_CPUPROFILE"

// WorkerTraceEnv names the environment variable that makes every worker
// process of a multi-process run write a Go execution trace (runtime/trace)
// to "<value>-<store>-<worker name>.trace": where its goroutines blocked
// (go tool trace -pprof=syscall, sync, sched or net).
const WorkerTraceEnv = "GWBENCH_WORKER_TRACE"

// IsWorker reports whether args (os.Args[1:]) start a worker process.
func IsWorker(args []string) bool { return len(args) > 0 && args[0] == workerFlag }

// WorkerMain runs a worker process (args: workerFlag, backend, dir, name)
// until SIGTERM and returns its exit code.
func WorkerMain(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "gwbench worker: want backend, dir, name")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	for _, rec := range []struct {
		env, suffix string
		start       func(io.Writer) error
		stop        func()
	}{
		{WorkerProfileEnv, "prof", pprof.StartCPUProfile, pprof.StopCPUProfile},
		{WorkerTraceEnv, "trace", trace.Start, trace.Stop},
	} {
		prefix := os.Getenv(rec.env)
		if prefix == "" {
			continue
		}
		f, err := os.Create(fmt.Sprintf("%s-%s-%s.%s", prefix, filepath.Base(args[2]), args[3], rec.suffix))
		if err == nil {
			defer f.Close()
			err = rec.start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gwbench worker:", err)
			return 1
		}
		defer rec.stop()
	}
	var stats *taskStats
	if prefix := os.Getenv(WorkerStatsEnv); prefix != "" {
		stats = newTaskStats()
		defer writeStats(stats, prefix, args[2], args[3])
	}
	b, _, err := open(args[1], args[2], args[3], stats)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwbench worker:", err)
		return 1
	}
	defer b.Close()
	if stats != nil {
		b = timedBackend{b, stats}
	}
	w, err := startWorker(ctx, b)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwbench worker:", err)
		return 1
	}
	fmt.Println("ready")
	<-ctx.Done()
	_ = w.WaitForCompletion()
	return 0
}

// Run makes one measurement; self is the executable to start worker
// processes from (its main must call WorkerMain when IsWorker).
func Run(ctx context.Context, cfg Config, self string) (Result, error) {
	res := Result{Config: cfg}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var stats *taskStats
	if prefix := os.Getenv(WorkerStatsEnv); prefix != "" && cfg.Processes <= 1 {
		// The 1-process runs' worker is this process's.
		stats = newTaskStats()
		defer writeStats(stats, prefix, cfg.Dir, "worker")
	}
	b, d, err := open(cfg.Backend, cfg.Dir, "client", stats)
	if err != nil {
		return res, err
	}
	defer b.Close()
	stopWorkers := func() []time.Duration { return nil }
	if cfg.Processes <= 1 {
		wb := b
		if stats != nil {
			wb = timedBackend{b, stats}
		}
		w, err := startWorker(ctx, wb)
		if err != nil {
			return res, err
		}
		defer func() { cancel(); _ = w.WaitForCompletion() }()
	} else {
		stop, err := startProcesses(cfg, self)
		if err != nil {
			return res, err
		}
		var once sync.Once
		stopWorkers = func() (cpu []time.Duration) {
			once.Do(func() { cpu = stop() })
			return cpu
		}
		defer stopWorkers()
	}

	c := client.New(b)
	var busy atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Roots)
	started := make([]*workflow.Instance, 0, cfg.Roots)
	for i := range cfg.Roots {
		var inst *workflow.Instance
		id := fmt.Sprintf("%s-%d", cfg.Scenario, i)
		wf, arg := any(Chain), any(cfg.ChainLen)
		if cfg.Scenario == Tree {
			in := cfg.Tree
			wf, arg = Root, &in
			res.Workflows += treeSize(in)
		} else {
			res.Workflows++
		}
		err := retryBusy(ctx, &busy, func() error {
			var err error
			inst, err = c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: id}, wf, arg)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("start %s: %w", id, err)
		}
		started = append(started, inst)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := retryBusy(ctx, &busy, func() error { return c.WaitForWorkflowInstance(ctx, inst, cfg.Timeout) })
			if err != nil {
				errs <- fmt.Errorf("%s: %w", inst.InstanceID, err)
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Busy = int(busy.Load())
	res.WorkerCPU = stopWorkers()
	close(errs)
	for err := range errs {
		return res, err
	}
	last, err := lastFinish(ctx, d, started)
	if err != nil {
		return res, err
	}
	res.Finished = last.Sub(start)
	return res, nil
}

// lastFinish returns the latest completion time the store recorded for
// the instances (a tree's root finishes after its whole tree).
func lastFinish(ctx context.Context, d diag.Backend, insts []*workflow.Instance) (time.Time, error) {
	var last time.Time
	for _, inst := range insts {
		ref, err := d.GetWorkflowInstance(ctx, inst)
		if err != nil {
			return last, fmt.Errorf("gwbench: %s: %w", inst.InstanceID, err)
		}
		if ref == nil || ref.CompletedAt == nil {
			return last, fmt.Errorf("gwbench: %s: no completion time recorded", inst.InstanceID)
		}
		if ref.CompletedAt.After(last) {
			last = *ref.CompletedAt
		}
	}
	return last, nil
}

// retryBusy calls f until it does not fail with SQLite's "database is
// locked" (SQLITE_BUSY: another process held the write lock past
// busy_timeout; SQLITE_BUSY_SNAPSHOT: a read transaction could not be
// upgraded to a write), counting the retries.
func retryBusy(ctx context.Context, busy *atomic.Int64, f func() error) error {
	for {
		err := f()
		if err == nil || !strings.Contains(err.Error(), "database is locked") || ctx.Err() != nil {
			return err
		}
		busy.Add(1)
		time.Sleep(10 * time.Millisecond)
	}
}

// startProcesses starts cfg.Processes worker processes and returns a
// function that stops them and returns each one's CPU time.
func startProcesses(cfg Config, self string) (func() []time.Duration, error) {
	var cmds []*exec.Cmd
	stop := func() []time.Duration {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		var cpu []time.Duration
		for _, cmd := range cmds {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if st := cmd.ProcessState; st != nil {
				cpu = append(cpu, st.UserTime()+st.SystemTime())
			}
		}
		return cpu
	}
	for i := range cfg.Processes {
		cmd := exec.Command(self, workerFlag, cfg.Backend, cfg.Dir, fmt.Sprintf("worker-%d", i))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, cmd)
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			stop()
			return nil, fmt.Errorf("worker process %d did not start: %q %v", i, line, err)
		}
	}
	return stop, nil
}
