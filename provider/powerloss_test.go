package provider_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/crashcheck"
	"github.com/durofs/durofs/internal/crashcheck/script"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
)

// Power-loss simulation. The crash script (internal/crashcheck/script) runs
// through provider.Open on a strict in-memory file system (vfs.NewStrictMem)
// that forgets, at a simulated power loss, every file byte and directory
// entry not yet fsynced. For every sync point k of the script, a fresh run
// takes a crash image right after its kth successful sync (MemFS.CrashClone
// from the OnSync hook) and runs on to the end; then a new provider opens the
// image (recovery) and the test checks:
//
//   - no pending commit record or unfinished work ack remains, every history
//     has event ids contiguous from 1, no torn tail, fences never decrease,
//     and the summary counters agree with the histories;
//   - the state equals the reference state before or after the operation
//     that was in flight at sync k: everything that returned before it is
//     durable (histories, messages, deletions), the in-flight operation is
//     all-or-nothing, and no message is lost, duplicated or resurrected;
//   - the rest of the script then runs on the recovered image and ends in
//     the reference final state.
//
// This is the only test that proves the fsync and directory-fsync
// discipline: a kill -9 never loses what reached the page cache.

const plDir = "/durofs"

// plRun is one run of the script on a fresh MemFS.
type plRun struct {
	mem      *vfs.MemFS
	fs       vfs.FS       // what the provider uses: mem, or a wrapper of it
	inflight atomic.Int64 // the step running now (0: Open)
	mode     provider.CommitSync
}

// plCfg configures a sweep: the commit mode, and optionally a wrapper of
// the MemFS the provider runs on.
type plCfg struct {
	mode provider.CommitSync
	wrap func(*vfs.MemFS) vfs.FS
	// writeback takes crash images in which every file's data, synced or
	// not, reached the disk but no unsynced directory entry did
	// (MemFS.CrashCloneWriteback) instead of none of it.
	writeback bool
}

func newPLRun(cfg plCfg) *plRun {
	mem := vfs.NewStrictMem()
	if err := mem.MkdirAll(plDir, vfs.DirPerm); err != nil {
		panic(err)
	}
	mem.MarkAllSynced() // the directory itself exists before the workload
	r := &plRun{mem: mem, fs: mem, mode: cfg.mode}
	if cfg.wrap != nil {
		r.fs = cfg.wrap(mem)
	}
	return r
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// skewClock is the system clock moved forward, so that claims written before
// the power loss have expired when the script continues on the image.
type skewClock struct{ d time.Duration }

func (s skewClock) Now() time.Time { return time.Now().Add(s.d) }

var _ clock.Clock = skewClock{}

// run runs the whole script. after, if set, is called after Open (step 0)
// and after each step i.
func (r *plRun) run(after func(i int) error) error {
	p, err := provider.Open(plDir, provider.Options{FS: r.fs, SweepInterval: -1, Logger: quietLogger(), CommitSync: r.mode})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer p.Close()
	if after != nil {
		if err := after(0); err != nil {
			return err
		}
	}
	env := &script.Env{P: p}
	for i := 1; i <= script.Len(); i++ {
		r.inflight.Store(int64(i))
		if err := script.Run(context.Background(), env, i); err != nil {
			return err
		}
		if after != nil {
			if err := after(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// plReference runs the script once and returns the state after Open (index
// 0) and after each step, the sync count at the end of each, and the total.
func plReference(t *testing.T, cfg plCfg) (ref []*crashcheck.Snapshot, syncsAt []int) {
	t.Helper()
	r := newPLRun(cfg)
	err := r.run(func(i int) error {
		snap, err := crashcheck.Take(r.mem, plDir)
		if err != nil {
			return err
		}
		if len(snap.Problems) > 0 {
			return fmt.Errorf("reference state after step %d: %v", i, snap.Problems)
		}
		ref = append(ref, snap)
		syncsAt = append(syncsAt, r.mem.SyncCount())
		return nil
	})
	if err != nil {
		t.Fatalf("reference run: %v", err)
	}
	return ref, syncsAt
}

// plResult summarizes a power-loss sweep.
type plResult struct {
	syncPoints int
	checked    int
	applied    int // the in-flight operation survived whole
	notApplied int // the in-flight operation left no trace
	noChange   int // the in-flight operation changes no durable state
	violations []string
}

// powerLossSweep crashes the script at every sync point and checks each
// crash image (see the file comment).
func powerLossSweep(t *testing.T, cfg plCfg) plResult {
	t.Helper()
	ref, syncsAt := plReference(t, cfg)
	// The sync points must be the same in every run, or k means nothing.
	if _, again := plReference(t, cfg); !slices.Equal(syncsAt, again) {
		t.Fatalf("the script's sync points are not deterministic: %v vs %v", syncsAt, again)
	}
	total := syncsAt[len(syncsAt)-1]
	res := plResult{syncPoints: total}
	var mu sync.Mutex
	record := func(f func()) { mu.Lock(); f(); mu.Unlock() }

	ks := make(chan int)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range ks {
				outcome, violation := plCrashAt(k, ref, cfg)
				record(func() {
					res.checked++
					switch outcome {
					case "applied":
						res.applied++
					case "not applied":
						res.notApplied++
					case "no change":
						res.noChange++
					}
					if violation != "" {
						res.violations = append(res.violations, fmt.Sprintf("sync %d/%d: %s", k, total, violation))
					}
				})
			}
		}()
	}
	for k := 1; k <= total; k++ {
		ks <- k
	}
	close(ks)
	wg.Wait()
	slices.SortFunc(res.violations, func(a, b string) int {
		var ka, kb int
		fmt.Sscanf(a, "sync %d", &ka)
		fmt.Sscanf(b, "sync %d", &kb)
		return ka - kb
	})
	return res
}

// plCrashAt runs the script with a crash image taken at sync k, recovers the
// image and checks it. It returns how the in-flight operation ended and a
// violation ("" if none).
func plCrashAt(k int, ref []*crashcheck.Snapshot, cfg plCfg) (outcome, violation string) {
	r := newPLRun(cfg)
	var image *vfs.MemFS
	var step int
	r.mem.OnSync(func(n int) {
		if n == k {
			if cfg.writeback {
				image = r.mem.CrashCloneWriteback()
			} else {
				image = r.mem.CrashClone()
			}
			step = int(r.inflight.Load())
		}
	})
	if err := r.run(nil); err != nil {
		return "", fmt.Sprintf("the script failed on the running side: %v", err)
	}
	if image == nil {
		return "", "sync point never reached (nondeterministic script)"
	}
	label := "open"
	if step > 0 {
		label = fmt.Sprintf("step %d (%s)", step, script.Steps()[step-1].Name)
	}
	fail := func(format string, args ...any) (string, string) {
		return outcome, label + ": " + fmt.Sprintf(format, args...)
	}

	// Recovery: a new provider opens the crash image.
	p, err := provider.Open(plDir, provider.Options{FS: image, SweepInterval: -1, Logger: quietLogger(), Clock: skewClock{time.Hour}, CommitSync: r.mode})
	if err != nil {
		return fail("recovery (Open) failed: %v", err)
	}
	defer p.Close()
	check := func(when string) (*crashcheck.Snapshot, string) {
		snap, err := crashcheck.Take(image, plDir)
		if err != nil {
			return nil, fmt.Sprintf("%s: snapshot: %v", when, err)
		}
		snap.Problems = append(snap.Problems, script.CheckReads(context.Background(), p)...)
		if len(snap.Problems) > 0 {
			return nil, fmt.Sprintf("%s: %s", when, strings.Join(snap.Problems, "; "))
		}
		if d := crashcheck.Duplicates(snap.Facts); len(d) > 0 {
			return nil, fmt.Sprintf("%s: duplicated: %s", when, strings.Join(d, "; "))
		}
		return snap, ""
	}
	snap, v := check("after recovery")
	if v != "" {
		return fail("%s", v)
	}
	before, after := ref[max(step-1, 0)], ref[step]
	from := step
	switch eqB, eqA := slices.Equal(snap.Facts, before.Facts), slices.Equal(snap.Facts, after.Facts); {
	case eqB && eqA:
		outcome, from = "no change", step+1
	case eqA:
		outcome, from = "applied", step+1
	case eqB:
		outcome = "not applied"
	default:
		return fail("half-applied or not durable: vs before it: %s | vs after it: %s",
			crashcheck.DescribeDiff(before.Facts, snap.Facts, 3), crashcheck.DescribeDiff(after.Facts, snap.Facts, 3))
	}

	// The rest of the script runs on the recovered image.
	env := &script.Env{P: p}
	for i := max(from, 1); i <= script.Len(); i++ {
		if err := script.Run(context.Background(), env, i); err != nil {
			return fail("rest of the script after recovery: %v", err)
		}
	}
	final, v := check("after the rest of the script")
	if v != "" {
		return fail("%s", v)
	}
	if want := ref[len(ref)-1]; !slices.Equal(final.Facts, want.Facts) {
		return fail("final state differs: %s", crashcheck.DescribeDiff(want.Facts, final.Facts, 3))
	}
	return outcome, ""
}

// report logs a sweep's numbers and its first violations.
func (res plResult) report(t *testing.T, label string, d time.Duration) {
	t.Helper()
	t.Logf("power loss (%s): %d sync points, %d crash states checked (in-flight operation: %d applied, %d not applied, %d without durable effect), %d violations, %v",
		label, res.syncPoints, res.checked, res.applied, res.notApplied, res.noChange, len(res.violations), d.Round(time.Millisecond))
	for i, v := range res.violations {
		if i == 8 {
			t.Logf("  ... and %d more", len(res.violations)-i)
			break
		}
		t.Logf("  VIOLATION at %s", v)
	}
}

// TestPowerLossAtEverySyncPoint runs the power-loss sweep (see the file
// comment) in both commit modes and fails on any violation. (It found that
// instances/<key> was never made durable when the lease store created it;
// mkdirDurable now syncs the parent of every directory it vouches for.)
func TestPowerLossAtEverySyncPoint(t *testing.T) {
	for _, mode := range []provider.CommitSync{provider.CommitPerFile, provider.CommitBarrier} {
		for _, wb := range []bool{false, true} {
			label := mode.String() + " commits"
			if wb {
				label += ", unsynced data written back"
			}
			start := time.Now()
			res := powerLossSweep(t, plCfg{mode: mode, writeback: wb})
			res.report(t, label, time.Since(start))
			if len(res.violations) > 0 {
				t.Errorf("%s: %d crash states violate an invariant", label, len(res.violations))
			}
		}
	}
}

// TestPowerLossSimulationIsSharp weakens the provider at one sync site per
// commit mode and requires the power-loss sweep to notice: the baseline has
// no violations, so every violation of the weakened run is the knob's.
// Per-file mode skips the queue-directory fsync after staging an ack's
// messages; barrier mode skips the barrier before the commit point.
func TestPowerLossSimulationIsSharp(t *testing.T) {
	for _, c := range []struct {
		mode provider.CommitSync
		site string
	}{{provider.CommitPerFile, "stage"}, {provider.CommitBarrier, "barrier"}} {
		start := time.Now()
		base := powerLossSweep(t, plCfg{mode: c.mode})
		base.report(t, c.mode.String()+" baseline", time.Since(start))
		restore := provider.SetSkipSyncDirForTest(c.site)
		start = time.Now()
		weak := powerLossSweep(t, plCfg{mode: c.mode})
		restore()
		weak.report(t, c.mode.String()+" with the "+c.site+" sync skipped", time.Since(start))
		if len(base.violations) > 0 {
			t.Fatalf("%s baseline has %d violations", c.mode, len(base.violations))
		}
		if len(weak.violations) <= len(base.violations) {
			t.Errorf("the power-loss simulation did not notice the skipped %s sync (%d violations, baseline %d)", c.site, len(weak.violations), len(base.violations))
		}
	}
}
