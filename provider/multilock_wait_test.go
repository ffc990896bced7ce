package provider

import (
	"context"
	"testing"
	"time"
)

// awaitLocked returns once instance key's flock is held by someone else (a
// call under test that takes it before it waits for another).
func awaitLocked(t *testing.T, p *FSProvider, key, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		g, ok, err := p.tryLockInstance(key)
		mustNoErr(t, err)
		if !ok {
			return
		}
		_ = g.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%s never locked %s", what, instanceIDOf(key))
		}
		time.Sleep(time.Millisecond)
	}
}

// orderedPair returns two instance ids whose keys sort as (first, second):
// callers that take several flocks take them in that order.
func orderedPair(a, b string) (first, second string) {
	if instanceKey(a) > instanceKey(b) {
		return b, a
	}
	return a, b
}

// TestWorkflowTaskDoesNotHoldItsInstanceWhileWaitingForAStoppedHolder: a
// go-workflows task whose result sends an event to another instance locks
// both (gwLock, sorted order). If the other's flock is held by a stopped
// process, the completion must not wait for it holding its own instance's
// flock: every renewal of its own task (and every other call on its
// instance) would wait as long as the stop, and the task's lock would
// expire. It lets go, waits for the busy flock alone, and tries again: the
// renewal goes through meanwhile, and the completion delivers its event
// once the stopped process resumes.
//
// Mutation that fails it: lockNext waiting with the caller's context while
// it holds others (the renewal returns only when its context ends).
func TestWorkflowTaskDoesNotHoldItsInstanceWhileWaitingForAStoppedHolder(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	own, other := orderedPair("wait-own", "wait-other")
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{own, "e1"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("s1", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, own)
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{other, "e1"}, WorkflowStart{Queue: "other", Name: "W"}, gwEv("s2", "WorkflowExecutionStarted", 0)))

	release := holdInstanceLock(t, p, other)
	done := make(chan error, 1)
	go func() {
		done <- p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
			Executed: []WorkflowEvent{gwEv("s1", "WorkflowExecutionStarted", 1)},
			Sends:    []WorkflowSend{{Target: WorkflowRef{other, "e1"}, Events: []WorkflowEvent{gwEv("sig", "SignalReceived", 0)}}}})
	}()
	awaitLocked(t, p, instanceKey(own), "the completion")

	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := notStalled(t, "the renewal", func() error { release(); return nil }, func() error {
		return p.ExtendWorkflowTask(ectx, task.Token, time.Minute)
	})
	if ectx.Err() != nil {
		t.Errorf("the renewal of %s's task returned (%v) only when its context ended: the completion held its flock while it waited for %s's stopped holder", own, err, other)
	} else {
		mustNoErr(t, err)
	}

	release()
	awaitResumed(t, done, "the completion")
	q, err := p.gwQueue(gwWorkflowQueue("other"))
	mustNoErr(t, err)
	if n, err := q.Len(); err != nil || n != 2 {
		t.Errorf("%s's queue holds %d events (%v), want its start and the signal", other, n, err)
	}
}

// TestDrainDoesNotHoldOneInstanceWhileWaitingForAStoppedHolder: draining
// orphan messages locks every instance it drains (sorted order) and holds
// them until its one record commits. If one's flock is held by a stopped
// process, the drain must not wait for it holding the others: whatever
// another process does with those instances (a start's first fetch) would
// wait as long as the stop. It lets go, waits for the busy one alone, and
// tries again; once the stopped process resumes, both are drained.
//
// Mutation that fails it: lockNext waiting with the caller's context while
// it holds others.
func TestDrainDoesNotHoldOneInstanceWhileWaitingForAStoppedHolder(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	first, second := orderedPair("orphan-a", "orphan-b")
	for _, id := range []string{first, second} {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: id, Name: "early", Data: "1"}, 0))
	}

	release := holdInstanceLock(t, p, second)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := p.DrainOrphanMessages(ctx, nil, 0)
		done <- result{len(msgs), err}
	}()
	awaitLocked(t, p, instanceKey(first), "the drain")

	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = notStalled(t, "locking "+first, func() error { release(); return nil }, func() error {
		g, err := p.lockInstance(lctx, instanceKey(first))
		if err == nil {
			_ = g.Unlock()
		}
		return err
	})
	if lctx.Err() != nil {
		t.Errorf("%s's flock was free only when the context ended: the drain held it while it waited for %s's stopped holder", first, second)
	}

	release()
	select {
	case r := <-done:
		mustNoErr(t, r.err)
		if r.n != 2 {
			t.Errorf("drained %d messages, want 2", r.n)
		}
	case <-time.After(time.Minute):
		t.Fatal("the drain did not finish after the stopped holder resumed")
	}
}
