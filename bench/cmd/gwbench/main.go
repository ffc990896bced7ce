// Command gwbench measures go-workflows workflows per second on the durofs
// backend against go-workflows' SQLite backend (package
// github.com/durofs/durofs/bench/gwbench): go-workflows' bench-tool tree and
// a chain of sequential activities, at 1 process and at -procs worker
// processes sharing one store. It prints a Markdown table with the ratios
// and the goals (>= 1.0x at 1 process, >= 1.5x at several).
//
//	go run ./cmd/gwbench [-roots 20] [-chains 100] [-chain-len 10] [-procs 4] [-dir D]
//
// The stores go to -dir (default: a temporary directory on the disk of
// $DUROBENCH_DIR or bench/.data), which must be on a real disk.
//
// For every multi-process measurement it prints each worker process's CPU
// time (stderr) and the busiest one's share of their sum (the table's last
// column): go-workflows' SQLite backend wakes only the process that
// committed, so one of its workers tends to do nearly all the work, while
// durofs's workers share it.
//
// Where the time goes: GWBENCH_WORKER_STATS=prefix makes every worker (the
// worker processes, and this process's worker in the 1-process runs) write
// "<prefix>-<store>-<worker>.txt": go-workflows' own task metrics (how long
// a task waited in its queue, how long it took to process) and how long
// the backend calls that fetch and complete tasks took, as count, mean and
// percentiles. GWBENCH_WORKER_CPUPROFILE=prefix writes a CPU profile per
// worker process.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/durofs/durofs/bench/gwbench"
)

func main() {
	if gwbench.IsWorker(os.Args[1:]) {
		os.Exit(gwbench.WorkerMain(os.Args[1:]))
	}
	roots := flag.Int("roots", 20, "tree scenario: root workflows (15 workflows and 16 activities each)")
	chains := flag.Int("chains", 100, "chain scenario: chains started")
	chainLen := flag.Int("chain-len", 10, "chain scenario: sequential activities per chain")
	procs := flag.Int("procs", 4, "worker processes of the multi-process runs")
	dir := flag.String("dir", "", "where the stores go (default: a temporary directory under $DUROBENCH_DIR or .data)")
	timeout := flag.Duration("timeout", 10*time.Minute, "time limit of one measurement")
	cpuprofile := flag.String("cpuprofile", "", "write this process's CPU profile (the client, and the worker of the 1-process runs) to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *dir == "" {
		base := os.Getenv("DUROBENCH_DIR")
		if base == "" {
			base = ".data"
		}
		if err := os.MkdirAll(base, 0o755); err != nil {
			fail(err)
		}
		d, err := os.MkdirTemp(base, "gwbench-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	fmt.Printf("| scenario | processes | durofs wf/s | SQLite wf/s | ratio | goal | busiest worker's CPU share, durofs / SQLite |\n|---|---|---|---|---|---|---|\n")
	for _, sc := range []string{gwbench.Tree, gwbench.ChainS} {
		for _, p := range []int{1, *procs} {
			per := map[string]float64{}
			busiest := map[string]string{}
			for _, be := range []string{gwbench.Durofs, gwbench.SQLite} {
				cfg := gwbench.Config{Backend: be, Scenario: sc, Processes: p, Roots: *roots, Tree: gwbench.DefaultTree,
					ChainLen: *chainLen, Dir: filepath.Join(*dir, fmt.Sprintf("%s-%s-%d", sc, be, p)), Timeout: *timeout}
				if sc == gwbench.ChainS {
					cfg.Roots = *chains
				}
				if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
					fail(err)
				}
				res, err := gwbench.Run(context.Background(), cfg, self)
				if err != nil {
					fail(fmt.Errorf("%s %s at %d process(es): %w", be, sc, p, err))
				}
				per[be] = res.PerSecond()
				busiest[be] = busiestShare(res.WorkerCPU)
				fmt.Fprintf(os.Stderr, "%s %s %d process(es): %d workflows in %v (%d client calls retried on \"database is locked\")%s\n",
					be, sc, p, res.Workflows, res.Elapsed.Round(time.Millisecond), res.Busy, cpuShares(res.WorkerCPU))
			}
			goal := 1.0
			if p > 1 {
				goal = 1.5
			}
			ratio := per[gwbench.Durofs] / per[gwbench.SQLite]
			verdict := "PASS"
			if ratio < goal {
				verdict = fmt.Sprintf("MISS (goal %.1fx)", goal)
			}
			fmt.Printf("| %s | %d | %.1f | %.1f | %.2fx | %s | %s / %s |\n", sc, p, per[gwbench.Durofs], per[gwbench.SQLite], ratio, verdict,
				busiest[gwbench.Durofs], busiest[gwbench.SQLite])
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gwbench:", err)
	os.Exit(1)
}

// cpuShares describes how the worker processes of a measurement shared the
// work: each one's CPU time, and the busiest one's share of their sum.
func cpuShares(cpu []time.Duration) string {
	if len(cpu) == 0 {
		return ""
	}
	parts := make([]string, len(cpu))
	for i, c := range cpu {
		parts[i] = fmt.Sprintf("%.2fs", c.Seconds())
	}
	return fmt.Sprintf("; worker CPU %s (busiest %s)", strings.Join(parts, " "), busiestShare(cpu))
}

// busiestShare is the busiest worker process's share of the workers' CPU
// time ("-" for a measurement without worker processes): 100 % / n when
// n processes share the work evenly, near 100 % when one does it all.
func busiestShare(cpu []time.Duration) string {
	var sum, top time.Duration
	for _, c := range cpu {
		sum += c
		top = max(top, c)
	}
	if sum <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*top.Seconds()/sum.Seconds())
}
