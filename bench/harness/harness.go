package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Result is everything one harness run measured. A nil section was not
// selected.
type Result struct {
	Machine    Machine
	Config     Config
	Fsyncs     *FsyncResult
	Throughput *ThroughputResult
	Fetch      *FetchResult
	Restart    *RestartResult
	// Elapsed is the whole run's wall time.
	Elapsed time.Duration
}

// Run runs the selected sections and returns their results. It fails if a
// section cannot run or a workload's result does not verify; it never
// fails because a figure misses its target.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	cfg.Dir = abs
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	res := &Result{Machine: DescribeMachine(cfg.Dir), Config: cfg}
	if inMemoryFS(res.Machine.FSType) && !cfg.AllowTmpfs {
		return nil, fmt.Errorf("harness: %s is on %s, where fsync costs nothing; use a directory on a disk (-dir or $DUROBENCH_DIR)",
			cfg.Dir, res.Machine.FSType)
	}
	// Each harness run works in its own subdirectory.
	root, err := os.MkdirTemp(cfg.Dir, "run-")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	if !cfg.Keep {
		defer os.RemoveAll(root)
	}
	cfg.logf("durobench: data in %s (%s)", root, res.Machine.FSType)

	var errs []error
	section := func(name string, f func() error) {
		if !cfg.has(name) || ctx.Err() != nil {
			return
		}
		t := time.Now()
		cfg.logf("== %s", name)
		if err := f(); err != nil {
			errs = append(errs, err)
			cfg.logf("== %s FAILED: %v", name, err)
			return
		}
		cfg.logf("== %s done in %v", name, time.Since(t).Round(time.Second))
	}
	section(SectionFsyncs, func() (err error) {
		res.Fsyncs, err = runFsyncs(ctx, cfg, root)
		return err
	})
	section(SectionThroughput, func() (err error) {
		res.Throughput, err = runThroughput(ctx, cfg, root)
		return err
	})
	section(SectionFetch, func() (err error) {
		res.Fetch, err = runFetch(ctx, cfg, root)
		return err
	})
	section(SectionRestart, func() (err error) {
		res.Restart, err = runRestart(ctx, cfg, root)
		return err
	})
	res.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// removeRunDir flushes the file systems after a finished run, so the next
// measurement starts quiet, and with cfg.EagerCleanup (and not cfg.Keep)
// first removes the run's directory and then waits cfg.Settle. Otherwise the
// directory goes with the harness's root directory at the end (see
// Config.EagerCleanup).
func removeRunDir(cfg Config, dir string) error {
	if cfg.Keep || !cfg.EagerCleanup {
		flushAll()
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	flushAll()
	time.Sleep(cfg.Settle)
	return nil
}
