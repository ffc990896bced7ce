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
)

// The crash-point sweep. See the package comment.

const (
	envFailpoint = "DUROFS_FAILPOINT"
	envList      = "DUROFS_FAILPOINT_LIST"
	// remainderSkew moves the clock of a run that continues the script after
	// a crash, so the killed process's leases and claims have expired.
	remainderSkew = time.Hour
	runTimeout    = 60 * time.Second
)

// seeds are crash points that leave a committed but unapplied operation
// behind; the sweep also crashes the recovery of each at every failpoint.
var seeds = []struct {
	name string
	step int
}{
	{"ack.after_commit_record", 2},      // publishes to both queues, consumes the start
	{"ack.after_commit_record", 5},      // deletes three messages and a queued cancelled activity
	{"workack.after_claim_commit", 4},   // completion staged, claim acked
	{"prune.after_record", 14},          // two executions to remove
	{"delete.after_intents_sync", 19},   // intents without a group: aborted
	{"delete.after_group_record", 19},   // committed, nothing applied
	{"delete.after_intent_applied", 19}, // committed, one of two instances applied
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
	// Both commit modes: each has failpoints only it reaches, and every
	// failpoint must be swept in at least one of them.
	swept := map[string]bool{}
	for _, mode := range []provider.CommitSync{provider.CommitPerFile, provider.CommitBarrier} {
		t.Run(mode.String(), func(t *testing.T) {
			for name := range sweepMode(t, bin, mode) {
				swept[name] = true
			}
		})
	}
	if t.Failed() {
		return
	}
	static := providerFailpoints(t)
	for _, name := range static {
		if !swept[name] {
			t.Errorf("failpoint %q is in the provider but was never swept: make the crash script or a seed reach it", name)
		}
	}
	for name := range swept {
		if !slices.Contains(static, name) {
			t.Errorf("failpoint %q was hit but is not a failpoint.Hit literal in provider/*.go", name)
		}
	}
}

// sweepMode runs the crash-point sweep with the given commit mode and
// returns the failpoints it swept.
func sweepMode(t *testing.T, bin string, mode provider.CommitSync) map[string]bool {
	start := time.Now()
	work := t.TempDir()
	s := &sweep{t: t, bin: bin, work: work, mode: mode}
	s.ref = reference(t, filepath.Join(work, "ref"), mode)

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
			cases = append(cases, &sweepCase{point: name, nth: nth, step: hits[name][nth-1]})
		}
	}
	s.runAll(cases, s.crashScript)

	// Recovery sweep: crash the recovery of committed, unapplied operations.
	var rcases []*sweepCase
	recoveryHits := map[string]bool{}
	for _, sd := range seeds {
		nth := slices.Index(hits[sd.name], sd.step) + 1
		if nth == 0 {
			t.Fatalf("seed %s is not hit in step %d", sd.name, sd.step)
		}
		seedDir := filepath.Join(work, fmt.Sprintf("seed-%s-%d", sd.name, nth))
		c := &sweepCase{point: sd.name, nth: nth, step: sd.step}
		if !s.crashRun(c, seedDir) {
			t.Fatalf("seed %s:%d: %s", sd.name, nth, c.violation)
		}
		rlist := filepath.Join(work, fmt.Sprintf("rlist-%s-%d", sd.name, nth))
		dir := filepath.Join(work, fmt.Sprintf("rdiscover-%s-%d", sd.name, nth))
		if err := copyTree(seedDir, dir); err != nil {
			t.Fatal(err)
		}
		if out, status := s.run(dir, []string{envList + "=" + rlist}, "-recover"); status != "exit 0" {
			t.Fatalf("recovery of seed %s:%d: %s\n%s", sd.name, nth, status, out)
		}
		rh := parseList(t, rlist)
		for _, name := range sortedKeys(rh) {
			recoveryHits[name] = true
			for _, rnth := range nths(len(rh[name]), allNth) {
				rcases = append(rcases, &sweepCase{point: name, nth: rnth, step: sd.step, seed: seedDir,
					seedLabel: fmt.Sprintf("%s:%d", sd.name, nth)})
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
		fmt.Fprintf(&b, "%-66s %3d %4d  %-11s %-34s %s\n", point, c.nth, c.step, c.outcome, c.garbage, res)
	}
	fmt.Fprintf(&b, "%-66s %3s %4s  %-11s %-34s %s\n", "point", "nth", "step", "in-flight", "garbage after recovery", "result")
	bad := 0
	for _, c := range append(slices.Clone(cases), rcases...) {
		tw(c)
		if c.violation != "" {
			bad++
		}
	}
	t.Logf("crash-point sweep: %d script steps, %d failpoints reached by the script, %d by recovery\n%s",
		script.Len(), len(hits), len(recoveryHits), b.String())
	outcomes := map[string]int{}
	for _, c := range append(slices.Clone(cases), rcases...) {
		outcomes[c.outcome]++
	}
	t.Logf("crash-point sweep: %d crash runs (%d in the script, %d in recovery), in-flight operation: %d applied, %d not applied, %d without durable effect; %d violations, %v",
		len(cases)+len(rcases), len(cases), len(rcases), outcomes["applied"], outcomes["not applied"], outcomes["no change"], bad, time.Since(start).Round(time.Millisecond))
	if bad > 0 {
		t.Errorf("%d of %d crash runs violated an invariant (table above)", bad, len(cases)+len(rcases))
	}
	swept := map[string]bool{}
	for _, c := range append(cases, rcases...) {
		swept[c.point] = true
	}
	return swept
}

// sweep holds what every crash run shares.
type sweep struct {
	t    *testing.T
	bin  string
	work string
	ref  []*crashcheck.Snapshot // ref[i] = state after step i (ref[0]: after open)
	mode provider.CommitSync
	mu   sync.Mutex
	n    int
}

// sweepCase is one crash run and its verdict.
type sweepCase struct {
	point, seed, seedLabel string
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
	for range max(2, min(4, runtime.GOMAXPROCS(0))) {
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
	args = append([]string{"-dir", dir}, args...)
	if os.Getenv("DUROFS_SWEEP_NOSYNC") == "1" {
		args = append(args, "-nosync")
	}
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append(os.Environ(), envFailpoint+"=", envList+"=", "DUROFS_COMMIT_SYNC="+s.mode.String())
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
	if done := lastOK(out); done+1 != c.step {
		c.fail("worker reported step %d done but the failpoint belongs to step %d (nondeterministic script)", done, c.step)
		return false
	}
	return true
}

// crashRecovery copies the seed's crash image and kills its recovery at c's
// failpoint, then recovers in this process, checks, and finishes the script.
func (s *sweep) crashRecovery(c *sweepCase, dir string, remainder bool) {
	if err := copyTree(c.seed, dir); err != nil {
		c.fail("copy the seed's crash image: %v", err)
		return
	}
	out, status := s.run(dir, []string{fmt.Sprintf("%s=%s:%d", envFailpoint, c.point, c.nth)}, "-recover")
	if status != "killed" {
		c.fail("recovery was not killed at the failpoint (%s): %s", status, lastLine(out))
		return
	}
	s.verify(c, dir, remainder)
}

// verify recovers dir in this process and checks the invariants for a crash
// during step c.step; with remainder it then runs the rest of the script and
// checks the final state.
func (s *sweep) verify(c *sweepCase, dir string, remainder bool) {
	snap := s.recoverAndSnapshot(c, dir)
	if snap == nil {
		return
	}
	c.garbage = snap.Garbage.String()
	before, after := s.ref[c.step-1], s.ref[c.step]
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
	if from <= script.Len() {
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
	p, err := provider.Open(dir, testOptions(s.mode))
	if err != nil {
		c.fail("recovery (Open) failed: %v", err)
		return nil
	}
	defer p.Close()
	snap := s.snapshotOr(c, dir)
	if snap != nil {
		snap.Problems = append(snap.Problems, script.CheckReads(context.Background(), p)...)
	}
	return snap
}

func (s *sweep) snapshotOr(c *sweepCase, dir string) *crashcheck.Snapshot {
	snap, err := crashcheck.Take(vfs.OS{}, dir)
	if err != nil {
		c.fail("snapshot: %v", err)
		return nil
	}
	return snap
}

func (s *sweep) snapshot(dir string) *crashcheck.Snapshot {
	s.t.Helper()
	snap, err := crashcheck.Take(vfs.OS{}, dir)
	if err != nil {
		s.t.Fatal(err)
	}
	return snap
}

func testOptions(mode provider.CommitSync) provider.Options {
	return provider.Options{SweepInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CommitSync: mode}
}

// reference runs the script in this process and returns the state after
// opening (index 0) and after each step.
func reference(t *testing.T, dir string, mode provider.CommitSync) []*crashcheck.Snapshot {
	t.Helper()
	p, err := provider.Open(dir, testOptions(mode))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	take := func() *crashcheck.Snapshot {
		snap, err := crashcheck.Take(vfs.OS{}, dir)
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
	for i := 1; i <= script.Len(); i++ {
		if err := script.Run(context.Background(), env, i); err != nil {
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

// providerFailpoints returns the names of every failpoint.Hit("...") call in
// the provider's non-test sources.
func providerFailpoints(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "provider", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("provider sources not found: %v", err)
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

// copyTree copies a directory of regular files and directories.
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
		return os.WriteFile(target, data, 0o600)
	})
}
