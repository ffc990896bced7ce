package provider

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
)

// TestApplyDoesNotWaitForAStoppedClaimHolder: a turn that cancels an
// activity deletes its work item under the item's claim lock. If another
// process holds that lock and is stopped (SIGSTOP inside a claim, renew or
// work ack), the ack still returns - its record is committed, the delete is
// left to the redo - and the checkpoint counts the record busy instead of
// parking it. Once the holder lets go, the checkpoint's redo deletes the
// item and releases the instance. (make stalltest found the wait: an ack
// took as long as the stop.)
//
// Mutations that fail it: deleteClaimed waiting on the caller's context
// (the ack never returns: the guard below fires); ensureApplied treating
// errClaimBusy as stuck (the record is parked).
func TestApplyDoesNotWaitForAStoppedClaimHolder(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.Now())
	p := openT(t, t.TempDir(), Options{Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	ev := func(id uint64, kind EventKind) Event {
		return Event{EventID: id, InstanceID: "a", ExecutionID: 1, TimestampMs: uint64(clk.Now().UnixMilli()), DuroxideVersion: "0.1.26", Kind: kind}
	}
	fetch := func() *LockedOrchestrationItem {
		t.Helper()
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil || it.Item.Instance != "a" {
			t.Fatalf("fetch = %+v, %v; want a turn of a", it, err)
		}
		return it
	}

	// a's first turn schedules activity 2.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
	it := fetch()
	act := ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("a"), ev(2, ActivityScheduled{Name: "act", Input: "x"})},
		[]WorkItem{act}, nil, md("TestOrch", "1.0.0"), nil))
	work, err := allQueued(p.workQ)
	if err != nil || len(work) != 1 {
		t.Fatalf("worker queue = %+v, %v; want the activity", work, err)
	}
	item := work[0].Name

	// A "stopped process" holds the item's claim lock.
	release := holdClaim(t, p.workQ, item)

	// a's next turn cancels the activity: committed and returned.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "stop", Data: "1"}, 0))
	it = fetch()
	mustNoErr(t, notStalled(t, "the ack", release, func() error {
		return p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev(3, ActivityCancelRequested{Reason: "stop"})}, nil, nil,
			md("TestOrch", "1.0.0"), []ScheduledActivityIdentifier{{Instance: "a", ExecutionID: 1, ActivityID: 2}})
	}))
	if h, err := p.Read(ctx, "a"); err != nil || len(h) != 3 {
		t.Fatalf("history of a = %d events (%v), want 3: the turn is committed", len(h), err)
	}
	if work, _ := allQueued(p.workQ); len(work) != 1 {
		t.Errorf("worker queue = %+v; the item's delete should wait for its lock", work)
	}
	sc, err := p.StuckCommits(ctx)
	mustNoErr(t, err)
	if len(sc) != 1 || sc[0].Instance != "a" || !strings.Contains(sc[0].Error, errClaimBusy.Error()) {
		t.Fatalf("StuckCommits = %+v; want a's turn, waiting for the claim lock", sc)
	}
	id := sc[0].CommitID
	lsn := recordLSN(t, p, id)

	// The checkpoint neither parks the record nor passes it.
	mustNoErr(t, p.Checkpoint(ctx))
	if got := p.RecoveryStats().CommitsParked; got != 0 {
		t.Errorf("CommitsParked = %d, want 0: a busy claim lock is not a failed apply", got)
	}
	if ck, err := p.wal.Checkpoint(); err != nil || ck > lsn {
		t.Errorf("checkpoint = %v, %v; want at or before the unapplied record at %v", ck, err, lsn)
	}
	if m := leaseMark(t, p, "a"); m == nil || m.ID != id {
		t.Errorf("the lease of a marks %+v; want the unapplied turn %s", m, id)
	}

	// The holder lets go: the next checkpoint finishes the turn.
	mustNoErr(t, release())
	mustNoErr(t, p.Checkpoint(ctx))
	if work, _ := allQueued(p.workQ); len(work) != 0 {
		t.Errorf("worker queue = %+v; want the cancelled item deleted", work)
	}
	if m := leaseMark(t, p, "a"); m != nil {
		t.Errorf("the lease of a still marks %+v", m)
	}
	if sc, err := p.StuckCommits(ctx); err != nil || len(sc) != 0 {
		t.Errorf("StuckCommits = %+v, %v; want none", sc, err)
	}
	if ck, err := p.wal.Checkpoint(); err != nil || ck <= lsn {
		t.Errorf("checkpoint = %v, %v; want past the turn at %v", ck, err, lsn)
	}
}

// TestStaleAckDoesNotWaitForTheNewHolder: an ack whose claim expired and
// was taken by another holder is rejected without waiting for the item's
// lock - which the new holder keeps while it is stopped inside its own ack
// (make stalltest: a work ack took as long as such a stop). The new
// holder's ack still succeeds afterwards. Mutation that fails it: dropping
// the claimTakenFrom check (the stale ack waits: the guard fires).
func TestStaleAckDoesNotWaitForTheNewHolder(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// claimTwice fetches the same item twice, the first claim expired
		// in between; it returns the item's queue and name and both tokens.
		claimTwice func(t *testing.T, p *FSProvider, clk *clock.Manual) (q *fsqueue.Queue, name, stale, fresh string)
		ack        func(p *FSProvider, token string) error
		lost       error
	}{
		{
			name: "work item",
			claimTwice: func(t *testing.T, p *FSProvider, clk *clock.Manual) (*fsqueue.Queue, string, string, string) {
				mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}))
				var tokens []string
				for i, lock := range []time.Duration{time.Second, time.Minute} {
					if i == 1 {
						clk.Advance(2 * time.Second) // the first claim expires
					}
					it, err := p.FetchWorkItem(ctx, lock, 0, nil, DefaultOnlyTags())
					if err != nil || it == nil {
						t.Fatalf("fetch work item = %+v, %v", it, err)
					}
					tokens = append(tokens, it.LockToken)
				}
				ct, _ := parseWorkToken(tokens[0])
				name, _ := fsqueue.NameFromToken(ct)
				return p.workQ, name, tokens[0], tokens[1]
			},
			ack: func(p *FSProvider, token string) error {
				return p.AckWorkItem(ctx, token, ActivityCompleted{Instance: "a", ExecutionID: 1, ID: 2, Result: "r"})
			},
			lost: ErrInvalidLockToken,
		},
		{
			name: "go-workflows activity task",
			claimTwice: func(t *testing.T, p *FSProvider, clk *clock.Manual) (*fsqueue.Queue, string, string, string) {
				gwRunningParent(t, p)
				a1, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Second, 0)
				if err != nil || a1 == nil || a1.EventID != "a1" {
					t.Fatalf("fetch a1 = %+v, %v", a1, err)
				}
				gwFetchActivity(t, p, "a2")
				clk.Advance(2 * time.Second)
				again := gwFetchActivity(t, p, "a1")
				dir, _, name, _ := parseGWActToken(a1.Token)
				q, err := p.gwQueue(dir)
				mustNoErr(t, err)
				return q, name, a1.Token, again.Token
			},
			ack: func(p *FSProvider, token string) error {
				return p.CompleteWorkflowActivity(ctx, token, gwEv("a1done", "ActivityCompleted", 0))
			},
			lost: ErrWorkflowTaskLost,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewManual(time.Now())
			p := openT(t, t.TempDir(), Options{Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			q, name, stale, fresh := tc.claimTwice(t, p, clk)

			// The new holder is "stopped" holding the item's lock.
			release := holdClaim(t, q, name)
			if err := notStalled(t, "the stale ack", release, func() error { return tc.ack(p, stale) }); !errors.Is(err, tc.lost) {
				t.Errorf("stale ack = %v, want %v", err, tc.lost)
			}
			mustNoErr(t, release())
			mustNoErr(t, tc.ack(p, fresh))
		})
	}
}

// holdClaim holds the claim lock of q's message name from another goroutine
// - a process stopped inside a claim section - until release is called (or
// the test ends); release returns WithClaim's error.
func holdClaim(t *testing.T, q *fsqueue.Queue, name string) (release func() error) {
	t.Helper()
	held, done, errc := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		errc <- q.WithClaim(context.Background(), name, func(*fsqueue.ClaimGuard) error {
			close(held)
			<-done
			return nil
		})
	}()
	<-held
	var once sync.Once
	var err error
	release = func() error {
		once.Do(func() { close(done); err = <-errc })
		return err
	}
	t.Cleanup(func() { _ = release() })
	return release
}

// notStalled runs call and returns its error; if it has not returned after
// a minute - a deadlock guard, not a timing bound - it releases the held
// lock, waits for call and fails the test.
func notStalled(t *testing.T, what string, release func() error, call func() error) error {
	t.Helper()
	c := make(chan error, 1)
	go func() { c <- call() }()
	select {
	case err := <-c:
		return err
	case <-time.After(time.Minute):
		_ = release()
		<-c
		t.Fatalf("%s waited for the stopped lock holder", what)
		return nil
	}
}

// TestWorkCallsDoNotWaitForAStoppedLockHolder: a process stopped while it
// holds a work item's claim lock - a claim attempt of its own that found the
// item taken, stopped there - holds up the holder's ack, renewal or abandon
// of the item only until the holder's claim expires (plus a margin): the call
// fails, retryably, instead of waiting for the stopped process (make
// stalltest: a work ack waited 1.04 s on such a stop with a 600 ms lock).
// Once the stopped process resumes, the item (its claim expired) is
// delivered again. Mutation that fails it: claimCtx returning ctx unbounded
// (the calls wait for the release: the guard fires).
func TestWorkCallsDoNotWaitForAStoppedLockHolder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(p *FSProvider, token string) error
	}{
		{"ack", func(p *FSProvider, token string) error {
			return p.AckWorkItem(ctx, token, ActivityCompleted{Instance: "a", ExecutionID: 1, ID: 2, Result: "r"})
		}},
		{"renew", func(p *FSProvider, token string) error { return p.RenewWorkItemLock(ctx, token, time.Minute) }},
		{"abandon", func(p *FSProvider, token string) error { return p.AbandonWorkItem(ctx, token, 0, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}))
			it, err := p.FetchWorkItem(ctx, 300*time.Millisecond, 0, nil, DefaultOnlyTags())
			if err != nil || it == nil {
				t.Fatalf("fetch = %+v, %v", it, err)
			}
			ct, _ := parseWorkToken(it.LockToken)
			name, _ := fsqueue.NameFromToken(ct)

			release := holdClaim(t, p.workQ, name)
			err = notStalled(t, "the "+tc.name, release, func() error { return tc.call(p, it.LockToken) })
			if !errors.Is(err, ErrRetryable) || !strings.Contains(err.Error(), "held by another process") {
				t.Fatalf("%s = %v; want a retryable error naming the held claim lock", tc.name, err)
			}
			mustNoErr(t, release())
			again, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
			if err != nil || again == nil || again.LockToken == it.LockToken {
				t.Fatalf("fetch after the release = %+v, %v; want the item again under a new token", again, err)
			}
		})
	}
}

// TestGWActivityCallsDoNotWaitForAStoppedLockHolder is
// TestWorkCallsDoNotWaitForAStoppedLockHolder for go-workflows activity
// tasks: a completion or an extension waits for the task's claim lock, held
// by a "stopped" process, only until the claim expires (plus a margin), then
// fails without writing; the task is delivered again once the lock is
// free. Mutation that fails it: claimWaitCtx returning ctx
// unbounded (the calls wait for the release: the guard fires).
func TestGWActivityCallsDoNotWaitForAStoppedLockHolder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(p *FSProvider, token string) error
	}{
		{"complete", func(p *FSProvider, token string) error {
			return p.CompleteWorkflowActivity(ctx, token, gwEv("a1done", "ActivityCompleted", 0))
		}},
		{"extend", func(p *FSProvider, token string) error { return p.ExtendWorkflowActivity(ctx, token, time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			gwRunningParent(t, p)
			a1, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", 300*time.Millisecond, 0)
			if err != nil || a1 == nil || a1.EventID != "a1" {
				t.Fatalf("fetch a1 = %+v, %v", a1, err)
			}
			dir, _, name, _ := parseGWActToken(a1.Token)
			q, err := p.gwQueue(dir)
			mustNoErr(t, err)

			release := holdClaim(t, q, name)
			err = notStalled(t, "the "+tc.name, release, func() error { return tc.call(p, a1.Token) })
			if err == nil || !strings.Contains(err.Error(), "held by another process") {
				t.Fatalf("%s = %v; want an error naming the held claim lock", tc.name, err)
			}
			mustNoErr(t, release())
			again := gwFetchActivity(t, p, "a1")
			if again.Token == a1.Token {
				t.Fatal("a1 delivered again under the same token")
			}
		})
	}
}

// TestReplayedWorkAckKeepsAClaimMarkedByAnotherCommit: applying a logged
// work ack in replay mode removes the item's claim only if the claim marks
// that ack (or marks none); a claim marking another commit is that
// commit's to settle. Outside a replay the caller read the claim, marked
// with the record's id, under the lock, so the apply removes it without
// reading it again. Mutation that fails it: the replay's check of the mark
// dropped (the claim is removed).
func TestReplayedWorkAckKeepsAClaimMarkedByAnotherCommit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		mark      string // the claim's mark ("" : held, no mark)
		wantClaim bool
	}{
		{"marked by another commit", "other", true},
		{"marked by this commit", "mine", false},
		{"not marked", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}))
			it, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
			if err != nil || it == nil {
				t.Fatalf("fetch = %+v, %v", it, err)
			}
			ct, _ := parseWorkToken(it.LockToken)
			name, _ := fsqueue.NameFromToken(ct)
			rec := &commitRecord{Kind: kindWorkAck, Item: name, ItemToken: ct, CommitID: "mine",
				Delete: []queueRef{{Queue: "worker", Name: name}}}
			mustNoErr(t, p.workQ.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
				c, _, err := g.Read()
				if err != nil {
					return err
				}
				if tc.mark != "" {
					c.State = claimStateAcked
					if c.Data, err = json.Marshal(workAckData{pendingMark: pendingMark{ID: tc.mark}}); err != nil {
						return err
					}
					if err := g.Write(c); err != nil {
						return err
					}
				}
				return p.applyWorkAck(g, rec, true)
			}))
			if work, _ := allQueued(p.workQ); len(work) != 0 {
				t.Errorf("worker queue = %+v; want the item deleted", work)
			}
			c, exists, err := p.workQ.PeekClaim(name)
			mustNoErr(t, err)
			if exists != tc.wantClaim {
				t.Fatalf("claim after the replayed apply: %+v (exists %v), want exists %v", c, exists, tc.wantClaim)
			}
			if exists && workMark(c) != tc.mark {
				t.Errorf("claim marks %q, want %q", workMark(c), tc.mark)
			}
		})
	}
}

// TestOrchestrationCallsDoNotWaitForAStoppedLockHolder is
// TestWorkCallsDoNotWaitForAStoppedLockHolder for orchestration turns: an
// ack, renewal or abandon waits for the instance's flock, held by a
// "stopped" process (a fetch pass stopped while it looked at the lease, or
// after it took the expired lease over), only until the turn's lease
// expires (plus a margin), then fails without writing: as it would under
// the flock when the lease file settles it (leaseWaitErr) - another token:
// invalid; the caller's, expired, for the ack and the renewal (which check
// expiry) - else retryably (the abandon of an expired lease not taken
// over, which may still succeed); once the flock is free the instance is
// fetched again under a new token. The call gives up only once the lease
// has expired, whether its process knew the expiry (it fetched the turn)
// or read it from the lease file (a token passed to another process).
// Mutations that fail it: leaseWaitCtx returning ctx unbounded (the calls
// wait for the release: the guard fires); ignoring the known expiry, or the
// file's (the calls give up before the lease expired).
func TestOrchestrationCallsDoNotWaitForAStoppedLockHolder(t *testing.T) {
	ctx := context.Background()
	type call func(p *FSProvider, token string) error
	calls := []struct {
		name string
		call call
		// What the call returns once its wait ran out at the lease's
		// expiry, the lease still the caller's; taken over, every call
		// fails as invalid.
		expired error
	}{
		{"ack", func(p *FSProvider, token string) error {
			return p.AckOrchestrationItem(ctx, token, 1, []Event{started("a")}, nil, nil, md("TestOrch", "1.0.0"), nil)
		}, errTokenExpired},
		{"renew", func(p *FSProvider, token string) error { return p.RenewOrchestrationItemLock(ctx, token, time.Minute) }, errTokenExpired},
		{"abandon", func(p *FSProvider, token string) error { return p.AbandonOrchestrationItem(ctx, token, 0, false) }, ErrRetryable},
	}
	for _, tc := range calls {
		for _, caller := range []string{"fetching process", "other process"} {
			for _, takenOver := range []bool{false, true} {
				name := tc.name + " by the " + caller
				if takenOver {
					name += ", the lease taken over"
				}
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
					by := p
					if caller == "other process" {
						by = openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
					}
					mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
					it, err := p.FetchOrchestrationItem(ctx, 300*time.Millisecond, 0, nil)
					if err != nil || it == nil {
						t.Fatalf("fetch = %+v, %v", it, err)
					}
					l, _, err := p.leases.Inspect(ctx, p.lockPath(instanceKey("a")), p.leasePath(instanceKey("a")))
					mustNoErr(t, err)
					var release func()
					if takenOver {
						release = holdTakenOver(t, p, "a", l.ExpiresAtMs)
					} else {
						release = holdInstanceLock(t, p, "a")
					}
					err = notStalled(t, "the "+tc.name, func() error { release(); return nil }, func() error { return tc.call(by, it.LockToken) })
					switch want := tc.expired; {
					case takenOver:
						if !errors.Is(err, ErrInvalidLockToken) || IsRetryable(err) || errors.Is(err, errTokenExpired) {
							t.Fatalf("%s = %v; want the permanent invalid-token error", tc.name, err)
						}
					case want == ErrRetryable:
						if !errors.Is(err, ErrRetryable) || !strings.Contains(err.Error(), "held by another process") {
							t.Fatalf("%s = %v; want a retryable error naming the held flock", tc.name, err)
						}
					case !errors.Is(err, want) || IsRetryable(err):
						t.Fatalf("%s = %v; want the permanent %v", tc.name, err, want)
					}
					if now := p.nowMs(); now < l.ExpiresAtMs {
						t.Fatalf("the %s gave up %d ms before the lease expired", tc.name, l.ExpiresAtMs-now)
					}
					release()
					var again *LockedOrchestrationItem
					for deadline := time.Now().Add(5 * time.Second); again == nil && time.Now().Before(deadline); {
						again, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
						mustNoErr(t, err)
					}
					if again == nil || again.LockToken == it.LockToken {
						t.Fatalf("fetch after the release = %+v; want the instance again under a new token", again)
					}
				})
			}
		}
	}
}

// holdTakenOver is holdInstanceLock by a process that takes inst's lease
// over once it has expired (at expiresAtMs) and then stops, the flock held.
func holdTakenOver(t *testing.T, p *FSProvider, inst string, expiresAtMs int64) (release func()) {
	t.Helper()
	g, err := p.lockInstance(context.Background(), instanceKey(inst))
	mustNoErr(t, err)
	time.Sleep(time.Duration(expiresAtMs-p.nowMs()+5) * time.Millisecond)
	cur, _, err := g.Read()
	mustNoErr(t, err)
	cur.Token, cur.ExpiresAtMs = "01ARZ3NDEKTSV4RRFFQ69G5FAV.6f1c6b7e-6d51-4b4a-9d1c-6a2a9a3f6d11", p.nowMs()+60_000
	mustNoErr(t, g.Write(cur))
	var once bool
	release = func() {
		if !once {
			once = true
			// The stopped fetch resumes and lets the instance go again.
			cur.Token, cur.ExpiresAtMs = "", 0
			_ = g.Write(cur)
			_ = g.Unlock()
		}
	}
	t.Cleanup(release)
	return release
}

// TestGWTaskCallsDoNotWaitForAStoppedLockHolder is
// TestOrchestrationCallsDoNotWaitForAStoppedLockHolder for go-workflows
// workflow tasks: a completion or an extension waits for the instance's
// flock, held by a "stopped" process, only until the task's lease expires
// (plus a margin), then fails without writing; the task is delivered again
// once the flock is free. Mutation that fails it: leaseWaitCtx returning
// ctx unbounded.
func TestGWTaskCallsDoNotWaitForAStoppedLockHolder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(p *FSProvider, task *WorkflowTask) error
	}{
		{"complete", func(p *FSProvider, task *WorkflowTask) error {
			return p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
				Executed: []WorkflowEvent{gwEv("s1", "WorkflowExecutionStarted", 1)}})
		}},
		{"extend", func(p *FSProvider, task *WorkflowTask) error {
			return p.ExtendWorkflowTask(ctx, task.Token, time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"x", "e1"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("s1", "WorkflowExecutionStarted", 0)))
			task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", 300*time.Millisecond, 0)
			if err != nil || task == nil {
				t.Fatalf("fetch = %+v, %v", task, err)
			}
			release := holdInstanceLock(t, p, "x")
			err = notStalled(t, "the "+tc.name, func() error { release(); return nil }, func() error { return tc.call(p, task) })
			if err == nil || !strings.Contains(err.Error(), "held by another process") {
				t.Fatalf("%s = %v; want an error naming the held flock", tc.name, err)
			}
			release()
			var again *WorkflowTask
			for deadline := time.Now().Add(5 * time.Second); again == nil && time.Now().Before(deadline); {
				again, err = p.FetchWorkflowTask(ctx, []string{"default"}, "w", time.Minute, 0)
				mustNoErr(t, err)
			}
			if again == nil || again.Token == task.Token {
				t.Fatalf("fetch after the release = %+v; want the task again under a new token", again)
			}
		})
	}
}

// TestReadDoesNotWaitForAStoppedLockHolder: a read that finds a history
// shorter than committed looks again under the instance's flock (settled:
// it may be a change in progress). A process stopped while holding that
// flock held the read up for as long as it stayed stopped (the caller's
// context alone bounded the wait); now the wait ends when the instance's
// lease has expired (plus a margin) and the read fails retryably. Once the
// holder is gone, the read reports the loss. Mutation that fails it:
// settled waiting on ctx (the guard fires).
func TestReadDoesNotWaitForAStoppedLockHolder(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	createInstance(t, p, "a")
	mustNoErr(t, os.Truncate(p.historyPath(instanceKey("a"), 1), 0))
	release := holdInstanceLock(t, p, "a")
	err := notStalled(t, "the read", func() error { release(); return nil }, func() error {
		_, err := p.Read(ctx, "a")
		return err
	})
	if !errors.Is(err, ErrRetryable) || !strings.Contains(err.Error(), "held by another process") {
		t.Fatalf("Read while a stopped process holds the flock = %v; want a retryable error naming the held flock", err)
	}
	release()
	if _, err := p.Read(ctx, "a"); !errors.Is(err, ErrCorrupt) || IsRetryable(err) {
		t.Fatalf("Read of the cut history once the flock is free = %v; want the permanent ErrCorrupt", err)
	}
}
