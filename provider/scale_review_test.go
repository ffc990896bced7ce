package provider

// Scale review (branch review-scale): tests that pin per-call costs which
// grow with the number of queued items although the design says finding
// work must not cost O(all messages) per poll when nothing changed
// (/work/shared/spec/design.md §4) and memory/work is bounded by what is in
// flight (docs/design.md §7).

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// entryCountFS counts the directory entries its listings return (ScanDir
// and ReadDirNames), on top of a CountingFS (whose WatchDir it keeps, so
// queues can watch their directories as they do on the OS).
type entryCountFS struct {
	*vfs.CountingFS
	entries atomic.Int64
}

func (c *entryCountFS) ReadDirNames(name string) ([]string, error) {
	names, err := c.CountingFS.ReadDirNames(name)
	c.entries.Add(int64(len(names)))
	return names, err
}

func (c *entryCountFS) ScanDir(dir string, fn func(name []byte) error) error {
	return c.CountingFS.ScanDir(dir, func(name []byte) error {
		c.entries.Add(1)
		return fn(name)
	})
}

// sweepEntriesListed opens a provider that only enqueues (a client: it
// never fetches), enqueues n starts, and returns how many directory entries
// one pass of its background sweep (recoverPass, as sweepLoop runs it every
// SweepInterval, 2 s by default) lists.
func sweepEntriesListed(t *testing.T, n int) int64 {
	t.Helper()
	dir := t.TempDir()
	efs := &entryCountFS{CountingFS: vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))}
	p := openT(t, dir, Options{fs: efs, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	ctx := context.Background()
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("s-%05d", i)), 0))
	}
	before := efs.entries.Load()
	mustNoErr(t, p.recoverPass(ctx, 2*time.Second, false))
	return efs.entries.Load() - before
}

// TestScaleClientSweepListsWholeQueue: the background sweep of a process
// that does not fetch (an enqueuing client, an admin tool with the default
// Options) lists every queue directory in full to find staged and temporary
// files, twice per queue per pass (Queue.Staged, then Queue.Sweep), every
// 2 s. With a million queued messages that is several million directory
// entries read every 2 s by every such process (the design puts one
// listing of a million at about 0.7 s).
func TestScaleClientSweepListsWholeQueue(t *testing.T) {
	small, large := 500, 4000
	a := sweepEntriesListed(t, small)
	b := sweepEntriesListed(t, large)
	t.Logf("directory entries listed by one background sweep pass of a non-fetching process: %d with %d queued, %d with %d", a, small, b, large)
	if b > 2*a+16 {
		t.Errorf("one sweep pass lists %d directory entries with %d queued messages, %d with %d: O(queued) per pass, every SweepInterval",
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
