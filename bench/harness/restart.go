package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// RestartRun is one kill -9 and restart.
type RestartRun struct {
	// VictimTurns is how many turns the killed process had acked (at its
	// last report before the kill).
	VictimTurns int64
	// Open is provider Open in the new process (durofs: with its recovery
	// pass); FirstOrch and FirstWork are from the start of Open to the
	// first orchestration item and the first work item fetched.
	Open, FirstOrch, FirstWork time.Duration
	// Total is from starting the new process (fork/exec) to its first
	// orchestration item: what "serving work after a restart" costs.
	Total time.Duration
	// EmptyFetches counts fetches that found nothing first.
	EmptyFetches int
	// Recovery is durofs's recovery counters in the new process.
	Recovery *provider.RecoveryStats
	// ProbeRSSKiB and VictimRSSKiB are the peak RSS of the new process and
	// of the killed one.
	ProbeRSSKiB, VictimRSSKiB int64
}

// RestartCell is every run of one provider and scenario.
type RestartCell struct {
	// Provider is ProviderDurofs or ProviderSQLite.
	Provider string
	// Instances are on disk, of which Pending had pending work at set-up.
	Instances, Pending int
	// Setup says how the directory was built and how long it took.
	Setup     string
	SetupTime time.Duration
	// Runs are the kill -9 and restart runs, in order.
	Runs []RestartRun
}

// Median returns the median of f over the runs.
func (c RestartCell) Median(f func(RestartRun) time.Duration) time.Duration {
	ds := make([]time.Duration, len(c.Runs))
	for i, r := range c.Runs {
		ds[i] = f(r)
	}
	return durationsMedian(ds)
}

// MaxProbeRSSKiB is the largest peak RSS of the restarted processes.
func (c RestartCell) MaxProbeRSSKiB() int64 {
	var m int64
	for _, r := range c.Runs {
		m = max(m, r.ProbeRSSKiB)
	}
	return m
}

// RestartResult is the restart section's result.
type RestartResult struct {
	// Method explains the procedure.
	Method string
	Cells  []RestartCell
}

// Cell returns the cell of a provider and instance count, or nil.
func (r *RestartResult) Cell(prov string, instances int) *RestartCell {
	for i := range r.Cells {
		c := &r.Cells[i]
		if c.Provider == prov && c.Instances == instances {
			return c
		}
	}
	return nil
}

// runRestart builds, per provider, a directory with RestartInstances
// instances (RestartPending with pending work, the rest completed) and one
// with only the pending ones; then, per run, starts a worker process, kills
// it with SIGKILL after RestartKillAfter turns, and times a new process
// from its start to its first fetched item.
func runRestart(ctx context.Context, cfg Config, root string) (*RestartResult, error) {
	sz := cfg.Sizes
	res := &RestartResult{Method: fmt.Sprintf("completed instances: chain of 0 activities (one turn each); pending: chain of %d activities, "+
		"start enqueued. Per run a worker process (%d dispatchers + %d workers) is killed with SIGKILL once it has acked %d turns; "+
		"then a new process opens the store and fetches (pollTimeout 0, in a loop) until it holds an orchestration item, then a work item. "+
		"Locks of the killed process stay held until they expire (5 s); the new process must skip them. Page cache warm.",
		sz.ChainLength, sz.Dispatchers, sz.Workers, sz.RestartKillAfter)}
	type cell struct{ instances, pending int }
	cells := []cell{{sz.RestartInstances, sz.RestartPending}, {sz.RestartPending, sz.RestartPending}}
	if sz.RestartBigInstances > 0 {
		cells = append(cells, cell{sz.RestartBigInstances, sz.RestartBigPending})
	}
	for _, cl := range cells {
		instances := cl.instances
		for _, prov := range cfg.Providers {
			if instances == sz.RestartBigInstances && prov != ProviderDurofs {
				continue // the reference has no way to build a million instances in minutes
			}
			dir := filepath.Join(root, fmt.Sprintf("restart-%s-%d", prov, instances))
			c, err := restartCell(ctx, cfg, prov, dir, instances, cl.pending)
			if err != nil {
				return nil, fmt.Errorf("restart %s %d instances: %w", prov, instances, err)
			}
			res.Cells = append(res.Cells, c)
			if err := removeRunDir(cfg, dir); err != nil {
				return nil, fmt.Errorf("restart: %w", err)
			}
		}
	}
	return res, nil
}

func restartCell(ctx context.Context, cfg Config, prov, dir string, instances, pending int) (RestartCell, error) {
	c := RestartCell{Provider: prov, Instances: instances, Pending: min(pending, instances)}
	t := time.Now()
	setup, err := buildRestartDir(ctx, cfg, prov, dir, instances-c.Pending, c.Pending)
	if err != nil {
		return c, fmt.Errorf("set-up: %w", err)
	}
	c.Setup, c.SetupTime = setup, time.Since(t)
	flushAll() // the unsynced set-up's write-back must not run during the measurement
	cfg.logf("  restart %-6s %d instances (%d pending): set-up %v", prov, instances, c.Pending, c.SetupTime.Round(time.Millisecond))
	for run := range cfg.Runs {
		r, err := restartRun(ctx, cfg, prov, dir)
		if err != nil {
			return c, fmt.Errorf("run %d: %w", run+1, err)
		}
		c.Runs = append(c.Runs, r)
		cfg.logf("  restart %-6s %d instances run %d: first item %v after process start (open %v, first orchestration fetch %v, first work fetch %v; killed after %d turns)",
			prov, instances, run+1, r.Total.Round(time.Microsecond), r.Open.Round(time.Microsecond),
			r.FirstOrch.Round(time.Microsecond), r.FirstWork.Round(time.Microsecond), r.VictimTurns)
	}
	return c, nil
}

// buildRestartDir creates completed instances (chains of length 0, run to
// the end by an in-process runtime) and enqueues the starts of pending
// ones. durofs is built in ProcessCrashSafe mode (the files are those of
// Durable mode, not fsynced); the SQLite reference has no unsynced mode.
// cloneAbove is how many completed instances buildRestartDir runs before
// it copies the rest (durofs only).
const cloneAbove = 10_000

func buildRestartDir(ctx context.Context, cfg Config, prov, dir string, completed, pending int) (string, error) {
	sz := cfg.Sizes
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	p, err := openProvider(prov, dir, openOptions{noSync: true})
	if err != nil {
		return "", err
	}
	defer p.Close()
	// Beyond cloneAbove completed instances, durofs's are built by running
	// the first cloneAbove and copying the first one's files for the rest
	// (clone.go): a million would take the runtime hours.
	cloned := 0
	if prov == ProviderDurofs && completed > cloneAbove {
		cloned, completed = completed-cloneAbove, cloneAbove
	}
	var done []queued
	for i := range completed {
		s, err := workload.NewSpec(fmt.Sprintf("done-%06d", i), workload.KindChain, 0, i)
		if err != nil {
			return "", err
		}
		done = append(done, queued{item: workload.StartItem(s)})
	}
	if err := enqueueParallel(ctx, p, done, 4); err != nil {
		return "", err
	}
	if completed > 0 {
		rctx, cancel := context.WithCancel(ctx)
		rt := workload.NewRuntime(p, workload.RuntimeOptions{Dispatchers: 4, Workers: 1, Logger: warnLogger(os.Stderr)})
		runErr := make(chan error, 1)
		go func() { runErr <- rt.Run(rctx) }()
		deadline := time.Now().Add(10 * time.Minute)
		for rt.Stats().ExecutionsEnded < int64(completed) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-runErr; err != nil {
			return "", err
		}
		if n := rt.Stats().ExecutionsEnded; n != int64(completed) {
			return "", fmt.Errorf("%d of %d set-up instances completed", n, completed)
		}
		if adm := admin(p); adm != nil {
			ids, err := adm.ListInstancesByStatus(ctx, workload.StatusCompleted)
			if err != nil {
				return "", fmt.Errorf("count completed instances: %w", err)
			}
			if len(ids) != completed {
				return "", fmt.Errorf("%d instances completed, want %d", len(ids), completed)
			}
		}
	}
	if cloned > 0 {
		if err := cloneInstances(dir, "done-000000", cloned, func(i int) string { return fmt.Sprintf("done-%06d", completed+i) }, 8); err != nil {
			return "", err
		}
	}
	var pend []queued
	for i := range pending {
		s, err := workload.NewSpec(fmt.Sprintf("pend-%06d", i), workload.KindChain, sz.ChainLength, i)
		if err != nil {
			return "", err
		}
		pend = append(pend, queued{item: workload.StartItem(s)})
	}
	if err := enqueueParallel(ctx, p, pend, 4); err != nil {
		return "", err
	}
	if err := p.Close(); err != nil {
		return "", err
	}
	if prov == ProviderDurofs && cloned > 0 {
		return fmt.Sprintf("durofs ProcessCrashSafe, 4 dispatchers in one process; %d more completed instances copied from the first one's files", cloned), nil
	}
	if prov == ProviderDurofs {
		return "durofs ProcessCrashSafe, 4 dispatchers in one process", nil
	}
	return "SQLite FULL (no unsynced mode), 4 dispatchers in one process", nil
}

// restartRun kills a worker process mid-work and times a new one.
func restartRun(ctx context.Context, cfg Config, prov, dir string) (RestartRun, error) {
	sz := cfg.Sizes
	var r RestartRun
	victim, err := startChild(cfg, roleRun, "--provider", prov, "--dir", dir,
		"--dispatchers", strconv.Itoa(sz.Dispatchers), "--workers", strconv.Itoa(sz.Workers))
	if err != nil {
		return r, err
	}
	defer victim.kill()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := victim.expect(rctx, msgReady); err != nil {
		return r, err
	}
	if err := victim.send(cmdGo); err != nil {
		return r, err
	}
	var latest childMsg
	for latest.Stats == nil || latest.Stats.Turns < int64(sz.RestartKillAfter) {
		if err := drain(victim, &latest); err != nil {
			return r, err
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-rctx.Done():
			return r, fmt.Errorf("the worker did not ack %d turns: %w", sz.RestartKillAfter, rctx.Err())
		}
	}
	victim.kill() // SIGKILL, then reap
	r.VictimTurns, r.VictimRSSKiB = latest.Stats.Turns, victim.maxRSSKiB

	probe, err := startChild(cfg, roleProbe, "--provider", prov, "--dir", dir)
	if err != nil {
		return r, err
	}
	defer probe.kill()
	m, err := probe.expect(rctx, msgResult)
	if err != nil {
		return r, err
	}
	if err := probe.wait(30 * time.Second); err != nil {
		return r, err
	}
	pr := m.Probe
	if pr == nil {
		return r, errors.New("the probe reported nothing")
	}
	r.Open, r.FirstOrch, r.FirstWork = time.Duration(pr.OpenNs), time.Duration(pr.FirstOrchNs), time.Duration(pr.FirstWorkNs)
	r.Total = time.Unix(0, pr.OrchFetchedUnixNs).Sub(probe.spawnedAt)
	r.EmptyFetches, r.Recovery, r.ProbeRSSKiB = pr.EmptyFetches, pr.Recovery, probe.maxRSSKiB
	return r, nil
}
