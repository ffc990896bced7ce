package harness

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Section names, for Config.Only.
const (
	SectionFsyncs     = "fsyncs"
	SectionThroughput = "throughput"
	SectionFetch      = "fetch"
	SectionRestart    = "restart"
)

// Sections lists every section in the order Run runs them.
var Sections = []string{SectionFsyncs, SectionThroughput, SectionFetch, SectionRestart}

// Provider names, for Config.Providers and the child processes' --provider.
const (
	ProviderDurofs = "durofs"
	ProviderSQLite = "sqlite"
)

// Config configures a harness run. Zero values select the defaults of a
// full run (see Defaults); Quick selects tiny sizes.
type Config struct {
	// Dir is where benchmark data is created (one subdirectory per run,
	// all removed at the end unless Keep). It must be on a real disk: Run
	// refuses tmpfs and ramfs unless AllowTmpfs.
	Dir string
	// AllowTmpfs lets Dir be on tmpfs/ramfs (the package's own test does,
	// since it measures nothing).
	AllowTmpfs bool
	// Keep keeps the data directories of finished runs.
	Keep bool
	// EagerCleanup removes each finished run's directory right after the
	// run. By default finished runs' directories stay (flushed to disk)
	// until the whole harness run ends, so that runs are independent: on
	// ext4 without a journal (this machine) a freed inode counts as
	// "recently deleted" for dirty_expire_centisecs/100 + 5 s (35 s by
	// default), and every inode creation in its block group scans past all
	// such inodes, so removing the ~2,400 files of a durofs run at once
	// bills that clean-up to the next few runs of any provider that creates
	// files. BENCHMARKS.md (session of 2026-11-25, day) shows that waiting
	// 36 s after each eager removal gives the same figures as the default.
	EagerCleanup bool
	// Settle, with EagerCleanup, waits this long after each removal (and
	// its flush) before the next run: waiting out the "recently deleted"
	// window (36 s here) makes the eager figures match the default ones,
	// which shows what the eager removal costs the next runs.
	Settle time.Duration
	// Quick selects tiny sizes: every section runs, nothing is meaningful.
	Quick bool
	// Big adds the large cases: the fetch section with 10× its largest
	// queue (1M messages by default, 1,000 with Quick) and, without Quick, a
	// restart cell with 1M instances on disk (10k pending). They take
	// minutes (set-up, and a few GiB of disk for a million files per case).
	Big bool
	// Runs is how many times each throughput and restart measurement is
	// repeated; the median is reported (default 3).
	Runs int
	// Only selects sections (default all, see Sections).
	Only []string
	// Procs are the process counts of the throughput section (default 1, 2, 4).
	Procs []int
	// Providers are the providers compared (default durofs and sqlite).
	Providers []string
	// Exe is the executable re-executed for child processes; it must call
	// ChildMain when its first argument is "child" (or, with ChildEnv, when
	// that environment is set). Default: the running executable.
	Exe string
	// ChildEnv is extra environment for child processes ("K=V").
	ChildEnv []string
	// Log receives progress lines (default: discarded).
	Log io.Writer
	// Sizes overrides the section sizes (default DefaultSizes or QuickSizes).
	Sizes *Sizes
	// Command is the command line printed in the report's header.
	Command string
}

// Sizes are the sizes of every section's workload.
type Sizes struct {
	// ChainInstances × ChainLength is the chain workload (200 × 5).
	ChainInstances, ChainLength int
	// FanOut is the width of the fan-out/fan-in workload's one instance (500).
	FanOut int
	// Dispatchers and Workers are the runtime loops per process (2 + 2).
	Dispatchers, Workers int
	// FsyncChains × FsyncChainLength chains and one FsyncFanOut-wide fan-out
	// are run to count fsyncs.
	FsyncChains, FsyncChainLength, FsyncFanOut int
	// FetchQueued are the queue sizes of the fetch section (100, 10k, 100k;
	// Config.Big adds 1M).
	FetchQueued []int
	// FetchVisible is how many messages are visible in the delayed case.
	FetchVisible int
	// FetchIters and FetchWarmup are the measured and the discarded
	// fetches per configuration.
	FetchIters, FetchWarmup int
	// RestartInstances and RestartPending: instances on disk, of which
	// RestartPending have pending work (10,000 and 1,000).
	RestartInstances, RestartPending int
	// RestartBigInstances and RestartBigPending, if set (Config.Big: 1M and
	// 10,000), add a durofs-only restart cell of that size (completed
	// instances beyond 10,000 are copied from the first one's files).
	RestartBigInstances, RestartBigPending int
	// RestartKillAfter is how many turns the victim process acks before
	// it is killed with SIGKILL.
	RestartKillAfter int
	// RunTimeout bounds one throughput run.
	RunTimeout time.Duration
}

// DefaultSizes are the sizes of the benchmark (`make bench`).
func DefaultSizes() Sizes {
	return Sizes{
		ChainInstances: 200, ChainLength: 5, FanOut: 500,
		Dispatchers: 2, Workers: 2,
		FsyncChains: 20, FsyncChainLength: 5, FsyncFanOut: 20,
		FetchQueued: []int{100, 10_000, 100_000}, FetchVisible: 10,
		FetchIters: 400, FetchWarmup: 20,
		RestartInstances: 10_000, RestartPending: 1_000, RestartKillAfter: 300,
		RunTimeout: 5 * time.Minute,
	}
}

// QuickSizes are tiny sizes for `make bench-quick` and the package test.
func QuickSizes() Sizes {
	return Sizes{
		ChainInstances: 6, ChainLength: 2, FanOut: 8,
		Dispatchers: 2, Workers: 2,
		FsyncChains: 2, FsyncChainLength: 2, FsyncFanOut: 3,
		FetchQueued: []int{10, 100}, FetchVisible: 2,
		FetchIters: 10, FetchWarmup: 2,
		RestartInstances: 100, RestartPending: 50, RestartKillAfter: 5,
		RunTimeout: 2 * time.Minute,
	}
}

// withDefaults fills in defaults and validates.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("harness: Config.Dir is required")
	}
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if len(c.Only) == 0 {
		c.Only = slices.Clone(Sections)
	}
	for _, s := range c.Only {
		if !slices.Contains(Sections, s) {
			return c, fmt.Errorf("harness: unknown section %q (want %s)", s, strings.Join(Sections, ", "))
		}
	}
	if len(c.Procs) == 0 {
		c.Procs = []int{1, 2, 4}
	}
	for _, p := range c.Procs {
		if p < 1 || p > 64 {
			return c, fmt.Errorf("harness: process count %d out of range 1..64", p)
		}
	}
	if len(c.Providers) == 0 {
		c.Providers = []string{ProviderDurofs, ProviderSQLite}
	}
	for _, p := range c.Providers {
		if p != ProviderDurofs && p != ProviderSQLite {
			return c, fmt.Errorf("harness: unknown provider %q (want %s or %s)", p, ProviderDurofs, ProviderSQLite)
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Sizes == nil {
		s := DefaultSizes()
		if c.Quick {
			s = QuickSizes()
		}
		c.Sizes = &s
	}
	if c.Big && len(c.Sizes.FetchQueued) > 0 {
		big := 10 * slices.Max(c.Sizes.FetchQueued)
		s := *c.Sizes
		s.FetchQueued = append(slices.Clone(s.FetchQueued), big)
		if !c.Quick {
			s.RestartBigInstances, s.RestartBigPending = 1_000_000, 10_000
		}
		c.Sizes = &s
	}
	return c, nil
}

// has reports whether section s is selected.
func (c Config) has(s string) bool { return slices.Contains(c.Only, s) }

// logf writes one progress line.
func (c Config) logf(format string, args ...any) {
	fmt.Fprintf(c.Log, format+"\n", args...)
}
