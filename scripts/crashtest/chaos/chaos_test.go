//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// TestMain lets the test binary serve as the workers: the supervisor
// re-executes its own binary with workerEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for the supervisor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runForTest runs the suite with cfg, the test binary as the workers.
func runForTest(t *testing.T, cfg config) *result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.exe = exe
	cfg.dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	res, err := runChaos(ctx, cfg, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil || res == nil || !res.ok() {
		t.Logf("stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("runChaos: %v", err)
	}
	return res
}

// TestChaos is a short version of `make crashtest`: ≥ 15 s and ≥ 30
// SIGKILLs of 3 durable workers while the driver deletes a quarter of the
// chain, fan-out, cancel and sub instances, then drain, recovery and the
// invariant check, which must find no violation.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for about 20 s")
	}
	t.Parallel() // its own directory and worker processes
	cfg := defaultConfig()
	cfg.duration, cfg.kills, cfg.seed, cfg.deletes = 15*time.Second, 30, 1, 0.25
	res := runForTest(t, cfg)
	if res.kills < 30 {
		t.Errorf("%d kills, want ≥ 30", res.kills)
	}
	if res.deletedForced == 0 || res.deleted == res.deletedForced {
		t.Errorf("%d instances deleted, %d of them forced while running: want both kinds", res.deleted, res.deletedForced)
	}
	if rep := res.report; rep != nil && rep.Figures.Deleted < res.deleted {
		t.Errorf("the check found %d instances deleted, the driver deleted %d", rep.Figures.Deleted, res.deleted)
	}
	for _, f := range res.failures {
		t.Errorf("failure: %s", f)
	}
	checkReports(t, res)
	if f := res.report.Figures; res.oracle.OK == 0 || f.AcksOK+f.AcksOfDeleted != res.oracle.OK {
		t.Errorf("%d OK acks reported, %d checked, %d to deleted instances", res.oracle.OK, f.AcksOK, f.AcksOfDeleted)
	}
}

// TestZombieHolder stops workers while they hold back an ack (holding the
// instance's lease), past the lease, and continues them after the others
// took over: each held-back ack must be rejected as stale and leave no
// trace (the checker's invariant 7), and the run must pass.
func TestZombieHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for about 15 s")
	}
	t.Parallel() // its own directory and worker processes
	cfg := defaultConfig()
	cfg.duration, cfg.zombies, cfg.seed = 8*time.Second, 2, 2
	cfg.killMin, cfg.killMax = 300*time.Millisecond, 900*time.Millisecond
	res := runForTest(t, cfg)
	held := 0
	for _, z := range res.zombies {
		if !z.caught || !z.paused {
			continue
		}
		held++
		if z.outcome != oracle.OutcomeRejected {
			t.Errorf("held-back ack %d of worker %d: outcome %s, want rejected", z.seq, z.worker, z.outcome)
		}
	}
	if held == 0 {
		t.Fatalf("no zombie round held an ack back past its lease (%d rounds)", len(res.zombies))
	}
	checkReports(t, res)
	for _, f := range res.failures {
		t.Errorf("failure: %s", f)
	}
}

// checkReports fails t unless both invariant checks (after the final
// recovery without replay, and after a replay) ran and found nothing.
func checkReports(t *testing.T, res *result) {
	t.Helper()
	if res.report == nil || res.replayReport == nil {
		t.Fatal("the invariant check did not run")
	}
	if n := res.report.Total(); n != 0 {
		t.Errorf("violations after the recovery without replay: %d (%s)", n, res.report.Breakdown())
	}
	if n := res.replayReport.Total(); n != 0 {
		t.Errorf("violations after the replay: %d (%s)", n, res.replayReport.Breakdown())
	}
}

// TestStall is a short stall-mode run (the harness, not the verdict: the
// verdict is make stalltest's): a worker is stopped 20 times while the two
// others ack; the stops, the others' latencies and the invariants must be
// measured and checked.
func TestStall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for about 15 s")
	}
	t.Parallel() // its own directory and worker processes
	cfg := defaultConfig()
	cfg.duration, cfg.stops, cfg.lockTimeout, cfg.seed = 0, 20, time.Second, 3
	cfg = cfg.withDerived()
	res := runForTest(t, cfg)
	checkReports(t, res)
	st := res.stall
	if st == nil {
		t.Fatal("no stall figures")
	}
	if len(st.stops) < 20 || len(st.others) == 0 || st.victimAcks == 0 {
		t.Errorf("%d stops, %d acks of the others, %d of the stopped worker: want ≥ 20 stops and acks on both sides", len(st.stops), len(st.others), st.victimAcks)
	}
	for _, f := range res.failures {
		t.Logf("failure: %s", f)
	}
}

// The stall verdict fails an ack of the others over the threshold unless
// its wait for the log's fdatasync (disk time, which no stopped process
// holds up) accounts for the excess.
func TestStallVerdictDiskTime(t *testing.T) {
	cfg := defaultConfig()
	cfg.lockTimeout, cfg.stallMargin = 600*time.Millisecond, 250*time.Millisecond // threshold 850 ms
	begin := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		d, sync  time.Duration
		wantSlow bool
		wantDisk bool
	}{
		{"fast", 500 * time.Millisecond, 0, false, false},
		{"slow, no disk wait", 900 * time.Millisecond, 40 * time.Millisecond, true, false},
		{"slow on the disk", 900 * time.Millisecond, 800 * time.Millisecond, false, true},
		{"disk wait just short of the excess", time.Second, 149 * time.Millisecond, true, false},
		{"disk wait covering the excess", time.Second, 150 * time.Millisecond, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &supervisor{lats: make([][]ackLatency, 2)}
			s.latency(&worker{id: 2, slot: 1}, "work", oracle.Line{Type: oracle.TypeWorkAck, AckAtUs: begin.UnixMicro(),
				AckMs: float64(tc.d.Microseconds()) / 1000, SyncMs: float64(tc.sync.Microseconds()) / 1000})
			st := s.stallVerdict(cfg, nil, begin.Add(time.Minute))
			if got := len(st.slow) == 1; got != tc.wantSlow {
				t.Errorf("slow: %v, want %v", got, tc.wantSlow)
			}
			if got := len(st.slowDisk) == 1; got != tc.wantDisk {
				t.Errorf("slow on the disk: %v, want %v", got, tc.wantDisk)
			}
		})
	}
}
