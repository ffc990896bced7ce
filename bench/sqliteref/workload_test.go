package sqliteref_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/bench/sqliteref"
	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// Runtimes sharing one database file: in one process (two Providers on one
// file, one runtime each) and in several processes (the test binary
// re-executed as helper processes). Every acked event is recorded per
// runtime; a turn processed twice would show up as an event acked twice,
// and a lost one as a history event nobody acked or a Verify violation.

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

// ackKey identifies one acked history event.
type ackKey struct {
	Instance string `json:"i"`
	Exec     uint64 `json:"x"`
	Event    uint64 `json:"e"`
	Type     string `json:"t"`
}

// ackLog collects acked events.
type ackLog struct {
	mu   sync.Mutex
	acks []ackKey
}

func (a *ackLog) record(instance string, exec uint64, events []provider.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range events {
		a.acks = append(a.acks, ackKey{instance, exec, e.EventID, e.Kind.Type()})
	}
}

func openT(t *testing.T, path string) *sqliteref.Provider {
	t.Helper()
	p, err := sqliteref.Open(path, sqliteref.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func startAll(t *testing.T, p provider.Provider, specs []workload.Spec) {
	t.Helper()
	for _, s := range specs {
		if err := workload.Start(context.Background(), p, s); err != nil {
			t.Fatalf("start %s: %v", s.Instance, err)
		}
	}
}

// checkRun verifies the final state against specs, and that the acks of all
// runtimes together hold every history event exactly once. With complete
// false (a runtime was killed, so its last acks may be missing from its
// log) it only checks that no event was acked twice and that every logged
// ack is in the history.
func checkRun(t *testing.T, p provider.Provider, specs []workload.Spec, acks []ackKey, complete bool) {
	t.Helper()
	ctx := context.Background()
	adm, _ := p.Admin()
	rep, err := workload.Verify(ctx, p, adm, specs)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	t.Logf("verify: %s", rep)
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if rep.Completed != len(specs) {
		t.Errorf("completed %d of %d", rep.Completed, len(specs))
	}
	if rep.QueueDepths == nil || *rep.QueueDepths != (provider.QueueDepths{}) {
		t.Errorf("queues not empty at the end: %+v", rep.QueueDepths)
	}
	seen := map[ackKey]int{}
	for _, a := range acks {
		seen[a]++
		if seen[a] == 2 {
			t.Errorf("event acked twice (double processing): %+v", a)
		}
	}
	histories := map[[2]any][]provider.Event{}
	for a := range seen {
		k := [2]any{a.Instance, a.Exec}
		h, ok := histories[k]
		if !ok {
			if h, err = p.ReadWithExecution(ctx, a.Instance, a.Exec); err != nil {
				t.Fatal(err)
			}
			histories[k] = h
		}
		found := false
		for _, e := range h {
			if e.EventID == a.Event && e.Kind.Type() == a.Type {
				found = true
			}
		}
		if !found {
			t.Errorf("acked event %+v is not in the history", a)
		}
	}
	if complete && len(seen) != rep.Events {
		t.Errorf("runtimes acked %d distinct events, histories hold %d", len(seen), rep.Events)
	}
}

// TestWorkloadTwoProvidersOneFile runs two runtimes, each on its own
// Provider, against one database file.
func TestWorkloadTwoProvidersOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	p1, p2 := openT(t, path), openT(t, path)
	specs := workload.Mix(11, 48)
	startAll(t, p1, specs)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs [2]ackLog
	rts := [2]*workload.Runtime{}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, p := range []*sqliteref.Provider{p1, p2} {
		rts[i] = workload.NewRuntime(p, workload.RuntimeOptions{Dispatchers: 2, Workers: 2, Logger: quietLogger(), OnAck: logs[i].record})
		wg.Go(func() { _ = rts[i].Run(runCtx) })
	}
	adm, _ := p1.Admin()
	begin := time.Now()
	err := workload.Await(ctx, p1, adm, specs, nil)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("Await: %v (stats %+v / %+v)", err, rts[0].Stats(), rts[1].Stats())
	}
	t.Logf("%d instances in %v; runtime 1 %+v; runtime 2 %+v", len(specs), time.Since(begin).Round(time.Millisecond), rts[0].Stats(), rts[1].Stats())
	for i, rt := range rts {
		if rt.Stats().Turns == 0 {
			t.Errorf("runtime %d did no turn: the two providers did not share the work", i+1)
		}
	}
	checkRun(t, p1, specs, append(logs[0].acks, logs[1].acks...), true)
}

// ---- several processes ----

const helperEnv = "SQLITEREF_WORKLOAD_HELPER"

// TestHelperProcess is not a test: it is the body of a helper process. It
// runs a workload runtime on the database SQLITEREF_DB until its stdin
// closes, appends every acked event to SQLITEREF_ACKLOG (one JSON line,
// written at once, so a killed helper loses at most the ack in flight),
// and prints its stats as one JSON line.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	ppid := os.Getppid()
	go func() { // exit with the test process
		for range time.Tick(200 * time.Millisecond) {
			if os.Getppid() != ppid {
				os.Exit(4)
			}
		}
	}()
	p, err := sqliteref.Open(os.Getenv("SQLITEREF_DB"), sqliteref.Options{Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper open:", err)
		os.Exit(2)
	}
	f, err := os.OpenFile(os.Getenv("SQLITEREF_ACKLOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper ack log:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	onAck := func(instance string, exec uint64, events []provider.Event) {
		var b []byte
		for _, e := range events {
			line, _ := json.Marshal(ackKey{instance, exec, e.EventID, e.Kind.Type()})
			b = append(append(b, line...), '\n')
		}
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.Write(b)
	}
	lock, _ := time.ParseDuration(os.Getenv("SQLITEREF_LOCK"))
	delay, _ := time.ParseDuration(os.Getenv("SQLITEREF_ACTIVITY_DELAY"))
	rt := workload.NewRuntime(p, workload.RuntimeOptions{Dispatchers: 2, Workers: 2, LockTimeout: lock, ActivityDelay: delay,
		Logger: quietLogger(), OnAck: onAck})
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	_ = rt.Run(ctx)
	st, _ := json.Marshal(rt.Stats())
	fmt.Println(string(st))
	_ = f.Close()
	_ = p.Close()
	os.Exit(0)
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	log    string
}

func startHelper(t *testing.T, db, ackLog string, lock, activityDelay time.Duration) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "SQLITEREF_DB="+db, "SQLITEREF_ACKLOG="+ackLog,
		"SQLITEREF_LOCK="+lock.String(), "SQLITEREF_ACTIVITY_DELAY="+activityDelay.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &helper{cmd: cmd, stdin: in, stdout: out, log: ackLog}
}

// finish stops the helper's runtime and returns its stats.
func (h *helper) finish(t *testing.T) workload.Stats {
	t.Helper()
	_ = h.stdin.Close()
	var st workload.Stats
	sc := bufio.NewScanner(h.stdout)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &st); err != nil {
				t.Errorf("helper stats %q: %v", line, err)
			}
		}
	}
	if err := h.cmd.Wait(); err != nil {
		t.Errorf("helper exited: %v", err)
	}
	return st
}

func readAckLog(t *testing.T, path string) []ackKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []ackKey
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		var a ackKey
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			continue // a torn last line of a killed helper
		}
		out = append(out, a)
	}
	return out
}

// TestWorkloadMultiProcess runs workload runtimes in two and in four
// processes sharing one database file, and, in the "kill" variant, kills
// one of two with SIGKILL mid-run: its locks expire and the other process
// takes its work over. SQLITEREF_WORKLOAD_SPECS sets the number of
// instances (default 48).
func TestWorkloadMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	nSpecs := 48
	if v, err := strconv.Atoi(os.Getenv("SQLITEREF_WORKLOAD_SPECS")); err == nil && v > 0 {
		nSpecs = v
	}
	for _, c := range []struct {
		name  string
		procs int
		kill  bool
	}{
		{"two_processes", 2, false},
		{"four_processes", 4, false},
		{"kill_one_mid_run", 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "shared.db")
			p := openT(t, db)
			specs := workload.Mix(23, nSpecs)
			startAll(t, p, specs)

			// The kill variant slows activities down, so that the killed
			// process surely holds locks, and uses 1 s locks, so that the
			// survivor takes them over quickly.
			lock, delay := 5*time.Second, time.Duration(0)
			if c.kill {
				lock, delay = time.Second, 50*time.Millisecond
			}
			var hs []*helper
			for i := range c.procs {
				hs = append(hs, startHelper(t, db, filepath.Join(dir, fmt.Sprintf("acks-%d.jsonl", i+1)), lock, delay))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second+time.Duration(nSpecs)*100*time.Millisecond)
			defer cancel()
			adm, _ := p.Admin()
			begin := time.Now()
			killed := false
			err := workload.Await(ctx, p, adm, specs, func(done, total int) {
				if c.kill && !killed && done > 0 {
					killed = true
					_ = hs[0].cmd.Process.Kill()
					t.Logf("killed helper 1 with %d of %d instances done", done, total)
				}
			})
			elapsed := time.Since(begin)
			var (
				acks  []ackKey
				total workload.Stats
			)
			for i, h := range hs {
				if c.kill && i == 0 {
					_ = h.cmd.Wait()
				} else {
					st := h.finish(t)
					t.Logf("helper %d: %+v", i+1, st)
					total = total.Add(st)
				}
				acks = append(acks, readAckLog(t, h.log)...)
			}
			if err != nil {
				t.Fatalf("Await: %v", err)
			}
			t.Logf("%d instances in %v with %d processes", len(specs), elapsed.Round(time.Millisecond), c.procs)
			if total.Turns == 0 {
				t.Error("the helpers did no turn")
			}
			if c.kill && !killed {
				t.Fatal("helper 1 was never killed")
			}
			checkRun(t, p, specs, acks, !c.kill)
		})
	}
}
