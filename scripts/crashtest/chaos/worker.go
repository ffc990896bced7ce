//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
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
	slowDump := fs.Duration("slow-dump", 0, "dump every goroutine and the flocks held (/proc/locks) to stderr when an ack call is still running after this long (0: never)")
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
	if *slowDump > 0 {
		rec.SlowAfter, rec.SlowAck = *slowDump, func(kind string, began time.Time) {
			if summary, ok := dumpSlow(stderr, *dir, kind, began); ok {
				out.emit(oracle.Line{Type: oracle.TypeSlow, Err: summary})
			}
		}
	}
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

// dumpMu keeps dumps of concurrent slow acks apart.
var dumpMu sync.Mutex

// dumpSlow writes every goroutine's stack and the flocks held on this host
// to w, and returns a summary: which of this process's calls wait for a
// lock (the provider or queue function that asked for it), and which lock
// files of the directory dir other processes hold (from /proc/locks, by
// inode).
//
// One dump at a time: a slow ack while another dump is being written is
// not dumped (ok false); the dump in progress shows the same waits.
func dumpSlow(w io.Writer, dir, kind string, began time.Time) (summary string, ok bool) {
	if !dumpMu.TryLock() {
		return "", false
	}
	defer dumpMu.Unlock()
	fmt.Fprintf(w, "=== slow %s ack: still running %v after it began (pid %d)\n", kind, time.Since(began).Round(time.Millisecond), os.Getpid())
	locks, _ := os.ReadFile("/proc/locks")
	fmt.Fprintf(w, "--- /proc/locks\n%s", locks)
	var stacks bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
	fmt.Fprintf(w, "--- goroutines\n%s=== end of slow ack dump\n", stacks.Bytes())

	// Lock files of dir by inode.
	byInode := map[uint64]string{}
	for _, pat := range []string{"instances/*/lock", "queues/*/*.json", "wal/*.lock", "sessions/*.lock"} {
		paths, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, p := range paths {
			if fi, err := os.Stat(p); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					rel, _ := filepath.Rel(dir, p)
					byInode[uint64(st.Ino)] = rel
				}
			}
		}
	}
	var held []string
	for _, line := range strings.Split(string(locks), "\n") {
		// "1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF"
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" {
			continue
		}
		dev := strings.Split(f[5], ":")
		ino, err := strconv.ParseUint(dev[len(dev)-1], 10, 64)
		if path, ok := byInode[ino]; err == nil && ok && f[4] != strconv.Itoa(os.Getpid()) {
			held = append(held, "pid "+f[4]+" holds "+path)
		}
	}
	// Goroutines waiting for a lock, by the function that asked for it.
	var waiting []string
	for _, g := range strings.Split(stacks.String(), "\n\n") {
		if !strings.Contains(g, "vfs.(*noFollowFS).Lock") && !strings.Contains(g, "vfs.(*procMutex).lock") && !strings.Contains(g, "vfs.OS.Lock") {
			continue
		}
		var frames []string
		for _, l := range strings.Split(g, "\n") {
			if fn, ok := strings.CutPrefix(l, "github.com/durofs/durofs/"); ok && !strings.HasPrefix(fn, "internal/vfs") {
				if i := strings.LastIndex(fn, "("); i > 0 {
					fn = fn[:i] // the arguments
				}
				frames = append(frames, fn)
				if len(frames) == 3 {
					break
				}
			}
		}
		waiting = append(waiting, strings.Join(frames, " < "))
	}
	return fmt.Sprintf("pid %d waits for a lock in: %s; flocks of the directory held by other processes: %s",
		os.Getpid(), strings.Join(waiting, " | "), strings.Join(held, ", ")), true
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
