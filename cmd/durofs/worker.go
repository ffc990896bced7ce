package main

import (
	"context"
	"encoding/json"
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
)

// workerReport is one line of a worker's stdout: its counters, as JSON.
// Final is set on the line written at a graceful exit.
type workerReport struct {
	PID   int  `json:"pid"`
	Final bool `json:"final"`
	workload.Stats
}

// workerCmd is "durofs worker": it runs workload.Runtime on --dir until
// SIGTERM or SIGINT and writes its stats as one JSON line on exit (and, with
// --stats-every, periodically before that).
func workerCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("durofs worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "durofs `directory` (required)")
	dispatchers := fs.Int("dispatchers", 2, "orchestration dispatcher loops")
	activities := fs.Int("activity-workers", 2, "activity worker loops")
	nosync := fs.Bool("nosync", false, "process-crash-safe mode (no fsync)")
	statsEvery := fs.Duration("stats-every", 0, "also write a stats line this often (0: only at exit)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *dir == "" || fs.NArg() > 0 || *dispatchers < 1 || *activities < 1 {
		fmt.Fprintln(stderr, "durofs worker: --dir is required; dispatchers and activity workers must be positive")
		fs.Usage()
		return exitUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := provider.Options{Logger: log}
	if *nosync {
		opts.Durability = provider.ProcessCrashSafe
	}
	p, err := provider.Open(*dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "durofs worker: %v\n", err)
		return exitFailure
	}
	defer p.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rt := workload.NewRuntime(p, workload.RuntimeOptions{
		Dispatchers: *dispatchers, Workers: *activities, LockTimeout: lockTimeout, Logger: log,
	})

	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	report := func(final bool) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(workerReport{PID: os.Getpid(), Final: final, Stats: rt.Stats()})
	}
	var wg sync.WaitGroup
	if *statsEvery > 0 {
		wg.Go(func() {
			t := time.NewTicker(*statsEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					report(false)
				}
			}
		})
	}
	if err := rt.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "durofs worker: %v\n", err)
		return exitFailure
	}
	wg.Wait()
	report(true)
	return exitOK
}
