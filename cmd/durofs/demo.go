package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/wal"
)

// demoConfig is the demo's flags.
type demoConfig struct {
	dir       string
	instances int
	workers   int
	seed      int64
	timeout   time.Duration
	nosync    bool
	force     bool
}

// statsEvery is how often the demo's workers report their counters, so
// that a SIGKILLed worker's counts are lost for at most this long.
const statsEvery = 500 * time.Millisecond

// lockTimeout is the lock timeout of the workers' fetches.
const lockTimeout = 5 * time.Second

// killAtPercent is the progress at which the demo SIGKILLs a worker.
const killAtPercent = 40

// usageError is a problem with the command line (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// demoCmd is "durofs demo".
func demoCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("durofs demo", `Usage: durofs demo [--dir D] [--force] [flags]

Runs a mixed workload on --workers processes sharing --dir: chains,
fan-out/fan-in, durable timers, sub-orchestrations, external events,
continue-as-new, activity cancellation and failures. One worker is
SIGKILLed at 40% and restarted. At the end every instance's status and
output and every history are verified.

Flags:
`, stderr)
	var cfg demoConfig
	fs.StringVar(&cfg.dir, "dir", "./durofs-demo", "the directory `D` to run in: created if missing; an existing one must be empty (or, with --force, a durofs directory no process has open)")
	fs.BoolVar(&cfg.force, "force", false, "replace an existing durofs directory (a previous demo's, say) if no process has it open; never anything else")
	fs.IntVar(&cfg.instances, "instances", 60, "orchestration instances to run")
	fs.IntVar(&cfg.workers, "workers", 3, "worker processes")
	fs.Int64Var(&cfg.seed, "seed", 1, "workload seed (the same seed gives the same workload and results)")
	fs.DurationVar(&cfg.timeout, "timeout", 120*time.Second, "give up if the instances have not all finished by then")
	fs.BoolVar(&cfg.nosync, "nosync", false, "process-crash-safe mode: no fsync (survives kill -9, not power loss)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "durofs demo: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case cfg.instances < 1 || cfg.instances > 100_000:
		fmt.Fprintln(stderr, "durofs demo: --instances must be between 1 and 100000")
		return exitUsage
	case cfg.workers < 1 || cfg.workers > 64:
		fmt.Fprintln(stderr, "durofs demo: --workers must be between 1 and 64")
		return exitUsage
	case cfg.timeout <= 0:
		fmt.Fprintln(stderr, "durofs demo: --timeout must be positive")
		return exitUsage
	}
	if err := prepareDir(cfg.dir, cfg.force); err != nil {
		fmt.Fprintf(stderr, "durofs demo: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runDemo(ctx, cfg, stdout, stderr)
}

// prepareDir makes dir a directory for the demo, creating it if needed. An
// existing one must be empty; with force, a durofs directory (it has a
// durofs FORMAT file) is removed and made anew, unless a process has it
// open: a provider registers in wal/procs and holds a lock there while it
// lives (package wal, "Who is alive"). Anything else is refused with a
// usageError and left as it is.
func prepareDir(dir string, force bool) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, iofs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return usageError{fmt.Sprintf("%s exists and is not a directory", dir)}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	format, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
	if err != nil || !strings.Contains(string(format), `"durofs"`) {
		return usageError{fmt.Sprintf("%s is not empty and not a durofs directory; refusing to touch it (give a new or empty directory)", dir)}
	}
	if !force {
		return usageError{fmt.Sprintf("%s already holds a durofs directory; --force replaces it (if no process has it open), or give a new directory", dir)}
	}
	// Register as a process of the directory's log: Open tells whether any
	// other process is registered and alive, and keeps every other
	// provider's Open waiting (wal/open.lock) until Close, so none can
	// start using the directory while it is removed.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := wal.Open(ctx, vfs.OS{}, filepath.Join(dir, "wal"), wal.Options{Logger: slog.New(slog.DiscardHandler)})
	if errors.Is(err, wal.ErrModeMismatch) {
		// Only processes registered in the log have a mode.
		return fmt.Errorf("%s is in use: another process has it open (see %s); stop it, or give another directory", dir, filepath.Join(dir, "wal", "procs"))
	}
	if err != nil {
		return fmt.Errorf("%s: cannot tell whether a process has it open, so it is left as it is: %w", dir, err)
	}
	defer l.Close()
	if !l.Alone() {
		return fmt.Errorf("%s is in use: another process has it open (see %s); stop it, or give another directory", dir, filepath.Join(dir, "wal", "procs"))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// runDemo runs the demo on a fresh directory and returns the exit code.
func runDemo(ctx context.Context, cfg demoConfig, stdout, stderr io.Writer) int {
	tail := newTailBuffer(40)
	log := slog.New(slog.NewTextHandler(tail.prefixed("[demo] "), &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := provider.Options{Logger: log}
	if cfg.nosync {
		opts.Durability = provider.ProcessCrashSafe
	}
	p, err := provider.Open(cfg.dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "durofs demo: %v\n", err)
		return exitFailure
	}
	defer p.Close()
	adm, ok := p.Admin()
	if !ok {
		adm = nil
	}

	specs := workload.Mix(cfg.seed, cfg.instances)
	fmt.Fprintf(stdout, "durofs demo: %d instances (%s), %d worker processes, seed %d\n",
		len(specs), kindCounts(specs), cfg.workers, cfg.seed)
	fmt.Fprintf(stdout, "directory %s (%s); a worker is SIGKILLed at %d%% and restarted\n",
		cfg.dir, p.Durability(), killAtPercent)

	start := time.Now()
	for _, s := range specs {
		if err := workload.Start(ctx, p, s); err != nil {
			fmt.Fprintf(stderr, "durofs demo: %v\n", err)
			return exitFailure
		}
	}
	wargs := []string{"--dir", cfg.dir, "--stats-every", statsEvery.String()}
	if cfg.nosync {
		wargs = append(wargs, "--nosync")
	}
	pl := newPool(executable(), wargs, cfg.workers, tail)
	for i := range cfg.workers {
		if _, err := pl.start(i); err != nil {
			pl.stopAll(5 * time.Second)
			fmt.Fprintf(stderr, "durofs demo: %v\n", err)
			return exitFailure
		}
	}

	pr := newProgress(stdout)
	victim := int(uint64(cfg.seed) % uint64(cfg.workers))
	kills := 0
	var killNote string
	var killErr error
	actx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	crashed := false // a worker exited without being asked to: give up early
	onProgress := func(done, total int) {
		pr.update(done, total, time.Since(start))
		if pl.unexpectedExits() > 0 && !crashed {
			crashed = true
			pr.note("a worker process exited unexpectedly; stopping")
			cancel()
			return
		}
		if kills > 0 || killErr != nil || done >= total || done*100 < total*killAtPercent {
			return
		}
		pid, err := pl.kill(victim)
		if err != nil {
			killErr = err
			pr.note(fmt.Sprintf("could not kill worker %d: %v", victim, err))
			return
		}
		np, err := pl.start(victim)
		if err != nil {
			killErr = err
			pr.note(fmt.Sprintf("SIGKILLed worker %d (pid %d) but could not restart it: %v", victim, pid, err))
			return
		}
		kills++
		killNote = fmt.Sprintf("worker %d SIGKILLed at %d/%d and restarted", victim, done, total)
		pr.note(fmt.Sprintf("SIGKILLed worker %d (pid %d) at %d/%d done; restarted it as pid %d", victim, pid, done, total, np.cmd.Process.Pid))
		pr.note(deadLocks(ctx, p, pid))
	}
	awaitErr := workload.Await(actx, p, adm, specs, onProgress)
	cancel()
	elapsed := time.Since(start)
	pr.finish()
	// Exits from here on are requested (or caused by an interrupt, which
	// the workers receive too).
	unexpected := pl.unexpectedList()
	pl.stopAll(10 * time.Second)

	failed := killErr != nil
	switch {
	case awaitErr == nil:
	case ctx.Err() != nil:
		fmt.Fprintln(stdout, "interrupted")
		failed = true
	case crashed:
		failed = true
	default:
		fmt.Fprintf(stdout, "TIMEOUT after %v: %v\n", cfg.timeout, awaitErr)
		failed = true
	}
	if ctx.Err() == nil {
		for _, u := range unexpected {
			fmt.Fprintf(stdout, "unexpected: %s\n", u)
			failed = true
		}
	}

	vctx, vcancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer vcancel()
	rep, verr := workload.Verify(vctx, p, adm, specs)
	if verr != nil {
		fmt.Fprintf(stdout, "verify: %v\n", verr)
		failed = true
	}
	if !rep.OK() {
		failed = true
	}

	// The summary.
	totals, reports := pl.totals()
	row := func(label, format string, args ...any) {
		fmt.Fprintf(stdout, "  %-21s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(stdout, "summary")
	row("instances completed", "%d/%d as expected (+%d %s; %d executions)",
		rep.Completed, rep.Instances, rep.Children, plural(rep.Children, "sub-orchestration"), rep.Executions)
	turnsNote := fmt.Sprintf("as reported by %d of %d worker processes", reports, pl.started())
	if kills > 0 {
		turnsNote += fmt.Sprintf("; a SIGKILLed worker's counts since its last report (every %v) are lost", statsEvery)
	}
	row("turns", "%d acked (%s)", totals.Turns, turnsNote)
	row("history", "%d events: %d executions started, %d activity results, %d timers fired",
		rep.Events, rep.OrchestrationStarts, rep.ActivityResults, rep.TimersFired)
	row("activities", "%d executed by workers (%d duplicate executions, %d cancelled while running)",
		totals.ActivitiesExecuted, totals.DuplicateActivityExecutions, totals.ActivitiesCancelled)
	if kills > 0 {
		row("kills survived", "%d (%s)", kills, killNote)
	} else {
		row("kills survived", "0 (the workload finished before %d%% was observed)", killAtPercent)
	}
	if rep.QueueDepths != nil {
		row("queues at the end", "orchestrator %d, worker %d", rep.QueueDepths.OrchestratorQueue, rep.QueueDepths.WorkerQueue)
	}
	verdict := "passed"
	if !rep.OK() || verr != nil {
		verdict = "FAILED"
	}
	row("invariant check", "%s (%d violations in %d instances, %d executions, %d events)",
		verdict, len(rep.Violations), rep.Instances+rep.Children, rep.Executions, rep.Events)
	for i, v := range rep.Violations {
		if i == 20 {
			fmt.Fprintf(stdout, "    … %d more\n", len(rep.Violations)-i)
			break
		}
		fmt.Fprintf(stdout, "    %s\n", v)
	}
	secs := elapsed.Seconds()
	row("throughput", "%.1f instances/s, %.1f turns/s", float64(len(specs))/secs, float64(totals.Turns)/secs)
	row("elapsed", "%v", elapsed.Round(10*time.Millisecond))
	if failed {
		fmt.Fprintln(stderr, "durofs demo: FAILED; last log lines:")
		tail.dump(stderr)
		return exitFailure
	}
	return exitOK
}

// deadLocks says what the other workers wait for after a worker was
// killed: the instance leases and activity claims the dead process (pid)
// still holds, which nobody can take over until they expire.
func deadLocks(ctx context.Context, p *provider.FSProvider, pid int) string {
	list, err := p.Leases(ctx)
	if err != nil {
		return fmt.Sprintf("could not read the locks it held (%v); they expire within %v", err, lockTimeout)
	}
	owner := strconv.Itoa(pid) + "@" // the provider's default owner name: pid@host/id
	var turns, activities int
	var last int64
	for _, l := range list {
		if !strings.HasPrefix(l.Owner, owner) || (l.State != provider.LeaseHeld && l.State != provider.LeaseExpired) {
			continue
		}
		switch l.Kind {
		case provider.LeaseKindInstance:
			turns++
		case provider.LeaseKindWorkItem:
			activities++
		default:
			continue
		}
		last = max(last, l.ExpiresAtMs)
	}
	if turns+activities == 0 {
		return "it held no locks: nothing waits for it"
	}
	wait := max(time.Until(time.UnixMilli(last)), 0).Round(100 * time.Millisecond)
	return fmt.Sprintf("waiting for the locks it held to expire: %d %s and %d %s it fetched and did not ack; "+
		"the other workers take each over when its lock expires (the last in %v; the lock timeout is %v), so progress may pause until then",
		turns, plural(turns, "orchestration turn"), activities, plural(activities, "activity"), wait, lockTimeout)
}

// plural returns word, in the plural unless n is 1.
func plural(n int, word string) string {
	switch {
	case n == 1:
		return word
	case strings.HasSuffix(word, "ity"):
		return strings.TrimSuffix(word, "y") + "ies"
	}
	return word + "s"
}

// kindCounts describes how many specs there are of each kind.
func kindCounts(specs []workload.Spec) string {
	n := map[string]int{}
	for _, s := range specs {
		n[s.Kind]++
	}
	var parts []string
	for _, k := range workload.Kinds {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// progress shows how many instances are done: a bar rewritten in place on
// a terminal, a plain line every second otherwise.
type progress struct {
	w        io.Writer
	tty      bool
	dirty    bool // a bar is on the current line
	last     time.Time
	lastDone int
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty, lastDone: -1}
}

func (p *progress) update(done, total int, elapsed time.Duration) {
	if p.tty {
		const width = 30
		filled := width * done / max(total, 1)
		bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
		fmt.Fprintf(p.w, "\r[%s] %d/%d instances done  %5.1fs", bar, done, total, elapsed.Seconds())
		p.dirty = true
		return
	}
	if time.Since(p.last) >= time.Second || (done == total && done != p.lastDone) {
		fmt.Fprintf(p.w, "progress: %d/%d instances done (%.1fs)\n", done, total, elapsed.Seconds())
		p.last, p.lastDone = time.Now(), done
	}
}

// note prints a message on its own line.
func (p *progress) note(msg string) {
	if p.tty && p.dirty {
		fmt.Fprint(p.w, "\r\033[K")
		p.dirty = false
	}
	fmt.Fprintln(p.w, msg)
}

// finish ends the progress display.
func (p *progress) finish() {
	if p.tty && p.dirty {
		fmt.Fprintln(p.w)
		p.dirty = false
	}
}
