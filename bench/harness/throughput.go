package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durofs/durofs/provider"

	"github.com/durofs/durofs/conformance/workload"
)

// Workload names of the throughput section.
const (
	WorkloadChain  = "chain"
	WorkloadFanOut = "fanout"
)

// ThroughputRun is one measured run.
type ThroughputRun struct {
	// Wall is from the moment the workers were told to start to the last
	// execution-ending ack.
	Wall time.Duration
	// Turns and Activities are orchestration acks and activity acks, summed
	// over the processes.
	Turns, Activities int64
	// MaxRSSKiB is the largest peak RSS of the run's processes.
	MaxRSSKiB int64
	// Log sums durofs's write-ahead log counters over the processes
	// (appends, fdatasyncs, checkpoint fsyncs); zero for other providers.
	Log provider.LogStats
	// Create is what creating a small file in the run's directory cost
	// just before the run started (probeCreate).
	Create time.Duration
}

// TurnsPerSec is orchestration acks per second.
func (r ThroughputRun) TurnsPerSec() float64 { return float64(r.Turns) / r.Wall.Seconds() }

// ActivitiesPerSec is activity acks per second.
func (r ThroughputRun) ActivitiesPerSec() float64 { return float64(r.Activities) / r.Wall.Seconds() }

// ThroughputCell is every run of one provider, workload and process count.
type ThroughputCell struct {
	// Provider is ProviderDurofs or ProviderSQLite; Workload is
	// WorkloadChain or WorkloadFanOut.
	Provider, Workload string
	// Procs is the number of worker processes.
	Procs int
	// Runs are the measured runs, in order.
	Runs []ThroughputRun
}

// MedianTurnsPerSec is the median over runs.
func (c ThroughputCell) MedianTurnsPerSec() float64 {
	return medianOf(c.Runs, ThroughputRun.TurnsPerSec)
}

// MedianActivitiesPerSec is the median over runs.
func (c ThroughputCell) MedianActivitiesPerSec() float64 {
	return medianOf(c.Runs, ThroughputRun.ActivitiesPerSec)
}

// MaxRSSKiB is the largest peak RSS of any process of any run.
func (c ThroughputCell) MaxRSSKiB() int64 {
	var m int64
	for _, r := range c.Runs {
		m = max(m, r.MaxRSSKiB)
	}
	return m
}

func medianOf(runs []ThroughputRun, f func(ThroughputRun) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return median(xs)
}

// ThroughputResult is the throughput section's result.
type ThroughputResult struct {
	// Workloads describes the workloads; Runtime the loops per process.
	Workloads, Runtime string
	Cells              []ThroughputCell
}

// Cell returns the cell of a provider, workload and process count.
func (t *ThroughputResult) Cell(prov, wl string, procs int) *ThroughputCell {
	for i := range t.Cells {
		c := &t.Cells[i]
		if c.Provider == prov && c.Workload == wl && c.Procs == procs {
			return c
		}
	}
	return nil
}

// throughputSpecs returns a workload's specs.
func throughputSpecs(sz *Sizes, wl string) ([]workload.Spec, error) {
	switch wl {
	case WorkloadChain:
		specs := make([]workload.Spec, 0, sz.ChainInstances)
		for i := range sz.ChainInstances {
			s, err := workload.NewSpec(fmt.Sprintf("chain-%d", i), workload.KindChain, sz.ChainLength, i+1)
			if err != nil {
				return nil, err
			}
			specs = append(specs, s)
		}
		return specs, nil
	case WorkloadFanOut:
		s, err := workload.NewSpec("fanout-0", workload.KindFanOut, sz.FanOut, 1)
		if err != nil {
			return nil, err
		}
		return []workload.Spec{s}, nil
	}
	return nil, fmt.Errorf("unknown workload %q", wl)
}

// runThroughput runs every workload × process count × run × provider;
// the providers alternate run by run so drift in the machine's speed
// affects both alike.
func runThroughput(ctx context.Context, cfg Config, root string) (*ThroughputResult, error) {
	sz := cfg.Sizes
	res := &ThroughputResult{
		Workloads: fmt.Sprintf("chain: %d instances × %d sequential activities; fanout: 1 instance × %d parallel activities",
			sz.ChainInstances, sz.ChainLength, sz.FanOut),
		Runtime: fmt.Sprintf("%d dispatchers + %d workers per process (conformance/workload.Runtime, default lock 5 s, long poll 200 ms)",
			sz.Dispatchers, sz.Workers),
	}
	for _, wl := range []string{WorkloadChain, WorkloadFanOut} {
		specs, err := throughputSpecs(sz, wl)
		if err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
		for _, procs := range cfg.Procs {
			for _, prov := range cfg.Providers {
				res.Cells = append(res.Cells, ThroughputCell{Provider: prov, Workload: wl, Procs: procs})
			}
			for run := range cfg.Runs {
				for _, prov := range cfg.Providers {
					dir := filepath.Join(root, fmt.Sprintf("tp-%s-%s-p%d-r%d", wl, prov, procs, run+1))
					r, err := throughputRun(ctx, cfg, prov, dir, specs, procs)
					if err != nil {
						return nil, fmt.Errorf("throughput %s %s %d process(es) run %d: %w", wl, prov, procs, run+1, err)
					}
					cell := res.Cell(prov, wl, procs)
					cell.Runs = append(cell.Runs, r)
					cfg.logf("  throughput %-6s %-6s %d proc run %d: %6.0f turns/s %6.0f activities/s (%v, %d turns, peak RSS %d MiB)",
						wl, prov, procs, run+1, r.TurnsPerSec(), r.ActivitiesPerSec(), r.Wall.Round(time.Millisecond), r.Turns, r.MaxRSSKiB/1024)
					if err := removeRunDir(cfg, dir); err != nil {
						return nil, fmt.Errorf("throughput: %w", err)
					}
				}
			}
		}
	}
	return res, nil
}

// throughputRun enqueues specs on a fresh directory, runs them with procs
// child processes, and verifies the result.
func throughputRun(ctx context.Context, cfg Config, prov, dir string, specs []workload.Spec, procs int) (ThroughputRun, error) {
	sz := cfg.Sizes
	var zero ThroughputRun
	if err := os.RemoveAll(dir); err != nil {
		return zero, err
	}
	p, err := openProvider(prov, dir, openOptions{})
	if err != nil {
		return zero, err
	}
	for _, s := range specs {
		if err := workload.Start(ctx, p, s); err != nil {
			_ = p.Close()
			return zero, fmt.Errorf("start %s: %w", s.Instance, err)
		}
	}
	if err := p.Close(); err != nil {
		return zero, fmt.Errorf("close after enqueue: %w", err)
	}
	create, err := probeCreate(dir)
	if err != nil {
		return zero, err
	}

	cs := make([]*child, 0, procs)
	defer func() { killAll(cs) }()
	for range procs {
		c, err := startChild(cfg, roleRun, "--provider", prov, "--dir", dir,
			"--dispatchers", strconv.Itoa(sz.Dispatchers), "--workers", strconv.Itoa(sz.Workers))
		if err != nil {
			return zero, err
		}
		cs = append(cs, c)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	for _, c := range cs {
		if _, err := c.expect(rctx, msgReady); err != nil {
			cancel()
			return zero, err
		}
	}
	cancel()
	t0 := time.Now()
	for _, c := range cs {
		if err := c.send(cmdGo); err != nil {
			return zero, err
		}
	}

	// Wait until the processes together have ended every execution.
	latest := make([]childMsg, len(cs))
	deadline := time.NewTimer(sz.RunTimeout)
	defer deadline.Stop()
	for {
		var ended int64
		for i, c := range cs {
			if err := drain(c, &latest[i]); err != nil {
				return zero, err
			}
			if latest[i].Stats != nil {
				ended += latest[i].Stats.ExecutionsEnded
			}
		}
		if ended >= int64(len(specs)) {
			break
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-deadline.C:
			return zero, fmt.Errorf("%d of %d executions ended after %v", ended, len(specs), sz.RunTimeout)
		}
	}

	// Stop them and collect their final counters and peak RSS.
	r := ThroughputRun{Create: create}
	var lastEnd int64
	for _, c := range cs {
		if err := c.send(cmdStop); err != nil {
			return zero, err
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	for _, c := range cs {
		m, err := c.expect(sctx, msgResult)
		if err != nil {
			return zero, err
		}
		if err := c.wait(30 * time.Second); err != nil {
			return zero, err
		}
		r.Turns += m.Stats.Turns
		r.Activities += m.Stats.ActivitiesAcked
		if m.Log != nil {
			r.Log.Appends += m.Log.Appends
			r.Log.Syncs += m.Log.Syncs
			r.Log.Checkpoints += m.Log.Checkpoints
			r.Log.CheckpointSyncs += m.Log.CheckpointSyncs
		}
		r.MaxRSSKiB = max(r.MaxRSSKiB, c.maxRSSKiB)
		lastEnd = max(lastEnd, m.LastEndUnixNs)
	}
	cs = nil
	if lastEnd == 0 {
		return zero, errors.New("no process saw an execution end")
	}
	r.Wall = time.Unix(0, lastEnd).Sub(t0)

	if err := verifyRun(ctx, prov, dir, specs); err != nil {
		return zero, err
	}
	return r, nil
}

// drain applies every message c has sent so far to *latest; it fails if c
// exited or reported an error.
func drain(c *child, latest *childMsg) error {
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				<-c.done
				return c.failure("exited during the run")
			}
			if m.Type == msgError {
				return c.failure(m.Error)
			}
			if m.Stats != nil {
				*latest = m
			}
		default:
			return nil
		}
	}
}

// verifyRun reopens a run's provider and checks every spec's result and
// history with workload.Verify.
func verifyRun(ctx context.Context, prov, dir string, specs []workload.Spec) error {
	p, err := openProvider(prov, dir, openOptions{})
	if err != nil {
		return err
	}
	defer p.Close()
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := workload.Await(actx, p, admin(p), specs, nil); err != nil {
		return fmt.Errorf("await: %w", err)
	}
	rep, err := workload.Verify(ctx, p, admin(p), specs)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if !rep.OK() || rep.Completed != len(specs) {
		return fmt.Errorf("the workload's result is wrong: %s", rep)
	}
	return nil
}
