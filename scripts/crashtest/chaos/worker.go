//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// armDelay is how long a worker holds back an ack the supervisor armed
// (SIGUSR1) before making it: the supervisor SIGSTOPs the worker inside
// this window.
const armDelay = time.Second

// lineWriter writes one report line per Write call, so a line is in the
// pipe (and survives a SIGKILL) as soon as emit returns.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// emit writes l. A failed write means the supervisor is gone: exit.
func (lw *lineWriter) emit(l oracle.Line) {
	b, err := l.Encode()
	if err != nil {
		// Unreachable for the types reported; keep the stream parsable.
		b = []byte(`{"t":"encode-error"}` + "\n")
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if _, err := lw.w.Write(b); err != nil {
		os.Exit(3)
	}
}

// workerMain is the hidden "worker" subcommand: it opens the directory
// (which recovers what killed processes left), reports ready with the
// recovery counters, and runs workload.Runtime until SIGTERM, reporting
// every ack (package oracle) and its counters.
func workerMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "durofs directory (required)")
	dispatchers := fs.Int("dispatchers", 2, "orchestration dispatcher loops")
	activities := fs.Int("activity-workers", 2, "activity worker loops")
	lockTimeout := fs.Duration("lock-timeout", 2*time.Second, "lock timeout of fetches")
	nosync := fs.Bool("nosync", false, "ProcessCrashSafe mode")
	statsEvery := fs.Duration("stats-every", 500*time.Millisecond, "how often to report counters")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "chaos worker: --dir is required")
		return exitUsage
	}
	watchParent()

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("pid", os.Getpid())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	arm := make(chan os.Signal, 1)
	signal.Notify(arm, syscall.SIGUSR1)

	opts := provider.Options{Logger: log}
	if *nosync {
		opts.Durability = provider.ProcessCrashSafe
	}
	out := &lineWriter{w: stdout}
	start := time.Now()
	p, err := provider.Open(*dir, opts)
	if err != nil {
		log.Error("chaos worker: open", "err", err)
		return exitFailure
	}
	defer p.Close()
	rs := p.RecoveryStats()
	out.emit(oracle.Line{Type: oracle.TypeReady, PID: os.Getpid(), OpenMs: float64(time.Since(start).Microseconds()) / 1000, Recovery: &rs})

	rec := oracle.NewRecorder(p, out.emit, armDelay, *lockTimeout)
	rt := workload.NewRuntime(rec, workload.RuntimeOptions{
		Dispatchers: *dispatchers, Workers: *activities, LockTimeout: *lockTimeout, Logger: log, OnAck: rec.OnAck,
	})
	report := func(final bool) {
		st, rs := rt.Stats(), p.RecoveryStats()
		out.emit(oracle.Line{Type: oracle.TypeStats, PID: os.Getpid(), Stats: &st, Recovery: &rs, Final: final})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(*statsEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-arm:
				rec.Arm()
			case <-t.C:
				report(false)
			}
		}
	})
	if err := rt.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("chaos worker: run", "err", err)
		return exitFailure
	}
	wg.Wait()
	report(true)
	return exitOK
}

// watchParent exits the process when its parent dies (the supervisor was
// killed or crashed): its parent then changes.
func watchParent() {
	ppid := os.Getppid()
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			if os.Getppid() != ppid {
				os.Exit(4)
			}
		}
	}()
}
