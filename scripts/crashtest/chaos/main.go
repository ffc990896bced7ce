//go:build unix

// Command chaos is durofs's kill -9 crash-recovery suite (design.md §6,
// filesystem-notes.md §3.2), in the style of RocksDB's db_crashtest
// blackbox mode.
//
// It runs --workers worker processes (re-executions of this binary with the
// hidden "worker" subcommand), each running workload.Runtime on one shared
// durofs directory, while a driver in this process keeps starting
// workload.Mix batches and raising their external events. Every U(--kill-min,
// --kill-max) it SIGKILLs a random worker and restarts it at once. Workers
// report every ack to this process over stdout before they continue (package
// oracle), so this process is the oracle of what was committed.
//
// Chaos lasts until --duration has passed AND --kills kills have happened
// (whichever comes later; --kills 0 means the duration alone decides). Then
// the killing and the new batches stop, the workers drain until every
// started instance is terminal and no work is pending (--drain-timeout),
// and are stopped with SIGTERM. Finally this process ages what killed
// writers left behind (temporary and staged files, so the sweep's minimum
// age has passed), opens the directory one last time (recovery) and runs the
// invariant checker (package invariants).
//
// With --zombies N it also, N times during chaos, asks a worker to hold back
// its next ack, SIGSTOPs it while it holds that instance's lease, lets the
// lease expire and the others take over, and SIGCONTs it: the held-back ack
// must be rejected and leave no trace.
//
// Usage:
//
//	go run ./scripts/crashtest/chaos [flags]
//	go run ./scripts/crashtest/chaos check --dir <kept working directory>
//
// The second form checks a kept run again offline: it rebuilds the oracle
// from oracle.jsonl and the started instances from specs.jsonl.
//
// It prints kills, kills that landed inside a commit, recovery work, recovery
// time, drain time, throughput under chaos, duplicate activity executions,
// instances, and "violations: N" with a per-invariant breakdown. The exit
// status is 0 on success, 1 on a violation, a timeout or any failure, 2 on a
// usage error. The working directory (--dir: a temporary one by default) is
// removed on success and kept on failure; it holds the durofs directory
// (data/), the worker logs (logs/) and every line the workers reported
// (oracle.jsonl).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// workerEnv is set in every worker's environment. The test binary, which
// re-executes itself as the workers, checks it in TestMain.
const workerEnv = "DUROFS_CHAOS_WORKER"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches between the supervisor and the hidden worker subcommand.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			return workerMain(args[1:], stdout, stderr)
		case "check":
			return checkMain(args[1:], stdout, stderr)
		}
	}
	cfg, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := runChaos(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return exitFailure
	}
	if !res.ok() {
		return exitFailure
	}
	return exitOK
}

// config is the supervisor's flags.
type config struct {
	dir             string
	keep            bool
	workers         int
	duration        time.Duration
	kills           int
	seed            int64
	nosync          bool
	killMin         time.Duration
	killMax         time.Duration
	lockTimeout     time.Duration
	dispatchers     int
	activityWorkers int
	active          int
	batch           int
	drainTimeout    time.Duration
	timeout         time.Duration
	zombies         int
	zombiePause     time.Duration
	verbose         bool
	// exe is the binary re-executed as a worker (default: this one).
	exe string
}

// defaultConfig returns the flag defaults.
func defaultConfig() config {
	return config{
		workers: 3, duration: 30 * time.Second, seed: 1,
		killMin: 30 * time.Millisecond, killMax: 300 * time.Millisecond,
		lockTimeout: 2 * time.Second, dispatchers: 2, activityWorkers: 2,
		active: 36, batch: 12, drainTimeout: 120 * time.Second, timeout: 60 * time.Minute,
	}
}

// withDerived fills in the defaults that depend on other flags.
func (c config) withDerived() config {
	if c.zombiePause == 0 {
		c.zombiePause = 2*c.lockTimeout + 500*time.Millisecond
	}
	return c
}

// parseFlags parses args; code is -1 to go on, else the exit code.
func parseFlags(args []string, stderr io.Writer) (config, int) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.dir, "dir", "", "working `directory` (data/, logs/, oracle.jsonl); default a new temporary one, removed on success")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the working directory even on success")
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "worker processes (at least 1; the suite is meant for 3 or more)")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "minimum chaos duration")
	fs.IntVar(&cfg.kills, "kills", 0, "minimum number of kills: chaos lasts until both --duration and --kills are reached")
	fs.Int64Var(&cfg.seed, "seed", cfg.seed, "seed of the workload and of the kill schedule")
	fs.BoolVar(&cfg.nosync, "nosync", false, "ProcessCrashSafe mode (no fsync): survives kill -9, not power loss")
	fs.DurationVar(&cfg.killMin, "kill-min", cfg.killMin, "minimum time between kills")
	fs.DurationVar(&cfg.killMax, "kill-max", cfg.killMax, "maximum time between kills")
	fs.DurationVar(&cfg.lockTimeout, "lock-timeout", cfg.lockTimeout, "lock timeout of the workers' fetches (a killed worker's locks expire after it)")
	fs.IntVar(&cfg.dispatchers, "dispatchers", cfg.dispatchers, "orchestration dispatcher loops per worker")
	fs.IntVar(&cfg.activityWorkers, "activity-workers", cfg.activityWorkers, "activity worker loops per worker")
	fs.IntVar(&cfg.active, "active", cfg.active, "keep at least this many instances running during chaos")
	fs.IntVar(&cfg.batch, "batch", cfg.batch, "instances per workload.Mix batch")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", cfg.drainTimeout, "give up if the workers have not drained by then")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "give up on the whole run after this long")
	fs.IntVar(&cfg.zombies, "zombies", 0, "zombie-holder pauses (SIGSTOP past the lease, then SIGCONT) during chaos")
	fs.DurationVar(&cfg.zombiePause, "zombie-pause", 0, "how long a zombie is stopped (default 2×lock-timeout + 500ms)")
	fs.BoolVar(&cfg.verbose, "v", false, "log every kill and restart")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: chaos [flags]

Runs durofs workers on one directory, SIGKILLs a random worker every
U(kill-min, kill-max) and restarts it, drains, recovers and checks the
crash suite's invariants. Prints "violations: N" last; exits 1 on any
violation or timeout.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, exitOK
		}
		return cfg, exitUsage
	}
	cfg = cfg.withDerived()
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case cfg.workers < 1 || cfg.workers > 64:
		problem = "--workers must be between 1 and 64"
	case cfg.duration < 0 || cfg.kills < 0 || cfg.zombies < 0:
		problem = "--duration, --kills and --zombies must not be negative"
	case cfg.killMin <= 0 || cfg.killMax < cfg.killMin:
		problem = "need 0 < --kill-min <= --kill-max"
	case cfg.lockTimeout < 100*time.Millisecond:
		problem = "--lock-timeout must be at least 100ms"
	case cfg.dispatchers < 1 || cfg.activityWorkers < 1 || cfg.active < 1 || cfg.batch < 1:
		problem = "--dispatchers, --activity-workers, --active and --batch must be positive"
	case cfg.drainTimeout <= 0 || cfg.timeout <= 0:
		problem = "--drain-timeout and --timeout must be positive"
	case cfg.zombies > 0 && cfg.zombiePause <= cfg.lockTimeout:
		problem = "--zombie-pause must exceed --lock-timeout"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "chaos: %s\n", problem)
		return cfg, exitUsage
	}
	return cfg, -1
}
