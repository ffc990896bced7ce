package provider

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestDeletionRemovesCompletionOfAWorkAckCommittedBeforeIt: a work ack of
// an instance's activity commits (its record is in the log) and is applied
// a moment later (its completion published, its item deleted). A forced
// deletion of the instance that runs in between comes after the ack in the
// log, so - as in the reference, where the ack's transaction committed
// first - it must delete the completion with the instance's other
// orchestrator messages. Otherwise the completion survives the deletion
// and is delivered to the next instance of the same id (whose activity ids
// start over): the new instance receives the old incarnation's result
// (contract test 100's hazard).
func TestDeletionRemovesCompletionOfAWorkAckCommittedBeforeIt(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	runActivities(t, p, "x", 1)

	// The work ack stops right after its commit point.
	ackDone, resume := holdWorkAck(t, p, "x", &testHookAfterCommitPoint)

	// The deletion comes after the ack in the log. (It waits for the
	// item's claim lock, which the ack holds until it is applied.)
	delDone := deleteAsync(p, "x")
	time.Sleep(300 * time.Millisecond)
	resume()
	mustNoErr(t, <-ackDone)
	mustNoErr(t, <-delDone)
	testHookAfterCommitPoint = nil
	mustNoErr(t, p.Recover(ctx)) // finishes whatever either left
	newIncarnationGetsNoCompletion(t, p, "x")
}

// TestReplayDoesNotRestoreCompletionOfAnAckCommittedAfterADeletion: a work
// ack checks its item under the item's claim lock and then commits. A
// forced deletion of the instance that commits in between must not come
// before the ack in the log: live, its apply (which waits for the claim
// lock) deletes the completion the ack published, but a replay after a
// power loss redoes the records in log order - the deletion, then the ack,
// which publishes the completion again, and the next instance of the same
// id receives the deleted one's result. The deletion passes its items'
// claim locks after creating its marker and before its commit, so the ack
// either commits first (and the deletion deletes its completion, in the log
// too) or finds the marker, waits for the deletion, and finds its item
// gone (fs_deleting.go).
//
// On main before the fix the new instance received "stale-result" after
// the replay.
func TestReplayDoesNotRestoreCompletionOfAnAckCommittedAfterADeletion(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)
	runActivities(t, p, "x", 1)

	// The work ack has checked its item and stops before its commit.
	ackDone, resume := holdWorkAck(t, p, "x", &testHookBeforeCommit)
	delDone := deleteAsync(p, "x")
	// Give the deletion time to commit (on main it did, and returned; with
	// the fix it waits for the item's claim lock).
	var delErr error
	returned := false
	select {
	case delErr = <-delDone:
		returned = true
	case <-time.After(time.Second):
	}
	resume()
	ackErr := <-ackDone
	if !returned {
		delErr = <-delDone
	}
	mustNoErr(t, delErr)
	testHookBeforeCommit = nil
	if ackErr != nil && !errors.Is(ackErr, errTokenGone) {
		t.Fatalf("ack: %v", ackErr)
	}
	mustNoErr(t, p.Recover(ctx)) // finishes whatever either left
	replayedGetsNoCompletion(t, mem, opts, "x")
}

// TestForcedDeletionOfAWideFanOut: a forced deletion passes the claim lock
// of every pending work item of its instances before its commit and takes
// each again to delete it; with hundreds of them, some claimed, it deletes
// them all and leaves no claim behind.
func TestForcedDeletionOfAWideFanOut(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog, Durability: ProcessCrashSafe})
	const n = 500
	runActivities(t, p, "wide", n)
	for range 20 { // some in flight
		if w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags()); err != nil || w == nil {
			t.Fatalf("fetch work = %+v, %v", w, err)
		}
	}
	res, err := p.DeleteInstance(ctx, "wide", true)
	mustNoErr(t, err)
	if res.QueueMessagesDeleted != n {
		t.Errorf("deleted %d queue messages, want %d", res.QueueMessagesDeleted, n)
	}
	if l, err := p.workQ.Len(); err != nil || l != 0 {
		t.Errorf("the worker queue holds %d items after the deletion (%v)", l, err)
	}
	if cs, err := p.workQ.Claims(); err != nil || len(cs) != 0 {
		t.Errorf("claims left after the deletion: %d (%v)", len(cs), err)
	}
}

// TestForcedDeletionFailingToLockAClaimChangesNothing: when taking one of
// its work items' claim locks fails (EMFILE) as it passes them, a forced
// deletion commits nothing, returns a retryable error, and leaves the
// instance and every item as they were, with no marker; tried again, it
// deletes them.
func TestForcedDeletionFailingToLockAClaimChangesNothing(t *testing.T) {
	ctx := context.Background()
	mem, _, p := strictMemT(t)
	runActivities(t, p, "x", 3)

	// Lock calls: the instance's flock, then the items' claim locks; the
	// second item's fails.
	mem.InjectError("lock", 3, syscall.EMFILE)
	_, err := p.DeleteInstance(ctx, "x", true)
	if !errors.Is(err, ErrRetryable) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("delete = %v; want a retryable EMFILE", err)
	}
	if _, err := p.GetInstanceInfo(ctx, "x"); err != nil {
		t.Fatalf("x after the failed deletion: %v", err)
	}
	if n, err := p.workQ.Len(); err != nil || n != 3 {
		t.Fatalf("the worker queue holds %d items after the failed deletion (%v), want 3", n, err)
	}
	noPendingState(t, p, "x")

	if _, err := p.DeleteInstance(ctx, "x", true); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if n, err := p.workQ.Len(); err != nil || n != 0 {
		t.Fatalf("the worker queue holds %d items after the deletion (%v)", n, err)
	}
}

// runActivities starts instance inst and acks its first turn, which
// schedules n activities (ids 2..n+1): n pending work items.
func runActivities(t *testing.T, p *FSProvider, inst string, n int) {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch = %+v, %v", it, err)
	}
	events := []Event{started(inst)}
	var items []WorkItem
	for i := range n {
		id := uint64(i + 2)
		events = append(events, Event{EventID: id, InstanceID: inst, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
			Kind: ActivityScheduled{Name: "act", Input: "in"}})
		items = append(items, ActivityExecute{Instance: inst, ExecutionID: 1, ID: id, Name: "act", Input: "in"})
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, events, items, nil, md("TestOrch", "1.0.0"), nil))
}

// newIncarnationGetsNoCompletion starts instance inst again (after its
// deletion) and fails if its first turn holds an ActivityCompleted: the
// deleted incarnation's result.
func newIncarnationGetsNoCompletion(t *testing.T, p *FSProvider, inst string) {
	t.Helper()
	ctx := context.Background()
	if _, err := p.GetInstanceInfo(ctx, inst); err == nil {
		t.Fatalf("%s exists after its deletion", inst)
	}
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
	var got *LockedOrchestrationItem
	for i := 0; i < 3 && got == nil; i++ {
		var err error
		got, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		mustNoErr(t, err)
	}
	if got == nil {
		t.Fatalf("the new %s was not fetched", inst)
	}
	for _, m := range got.Item.Messages {
		if ac, ok := m.(ActivityCompleted); ok {
			t.Errorf("the new instance %s received the deleted instance's completion %+v", inst, ac)
		}
	}
}

// replayedGetsNoCompletion: everything written reached the disk and no
// checkpoint passed it; a power loss, then a provider opened on /d replays
// the log, and a new instance inst must not receive a deleted one's
// completion (newIncarnationGetsNoCompletion).
func replayedGetsNoCompletion(t *testing.T, mem *vfs.MemFS, opts Options, inst string) {
	t.Helper()
	mem.MarkAllSynced()
	mem.Crash()
	p, err := Open("/d", opts)
	mustNoErr(t, err)
	defer p.Close()
	newIncarnationGetsNoCompletion(t, p, inst)
}

// holdWorkAck fetches inst's work item (activity id 2) and starts its ack,
// with the result "stale-result", from another goroutine; the ack stops
// in hook (testHookBeforeCommit or testHookAfterCommitPoint, kind
// "work_ack") until resume is called. It returns once the ack is there.
func holdWorkAck(t *testing.T, p *FSProvider, inst string, hook *func(kind string)) (ackDone <-chan error, resume func()) {
	t.Helper()
	ctx := context.Background()
	w := fetchOneWork(t, p)
	there, goOn := make(chan struct{}), make(chan struct{})
	*hook = func(kind string) {
		if kind == "work_ack" {
			close(there)
			<-goOn
		}
	}
	t.Cleanup(func() { *hook = nil })
	done := make(chan error, 1)
	go func() {
		done <- p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "stale-result"})
	}()
	<-there
	var once sync.Once
	return done, func() { once.Do(func() { close(goOn) }) }
}

// deleteAsync force-deletes inst from another goroutine.
func deleteAsync(p *FSProvider, inst string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := p.DeleteInstance(context.Background(), inst, true)
		done <- err
	}()
	return done
}

// awaitResumed waits for a call that was held up by a stopped lock holder
// to finish once the holder resumed, and fails if it fails or hangs.
func awaitResumed(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		mustNoErr(t, err)
	case <-time.After(time.Minute):
		t.Fatalf("%s did not finish after the stopped holder resumed", what)
	}
}

// TestAckAfterTheDeleterDiedIsRefused: a process commits a forced deletion
// and is killed (kill -9) before applying it; the kernel lets go of the
// claim locks it held, so the instance's work items are still there,
// unlocked. A worker of another process that fetched one of them before
// acks it now: the ack must be refused, as the item is deleted (the
// deletion is committed). Accepted, its record comes after the deletion's
// in the log: live, the deletion's redo deletes the completion it
// published, but a replay after a power loss redoes the deletion, then the
// ack, which publishes the completion again, and the next instance of the
// same id receives the deleted one's result.
func TestAckAfterTheDeleterDiedIsRefused(t *testing.T) {
	ctx := context.Background()
	mem, opts, worker := strictMemT(t)
	runActivities(t, worker, "x", 1)
	w := fetchOneWork(t, worker)

	// The deleter: its own view of the file system, killed at its first
	// change after the deletion's commit point.
	deleter, sw := killableDeleter(t, mem, opts)
	testHookAfterCommitPoint = func(kind string) {
		if kind == "delete" {
			sw.mu.Lock()
			sw.at = sw.ops + 1
			sw.mu.Unlock()
		}
	}
	t.Cleanup(func() { testHookAfterCommitPoint = nil })
	_, _ = deleter.DeleteInstance(ctx, "x", true) // what it returns, nobody sees
	testHookAfterCommitPoint = nil
	if !sw.fired() {
		t.Fatal("the deleter was not killed")
	}

	err := worker.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "stale-result"})
	if err == nil || IsRetryable(err) {
		t.Fatalf("ack of an item whose deletion is committed = %v; want a permanent error", err)
	}
	mustNoErr(t, worker.Recover(ctx)) // finishes the deletion
	replayedGetsNoCompletion(t, mem, opts, "x")
}

// TestDeleterKilledAtEachStep kills a forced deletion of an instance with a
// fetched work item at each of its file-system changes in turn, then acks
// the item from another process. The ack must succeed if and only if the
// deletion did not commit (after recovery the instance is gone if and only
// if it did); no deletion marker (fs_deleting.go) may be left either way: a
// deletion that did not commit has its marker removed by the next holder of
// the instance's flock; and after a power loss the replay must agree (a new
// instance of the id receives no completion of the deleted one).
func TestDeleterKilledAtEachStep(t *testing.T) {
	ctx := context.Background()
	for at := 1; ; at++ {
		var done bool
		t.Run(fmt.Sprintf("kill at change %d", at), func(t *testing.T) {
			mem, opts, worker := strictMemT(t)
			runActivities(t, worker, "x", 1)
			w := fetchOneWork(t, worker)
			deleter, sw := killableDeleter(t, mem, opts)
			sw.mu.Lock()
			sw.at = sw.ops + at
			sw.mu.Unlock()
			_, derr := deleter.DeleteInstance(ctx, "x", true)
			if !sw.fired() {
				mustNoErr(t, derr)
				done = true
				deleter.Close()
			}
			ackErr := worker.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "stale-result"})
			mustNoErr(t, worker.Recover(ctx))
			_, infoErr := worker.GetInstanceInfo(ctx, "x")
			committed := errors.Is(infoErr, ErrNotFound)
			switch {
			case !committed && infoErr != nil:
				t.Fatalf("instance info after recovery: %v", infoErr)
			case committed && (ackErr == nil || IsRetryable(ackErr)):
				t.Fatalf("the deletion committed, and the ack = %v; want a permanent error", ackErr)
			case !committed && ackErr != nil:
				t.Fatalf("the deletion did not commit, and the ack = %v; want it accepted", ackErr)
			}
			if !committed {
				// The next holder of the instance's flock settles the
				// deletion's mark, if it was set, and with it the marker.
				it, err := worker.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil {
					t.Fatalf("fetch the completion's turn = %+v, %v", it, err)
				}
			}
			if _, err := mem.Stat(worker.deletingPath(instanceKey("x"))); !vfs.IsNotExist(err) {
				t.Fatalf("deletion marker after recovery (deletion committed: %v): stat = %v", committed, err)
			}
			t.Logf("deletion committed: %v; ack: %v", committed, ackErr)
			if committed {
				replayedGetsNoCompletion(t, mem, opts, "x")
			}
		})
		if done || t.Failed() {
			t.Logf("%d kill points", at-1)
			return
		}
	}
}

// TestDeletionFaultLeavesNoMarker: a forced deletion whose deletion marker
// cannot be created, or whose append fails, commits nothing and takes its
// marker back (fs_deleting.go), so the instance's next work ack does not
// wait for its flock from then on; the worker's ack is accepted, and
// the deletion, tried again, succeeds.
func TestDeletionFaultLeavesNoMarker(t *testing.T) {
	isMarker := func(path string) bool { return filepath.Base(path) == "deleting" }
	faults := append([]ackFault{
		{name: "marker create fails (EMFILE)", op: "open", match: anyPath(isMarker), inject: failWith("open", syscall.EMFILE), want: syscall.EMFILE},
	}, logFaults...)
	for _, c := range faults {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFaultFS(t)
			p := openT(t, "/d", faultOptions(f))
			runActivities(t, p, "x", 1)
			w := fetchOneWork(t, p)
			if c.fill {
				fillSegment(t, p, f)
			}
			f.arm(c.op, c.match(p), c.inject)
			_, err := p.DeleteInstance(ctx, "x", true)
			wantFaultHit(t, err, c.want, f.disarm())
			if _, err := f.Stat(p.deletingPath(instanceKey("x"))); !vfs.IsNotExist(err) {
				t.Fatalf("deletion marker after a deletion that failed: stat = %v", err)
			}
			mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "r"}))
			if _, err := p.DeleteInstance(ctx, "x", true); err != nil {
				t.Fatalf("the deletion tried again: %v", err)
			}
			newIncarnationGetsNoCompletion(t, p, "x")
		})
	}
}

// lockCountFS counts the worker items' claim locks (flocks on files of
// queues/worker) its process holds at once.
type lockCountFS struct {
	vfs.FS
	mu        sync.Mutex
	held, max int
}

type countedUnlock struct {
	u vfs.Unlocker
	c *lockCountFS
}

func (u countedUnlock) Unlock() error {
	u.c.mu.Lock()
	u.c.held--
	u.c.mu.Unlock()
	return u.u.Unlock()
}

func (c *lockCountFS) LockExisting(ctx context.Context, name string, wait bool) (vfs.Unlocker, bool, error) {
	u, ok, err := c.FS.LockExisting(ctx, name, wait)
	if err != nil || !ok || filepath.Base(filepath.Dir(name)) != "worker" {
		return u, ok, err
	}
	c.mu.Lock()
	c.held++
	c.max = max(c.max, c.held)
	c.mu.Unlock()
	return countedUnlock{u, c}, true, nil
}

// TestDeletionHoldsOneClaimLockAtATime: a forced deletion of an instance
// with many pending work items passes their claim locks one at a time
// (passClaims) instead of holding them all through its commit, so that
// its descriptors do not grow with the items (each claim lock is an open
// file: holding them all, a deletion of more items than the descriptor
// limit - 20,000 on the CI machine - could never commit).
func TestDeletionHoldsOneClaimLockAtATime(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)
	const items = 300
	runActivities(t, p, "big", items)
	w := fetchOneWork(t, p)
	cfs := &lockCountFS{FS: mem}
	dopts := opts
	dopts.fs = cfs
	deleter := openT(t, "/d", dopts)
	res, err := deleter.DeleteInstance(ctx, "big", true)
	mustNoErr(t, err)
	if res.QueueMessagesDeleted != items {
		t.Fatalf("deleted %d messages, want %d", res.QueueMessagesDeleted, items)
	}
	if cfs.max != 1 {
		t.Fatalf("the deletion held up to %d claim locks at once; want 1", cfs.max)
	}
	if err := p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "big", ExecutionID: 1, ID: 2, Result: "r"}); err == nil || IsRetryable(err) {
		t.Fatalf("ack of a deleted item = %v; want a permanent error", err)
	}
	newIncarnationGetsNoCompletion(t, p, "big")
}

// TestAckDuringADeletionWaitsForIt: a work ack that takes its item's claim
// lock after a forced deletion passed it (the deletion stopped after its
// commit point, its item still there) finds the deletion marker, lets go
// of the claim lock and waits for the instance's flock, which the deleter
// holds until its apply; then its item is gone and it fails, permanently.
// Without the marker check it would commit after the deletion, and a
// replay would publish its completion to the next instance of the id.
func TestAckDuringADeletionWaitsForIt(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)
	runActivities(t, p, "x", 1)
	w := fetchOneWork(t, p)
	committed, goOn := make(chan struct{}), make(chan struct{})
	testHookAfterCommitPoint = func(kind string) {
		if kind == "delete" {
			close(committed)
			<-goOn
		}
	}
	t.Cleanup(func() { testHookAfterCommitPoint = nil })
	delDone := deleteAsync(p, "x")
	<-committed
	ackDone := make(chan error, 1)
	go func() {
		ackDone <- p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "stale-result"})
	}()
	select {
	case err := <-ackDone:
		close(goOn)
		t.Fatalf("the ack returned (%v) while the deletion was not applied; want it to wait for it", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(goOn)
	mustNoErr(t, <-delDone)
	if err := <-ackDone; err == nil || IsRetryable(err) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("ack of an item the deletion deleted = %v; want the permanent not-found error", err)
	}
	testHookAfterCommitPoint = nil
	replayedGetsNoCompletion(t, mem, opts, "x")
}

// TestDeletionWaitingForABusyClaimHoldsNothing: a forced deletion whose
// pass over its items' claim locks (passClaims) finds one held by a stopped
// process commits nothing, takes its marker and marks back and lets go of
// the instance's flock while it waits for that claim alone - the instance's
// other calls go on meanwhile - and completes once the holder resumes.
// Mutation that fails it: passClaims waiting on the caller's context (the
// deletion waits holding the instance's flock).
func TestDeletionWaitingForABusyClaimHoldsNothing(t *testing.T) {
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	runActivities(t, p, "x", 2)
	work, err := allQueued(p.workQ)
	if err != nil || len(work) != 2 {
		t.Fatalf("worker queue = %+v, %v; want two items", work, err)
	}
	release := holdClaim(t, p.workQ, work[1].Name)
	delDone := deleteAsync(p, "x")
	key := instanceKey("x")
	deadline := time.Now().Add(10 * time.Second)
	// First the deletion marks and waits at the busy claim, its marker there.
	for marked := false; !marked; time.Sleep(2 * time.Millisecond) {
		if marked, err = p.deletionMarked(key); err != nil || time.Now().After(deadline) {
			release()
			t.Fatalf("the deletion never created its marker (%v)", err)
		}
	}
	for {
		g, ok, err := p.tryLockInstance(key)
		mustNoErr(t, err)
		if ok {
			marked, merr := p.deletionMarked(key)
			m := leaseMark(t, p, "x")
			g.Unlock()
			if !marked && merr == nil && m == nil {
				break // the deletion waits holding nothing, its marker and mark taken back
			}
		}
		if time.Now().After(deadline) {
			release()
			t.Fatal("the deletion kept the instance's flock, its marker or its mark while it waited for the busy claim")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-delDone:
		t.Fatalf("the deletion returned (%v) while a claim lock it needs was held", err)
	default:
	}
	mustNoErr(t, release())
	awaitResumed(t, delDone, "the deletion")
	if n, err := p.workQ.Len(); err != nil || n != 0 {
		t.Fatalf("the worker queue holds %d items after the deletion (%v)", n, err)
	}
	newIncarnationGetsNoCompletion(t, p, "x")
}

// fetchOneWork fetches one work item from p, failing if there is none.
func fetchOneWork(t *testing.T, p *FSProvider) *LockedWorkItem {
	t.Helper()
	w, err := p.FetchWorkItem(context.Background(), time.Minute, 0, nil, DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatalf("fetch work = %+v, %v", w, err)
	}
	return w
}

// killableDeleter opens a second provider on mem - a process whose kill
// switch sw kills it (plKillFS) - to delete with.
func killableDeleter(t *testing.T, mem *vfs.MemFS, opts Options) (*FSProvider, *plKillSwitch) {
	t.Helper()
	sw := &plKillSwitch{at: -1}
	dopts := opts
	dopts.fs = sw.newFS(mem, "deleter")
	deleter, err := Open("/d", dopts)
	mustNoErr(t, err)
	return deleter, sw
}

// TestDeletionListingRacingAWorkAck: a forced deletion lists its instance's
// messages queue by queue while a work ack of one of its activities, in
// another process, is applied in between (the ack holds only the item's
// claim lock; its apply publishes the completion, then deletes the item).
// Whichever queue is listed first, the deletion must find the item or the
// completion, and leave neither behind. Listing the orchestrator queue
// first found neither: the completion stayed queued for the deleted
// instance, and its next incarnation received it (seen in make
// crashtest-long with deletions: 2 completions of one fan-out left).
func TestDeletionListingRacingAWorkAck(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	d := openT(t, dir, opts) // the deleting process
	w := openT(t, dir, opts) // the worker process
	runActivities(t, d, "x", 1)
	item := fetchOneWork(t, w)
	var between string
	testHookDeletionListed = func(queue string) {
		if between != "" {
			return
		}
		between = queue
		mustNoErr(t, w.AckWorkItem(ctx, item.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "stale-result"}))
	}
	t.Cleanup(func() { testHookDeletionListed = nil })
	if _, err := d.DeleteInstance(ctx, "x", true); err != nil {
		t.Fatal(err)
	}
	testHookDeletionListed = nil
	if between == "" {
		t.Fatal("the deletion listed no queue (the hook never ran)")
	}
	for _, q := range []*FSProvider{d, w} {
		left, err := queuedFor(q.orchQ, instanceKey("x"))
		mustNoErr(t, err)
		for _, m := range left {
			t.Errorf("after the deletion (the work ack applied after it listed the %s queue), %s is still queued for x (%s)", between, m.Name, m.Attrs[attrKind])
		}
	}
	newIncarnationGetsNoCompletion(t, d, "x")
}
