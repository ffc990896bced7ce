//go:build unix

package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Multi-process tests: the test binary re-executes itself as helper
// processes (DUROFS_PROVIDER_HELPER=1) that open the same directory and obey
// one-line JSON commands on stdin, answering one JSON line each on stdout.
// Every test uses 3 helper processes unless it says otherwise.

const helperEnv = "DUROFS_PROVIDER_HELPER"

// helperCmd is a command to a helper process.
type helperCmd struct {
	Op       string `json:"op"`
	LockMs   int64  `json:"lock_ms,omitempty"`
	Token    string `json:"token,omitempty"`
	Instance string `json:"instance,omitempty"`
	Count    int    `json:"count,omitempty"`
	EventID  uint64 `json:"event_id,omitempty"`
	Exec     uint64 `json:"exec,omitempty"`
	FireAtMs uint64 `json:"fire_at_ms,omitempty"`
	Owner    string `json:"owner,omitempty"`
	PollMs   int64  `json:"poll_ms,omitempty"`
}

// helperReply is a helper's answer.
type helperReply struct {
	OK       bool     `json:"ok"`
	Err      string   `json:"err,omitempty"`
	Perm     bool     `json:"perm,omitempty"`
	Instance string   `json:"instance,omitempty"`
	Token    string   `json:"token,omitempty"`
	Kinds    []string `json:"kinds,omitempty"`
	Items    []string `json:"items,omitempty"`
	N        int      `json:"n,omitempty"`
}

// TestHelperProcess is not a test: it is the body of a helper process.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	// Exit when the test process dies (a timed-out or panicking test does
	// not run its cleanups), even if a command is still running.
	ppid := os.Getppid()
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			if os.Getppid() != ppid {
				os.Exit(4)
			}
		}
	}()
	dir := os.Getenv("DUROFS_DIR")
	opts := Options{SweepInterval: 100 * time.Millisecond}
	// A test whose helpers poll a lot (TestReclaimChurn) may slow their
	// polls and sweeps down.
	if ms, err := strconv.Atoi(os.Getenv("DUROFS_HELPER_POLL_MS")); err == nil {
		opts.PollInterval = time.Duration(ms) * time.Millisecond
	}
	if ms, err := strconv.Atoi(os.Getenv("DUROFS_HELPER_SWEEP_MS")); err == nil {
		opts.SweepInterval = time.Duration(ms) * time.Millisecond
	}
	if os.Getenv("DUROFS_NOSYNC") == "1" {
		opts.Durability = ProcessCrashSafe
	}
	if kind := os.Getenv("DUROFS_CRASH_AFTER_COMMIT"); kind != "" {
		testHookAfterCommitPoint = func(k string) {
			if k == kind {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	p, err := Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper open:", err)
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	ctx := context.Background()
	for in.Scan() {
		var c helperCmd
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			os.Exit(3)
		}
		_ = out.Encode(runHelperCmd(ctx, p, c))
	}
	os.Exit(0)
}

func replyErr(err error) helperReply {
	return helperReply{Err: err.Error(), Perm: !IsRetryable(err)}
}

func runHelperCmd(ctx context.Context, p *FSProvider, c helperCmd) helperReply {
	switch c.Op {
	case "fetch":
		it, err := p.FetchOrchestrationItem(ctx, time.Duration(c.LockMs)*time.Millisecond, time.Duration(c.PollMs)*time.Millisecond, nil)
		if err != nil {
			return replyErr(err)
		}
		if it == nil {
			// Diagnostics for a test that expected work: what this process
			// sees right now.
			all, _ := allQueued(p.orchQ)
			var diag string
			for _, e := range all {
				key := e.Attrs[attrKey]
				g, ok, err := p.leases.TryLock(p.lockPath(key), p.leasePath(key))
				var l string
				if ok {
					cur, _, _ := g.Read()
					l = fmt.Sprintf("%+v now=%d", cur, p.nowMs())
					g.Unlock()
				}
				diag += fmt.Sprintf("[%s vis=%d trylock=%v/%v lease=%s]", e.Attrs[attrInstance], e.VisibleAtMs, ok, err, l)
			}
			return helperReply{OK: true, Err: fmt.Sprintf("list=%d %s", len(all), diag)}
		}
		r := helperReply{OK: true, Instance: it.Item.Instance, Token: it.LockToken, N: len(it.Item.History)}
		for _, m := range it.Item.Messages {
			r.Kinds = append(r.Kinds, m.Kind())
		}
		return r
	case "ack": // ack with one ExternalEvent-like history event (c.EventID)
		var delta []Event
		if c.EventID > 0 {
			delta = []Event{{EventID: c.EventID, InstanceID: c.Instance, ExecutionID: 1, DuroxideVersion: "0.1.26",
				Kind: ExternalEvent{Name: "helper", Data: strconv.Itoa(os.Getpid())}}}
		}
		if err := p.AckOrchestrationItem(ctx, c.Token, 1, delta, nil, nil, ExecutionMetadata{}, nil); err != nil {
			return replyErr(err)
		}
		return helperReply{OK: true}
	case "delete":
		adm, _ := p.Admin()
		if _, err := adm.DeleteInstance(ctx, c.Instance, true); err != nil {
			return replyErr(err)
		}
		return helperReply{OK: true}
	case "prune":
		adm, _ := p.Admin()
		k := uint32(1)
		if _, err := adm.PruneExecutions(ctx, c.Instance, PruneOptions{KeepLast: &k}); err != nil {
			return replyErr(err)
		}
		return helperReply{OK: true}
	case "wack": // fetch one work item and ack it with a completion
		it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags())
		if err != nil || it == nil {
			return helperReply{Err: fmt.Sprint("no work item ", err)}
		}
		ae := it.Item.(ActivityExecute)
		if err := p.AckWorkItem(ctx, it.LockToken, ActivityCompleted{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID, Result: "ok"}); err != nil {
			return replyErr(err)
		}
		return helperReply{OK: true}
	case "debug": // the helper's own view of an instance (diagnostics)
		key := instanceKey(c.Instance)
		all, _ := p.orchQ.List()
		mine, _ := queuedFor(p.orchQ, key)
		g, ok, err := p.leases.TryLock(p.lockPath(key), p.leasePath(key))
		if ok {
			g.Unlock()
		}
		it, ferr := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		got := ""
		if it != nil {
			got = it.Item.Instance
		}
		return helperReply{OK: true, Err: fmt.Sprintf("list=%d attr=%d trylock=%v/%v refetch=%q/%v", len(all), len(mine), ok, err, got, ferr)}
	case "sdrain": // fetch-and-ack session work items as Owner until idle
		var got []string
		idle := 0
		cfg := &SessionFetchConfig{OwnerID: c.Owner, LockTimeout: 30 * time.Second}
		for idle < 20 {
			it, err := p.FetchWorkItem(ctx, 30*time.Second, 20*time.Millisecond, cfg, DefaultOnlyTags())
			if err != nil {
				return replyErr(err)
			}
			if it == nil {
				idle++
				continue
			}
			idle = 0
			ae := it.Item.(ActivityExecute)
			got = append(got, strconv.FormatUint(ae.ID, 10))
			if err := p.AckWorkItem(ctx, it.LockToken, nil); err != nil {
				return replyErr(err)
			}
		}
		return helperReply{OK: true, Items: got}
	case "turns": // fetch and ack turns (one event appended each) until idle for ~1 s
		n, idle := 0, 0
		for idle < 10 {
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 100*time.Millisecond, nil)
			if err != nil {
				return replyErr(err)
			}
			if it == nil {
				idle++
				continue
			}
			idle = 0
			h := it.Item.History
			ev := Event{EventID: uint64(len(h)) + 1, InstanceID: it.Item.Instance, ExecutionID: it.Item.ExecutionID, DuroxideVersion: "0.1.26", Kind: ExternalEvent{Name: "t", Data: "x"}}
			if err := p.AckOrchestrationItem(ctx, it.LockToken, it.Item.ExecutionID, []Event{ev}, nil, nil, ExecutionMetadata{}, nil); err != nil {
				return replyErr(err)
			}
			n++
		}
		return helperReply{OK: true, N: n}
	case "drain": // fetch-and-ack orchestration turns until idle; acks append one event per turn
		var got []string
		idle := 0
		for idle < 20 {
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 50*time.Millisecond, nil)
			if err != nil {
				return replyErr(err)
			}
			if it == nil {
				idle++
				continue
			}
			idle = 0
			h, _ := p.Read(ctx, it.Item.Instance)
			next := uint64(len(h)) + 1
			var delta []Event
			for _, m := range it.Item.Messages {
				got = append(got, it.Item.Instance+"|"+m.Kind())
				var k EventKind = ExternalEvent{Name: m.Kind(), Data: "x"}
				if tf, ok := m.(TimerFired); ok {
					k = TimerFiredEvent{FireAtMs: tf.FireAtMs}
				}
				delta = append(delta, Event{EventID: next, InstanceID: it.Item.Instance, ExecutionID: 1, DuroxideVersion: "0.1.26", Kind: k})
				next++
			}
			if err := p.AckOrchestrationItem(ctx, it.LockToken, 1, delta, nil, nil, ExecutionMetadata{}, nil); err != nil {
				return replyErr(err)
			}
		}
		return helperReply{OK: true, Items: got}
	case "wdrain": // fetch-and-ack work items until idle
		var got []string
		idle := 0
		for idle < 20 {
			it, err := p.FetchWorkItem(ctx, 30*time.Second, 50*time.Millisecond, nil, DefaultOnlyTags())
			if err != nil {
				return replyErr(err)
			}
			if it == nil {
				idle++
				continue
			}
			idle = 0
			ae := it.Item.(ActivityExecute)
			got = append(got, ae.Instance+"/"+strconv.FormatUint(ae.ID, 10))
			if err := p.AckWorkItem(ctx, it.LockToken, ActivityCompleted{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID, Result: "ok"}); err != nil {
				return replyErr(err)
			}
		}
		return helperReply{OK: true, Items: got}
	case "serve": // TestReclaimChurn: fetch and ack everything in the background
		return churnServe(p)
	case "unserve":
		return churnUnserve()
	case "churn":
		return churn(p, c.Instance, c.Count)
	}
	return helperReply{Err: "unknown op " + c.Op}
}

// helper is a running helper process.
type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

func startHelper(t *testing.T, dir string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "DUROFS_DIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewScanner(outp)}
	h.out.Buffer(make([]byte, 1<<20), 16<<20)
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

// do sends a command and waits for the reply. ok is false if the helper died.
func (h *helper) do(c helperCmd) (helperReply, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(c)
	if _, err := h.in.Write(append(b, '\n')); err != nil {
		return helperReply{}, false
	}
	for h.out.Scan() {
		line := h.out.Text()
		if !strings.HasPrefix(line, "{") {
			continue // test framework chatter
		}
		var r helperReply
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return helperReply{}, false
		}
		return r, true
	}
	return helperReply{}, false
}

func (h *helper) must(t *testing.T, c helperCmd) helperReply {
	t.Helper()
	r, ok := h.do(c)
	if !ok {
		t.Fatalf("helper died on %+v", c)
	}
	if !r.OK {
		t.Fatalf("helper %+v: %s", c, r.Err)
	}
	return r
}

func multiprocessModes(t *testing.T, fn func(t *testing.T, env []string, opts Options)) {
	for _, m := range []struct {
		name string
		env  []string
		opts Options
	}{
		{"durable", nil, Options{SweepInterval: 100 * time.Millisecond}},
		{"process_crash_safe", []string{"DUROFS_NOSYNC=1"}, Options{SweepInterval: 100 * time.Millisecond, Durability: ProcessCrashSafe}},
	} {
		t.Run(m.name, func(t *testing.T) { fn(t, m.env, m.opts) })
	}
}

func startItem(inst string) StartOrchestration {
	v := "1.0.0"
	return StartOrchestration{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}
}

func TestMultiprocess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process tests skipped in -short mode")
	}
	t.Run("test_multiprocess_instance_exclusivity", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			const n = 30
			for i := 0; i < n; i++ {
				mustNoErr(t, p.EnqueueForOrchestrator(context.Background(), startItem(fmt.Sprintf("excl-%d", i)), 0))
			}
			hs := []*helper{startHelper(t, dir, env...), startHelper(t, dir, env...), startHelper(t, dir, env...)}
			var mu sync.Mutex
			got := map[string]int{}
			var wg sync.WaitGroup
			for _, h := range hs {
				wg.Add(1)
				go func(h *helper) {
					defer wg.Done()
					for {
						r, ok := h.do(helperCmd{Op: "fetch", LockMs: 60_000})
						if !ok || !r.OK || r.Instance == "" {
							return
						}
						mu.Lock()
						got[r.Instance]++
						mu.Unlock()
					}
				}(h)
			}
			wg.Wait()
			if len(got) != n {
				t.Fatalf("fetched %d distinct instances, want %d", len(got), n)
			}
			for inst, c := range got {
				if c != 1 {
					t.Errorf("instance %s locked %d times while its lease was held", inst, c)
				}
			}
		})
	})

	t.Run("test_multiprocess_lease_takeover_after_sigkill", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			ctx := context.Background()
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("takeover"), 0))
			h := startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			// The lease must outlive the kill and the fetch below on a loaded
			// machine (500 ms did not at load 35), and expire within the
			// takeover fetch's long poll.
			r := h.must(t, helperCmd{Op: "fetch", LockMs: 3000})
			if r.Instance != "takeover" {
				t.Fatalf("helper fetched %q", r.Instance)
			}
			// Mid-turn: the holder dies without acking.
			_ = h.cmd.Process.Kill()
			_ = h.cmd.Wait()
			if it, err := p.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil); err != nil || it != nil {
				t.Fatalf("fetch while the dead holder's lease is live = %v, %v; want none", it, err)
			}
			it, err := p.FetchOrchestrationItem(ctx, 5*time.Second, 10*time.Second, nil)
			if err != nil || it == nil || it.Item.Instance != "takeover" {
				t.Fatalf("takeover fetch = %+v, %v", it, err)
			}
			if it.AttemptCount != 2 {
				t.Errorf("attempt after takeover = %d, want 2", it.AttemptCount)
			}
			mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("takeover")}, nil, nil, md("TestOrch", "1.0.0"), nil))
			h2, _ := p.Read(ctx, "takeover")
			if len(h2) != 1 {
				t.Fatalf("history len %d, want 1", len(h2))
			}
		})
	})

	t.Run("test_multiprocess_no_double_delivery_of_work_items", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			ctx := context.Background()
			const n = 150
			for i := 1; i <= n; i++ {
				mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: uint64(i), Name: "A", Input: "{}"}))
			}
			hs := []*helper{startHelper(t, dir, env...), startHelper(t, dir, env...), startHelper(t, dir, env...)}
			var mu sync.Mutex
			count := map[string]int{}
			var wg sync.WaitGroup
			for _, h := range hs {
				wg.Add(1)
				go func(h *helper) {
					defer wg.Done()
					r, ok := h.do(helperCmd{Op: "wdrain"})
					if !ok || !r.OK {
						t.Errorf("wdrain: %v %+v", ok, r)
						return
					}
					mu.Lock()
					for _, it := range r.Items {
						count[it]++
					}
					mu.Unlock()
				}(h)
			}
			wg.Wait()
			if len(count) != n {
				t.Fatalf("delivered %d distinct items, want %d", len(count), n)
			}
			for it, c := range count {
				if c != 1 {
					t.Errorf("work item %s delivered %d times", it, c)
				}
			}
			// Every completion is in the orchestrator queue exactly once.
			depth := 0
			entries, _ := allQueued(p.orchQ)
			for _, e := range entries {
				if e.Attrs[attrKind] == "ActivityCompleted" {
					depth++
				}
			}
			if depth != n {
				t.Errorf("%d completions enqueued, want %d", depth, n)
			}
		})
	})

	t.Run("test_multiprocess_stale_holder_ack_rejected", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			ctx := context.Background()
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("stale"), 0))
			a, b := startHelper(t, dir, env...), startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			ra := a.must(t, helperCmd{Op: "fetch", LockMs: 300})
			if ra.Instance != "stale" {
				t.Fatalf("A fetched %q", ra.Instance)
			}
			// SIGSTOP the holder past its lease (a zombie), let B take over.
			_ = a.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(400 * time.Millisecond)
			rb := b.must(t, helperCmd{Op: "fetch", LockMs: 30_000})
			if rb.Instance != "stale" {
				t.Fatalf("B fetched %q after A's lease expired", rb.Instance)
			}
			b.must(t, helperCmd{Op: "ack", Token: rb.Token, Instance: "stale", EventID: 1})
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
			r, ok := a.do(helperCmd{Op: "ack", Token: ra.Token, Instance: "stale", EventID: 2})
			if !ok {
				t.Fatal("helper A died")
			}
			if r.OK || !r.Perm {
				t.Fatalf("stale holder's ack = %+v, want a permanent error", r)
			}
			h, err := p.Read(ctx, "stale")
			if err != nil || len(h) != 1 || h[0].EventID != 1 {
				t.Fatalf("history = %d events (%v), want only B's event 1", len(h), err)
			}
			// And the stale ack left no trace: no pending mark in the lease,
			// no record marked pending, no staged files.
			noPendingState(t, p, "stale")
		})
	})

	t.Run("test_multiprocess_timers_fire_once", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			ctx := context.Background()
			const n = 20
			// n started instances; then one turn schedules a timer for each, due shortly.
			for i := 0; i < n; i++ {
				inst := fmt.Sprintf("timer-%d", i)
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
				it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
				if err != nil || it == nil || it.Item.Instance != inst {
					t.Fatalf("create %s: %+v %v", inst, it, err)
				}
				mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(inst)}, nil, nil, md("TestOrch", "1.0.0"), nil))
			}
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("timer-parent"), 0))
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			fire := uint64(time.Now().Add(300 * time.Millisecond).UnixMilli())
			var timers []WorkItem
			for i := 0; i < n; i++ {
				timers = append(timers, TimerFired{Instance: fmt.Sprintf("timer-%d", i), ExecutionID: 1, ID: 1, FireAtMs: fire})
			}
			mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("timer-parent")}, nil, timers, md("TestOrch", "1.0.0"), nil))
			hs := []*helper{startHelper(t, dir, env...), startHelper(t, dir, env...), startHelper(t, dir, env...)}
			var mu sync.Mutex
			seen := map[string]int{}
			var wg sync.WaitGroup
			for _, h := range hs {
				wg.Add(1)
				go func(h *helper) {
					defer wg.Done()
					r, ok := h.do(helperCmd{Op: "drain"})
					if !ok || !r.OK {
						t.Errorf("drain: %v %+v", ok, r)
						return
					}
					mu.Lock()
					for _, x := range r.Items {
						seen[x]++
					}
					mu.Unlock()
				}(h)
			}
			wg.Wait()
			if time.Now().UnixMilli() < int64(fire) {
				t.Fatal("drain finished before the timers were due")
			}
			for i := 0; i < n; i++ {
				inst := fmt.Sprintf("timer-%d", i)
				if seen[inst+"|TimerFired"] != 1 {
					t.Errorf("%s: timer delivered %d times", inst, seen[inst+"|TimerFired"])
				}
				h, err := p.Read(ctx, inst)
				if err != nil || len(h) != 2 {
					t.Errorf("%s: history %d events (%v), want Started + exactly 1 TimerFired", inst, len(h), err)
					continue
				}
				if tf, ok := h[1].Kind.(TimerFiredEvent); !ok || tf.FireAtMs != fire {
					t.Errorf("%s: history[1] = %+v", inst, h[1])
				}
			}
		})
	})

	t.Run("test_multiprocess_kill_between_commit_and_apply", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			// This process finishes nothing in the background until the
			// state the crash left has been checked.
			quiet := opts
			quiet.SweepInterval, quiet.CheckpointInterval = -1, -1
			p := openT(t, dir, quiet)
			ctx := context.Background()
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("cp"), 0))
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "cp", Name: "e", Data: "1"}, 0))
			// The helper dies (SIGKILL) right after its commit point: its
			// record is in the log (synced), its lease marks it pending, and
			// nothing of it is applied.
			h := startHelper(t, dir, append(env, "DUROFS_CRASH_AFTER_COMMIT=ack")...)
			r := h.must(t, helperCmd{Op: "fetch", LockMs: 30_000})
			if r.Instance != "cp" || len(r.Kinds) != 2 {
				t.Fatalf("helper fetched %+v", r)
			}
			if _, ok := h.do(helperCmd{Op: "ack", Token: r.Token, Instance: "cp", EventID: 1}); ok {
				t.Fatal("helper survived its crash point")
			}
			_ = h.cmd.Wait()
			pcs := pendingCommits(t, p)
			if len(pcs) != 1 || pcs[0].Kind != "ack" || pcs[0].Instance != "cp" || pcs[0].Events != 1 || pcs[0].Delete != 2 {
				t.Fatalf("want exactly one pending ack of cp (1 event, 2 messages to delete), have %+v", pcs)
			}
			if m := leaseMark(t, p, "cp"); m == nil || m.ID != pcs[0].ID {
				t.Fatalf("lease mark of cp = %+v, want the logged record %s", m, pcs[0].ID)
			}
			if hist, err := p.Read(ctx, "cp"); err != nil || len(hist) != 0 {
				t.Fatalf("history before recovery = %d events (%v), want none (the apply never ran)", len(hist), err)
			}
			// Two fresh processes and this one race to recover; the turn must
			// complete exactly once.
			startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			q := openT(t, dir, opts)
			// (A Recover that finds another process checkpointing for
			// longer than checkpointTimeout leaves the record to it: retry.)
			var hist []Event
			for i := 0; i < 3 || (len(hist) == 0 && i < 30); i++ {
				mustNoErr(t, q.Recover(ctx))
				var err error
				hist, err = q.Read(ctx, "cp")
				mustNoErr(t, err)
			}
			if len(hist) != 1 {
				t.Fatalf("history after recovery = %d events, want the committed turn exactly once", len(hist))
			}
			if it, err := q.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil); err != nil || it != nil {
				t.Fatalf("the consumed batch is still fetchable after recovery: %+v %v", it, err)
			}
			noPendingState(t, q, "cp")
			// A checkpoint now passes the record: the log since the
			// checkpoint is empty (retried: another process may be
			// checkpointing at the same moment and hold the lock).
			deadline := time.Now().Add(10 * time.Second)
			for {
				mustNoErr(t, q.checkpointOnce(ctx, true, true))
				recs, _, _, err := q.scanLog()
				mustNoErr(t, err)
				if len(recs) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d records left after the checkpoint", len(recs))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	})
}
