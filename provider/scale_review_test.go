package provider

// Scale review (branch review-scale): tests that pin per-call costs which
// grow with the number of queued items although the design says finding
// work must not cost O(all messages) per poll when nothing changed
// (/work/shared/spec/design.md §4) and memory/work is bounded by what is in
// flight (docs/design.md §7).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// delayedOrchPassOpens enqueues n starts, fetches each one and abandons it
// with a one-hour delay (nothing is due for an hour), then returns how many
// files one FetchOrchestrationItem pass (poll timeout 0, which returns nil)
// opens and how many flocks it takes.
func delayedOrchPassOpens(t *testing.T, n int) (opens int64) {
	t.Helper()
	dir := t.TempDir()
	cfs := vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))
	p := openT(t, dir, Options{fs: cfs, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	ctx := context.Background()
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("d-%05d", i)), 0))
	}
	for i := 0; i < n; i++ {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch %d: %v %v", i, it, err)
		}
		mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, time.Hour, false))
	}
	// Warm pass (fills caches), then the measured pass: nothing changed.
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
		t.Fatalf("warm pass: %v %v", it, err)
	}
	before := cfs.Files().Opens
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
		t.Fatalf("pass: %v %v", it, err)
	}
	return cfs.Files().Opens - before
}

// TestScaleOrchFetchPassWithDelayedAbandons: an abandon with a delay keeps
// the message visible by its name (the delay lives in the instance's lease
// state), so every fetch pass walks every such message and locks and reads
// the lease of every such instance, although none is due. A poll that finds
// nothing should cost the same with 100 or 800 delayed instances.
func TestScaleOrchFetchPassWithDelayedAbandons(t *testing.T) {
	small, large := 100, 800
	a := delayedOrchPassOpens(t, small)
	b := delayedOrchPassOpens(t, large)
	t.Logf("files opened by one empty fetch pass: %d with %d delayed instances, %d with %d", a, small, b, large)
	if b > 2*a+16 {
		t.Errorf("an empty orchestrator fetch pass opens %d files with %d instances abandoned with a delay, %d with %d: O(delayed instances) per poll",
			b, large, a, small)
	}
}

// canAckCost runs one instance through k executions (a start, then k-1
// continue-as-new turns, as an eternal orchestration does) and returns the
// bytes the k-th turn's ack appended to the write-ahead log and the size of
// instance.json afterwards.
func canAckCost(t *testing.T, k int) (walBytes int64, instSize int64) {
	t.Helper()
	dir := t.TempDir()
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	ctx := context.Background()
	const inst = "eternal"
	v := "1.0.0"
	for n := 1; n <= k; n++ {
		var item WorkItem = startItem(inst)
		if n > 1 {
			item = ContinueAsNew{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, CarryForwardEvents: [][2]string{}}
		}
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, item, 0))
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch %d: %v %v", n, it, err)
		}
		ev := started(inst)
		ev.ExecutionID = uint64(n)
		before := p.wal.End()
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, uint64(n), []Event{ev}, nil, nil, md("TestOrch", v), nil))
		after := p.wal.End()
		if n == k {
			if before.Segment() != after.Segment() {
				t.Skip("the measured record crossed a segment boundary; rerun")
			}
			walBytes = int64(after.Offset()) - int64(before.Offset())
		}
	}
	fi, err := p.fs.Lstat(p.instFilePath(instanceKey(inst)))
	mustNoErr(t, err)
	return walBytes, fi.Size()
}

// TestScaleContinueAsNewAckGrowsWithExecutions: instance.json lists every
// execution id the instance ever had (instanceFile.Executions), and every
// ack writes the whole new instance.json into its log record and applies
// it. An eternal orchestration (continue-as-new in a loop) that is never
// pruned makes every later ack cost more: the record grows by a few bytes
// per execution ever run, without bound.
func TestScaleContinueAsNewAckGrowsWithExecutions(t *testing.T) {
	small, large := 10, 1500
	ws, is := canAckCost(t, small)
	wl, il := canAckCost(t, large)
	t.Logf("execution %d: ack appended %d log bytes, instance.json %d bytes; execution %d: %d log bytes, instance.json %d bytes",
		small, ws, is, large, wl, il)
	if wl > 2*ws {
		t.Errorf("an ack of execution %d appends %d bytes to the log, of execution %d %d: per-ack cost O(executions ever run)", large, wl, small, ws)
	}
}

// filteredOutPassOpens starts n instances, pins each to duroxide 9.0.0 with
// its first ack, gives each a new visible message, and returns the files
// one FetchOrchestrationItem pass opens with a capability filter that
// accepts only 0.x (so nothing is fetched).
func filteredOutPassOpens(t *testing.T, n int) int64 {
	t.Helper()
	dir := t.TempDir()
	cfs := vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))
	p := openT(t, dir, Options{fs: cfs, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	ctx := context.Background()
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("f-%05d", i)), 0))
	}
	pin := SemVer{Major: 9}
	for i := 0; i < n; i++ {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch %d: %v %v", i, it, err)
		}
		m := md("TestOrch", "1.0.0")
		m.PinnedDuroxideVersion = &pin
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(it.Item.Instance)}, nil, nil, m, nil))
	}
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: fmt.Sprintf("f-%05d", i), Name: "e", Data: "d"}, 0))
	}
	filter := &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{{Min: SemVer{}, Max: SemVer{Major: 0, Minor: 999}}}}
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, filter); err != nil || it != nil {
		t.Fatalf("warm pass: %v %v", it, err)
	}
	before := cfs.Files().Opens
	if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, filter); err != nil || it != nil {
		t.Fatalf("pass: %v %v", it, err)
	}
	return cfs.Files().Opens - before
}

// TestScaleOrchFetchPassWithFilteredOutInstances: a dispatcher whose
// capability filter rejects the queued instances (a rolling upgrade: the
// new runtime's dispatcher beside instances pinned to another duroxide
// version) re-reads, uncached, every rejected instance's instance.json,
// executions/ listing and state.json on every poll (filterAllows).
func TestScaleOrchFetchPassWithFilteredOutInstances(t *testing.T) {
	small, large := 100, 400
	a := filteredOutPassOpens(t, small)
	b := filteredOutPassOpens(t, large)
	t.Logf("files opened by one empty filtered fetch pass: %d with %d rejected instances, %d with %d", a, small, b, large)
	if b > 2*a+16 {
		t.Errorf("an empty filtered fetch pass opens %d files with %d instances the filter rejects, %d with %d: O(rejected instances) per poll",
			b, large, a, small)
	}
}
