package fsqueue_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/racereport"
	"github.com/durofs/durofs/internal/vfs"
)

// TestClaimNextGoroutineRace: 8 goroutines (over two Queue values on one
// directory) claim 500 messages with 1-hour leases until none is left; every
// message must be claimed exactly once.
func TestClaimNextGoroutineRace(t *testing.T) {
	const (
		messages   = 500
		goroutines = 8
	)
	dir := t.TempDir()
	setup := openQueue(t, vfs.NoSync(vfs.OS{}), dir, nil)
	for range messages {
		enqueue(t, setup, fsqueue.Message{})
	}
	qs := []*fsqueue.Queue{openQueue(t, vfs.OS{}, dir, nil), openQueue(t, vfs.OS{}, dir, nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	var (
		mu      sync.Mutex
		claimed = map[string][]string{} // name -> tokens
		total   atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			q := qs[g%len(qs)]
			for {
				c, err := q.ClaimNext(ctx, fmt.Sprintf("g%d", g), time.Hour, nil)
				if err != nil {
					errs <- err
					return
				}
				if c == nil {
					if total.Load() >= messages {
						return
					}
					time.Sleep(time.Millisecond) // the rest is momentarily locked by others
					continue
				}
				mu.Lock()
				claimed[c.Message.Name] = append(claimed[c.Message.Name], c.Claim.Token)
				mu.Unlock()
				total.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	double := 0
	for name, toks := range claimed {
		if len(toks) != 1 {
			double++
			t.Errorf("message %s claimed %d times", name, len(toks))
		}
	}
	if len(claimed) != messages {
		t.Fatalf("%d distinct messages claimed, want %d", len(claimed), messages)
	}
	if err := racereport.Printf("fsqueue race (goroutines): %d messages, %d goroutines, %d claims, %d double claims", messages, goroutines, total.Load(), double); err != nil {
		t.Error(err)
	}
	t.Logf("%d messages, %d goroutines, %d claims, %d double claims", messages, goroutines, total.Load(), double)
}

// Helper-process protocol (environment of the re-executed test binary).
const (
	helperEnv     = "DUROFS_FSQUEUE_HELPER"
	helperDir     = "DUROFS_FSQUEUE_DIR"
	helperCtrl    = "DUROFS_FSQUEUE_CTRL"
	helperID      = "DUROFS_FSQUEUE_ID"
	helperMode    = "DUROFS_FSQUEUE_MODE" // "once" or "expire"
	helperN       = "DUROFS_FSQUEUE_N"
	helperRunFor  = "DUROFS_FSQUEUE_RUN_FOR"
	helperLockFor = "DUROFS_FSQUEUE_LOCK_FOR"
)

// TestHelperProcess is the child side of TestMultiProcessNoDoubleClaim. It
// does nothing unless DUROFS_FSQUEUE_HELPER=1. It prints one line per claim:
//
//	CLAIM <name> <token> <claimMs> <lockedUntilMs> <attempt>
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	if err := runHelper(); err != nil {
		t.Fatalf("helper %s: %v", os.Getenv(helperID), err)
	}
}

func runHelper() error {
	dir, ctrl, id, mode := os.Getenv(helperDir), os.Getenv(helperCtrl), os.Getenv(helperID), os.Getenv(helperMode)
	n, _ := strconv.Atoi(os.Getenv(helperN))
	runFor, _ := time.ParseDuration(os.Getenv(helperRunFor))
	lockFor, _ := time.ParseDuration(os.Getenv(helperLockFor))
	fsys := vfs.FS(vfs.OS{})
	if mode == "once" {
		fsys = vfs.NoSync(fsys) // the race, not durability, is under test
	}
	q, err := fsqueue.Open(fsys, dir, fsqueue.Options{})
	if err != nil {
		return err
	}
	// Start barrier: announce readiness, wait for the parent's go.
	if err := os.WriteFile(filepath.Join(ctrl, "ready-"+id), nil, 0o600); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ctrl, "go")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no go signal")
		}
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	end := time.Now().Add(runFor)
	for {
		if mode == "expire" && time.Now().After(end) {
			return nil
		}
		c, err := q.ClaimNext(ctx, "proc-"+id, lockFor, nil)
		if err != nil {
			return err
		}
		if c != nil {
			fmt.Fprintf(out, "CLAIM %s %s %d %d %d\n", c.Message.Name, c.Claim.Token,
				c.Claim.LockedUntilMs-lockFor.Milliseconds(), c.Claim.LockedUntilMs, c.Claim.Attempt)
			continue
		}
		if mode == "once" {
			names, err := q.Claims()
			if err != nil {
				return err
			}
			if len(names) >= n {
				return nil // every message has been claimed by someone
			}
		}
		time.Sleep(time.Millisecond)
	}
}

type claimRecord struct {
	proc             int
	name, token      string
	startMs, untilMs int64
	attempt          int
}

// runHelpers starts procs helper processes on dir, releases them together
// and returns their claim records.
func runHelpers(t *testing.T, dir string, procs int, env ...string) []claimRecord {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctrl := t.TempDir()
	type child struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	children := make([]*child, procs)
	for i := range children {
		c := &child{cmd: exec.Command(exe, "-test.run=^TestHelperProcess$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(), helperEnv+"=1", helperDir+"="+dir, helperCtrl+"="+ctrl, helperID+"="+strconv.Itoa(i))
		c.cmd.Env = append(c.cmd.Env, env...)
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	defer func() {
		for _, c := range children {
			if c.cmd.ProcessState == nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ready, _ := filepath.Glob(filepath.Join(ctrl, "ready-*"))
		if len(ready) == procs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d helpers ready", len(ready), procs)
		}
	}
	if err := os.WriteFile(filepath.Join(ctrl, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var recs []claimRecord
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\nstdout:\n%s\nstderr:\n%s", i, err, c.stdout.String(), c.stderr.String())
		}
		for line := range strings.Lines(c.stdout.String()) {
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "CLAIM" {
				continue
			}
			r := claimRecord{proc: i, name: f[1], token: f[2]}
			r.startMs, _ = strconv.ParseInt(f[3], 10, 64)
			r.untilMs, _ = strconv.ParseInt(f[4], 10, 64)
			r.attempt, _ = strconv.Atoi(f[5])
			recs = append(recs, r)
		}
	}
	return recs
}

// TestMultiProcessNoDoubleClaim re-executes the test binary as 4 processes
// sharing one queue directory.
//
// Phase 1: 1,000 messages, 1-hour leases, each process claims until none is
// left: every message must be claimed exactly once across all processes.
//
// Phase 2: a few messages, 200 ms leases on the real clock, never acked:
// processes keep re-claiming messages as leases expire. For each message the
// lease intervals [claim time, locked until) must not overlap, and attempts
// must be 1, 2, 3, ... in claim order (no two claims read the same state).
func TestMultiProcessNoDoubleClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const procs = 4

	t.Run("once", func(t *testing.T) {
		const messages = 1000
		dir := t.TempDir()
		setup := openQueue(t, vfs.NoSync(vfs.OS{}), dir, nil)
		want := map[string]bool{}
		for range messages {
			want[enqueue(t, setup, fsqueue.Message{})] = true
		}
		start := time.Now()
		recs := runHelpers(t, dir, procs, helperMode+"=once", helperN+"="+strconv.Itoa(messages), helperLockFor+"=1h")
		perName := map[string][]claimRecord{}
		perProc := make([]int, procs)
		for _, r := range recs {
			if !want[r.name] {
				t.Fatalf("claimed unknown message %q", r.name)
			}
			if n, ok := fsqueue.NameFromToken(r.token); !ok || n != r.name {
				t.Fatalf("token %q does not belong to %s", r.token, r.name)
			}
			perName[r.name] = append(perName[r.name], r)
			perProc[r.proc]++
		}
		double := 0
		for name, rs := range perName {
			if len(rs) > 1 {
				double++
				t.Errorf("message %s claimed %d times: %+v", name, len(rs), rs)
			}
		}
		if len(perName) != messages {
			t.Fatalf("%d of %d messages claimed", len(perName), messages)
		}
		active := 0
		for _, n := range perProc {
			if n > 0 {
				active++
			}
		}
		if active < 2 {
			t.Fatalf("only %d process claimed anything (per process %v): no race exercised", active, perProc)
		}
		if double == 0 {
			if err := racereport.Printf("fsqueue race (processes): %d messages, %d processes, %d claims, 0 double claims", messages, procs, len(recs)); err != nil {
				t.Error(err)
			}
		}
		t.Logf("%d messages, %d processes, %d claims (per process %v), %d double claims, %v",
			messages, procs, len(recs), perProc, double, time.Since(start).Round(time.Millisecond))
	})

	t.Run("expire", func(t *testing.T) {
		const (
			messages = 12
			lockFor  = 200 * time.Millisecond
			runFor   = 1500 * time.Millisecond
		)
		dir := t.TempDir()
		setup := openQueue(t, vfs.OS{}, dir, clock.System{})
		for range messages {
			enqueue(t, setup, fsqueue.Message{})
		}
		recs := runHelpers(t, dir, procs, helperMode+"=expire", helperLockFor+"="+lockFor.String(), helperRunFor+"="+runFor.String())
		perName := map[string][]claimRecord{}
		procsPerName := map[string]map[int]bool{}
		for _, r := range recs {
			perName[r.name] = append(perName[r.name], r)
			if procsPerName[r.name] == nil {
				procsPerName[r.name] = map[int]bool{}
			}
			procsPerName[r.name][r.proc] = true
		}
		if len(perName) != messages {
			t.Fatalf("%d of %d messages claimed", len(perName), messages)
		}
		overlaps, reclaims, crossProc := 0, 0, 0
		for name, rs := range perName {
			slices.SortFunc(rs, func(a, b claimRecord) int { return int(a.startMs - b.startMs) })
			for i, r := range rs {
				if r.untilMs-r.startMs != lockFor.Milliseconds() {
					t.Errorf("%s: lease %d..%d is not %v long", name, r.startMs, r.untilMs, lockFor)
				}
				if r.attempt != i+1 {
					t.Errorf("%s: claim %d has attempt %d (claims %+v)", name, i, r.attempt, rs)
				}
				if i > 0 {
					reclaims++
					if prev := rs[i-1]; r.startMs < prev.untilMs {
						overlaps++
						t.Errorf("%s: lease [%d,%d) of process %d overlaps [%d,%d) of process %d",
							name, r.startMs, r.untilMs, r.proc, prev.startMs, prev.untilMs, prev.proc)
					}
				}
			}
			if len(rs) < 2 {
				t.Errorf("%s claimed only %d times; expected re-claims after expiry", name, len(rs))
			}
			if len(procsPerName[name]) > 1 {
				crossProc++
			}
		}
		if overlaps == 0 {
			if err := racereport.Printf("fsqueue race (processes, %v leases): %d messages, %d processes, %d claims (%d after expiry, %d messages moved between processes), 0 overlapping leases",
				lockFor, messages, procs, len(recs), reclaims, crossProc); err != nil {
				t.Error(err)
			}
		}
		t.Logf("%v leases: %d messages, %d processes, %d claims, %d re-claims after expiry, %d messages claimed by more than one process, %d overlapping leases",
			lockFor, messages, procs, len(recs), reclaims, crossProc, overlaps)
	})
}
