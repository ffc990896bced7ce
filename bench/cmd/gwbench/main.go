// Command gwbench measures go-workflows workflows per second on the durofs
// backend against go-workflows' SQLite backend (package
// github.com/durofs/durofs/bench/gwbench): go-workflows' bench-tool tree and
// a chain of sequential activities, at 1 process and at -procs worker
// processes sharing one store. It prints a Markdown table with the ratios
// and the goals (>= 1.0x at 1 process, >= 1.5x at several).
//
//	go run ./cmd/gwbench [-roots 20] [-chains 100] [-chain-len 10] [-procs 4] [-runs 1] [-dir D]
//
// With -runs N every measurement is made N times, the two backends
// alternating, and the table gives each backend's median workflows/s (all N
// figures go to stderr): on a shared or virtual disk single runs of a few
// seconds vary by a factor of two. -backends durofs (or sqlite) measures one
// backend alone, for profiling; the table then has no ratios.
//
// The stores go to -dir (default: a temporary directory on the disk of
// $DUROBENCH_DIR or bench/.data), which must be on a real disk.
//
// The goal's figures are as the client saw the workflows finish, as
// go-workflows' own bench tool measures: its WaitForWorkflowInstance polls
// the store with a backoff growing to one second, the same for both
// backends, so the last finish is seen up to a second late (0.7-1.3 s in
// the runs recorded in BENCHMARKS.md). The table also gives the figures by
// the completion times the stores recorded (go-workflows' diagnostics): the
// backends' own throughput, without the client's polling.
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
// worker process, GWBENCH_WORKER_TRACE=prefix a Go execution trace (where
// goroutines waited: go tool trace -pprof=sched, syscall or sync).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
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
	runs := flag.Int("runs", 1, "measure each scenario and process count this many times, alternating backends; the table gives medians")
	backends := flag.String("backends", gwbench.Durofs+","+gwbench.SQLite, "backends to measure, comma-separated")
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
	bes := strings.Split(*backends, ",")
	for _, be := range bes {
		if be != gwbench.Durofs && be != gwbench.SQLite {
			fail(fmt.Errorf("unknown backend %q", be))
		}
	}
	if *runs < 1 {
		fail(fmt.Errorf("-runs %d: want at least 1", *runs))
	}
	fmt.Printf("| scenario | processes | durofs wf/s | SQLite wf/s | ratio | goal | by the store's finish times: durofs / SQLite wf/s, ratio | busiest worker's CPU share, durofs / SQLite |\n|---|---|---|---|---|---|---|---|\n")
	for _, sc := range []string{gwbench.Tree, gwbench.ChainS} {
		for _, p := range []int{1, *procs} {
			per := map[string][]float64{}
			perStore := map[string][]float64{}
			busiest := map[string]string{}
			for r := range *runs {
				for _, be := range bes {
					cfg := gwbench.Config{Backend: be, Scenario: sc, Processes: p, Roots: *roots, Tree: gwbench.DefaultTree,
						ChainLen: *chainLen, Dir: filepath.Join(*dir, fmt.Sprintf("%s-%s-%d-%d", sc, be, p, r)), Timeout: *timeout}
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
					per[be] = append(per[be], res.PerSecond())
					perStore[be] = append(perStore[be], res.FinishedPerSecond())
					busiest[be] = busiestShare(res.WorkerCPU)
					fmt.Fprintf(os.Stderr, "%s %s %d process(es): %d workflows in %v, %.1f/s (the last finished after %v by the store, %.1f/s; %d client calls retried on \"database is locked\")%s\n",
						be, sc, p, res.Workflows, res.Elapsed.Round(time.Millisecond), res.PerSecond(), res.Finished.Round(time.Millisecond), res.FinishedPerSecond(), res.Busy, cpuShares(res.WorkerCPU))
				}
			}
			goal := 1.0
			if p > 1 {
				goal = 1.5
			}
			d, s := median(per[gwbench.Durofs]), median(per[gwbench.SQLite])
			ratio, verdict := "-", "-"
			if d > 0 && s > 0 {
				ratio = fmt.Sprintf("%.2fx", d/s)
				verdict = "PASS"
				if d/s < goal {
					verdict = fmt.Sprintf("MISS (goal %.1fx)", goal)
				}
			}
			ds, ss := median(perStore[gwbench.Durofs]), median(perStore[gwbench.SQLite])
			storeRatio := "-"
			if ds > 0 && ss > 0 {
				storeRatio = fmt.Sprintf("%.2fx", ds/ss)
			}
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %s / %s, %s | %s / %s |\n", sc, p, figure(d), figure(s), ratio, verdict,
				figure(ds), figure(ss), storeRatio, orDash(busiest[gwbench.Durofs]), orDash(busiest[gwbench.SQLite]))
		}
	}
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func figure(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", x)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
