package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// ChildMain runs one benchmark child process. args are the arguments after
// "child": a role ("run", "fetch" or "probe") and its flags. The child
// reads commands from stdin and writes JSON lines to stdout; it returns the
// process exit code. Programs that host the harness call it when they are
// re-executed as a child (cmd/durobench does when its first argument is
// "child").
func ChildMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := &lineWriter{w: stdout}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "durobench child: missing role (run, fetch or probe)")
		return 2
	}
	if dir := os.Getenv(EnvCPUProfile); dir != "" {
		stop, err := startCPUProfile(dir, args[0])
		if err != nil {
			fmt.Fprintf(stderr, "durobench child: %v\n", err)
			return 1
		}
		defer stop()
	}
	var err error
	switch role, rest := args[0], args[1:]; role {
	case roleRun:
		err = childRun(ctx, rest, stdin, out, stderr)
	case roleFetch:
		err = childFetch(ctx, rest, out, stderr)
	case roleProbe:
		err = childProbe(ctx, rest, out, stderr)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		_ = out.send(childMsg{Type: msgError, Error: err.Error()})
		fmt.Fprintf(stderr, "durobench child %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// EnvCPUProfile names an environment variable: when it holds a directory,
// every child process that exits normally writes its CPU profile there, as
// <role>-<pid>.pprof (`go tool pprof` reads it; a SIGKILLed child writes
// none).
const EnvCPUProfile = "DUROBENCH_CPUPROFILE"

// startCPUProfile starts this process's CPU profile into dir.
func startCPUProfile(dir, role string) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// lineWriter writes JSON lines, one goroutine at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) send(m childMsg) error {
	m.PeakRSSKiB = selfPeakRSSKiB()
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write %s message: %w", m.Type, err)
	}
	return nil
}

// commands delivers the parent's command lines; it is closed at end of input.
func commands(stdin io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			ch <- strings.TrimSpace(sc.Text())
		}
	}()
	return ch
}

// commonFlags are the flags every role has.
type commonFlags struct {
	provider string
	dir      string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.provider, "provider", ProviderDurofs, "provider: durofs or sqlite")
	fs.StringVar(&c.dir, "dir", "", "run directory")
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("durobench child "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// childRun opens the provider, reports ready, waits for "go", runs a
// workload.Runtime and reports its counters every --report-every until
// told to stop (or killed), then reports the final counters.
func childRun(ctx context.Context, args []string, stdin io.Reader, out *lineWriter, stderr io.Writer) error {
	var cf commonFlags
	fs := newFlagSet(roleRun, stderr)
	cf.register(fs)
	dispatchers := fs.Int("dispatchers", 2, "orchestration dispatcher loops")
	workers := fs.Int("workers", 2, "activity worker loops")
	every := fs.Duration("report-every", 20*time.Millisecond, "how often to report counters")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmds := commands(stdin)
	log := warnLogger(stderr)
	p, err := openProvider(cf.provider, cf.dir, openOptions{log: log})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := out.send(childMsg{Type: msgReady, Pid: os.Getpid()}); err != nil {
		return err
	}
	select {
	case c, ok := <-cmds:
		if !ok || c != cmdGo {
			return nil // stopped before it started
		}
	case <-ctx.Done():
		return nil
	}

	var lastEnd atomic.Int64
	rt := workload.NewRuntime(p, workload.RuntimeOptions{
		Dispatchers: *dispatchers,
		Workers:     *workers,
		Logger:      log,
		OnAck: func(_ string, _ uint64, events []provider.Event) {
			for _, e := range events {
				if isTerminal(e) {
					storeMax(&lastEnd, time.Now().UnixNano())
					return
				}
			}
		},
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(rctx) }()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	report := func(typ string) error {
		s := rt.Stats()
		m := childMsg{Type: typ, Stats: &s, LastEndUnixNs: lastEnd.Load()}
		if lp, ok := p.(interface{ LogStats() provider.LogStats }); ok {
			ls := lp.LogStats()
			m.Log = &ls
		}
		return out.send(m)
	}
	for {
		select {
		case <-tick.C:
			if err := report(msgStats); err != nil {
				return err
			}
			continue
		case c, ok := <-cmds:
			if ok && c != cmdStop {
				continue
			}
		case <-ctx.Done():
		case err := <-runErr:
			return fmt.Errorf("runtime stopped by itself: %w", err)
		}
		break
	}
	cancel()
	if err := <-runErr; err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	return report(msgResult)
}

// storeMax raises a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// fetchResult is what a fetch child measured.
type fetchResult struct {
	OpenNs       int64   `json:"open_ns"`
	FirstFetchNs int64   `json:"first_fetch_ns"`
	FetchNs      []int64 `json:"fetch_ns"`   // measured fetches, in order
	AbandonNs    []int64 `json:"abandon_ns"` // the abandon after each
	Instances    int     `json:"instances"`  // distinct instances fetched
	// InstanceSample names some of them (at most 20).
	InstanceSample []string `json:"instance_sample"`
}

// childFetch opens a provider on a prepared queue and times
// FetchOrchestrationItem (pollTimeout 0), each followed by an abandon with
// no delay that leaves the queue as it was.
func childFetch(ctx context.Context, args []string, out *lineWriter, stderr io.Writer) error {
	var cf commonFlags
	fs := newFlagSet(roleFetch, stderr)
	cf.register(fs)
	iters := fs.Int("iters", 400, "measured fetches")
	warmup := fs.Int("warmup", 20, "discarded fetches after the first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t0 := time.Now()
	p, err := openProvider(cf.provider, cf.dir, openOptions{log: warnLogger(stderr)})
	if err != nil {
		return err
	}
	defer p.Close()
	res := fetchResult{OpenNs: time.Since(t0).Nanoseconds()}
	seen := map[string]bool{}
	for i := -1; i < *warmup+*iters; i++ {
		t := time.Now()
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		d := time.Since(t)
		if err != nil {
			return fmt.Errorf("fetch %d: %w", i+1, err)
		}
		if it == nil {
			return fmt.Errorf("fetch %d: no work, though the queue was prepared with visible messages", i+1)
		}
		t = time.Now()
		if err := p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true); err != nil {
			return fmt.Errorf("abandon %d: %w", i+1, err)
		}
		da := time.Since(t)
		switch {
		case i < 0:
			res.FirstFetchNs = d.Nanoseconds()
		case i >= *warmup:
			res.FetchNs = append(res.FetchNs, d.Nanoseconds())
			res.AbandonNs = append(res.AbandonNs, da.Nanoseconds())
			if !seen[it.Item.Instance] && len(res.InstanceSample) < 20 {
				res.InstanceSample = append(res.InstanceSample, it.Item.Instance)
			}
			seen[it.Item.Instance] = true
		}
	}
	res.Instances = len(seen)
	return out.send(childMsg{Type: msgResult, Fetch: &res})
}

// probeResult is what a probe child measured after a crash.
type probeResult struct {
	// OpenNs is provider Open (durofs: including its recovery pass).
	OpenNs int64 `json:"open_ns"`
	// FirstOrchNs is from the start of Open to the first orchestration
	// item fetched.
	FirstOrchNs int64 `json:"first_orch_ns"`
	// FirstWorkNs is from the start of Open to the first work item fetched
	// (measured after the orchestration fetch).
	FirstWorkNs int64 `json:"first_work_ns"`
	// OrchFetchedUnixNs is the wall-clock time of the first orchestration item.
	OrchFetchedUnixNs int64 `json:"orch_fetched_unix_ns"`
	// StartedUnixNs is when ChildMain started.
	StartedUnixNs int64 `json:"started_unix_ns"`
	// EmptyFetches counts fetches that found nothing before the first item.
	EmptyFetches int `json:"empty_fetches"`
	// Recovery is durofs's recovery counters after the probe.
	Recovery *provider.RecoveryStats `json:"recovery,omitempty"`
}

// childProbe opens a provider (after a kill -9 of its last user) and
// fetches until it gets an orchestration item and a work item, which it
// abandons.
func childProbe(ctx context.Context, args []string, out *lineWriter, stderr io.Writer) error {
	started := time.Now()
	var cf commonFlags
	fs := newFlagSet(roleProbe, stderr)
	cf.register(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "give up after")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	t0 := time.Now()
	p, err := openProvider(cf.provider, cf.dir, openOptions{log: warnLogger(stderr)})
	if err != nil {
		return err
	}
	defer p.Close()
	res := probeResult{OpenNs: time.Since(t0).Nanoseconds(), StartedUnixNs: started.UnixNano()}
	for {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil && !provider.IsRetryable(err) {
			return fmt.Errorf("orchestration fetch: %w", err)
		}
		if it != nil {
			now := time.Now()
			res.FirstOrchNs, res.OrchFetchedUnixNs = now.Sub(t0).Nanoseconds(), now.UnixNano()
			if err := p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true); err != nil {
				return fmt.Errorf("abandon: %w", err)
			}
			break
		}
		res.EmptyFetches++
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("no orchestration item within %v: %w", *timeout, err)
		}
		time.Sleep(time.Millisecond)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	for {
		w, err := p.FetchWorkItem(wctx, 30*time.Second, 0, nil, provider.DefaultOnlyTags())
		if err != nil && !provider.IsRetryable(err) {
			return fmt.Errorf("work fetch: %w", err)
		}
		if w != nil {
			res.FirstWorkNs = time.Since(t0).Nanoseconds()
			if err := p.AbandonWorkItem(ctx, w.LockToken, 0, true); err != nil {
				return fmt.Errorf("abandon work item: %w", err)
			}
			break
		}
		if err := wctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break // there may be no work item; leave FirstWorkNs 0
			}
			return err
		}
		time.Sleep(time.Millisecond)
	}
	if fp, ok := p.(*provider.FSProvider); ok {
		rs := fp.RecoveryStats()
		res.Recovery = &rs
	}
	return out.send(childMsg{Type: msgResult, Probe: &res})
}
