//go:build unix

// Command chaos is durofs's kill -9 crash-recovery suite (docs/design.md
// §6, docs/testing.md), in the style of RocksDB's db_crashtest blackbox
// mode.
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
// started instance is terminal and no work is pending (no queued message
// but timers not yet due, no lease or claim marking a commit pending;
// --drain-timeout), and are stopped with SIGTERM. Finally this process ages
// what killed writers left behind (temporary and staged files, so the
// sweep's minimum age has passed) and checks the directory twice with the
// invariant checker (package invariants): after opening it while holding
// its write-ahead log open (as a live process would: recovery without
// replay, so what the workers' own recovery left is what is checked), and
// after a process that has it alone replayed the log.
//
// With --zombies N it also, N times during chaos, asks a worker to hold back
// its next ack, SIGSTOPs it while it holds that instance's lease, lets the
// lease expire and the others take over, and SIGCONTs it: the held-back ack
// must be rejected and leave no trace.
//
// With --stops N (stall mode, stall.go) it kills nothing: it SIGSTOPs
// worker 0 at least N times, at random moments and (--stop-at-failpoints,
// in a -tags crashtest build) at its next failpoint, each time for a random
// time up to --stop-max, while the two others ack; it reports the others'
// ack latency and fails if one took longer than --lock-timeout +
// --stall-margin beyond its wait for the log's fdatasync (disk time),
// naming the flocks the stopped worker held (the others dump their
// goroutines to their logs when an ack is that slow).
//
// Usage:
//
//	go run ./scripts/crashtest/chaos [flags]
//	go run -tags crashtest ./scripts/crashtest/chaos --stops 200 --stop-at-failpoints 0.5 [flags]
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
	stops           int
	stopMax         time.Duration
	stopGapMin      time.Duration
	stopGapMax      time.Duration
	stallMargin     time.Duration
	stopAtFailpoint float64
	deletes         float64
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
		stopGapMin: 10 * time.Millisecond, stopGapMax: 250 * time.Millisecond, stallMargin: time.Second,
	}
}

// withDerived fills in the defaults that depend on other flags.
func (c config) withDerived() config {
	if c.zombiePause == 0 {
		c.zombiePause = 2*c.lockTimeout + 500*time.Millisecond
	}
	if c.stopMax == 0 {
		c.stopMax = 2 * c.lockTimeout
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
	fs.IntVar(&cfg.stops, "stops", 0, "stall mode: instead of killing, SIGSTOP worker 0 at random moments at least this many times (each for a random time up to --stop-max, then SIGCONT) while the others ack; fail if any of the others' acks took longer than --lock-timeout + --stall-margin")
	fs.DurationVar(&cfg.stopMax, "stop-max", 0, "stall mode: longest stop (default 2×lock-timeout)")
	fs.DurationVar(&cfg.stopGapMin, "stop-gap-min", cfg.stopGapMin, "stall mode: minimum time the stopped worker runs between two stops")
	fs.DurationVar(&cfg.stopGapMax, "stop-gap-max", cfg.stopGapMax, "stall mode: maximum time the stopped worker runs between two stops")
	fs.DurationVar(&cfg.stallMargin, "stall-margin", cfg.stallMargin, "stall mode: how much longer than the lock timeout an ack of the other workers may take, beyond its wait for the log's group fdatasync (their own work under load: lock polling, CPU contention)")
	fs.Float64Var(&cfg.stopAtFailpoint, "stop-at-failpoints", 0, "stall mode: the fraction of stops made at the stopped worker's next failpoint (inside its acks and commits, holding their locks) rather than at a random moment; needs a build with -tags crashtest, on Linux")
	fs.Float64Var(&cfg.deletes, "deletes", 0, "the fraction of chain, fan-out, cancel and sub instances the driver deletes once started: forced while running (its activities held by workers being killed, a sub's child perhaps not started yet), plain once finished; each must leave nothing behind, children included")
	fs.BoolVar(&cfg.verbose, "v", false, "log every kill and restart")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: chaos [flags]

Runs durofs workers on one directory, SIGKILLs a random worker every
U(kill-min, kill-max) and restarts it (or, with --stops, SIGSTOPs worker 0
again and again and times the others' acks), drains, recovers and checks
the crash suite's invariants. Prints "violations: N" last; exits 1 on any
violation, stall or timeout.

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
	case cfg.stops < 0:
		problem = "--stops must not be negative"
	case cfg.stops > 0 && (cfg.zombies > 0 || cfg.kills > 0):
		problem = "--stops (stall mode) excludes --kills and --zombies"
	case cfg.stops > 0 && cfg.workers < 2:
		problem = "--stops needs at least 2 workers (one is stopped, the others are measured)"
	case cfg.stopAtFailpoint < 0 || cfg.stopAtFailpoint > 1:
		problem = "--stop-at-failpoints is a fraction between 0 and 1"
	case cfg.stopAtFailpoint > 0 && !failpointStops():
		problem = "--stop-at-failpoints needs a build with -tags crashtest (go run -tags crashtest ./scripts/crashtest/chaos) on Linux"
	case cfg.stops > 0 && (cfg.stopMax <= 0 || cfg.stopGapMin <= 0 || cfg.stopGapMax < cfg.stopGapMin || cfg.stallMargin < 0):
		problem = "need --stop-max > 0, 0 < --stop-gap-min <= --stop-gap-max and --stall-margin >= 0"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "chaos: %s\n", problem)
		return cfg, exitUsage
	}
	return cfg, -1
}
