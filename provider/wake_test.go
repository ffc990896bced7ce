package provider

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestChangesWakeTheFetchesOfTheirSide: a long-polling fetch is woken by
// the changes that give it work - an enqueue, or an ack publishing to its
// side's queue - made by its own process (notify) or by another process on
// the directory (the queue's watch calls notify: fsqueue.Options.Notify),
// and not only by the poll interval (an hour here: a fetch that is not
// woken returns nothing at its poll timeout). notify wakes only the side a
// change concerns. The other process is a second provider on the
// directory: its own queues, watches and notify channels.
func TestChangesWakeTheFetchesOfTheirSide(t *testing.T) {
	ctx := context.Background()
	act := ActivityExecute{Instance: "w", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}
	ev := func(id uint64, kind EventKind) Event {
		return Event{EventID: id, InstanceID: "w", ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26", Kind: kind}
	}
	// turn1 runs w's first turn, scheduling act, and returns the work item.
	turn1 := func(t *testing.T, p *FSProvider) {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("w"), 0))
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch = %+v, %v", it, err)
		}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("w"), ev(2, ActivityScheduled{Name: "act", Input: "x"})},
			[]WorkItem{act}, nil, md("TestOrch", "1.0.0"), nil))
	}
	// gwTurn1 creates workflow g and completes its first task, which
	// schedules an activity of queue "acts".
	gwTurn1 := func(t *testing.T, p *FSProvider) {
		mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"g", "e1"}, WorkflowStart{Queue: "default", Name: "G"}, gwEv("start", "WorkflowExecutionStarted", 0)))
		task := gwFetchOf(t, p, "g")
		mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
			State:      WorkflowActive,
			Executed:   []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("act", "ActivityScheduled", 3)},
			Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: json.RawMessage(`{"a":1}`)}},
			Worker:     "w", Sticky: time.Minute,
		}))
	}
	for _, tc := range []struct {
		name  string
		fetch int
		setup func(t *testing.T, p *FSProvider)
		wake  func(t *testing.T, p *FSProvider) // run once the fetch waits
	}{
		{"enqueue for the worker", fetchWork, nil, func(t *testing.T, p *FSProvider) {
			mustNoErr(t, p.EnqueueForWorker(ctx, act))
		}},
		{"enqueue for the orchestrator", fetchOrch, nil, func(t *testing.T, p *FSProvider) {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("w"), 0))
		}},
		{"an orchestration ack scheduling an activity", fetchWork, nil, func(t *testing.T, p *FSProvider) {
			turn1(t, p)
		}},
		{"a workflow created", fetchGwWF, nil, func(t *testing.T, p *FSProvider) {
			mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"g", "e1"}, WorkflowStart{Queue: "default", Name: "G"}, gwEv("start", "WorkflowExecutionStarted", 0)))
		}},
		{"a workflow task scheduling an activity", fetchGwAct, nil, gwTurn1},
		{"an activity task completed", fetchGwWF, gwTurn1, func(t *testing.T, p *FSProvider) {
			at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
			if err != nil || at == nil {
				t.Fatalf("fetch activity = %+v, %v", at, err)
			}
			mustNoErr(t, p.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0)))
		}},
		{"a work item ack completing an activity", fetchOrch, func(t *testing.T, p *FSProvider) {
			turn1(t, p)
		}, func(t *testing.T, p *FSProvider) {
			w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, TagFilter{})
			if err != nil || w == nil {
				t.Fatalf("fetch work = %+v, %v", w, err)
			}
			mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "w", ExecutionID: 1, ID: 2, Result: "r"}))
		}},
	} {
		for _, other := range []bool{false, true} {
			name := tc.name + ", same process"
			if other {
				name = tc.name + ", another process"
			}
			t.Run(name, func(t *testing.T) {
				if other && runtime.GOOS != "linux" {
					t.Skip("directory watches are inotify's: elsewhere other processes' changes are polled")
				}
				wakeChange(t, tc.fetch, tc.setup, tc.wake, other)
			})
		}
	}
}

// The fetch a wakeChange case waits in.
const (
	fetchOrch  = iota // orchestration items
	fetchWork         // work items
	fetchGwWF         // workflow tasks
	fetchGwAct        // activity tasks
)

// wakeChange runs one case of TestChangesWakeTheFetchesOfTheirSide: a
// fetch of p waits, then wake makes the change, through p itself or, with
// other, through a second provider on the directory.
func wakeChange(t *testing.T, fetch int, setup, wake func(t *testing.T, p *FSProvider), other bool) {
	ctx := context.Background()
	const pollTimeout = 20 * time.Second
	dir := t.TempDir()
	opts := Options{PollInterval: time.Hour, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	p := openT(t, dir, opts)
	changer := p
	if other {
		changer = openT(t, dir, opts)
	}
	if setup != nil {
		setup(t, p)
	}
	waiting := make(chan struct{}, 1)
	testHookWaitForWork = func(time.Duration) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { testHookWaitForWork = nil })
	got := make(chan bool, 1)
	go func() {
		switch fetch {
		case fetchOrch:
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, pollTimeout, nil)
			got <- err == nil && it != nil
		case fetchWork:
			w, err := p.FetchWorkItem(ctx, time.Minute, pollTimeout, nil, TagFilter{})
			got <- err == nil && w != nil
		case fetchGwWF:
			task, err := p.FetchWorkflowTask(ctx, []string{"default"}, "w", time.Minute, pollTimeout)
			got <- err == nil && task != nil
		case fetchGwAct:
			at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, pollTimeout)
			got <- err == nil && at != nil
		}
	}()
	<-waiting
	wake(t, changer)
	if !<-got {
		t.Fatalf("the waiting fetch returned nothing at its poll timeout: the change did not wake it")
	}
}

// TestIdleWait: a fetch that found nothing waits the poll interval while
// its queue holds a visible message (one it could not take may become
// takeable without a new message) and for quietBeforeBackoff after its
// queue became quiet (nothing visible, and other processes' additions wake
// the fetch) or work was last taken from it; after that, twice as long
// with each empty pass up to maxIdlePoll - never past the moment the first
// delayed message comes due, never less than the poll interval otherwise.
// Without a directory watch (the in-memory FS) it never backs off. Only a
// fetch that backs off, or whose poll interval is longer than maxIdlePoll,
// listens to other processes' messages (quiet).
//
// Mutations that fail it: backing off with a visible message; not capping
// at a due time; backing off at once (no quietBeforeBackoff); a fetch that
// takes work not restarting the quiet period (busyAgain removed from
// FetchOrchestrationItem).
func TestIdleWait(t *testing.T) {
	ctx := context.Background()
	const poll = 10 * time.Millisecond
	ms := time.Millisecond
	// The waits of n successive empty passes, from the first (prev 0).
	passes := func(t *testing.T, p *FSProvider, n int, wantQuiet bool) []time.Duration {
		var out []time.Duration
		var w time.Duration
		for range n {
			var quiet bool
			w, quiet = p.idleWait(w, p.orchQ)
			if quiet != wantQuiet {
				t.Fatalf("pass %d: quiet = %v, want %v", len(out)+1, quiet, wantQuiet)
			}
			out = append(out, w)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		mem   bool          // on the strict in-memory FS, which cannot watch
		poll  time.Duration // Options.PollInterval
		setup func(t *testing.T, p *FSProvider, clk *clock.Manual)
		want  []time.Duration // after quietBeforeBackoff; nil: check with wantMax instead
		quiet bool
		// wantMax: every wait > 0, at most this, and the last ones shorter
		// than maxIdlePoll (a delayed message due soon).
		wantMax time.Duration
	}{
		{name: "empty queue", poll: poll, want: []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, maxIdlePoll, maxIdlePoll}, quiet: true},
		{name: "a visible message", poll: poll, setup: func(t *testing.T, p *FSProvider, _ *clock.Manual) {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
		}, want: []time.Duration{poll, poll, poll}},
		{name: "a message in flight", poll: poll, setup: func(t *testing.T, p *FSProvider, _ *clock.Manual) {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
			if it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it == nil {
				t.Fatalf("fetch = %+v, %v", it, err)
			}
		}, want: []time.Duration{poll, poll, poll}},
		{name: "a delayed message due in a minute", poll: poll, setup: func(t *testing.T, p *FSProvider, _ *clock.Manual) {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), time.Minute))
		}, want: []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, maxIdlePoll}, quiet: true},
		{name: "a delayed message due 100 ms after the quiet period", poll: poll, setup: func(t *testing.T, p *FSProvider, _ *clock.Manual) {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), quietBeforeBackoff+100*ms))
		}, wantMax: 100 * ms},
		{name: "work taken restarts the quiet period", poll: poll, setup: func(t *testing.T, p *FSProvider, clk *clock.Manual) {
			passes(t, p, 1, false) // quiet since now
			clk.Advance(quietBeforeBackoff)
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				t.Fatalf("fetch = %+v, %v", it, err)
			}
			// The ack consumes the message: the queue is quiet again, and
			// has been since the fetch took work from it.
			mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("a")}, nil, nil, md("TestOrch", "1.0.0"), nil))
		}, want: []time.Duration{10 * ms, 20 * ms, 40 * ms}, quiet: true},
		{name: "a poll interval longer than maxIdlePoll", poll: time.Hour, want: []time.Duration{time.Hour, time.Hour}, quiet: true},
		{name: "no directory watch", mem: true, poll: poll, want: []time.Duration{poll, poll, poll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.mem && runtime.GOOS != "linux" {
				t.Skip("directory watches are inotify's")
			}
			clk := clock.NewManual(time.Now())
			opts := Options{Clock: clk, PollInterval: tc.poll, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
			dir := t.TempDir()
			if tc.mem {
				mem := vfs.NewStrictMem()
				mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
				opts.fs, dir = mem, "/d"
			}
			p := openT(t, dir, opts)
			if tc.setup != nil {
				tc.setup(t, p, clk)
			}
			// The first pass starts the quiet period; until it is over the
			// fetch polls, and listens to no other process.
			listen := tc.poll > maxIdlePoll && tc.quiet // a long poll listens at once
			if got := passes(t, p, 3, listen); !slices.Equal(got, []time.Duration{tc.poll, tc.poll, tc.poll}) {
				t.Fatalf("waits within the quiet period %v, want the poll interval", got)
			}
			clk.Advance(quietBeforeBackoff - time.Millisecond)
			if got := passes(t, p, 1, listen); got[0] != tc.poll {
				t.Fatalf("wait just before the quiet period's end %v, want the poll interval", got)
			}
			clk.Advance(time.Millisecond)
			if tc.want != nil {
				if got := passes(t, p, len(tc.want), tc.quiet); !slices.Equal(got, tc.want) {
					t.Fatalf("waits %v, want %v", got, tc.want)
				}
				return
			}
			var got []time.Duration
			var w time.Duration
			for range 8 { // quiet until the message comes due
				w, _ = p.idleWait(w, p.orchQ)
				got = append(got, w)
			}
			for _, w := range got {
				if w <= 0 || w > tc.wantMax {
					t.Fatalf("waits %v, want each in (0, %v]", got, tc.wantMax)
				}
			}
		})
	}

	// A poll interval longer than maxIdlePoll listens from the first quiet
	// pass, and its wait too ends when a delayed message comes due.
	t.Run("a long poll interval and a delayed message due in 100 ms", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("directory watches are inotify's")
		}
		p := openT(t, t.TempDir(), Options{Clock: clock.NewManual(time.Now()), PollInterval: time.Hour, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 100*ms))
		if w, quiet := p.idleWait(0, p.orchQ); w <= 0 || w > 100*ms || !quiet {
			t.Fatalf("idleWait = %v, %v; want a wait in (0, 100ms], listening", w, quiet)
		}
	})
}
