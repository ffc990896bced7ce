// Command durobench is durofs's benchmark harness (`make bench`): durable
// turn throughput at 1, 2 and 4 processes side by side with the SQLite
// reference provider, exact fsyncs per ack, fetch latency with up to
// 100,000 queued messages (1,000,000 with -big), restart time after kill
// -9 with 10,000 instances, and peak RSS, printed as a markdown table with
// design.md §7's targets marked PASS or MISS.
//
// Usage:
//
//	durobench [-quick] [-big] [-runs N] [-only fsyncs,throughput,fetch,restart] [-procs 1,2,4] [-out FILE] [-dir DIR]
//
// Benchmark data goes to -dir (default $DUROBENCH_DIR, else .data), which
// must be on a disk, not tmpfs. durobench re-executes itself as
// `durobench child ...` for its worker processes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/durofs/durofs/bench/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "child" {
		return harness.ChildMain(ctx, args[1:], stdin, stdout, stderr)
	}
	fs := flag.NewFlagSet("durobench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defDir := os.Getenv("DUROBENCH_DIR")
	if defDir == "" {
		defDir = ".data"
	}
	quick := fs.Bool("quick", false, "tiny sizes (checks that everything runs; the figures mean nothing)")
	big := fs.Bool("big", false, "add the fetch section's 1M-queued cases (minutes, and a few GiB of disk)")
	runs := fs.Int("runs", 3, "runs per throughput and restart figure (the median is reported)")
	only := fs.String("only", "", "comma-separated sections to run: "+strings.Join(harness.Sections, ", ")+" (default all)")
	procs := fs.String("procs", "1,2,4", "comma-separated process counts of the throughput section")
	providers := fs.String("providers", "durofs,sqlite", "comma-separated providers to compare")
	out := fs.String("out", "", "also write the markdown report to this file")
	dir := fs.String("dir", defDir, "benchmark data directory (on a disk, not tmpfs; default $DUROBENCH_DIR or .data)")
	keep := fs.Bool("keep", false, "keep the benchmark data")
	eagerCleanup := fs.Bool("eager-cleanup", false, "remove each finished run's data right after it (default: at the end, so that no run starts right after the previous one's files were freed)")
	settle := fs.Duration("settle", 0, "with -eager-cleanup, wait this long after each removal (36s waits out ext4's recently-deleted window)")
	allowTmpfs := fs.Bool("allow-tmpfs", false, "allow a data directory on tmpfs/ramfs")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	dispatchers := fs.Int("dispatchers", 0, "orchestration dispatchers per throughput/restart process (default 2)")
	workers := fs.Int("workers", 0, "activity workers per throughput/restart process (default 2)")
	fanout := fs.Int("fanout", 0, "width of the throughput section's fan-out (default 500; larger makes runs longer and steadier)")
	chains := fs.Int("chains", 0, "instances of the throughput section's chain workload (default 200)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "durobench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *settle != 0 && (!*eagerCleanup || *settle < 0) {
		fmt.Fprintln(stderr, "durobench: -settle needs -eager-cleanup and a positive duration")
		return 2
	}
	cfg := harness.Config{
		Dir: *dir, Quick: *quick, Big: *big, Runs: *runs, Keep: *keep, EagerCleanup: *eagerCleanup, Settle: *settle, AllowTmpfs: *allowTmpfs,
		Providers: split(*providers),
		Command:   "durobench " + strings.Join(args, " "),
		Log:       stderr,
	}
	if *quiet {
		cfg.Log = io.Discard
	}
	if *only != "" {
		cfg.Only = split(*only)
	}
	if *dispatchers > 0 || *workers > 0 || *fanout > 0 || *chains > 0 {
		sz := harness.DefaultSizes()
		if *quick {
			sz = harness.QuickSizes()
		}
		if *dispatchers > 0 {
			sz.Dispatchers = *dispatchers
		}
		if *workers > 0 {
			sz.Workers = *workers
		}
		if *fanout > 0 {
			sz.FanOut = *fanout
		}
		if *chains > 0 {
			sz.ChainInstances = *chains
		}
		cfg.Sizes = &sz
	}
	for _, p := range split(*procs) {
		n, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintf(stderr, "durobench: -procs: %v\n", err)
			return 2
		}
		cfg.Procs = append(cfg.Procs, n)
	}
	res, err := harness.Run(ctx, cfg)
	if res != nil {
		if werr := res.WriteMarkdown(stdout); werr != nil {
			fmt.Fprintf(stderr, "durobench: %v\n", werr)
			return 1
		}
		if *out != "" {
			if werr := writeFile(*out, res); werr != nil {
				fmt.Fprintf(stderr, "durobench: %v\n", werr)
				return 1
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "durobench: %v\n", err)
		return 1
	}
	return 0
}

func writeFile(path string, res *harness.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := res.WriteMarkdown(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write report: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
