//go:build unix

package crashtest_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/crashcheck"
	"github.com/durofs/durofs/internal/crashcheck/script"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/wal"
)

// The crash-point sweep. See the package comment.

const (
	envFailpoint = "DUROFS_FAILPOINT"
	envList      = "DUROFS_FAILPOINT_LIST"
	// remainderSkew moves the clock of a run that continues the script after
	// a crash, so the killed process's leases and claims have expired.
	remainderSkew = time.Hour
	runTimeout    = 60 * time.Second
	// segmentSize is the write-ahead log segment size of every process of a
	// sweep: small, so that records span several segments, appends roll to
	// new ones and checkpoints remove old ones.
	segmentSize = 4096
	// garbageAge is how far back the temporary and staged files of a crash
	// image are dated before recovery, so that recovery's sweep (which
	// leaves young ones to their writers) removes them.
	garbageAge = 2 * time.Hour
)

// Recovery flavors: how a crash image is recovered and checked.
const (
	// flavorReplay recovers alone after a simulated reboot (wal/boot, the
	// boot id the log was last used in, removed): Open finds no other
	// process and replays the log from the checkpoint, rewriting every byte
	// (what happens after a power loss or an OS crash). Without the reboot
	// a process alone would not replay: the page cache holds what the dead
	// applied.
	flavorReplay = "replay"
	// flavorShared recovers while another process holds the log open (the
	// test process, through a bare wal.Open): no replay; Open's recovery
	// pass (checkpoint visit of logged records, acked claims, aged staged
	// files) and the next flock holders finish what the pending marks show
	// (what happens when one of several processes dies).
	flavorShared = "shared"
)

var flavors = []string{flavorReplay, flavorShared}

// seed is a crash point that leaves an operation behind that recovery must
// finish or undo; the sweep also crashes the recovery of each, in each
// flavor, at every failpoint it reaches.
type seed struct {
	name string
	step int
}

// seeds are the seeds of each script (script.ByName).
var seeds = map[string][]seed{
	script.Duroxide: {
		{"commit.after_mark", 2},            // lease marked, no record, staged messages: a commit that never happened
		{"commit.after_append", 2},          // record appended, not yet synced
		{"wal.reserved", 2},                 // the record's place reserved in the log, nothing written there
		{"ack.after_commit", 2},             // publishes to both queues, consumes the start
		{"ack.after_commit", 5},             // deletes three messages and a queued cancelled activity
		{"workack.after_mark", 4},           // claim marked acked, no record
		{"workack.after_commit", 4},         // completion staged, claim acked, record logged
		{"prune.after_commit", 15},          // two executions to remove
		{"commit.after_mark", 20},           // a deletion's marks and markers, no record: the markers are removed
		{"delete.after_commit", 20},         // committed, nothing applied
		{"delete.after_member_applied", 20}, // committed, one of two instances applied
	},
	script.GoWorkflows: {
		{"gw.before_commit", 3},     // staged events and activity task, no mark: a completion that never happened
		{"commit.after_mark", 3},    // two leases marked (P and the C it creates), no record
		{"wal.reserved", 3},         // the record's place reserved, not written
		{"gw.after_commit", 3},      // a record of two parts, nothing applied
		{"gw.after_part", 3},        // C's part applied, P's not
		{"gwact.after_mark", 4},     // claim marked, result staged, no record
		{"gwact.after_commit", 4},   // activity completion logged, not applied
		{"gw.after_commit", 6},      // continue-as-new, the old execution removed in the same record
		{"gw.after_commit", 11},     // continue-as-new, the old execution kept: moved out of instance.json in the same record
		{"delete.after_commit", 13}, // deletion of a running instance: its new execution's start, a claimed task of the old one
		{"gw.after_commit", 8},      // removal of a finished execution
	},
}

// scripts are the scripts the sweep runs: the duroxide contract and the
// go-workflows engine (DUROFS_SWEEP_SCRIPT=duroxide or gw runs one).
func scripts(t *testing.T) []string {
	if name := os.Getenv("DUROFS_SWEEP_SCRIPT"); name != "" {
		if _, err := script.ByName(name); err != nil {
			t.Fatalf("DUROFS_SWEEP_SCRIPT: %v", err)
		}
		return []string{name}
	}
	return []string{script.Duroxide, script.GoWorkflows}
}

func TestCrashPointSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("crash-point sweep skipped in -short mode")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found: cannot build the failpoint worker")
	}
	bin := filepath.Join(t.TempDir(), "fpworker")
	build := exec.Command(goTool, "build", "-tags", "crashtest", "-o", bin, "./internal/fpworker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags crashtest: %v\n%s", err, out)
	}
	// Both scripts, in both durability modes: they share the commit path but
	// not the checkpoint's fsyncs, and every failpoint must be swept in at
	// least one.
	swept := map[string]bool{}
	flavorsBy := map[provider.Durability]map[string]map[string]bool{} // mode → failpoint → recovery flavors
	var mu sync.Mutex                                                 // guards swept and flavorsBy
	modes, names := sweepModes(t), scripts(t)
	// The four sweeps run side by side (each on its own directories): a
	// crash run spends most of its time starting processes and waiting for
	// them, so two at a time take the sweep from 74 to about 50 s on two
	// CPUs. The group returns when all have finished.
	t.Run("sweeps", func(t *testing.T) {
		for _, sc := range names {
			for _, d := range modes {
				t.Run(sc+"/"+d.String(), func(t *testing.T) {
					t.Parallel()
					found := sweepMode(t, bin, sc, d)
					mu.Lock()
					defer mu.Unlock()
					if flavorsBy[d] == nil {
						flavorsBy[d] = map[string]map[string]bool{}
					}
					for name, fls := range found {
						swept[name] = true
						if flavorsBy[d][name] == nil {
							flavorsBy[d][name] = map[string]bool{}
						}
						for fl := range fls {
							flavorsBy[d][name][fl] = true
						}
					}
				})
			}
		}
	})
	if t.Failed() || len(modes) < 2 || len(names) < 2 {
		return // a partial sweep need not reach every failpoint
	}
	static := staticFailpoints(t)
	for _, name := range static {
		if isGoWorkflowsFailpoint(name) {
			// The go-workflows engine's failpoints are killed at in both
			// modes, and each crash recovered both alone and beside a live
			// process.
			for _, d := range modes {
				for _, fl := range flavors {
					if !flavorsBy[d][name][fl] {
						t.Errorf("failpoint %q was never killed at in %s mode with %s recovery", name, d, fl)
					}
				}
			}
		}
		if !swept[name] {
			t.Errorf("failpoint %q is in the source but was never swept: make the crash script or a seed reach it", name)
		}
	}
	for name := range swept {
		if !slices.Contains(static, name) {
			t.Errorf("failpoint %q was hit but is not a failpoint.Hit literal in provider/*.go or wal/*.go", name)
		}
	}
}

// sweepModes returns the durability modes to sweep: both, or the one
// DUROFS_SWEEP_MODE names ("durable" or "process-crash-safe";
// DUROFS_SWEEP_NOSYNC=1 is short for the latter).
func sweepModes(t *testing.T) []provider.Durability {
	all := []provider.Durability{provider.Durable, provider.ProcessCrashSafe}
	want := os.Getenv("DUROFS_SWEEP_MODE")
	if os.Getenv("DUROFS_SWEEP_NOSYNC") == "1" {
		want = provider.ProcessCrashSafe.String()
	}
	if want == "" {
		return all
	}
	for _, d := range all {
		if d.String() == want {
			return []provider.Durability{d}
		}
	}
	t.Fatalf("DUROFS_SWEEP_MODE=%q: want durable or process-crash-safe", want)
	return nil
}

// sweepMode runs the crash-point sweep of the script called scriptName in
// one durability mode and returns the failpoints it swept, each with the
// recovery flavors of its crashes.
func sweepMode(t *testing.T, bin, scriptName string, mode provider.Durability) map[string]map[string]bool {
	start := time.Now()
	work := t.TempDir()
	steps, err := script.ByName(scriptName)
	if err != nil {
		t.Fatal(err)
	}
	s := &sweep{t: t, bin: bin, work: work, mode: mode, scriptName: scriptName, steps: steps}
	s.ref = reference(t, filepath.Join(work, "ref"), mode, steps)

	// Discovery: one clean run that lists every failpoint hit, by step.
	listPath := filepath.Join(work, "list")
	out, status := s.run(filepath.Join(work, "discover"), []string{envList + "=" + listPath}, "-from", "1")
	if status != "exit 0" || !strings.Contains(out, "\ndone\n") {
		t.Fatalf("discovery run: %s\n%s", status, out)
	}
	hits := parseList(t, listPath)
	if got := s.snapshot(filepath.Join(work, "discover")); !slices.Equal(got.Facts, s.ref[len(s.ref)-1].Facts) {
		t.Fatalf("the failpoint build and the test process disagree on the script's final state: %s",
			crashcheck.DescribeDiff(s.ref[len(s.ref)-1].Facts, got.Facts, 5))
	}

	allNth := os.Getenv("DUROFS_SWEEP_ALL_NTH") == "1"
	var cases []*sweepCase
	for _, name := range sortedKeys(hits) {
		for _, nth := range nths(len(hits[name]), allNth) {
			for _, fl := range s.flavorsFor(len(cases)) {
				cases = append(cases, &sweepCase{point: name, nth: nth, step: hits[name][nth-1], flavor: fl})
			}
		}
	}
	s.runAll(cases, s.crashScript)

	// Recovery sweep: crash the recovery of what the seeds left behind, in
	// each flavor.
	var rcases []*sweepCase
	recoveryHits := map[string]bool{}
	for _, sd := range seeds[scriptName] {
		nth := slices.Index(hits[sd.name], sd.step) + 1
		if nth == 0 {
			t.Fatalf("seed %s is not hit in step %d", sd.name, sd.step)
		}
		seedDir := filepath.Join(work, fmt.Sprintf("seed-%s-%d", sd.name, nth))
		c := &sweepCase{point: sd.name, nth: nth, step: sd.step}
		if !s.crashRun(c, seedDir) {
			t.Fatalf("seed %s:%d: %s", sd.name, nth, c.violation)
		}
		if err := ageGarbage(seedDir, garbageAge); err != nil {
			t.Fatal(err)
		}
		for _, fl := range s.flavorsFor(len(rcases)) {
			rlist := filepath.Join(work, fmt.Sprintf("rlist-%s-%d-%s", sd.name, nth, fl))
			dir := filepath.Join(work, fmt.Sprintf("rdiscover-%s-%d-%s", sd.name, nth, fl))
			if err := copyTree(seedDir, dir); err != nil {
				t.Fatal(err)
			}
			out, status, err := s.runFlavor(fl, dir, []string{envList + "=" + rlist}, "-recover")
			if err != nil || status != "exit 0" {
				t.Fatalf("%s recovery of seed %s:%d: %s %v\n%s", fl, sd.name, nth, status, err, out)
			}
			if _, err := os.Stat(rlist); errors.Is(err, fs.ErrNotExist) {
				continue // nothing to recover in this flavor: no failpoint hit
			}
			rh := parseList(t, rlist)
			for _, name := range sortedKeys(rh) {
				recoveryHits[name] = true
				for _, rnth := range nths(len(rh[name]), allNth) {
					rcases = append(rcases, &sweepCase{point: name, nth: rnth, step: sd.step, seed: seedDir, flavor: fl,
						seedLabel: fmt.Sprintf("%s:%d", sd.name, nth)})
				}
			}
		}
	}
	s.runAll(rcases, s.crashRecovery)

	// Report.
	var b strings.Builder
	tw := func(c *sweepCase) {
		point := c.point
		if c.seedLabel != "" {
			point = "recover(" + c.seedLabel + ") " + c.point
		}
		res := "ok"
		if c.violation != "" {
			res = "VIOLATION: " + c.violation
		}
		fmt.Fprintf(&b, "%-64s %3d %4d  %-7s %-11s %-58s %s\n", point, c.nth, c.step, c.flavor, c.outcome, c.garbage, res)
	}
	fmt.Fprintf(&b, "%-64s %3s %4s  %-7s %-11s %-58s %s\n", "point", "nth", "step", "flavor", "in-flight", "garbage after recovery", "result")
	bad := 0
	for _, c := range append(slices.Clone(cases), rcases...) {
		tw(c)
		if c.violation != "" {
			bad++
		}
	}
	t.Logf("crash-point sweep (%s script, %s): %d script steps, %d failpoints reached by the script, %d by recovery\n%s",
		scriptName, mode, len(steps), len(hits), len(recoveryHits), b.String())
	outcomes := map[string]int{}
	for _, c := range append(slices.Clone(cases), rcases...) {
		outcomes[c.outcome]++
	}
	t.Logf("crash-point sweep (%s script, %s): %d crash runs (%d in the script, %d in recovery), in-flight operation: %d applied, %d not applied, %d without durable effect; %d violations, %v",
		scriptName, mode, len(cases)+len(rcases), len(cases), len(rcases), outcomes["applied"], outcomes["not applied"], outcomes["no change"], bad, time.Since(start).Round(time.Millisecond))
	if bad > 0 {
		t.Errorf("%d of %d crash runs violated an invariant (table above)", bad, len(cases)+len(rcases))
	}
	swept := map[string]map[string]bool{}
	for _, c := range append(cases, rcases...) {
		if swept[c.point] == nil {
			swept[c.point] = map[string]bool{}
		}
		swept[c.point][c.flavor] = true
	}
	return swept
}

// flavorsFor returns the recovery flavors of the i-th case. A durable sweep
// recovers every crash both ways. A process-crash-safe sweep runs the same
// code but for the fsyncs it skips, so each of its cases is recovered one
// way, alternating: half the runs for the same coverage of failpoints.
func (s *sweep) flavorsFor(i int) []string {
	if s.mode == provider.Durable || os.Getenv("DUROFS_SWEEP_ALL_FLAVORS") == "1" {
		return flavors
	}
	return flavors[i%len(flavors) : i%len(flavors)+1]
}

// sweep holds what every crash run shares.
type sweep struct {
	t          *testing.T
	bin        string
	work       string
	scriptName string
	steps      []script.Step
	ref        []*crashcheck.Snapshot // ref[i] = state after step i (ref[0]: after open)
	mode       provider.Durability
	mu         sync.Mutex
	n          int
}

// sweepCase is one crash run and its verdict.
type sweepCase struct {
	point, seed, seedLabel string
	flavor                 string // flavorReplay or flavorShared: how the crash is recovered
	nth, step              int
	outcome                string // "applied", "not applied", "no change"
	garbage                string
	violation              string
}

func (c *sweepCase) fail(format string, args ...any) {
	if c.violation == "" {
		c.violation = fmt.Sprintf(format, args...)
	}
}

func nths(count int, all bool) []int {
	if all {
		out := make([]int, count)
		for i := range out {
			out[i] = i + 1
		}
		return out
	}
	if count <= 1 {
		return []int{1}
	}
	return []int{1, count}
}

func (s *sweep) newDir(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return filepath.Join(s.work, fmt.Sprintf("%s-%d", prefix, s.n))
}

// runAll runs the cases on a few goroutines.
func (s *sweep) runAll(cases []*sweepCase, fn func(c *sweepCase, dir string, remainder bool)) {
	ch := make(chan *sweepCase)
	var wg sync.WaitGroup
	// Runs mostly wait for the disk (fsyncs) and for their child process:
	// more runners than CPUs.
	for range max(4, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ch {
				fn(c, s.newDir("case"), true)
			}
		}()
	}
	for _, c := range cases {
		ch <- c
	}
	close(ch)
	wg.Wait()
}

// run runs the worker on dir and returns its stdout and how it ended:
// "exit 0", "exit N" or "signal: killed".
func (s *sweep) run(dir string, env []string, args ...string) (string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	args = append([]string{"-dir", dir, "-segment-size", strconv.Itoa(segmentSize), "-script", s.scriptName}, args...)
	if s.mode == provider.ProcessCrashSafe {
		args = append(args, "-nosync")
	}
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append(os.Environ(), envFailpoint+"=", envList+"=")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String() + errb.String(), "timeout"
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), "exit 0"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() == syscall.SIGKILL {
				return out.String(), "killed"
			}
			return out.String(), "signal " + ws.Signal().String()
		}
		return out.String() + errb.String(), fmt.Sprintf("exit %d", ee.ExitCode())
	default:
		return out.String(), err.Error()
	}
}

// runFlavor is run with flavor's setup: with flavorShared, this process
// holds dir's log open meanwhile, so the worker does not have it alone.
func (s *sweep) runFlavor(flavor, dir string, env []string, args ...string) (out, status string, err error) {
	if flavor == flavorReplay {
		if err := simulateReboot(dir); err != nil {
			return "", "", err
		}
	}
	if flavor == flavorShared {
		release, err := holdLog(dir, s.mode)
		if err != nil {
			return "", "", err
		}
		defer release()
	}
	out, status = s.run(dir, env, args...)
	return out, status, nil
}

// simulateReboot removes dir's wal/boot, the boot id its log was last used
// in: the next process to open dir alone takes it for a directory used
// before a reboot and replays the log.
func simulateReboot(dir string) error {
	if err := os.Remove(filepath.Join(dir, "wal", "boot")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("simulate a reboot: %w", err)
	}
	return nil
}

// holdLog registers this process in dir's write-ahead log, as another
// process using the directory in durability mode would be, until release
// is called: a provider that opens dir meanwhile does not replay the log.
func holdLog(dir string, mode provider.Durability) (release func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := wal.Open(ctx, vfs.OS{}, filepath.Join(dir, "wal"), wal.Options{SegmentSize: segmentSize, NoSync: mode == provider.ProcessCrashSafe})
	if err != nil {
		return nil, fmt.Errorf("hold the log of %s: %w", dir, err)
	}
	l.Ready()
	return func() { _ = l.Close() }, nil
}

// crashScript runs the script on a fresh dir until c's failpoint kills it,
// recovers, checks, and (if remainder) finishes the script and checks again.
func (s *sweep) crashScript(c *sweepCase, dir string, remainder bool) {
	if s.crashRun(c, dir) {
		s.verify(c, dir, remainder)
	}
}

// crashRun runs the script on a fresh dir until c's failpoint kills it and
// leaves the crash image there. It reports false (and a violation) if the
// worker was not killed during step c.step.
func (s *sweep) crashRun(c *sweepCase, dir string) bool {
	out, status := s.run(dir, []string{fmt.Sprintf("%s=%s:%d", envFailpoint, c.point, c.nth)}, "-from", "1")
	if status != "killed" {
		c.fail("worker was not killed at the failpoint (%s): %s", status, lastLine(out))
		return false
	}
	if c.step == 0 {
		// A failpoint of the first Open of the empty directory.
		if strings.Contains(out, "ok open") {
			c.fail("worker opened the directory but the failpoint belongs to its Open")
			return false
		}
		return true
	}
	if done := lastOK(out); done+1 != c.step {
		c.fail("worker reported step %d done but the failpoint belongs to step %d (nondeterministic script)", done, c.step)
		return false
	}
	return true
}

// crashRecovery copies the seed's crash image and kills its recovery (in
// c's flavor) at c's failpoint, then recovers, checks, and finishes the
// script.
func (s *sweep) crashRecovery(c *sweepCase, dir string, remainder bool) {
	if err := copyTree(c.seed, dir); err != nil {
		c.fail("copy the seed's crash image: %v", err)
		return
	}
	out, status, err := s.runFlavor(c.flavor, dir, []string{fmt.Sprintf("%s=%s:%d", envFailpoint, c.point, c.nth)}, "-recover")
	if err != nil {
		c.fail("%v", err)
		return
	}
	if status != "killed" {
		c.fail("recovery was not killed at the failpoint (%s): %s", status, lastLine(out))
		return
	}
	s.verify(c, dir, remainder)
}

// verify recovers dir in c's flavor and checks the invariants for a crash
// during step c.step; with remainder it then runs the rest of the script
// and checks the final state. In flavorShared this process holds the log
// throughout, so nothing is ever replayed: the pending marks alone must
// lead recovery and the later operations to finish every commit.
func (s *sweep) verify(c *sweepCase, dir string, remainder bool) {
	if err := ageGarbage(dir, garbageAge); err != nil {
		c.fail("age the crash image's temporary and staged files: %v", err)
		return
	}
	if c.flavor == flavorShared {
		release, err := holdLog(dir, s.mode)
		if err != nil {
			c.fail("%v", err)
			return
		}
		defer release()
	}
	snap := s.recoverAndSnapshot(c, dir)
	if snap == nil {
		return
	}
	c.garbage = snap.Garbage.String()
	before, after := s.ref[max(c.step-1, 0)], s.ref[c.step]
	if !s.check(c, snap) {
		return
	}
	from := c.step
	switch eqB, eqA := slices.Equal(snap.Facts, before.Facts), slices.Equal(snap.Facts, after.Facts); {
	case eqB && eqA:
		c.outcome, from = "no change", c.step+1
	case eqA:
		c.outcome, from = "applied", c.step+1
	case eqB:
		c.outcome = "not applied"
	default:
		c.fail("step %d is half-applied: vs before it: %s | vs after it: %s", c.step,
			crashcheck.DescribeDiff(before.Facts, snap.Facts, 3), crashcheck.DescribeDiff(after.Facts, snap.Facts, 3))
		return
	}
	if !remainder {
		return
	}
	if from <= len(s.steps) {
		out, status := s.run(dir, nil, "-from", strconv.Itoa(from), "-skew", remainderSkew.String())
		if status != "exit 0" {
			c.fail("rest of the script (from step %d) after recovery failed: %s: %s", from, status, lastLine(out))
			return
		}
	}
	final := s.recoverAndSnapshot(c, dir)
	if final == nil || !s.check(c, final) {
		return
	}
	if want := s.ref[len(s.ref)-1]; !slices.Equal(final.Facts, want.Facts) {
		c.fail("final state after finishing the script differs: %s", crashcheck.DescribeDiff(want.Facts, final.Facts, 3))
	}
}

// check reports a snapshot's problems and duplicates as a violation.
func (s *sweep) check(c *sweepCase, snap *crashcheck.Snapshot) bool {
	if len(snap.Problems) > 0 {
		c.fail("after recovery: %s", strings.Join(snap.Problems, "; "))
		return false
	}
	if d := crashcheck.Duplicates(snap.Facts); len(d) > 0 {
		c.fail("duplicated after recovery: %s", strings.Join(d, "; "))
		return false
	}
	return true
}

func (s *sweep) recoverAndSnapshot(c *sweepCase, dir string) *crashcheck.Snapshot {
	if c.flavor == flavorReplay {
		if err := simulateReboot(dir); err != nil {
			c.fail("%v", err)
			return nil
		}
	}
	p, err := provider.Open(dir, testOptions(s.mode))
	if err != nil {
		c.fail("recovery (Open) failed: %v", err)
		return nil
	}
	defer p.Close()
	snap := s.snapshotOr(c, dir)
	if snap != nil {
		snap.Problems = append(snap.Problems, script.CheckReads(context.Background(), p)...)
		snap.Problems = append(snap.Problems, script.CheckWorkflowReads(context.Background(), p)...)
	}
	return snap
}

func (s *sweep) snapshotOr(c *sweepCase, dir string) *crashcheck.Snapshot {
	snap, err := crashcheck.TakeWith(vfs.OS{}, dir, crashcheck.Options{SegmentSize: segmentSize})
	if err != nil {
		c.fail("snapshot: %v", err)
		return nil
	}
	return snap
}

func (s *sweep) snapshot(dir string) *crashcheck.Snapshot {
	s.t.Helper()
	snap, err := crashcheck.TakeWith(vfs.OS{}, dir, crashcheck.Options{SegmentSize: segmentSize})
	if err != nil {
		s.t.Fatal(err)
	}
	return snap
}

func testOptions(mode provider.Durability) provider.Options {
	return provider.Options{SweepInterval: -1, CheckpointInterval: -1, SegmentSize: segmentSize, Durability: mode,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// reference runs the script's steps in this process and returns the state
// after opening (index 0) and after each step.
func reference(t *testing.T, dir string, mode provider.Durability, steps []script.Step) []*crashcheck.Snapshot {
	t.Helper()
	p, err := provider.Open(dir, testOptions(mode))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	take := func() *crashcheck.Snapshot {
		snap, err := crashcheck.TakeWith(vfs.OS{}, dir, crashcheck.Options{SegmentSize: segmentSize})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Problems) > 0 {
			t.Fatalf("reference run: %v", snap.Problems)
		}
		if d := crashcheck.Duplicates(snap.Facts); len(d) > 0 {
			t.Fatalf("reference run has duplicate facts (the script must keep them distinct): %v", d)
		}
		return snap
	}
	ref := []*crashcheck.Snapshot{take()}
	env := &script.Env{P: p}
	for i := 1; i <= len(steps); i++ {
		if err := script.RunStep(context.Background(), env, steps, i); err != nil {
			t.Fatalf("reference run: %v", err)
		}
		ref = append(ref, take())
	}
	return ref
}

// parseList reads a failpoint list with "# step N" markers into
// name → the step of each hit.
func parseList(t *testing.T, path string) map[string][]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hits := map[string][]int{}
	step := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "# step "); ok {
			step, _ = strconv.Atoi(n)
			continue
		}
		if line != "" {
			hits[line] = append(hits[line], step)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return hits
}

// lastOK returns the highest step the worker reported done (0 if none).
func lastOK(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "ok" {
			if i, err := strconv.Atoi(f[1]); err == nil {
				n = max(n, i)
			}
		}
	}
	return n
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// staticFailpoints returns the names of every failpoint.Hit("...") call in
// the non-test sources of the provider and of the write-ahead log.
func staticFailpoints(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pkg := range []string{"provider", "wal"} {
		fs, err := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if err != nil || len(fs) == 0 {
			t.Fatalf("%s sources not found: %v", pkg, err)
		}
		files = append(files, fs...)
	}
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Hit" {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "failpoint" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: failpoint.Hit needs a constant string name", fset.Position(call.Pos()))
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			seen[name] = true
			return true
		})
	}
	return sortedKeys(seen)
}

// ageGarbage dates every temporary and staged file under dir back by age:
// a crash image's leftovers are then old enough for recovery's sweep, which
// leaves young ones to writers that may still be working.
func ageGarbage(dir string, age time.Duration) error {
	old := time.Now().Add(-age)
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name := d.Name(); vfs.IsTemp(name) || strings.HasPrefix(name, ".staged-") {
			return os.Chtimes(path, old, old)
		}
		return nil
	})
}

// copyTree copies a directory of regular files and directories, with the
// files' modification times (recovery judges leftovers by their age).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, data, 0o600); err != nil {
			return err
		}
		return os.Chtimes(target, fi.ModTime(), fi.ModTime())
	})
}

// isGoWorkflowsFailpoint reports whether a failpoint belongs to the
// go-workflows engine operations (provider/fs_gw*.go).
func isGoWorkflowsFailpoint(name string) bool {
	return strings.HasPrefix(name, "gw.") || strings.HasPrefix(name, "gwact.") || strings.HasPrefix(name, "gwredo.")
}
