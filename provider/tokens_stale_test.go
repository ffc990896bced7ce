package provider

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestStaleTokensConsistent: a token that no longer holds a live lock fails
// every operation of both queues permanently with an error matching
// ErrInvalidLockToken (issue 19 item 4: stale work-item tokens used to fail
// with ErrNotFound only); an expired one also matches ErrLockExpired, and a
// work-item token whose item is gone also ErrNotFound (the contract's "not
// found" for a cancelled activity). Abandoning an expired lock that nobody
// took over succeeds in both queues (contract §2.6, §2.12).
func TestStaleTokensConsistent(t *testing.T) {
	ctx := context.Background()
	type op struct {
		name string
		call func(p *FSProvider, token string) error
	}
	orchOps := []op{
		{"ack", func(p *FSProvider, token string) error {
			return p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, ExecutionMetadata{}, nil)
		}},
		{"abandon", func(p *FSProvider, token string) error { return p.AbandonOrchestrationItem(ctx, token, 0, false) }},
		{"renew", func(p *FSProvider, token string) error { return p.RenewOrchestrationItemLock(ctx, token, time.Minute) }},
	}
	workOps := []op{
		{"ack", func(p *FSProvider, token string) error {
			return p.AckWorkItem(ctx, token, ActivityCompleted{Instance: "wi", ExecutionID: 1, ID: 1, Result: "r"})
		}},
		{"abandon", func(p *FSProvider, token string) error { return p.AbandonWorkItem(ctx, token, 0, false) }},
		{"renew", func(p *FSProvider, token string) error { return p.RenewWorkItemLock(ctx, token, time.Minute) }},
	}
	open := func(t *testing.T) (*FSProvider, *clock.Manual) {
		mem := vfs.NewStrictMem()
		mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
		clk := clock.NewManual(time.Now())
		return openT(t, "/d", Options{fs: mem, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}), clk
	}
	fetchOrch := func(t *testing.T, p *FSProvider) string {
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatal(it, err)
		}
		return it.LockToken
	}
	fetchWork := func(t *testing.T, p *FSProvider) string {
		w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
		if err != nil || w == nil {
			t.Fatal(w, err)
		}
		return w.LockToken
	}
	cases := []struct {
		name string
		work bool
		// stale returns a token that holds no live lock.
		stale func(t *testing.T, p *FSProvider, clk *clock.Manual) string
		also  error // a more specific kind the error matches too
		// abandonOK: abandon succeeds (an expired lock nobody took over).
		abandonOK bool
	}{
		{name: "orchestration: acked", stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("o"), 0))
			tok := fetchOrch(t, p)
			mustNoErr(t, p.AckOrchestrationItem(ctx, tok, 1, []Event{started("o")}, nil, nil, md("TestOrch", "1.0.0"), nil))
			return tok
		}},
		{name: "orchestration: expired and taken over", stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("o"), 0))
			tok := fetchOrch(t, p)
			clk.Advance(2 * time.Minute)
			fetchOrch(t, p)
			return tok
		}},
		{name: "orchestration: expired", also: ErrLockExpired, abandonOK: true, stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("o"), 0))
			tok := fetchOrch(t, p)
			clk.Advance(2 * time.Minute)
			return tok
		}},
		{name: "work item: acked", work: true, also: ErrNotFound, stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 1, Name: "a", Input: "x"}))
			tok := fetchWork(t, p)
			mustNoErr(t, p.AckWorkItem(ctx, tok, nil))
			return tok
		}},
		{name: "work item: expired and taken over", work: true, stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 1, Name: "a", Input: "x"}))
			tok := fetchWork(t, p)
			clk.Advance(2 * time.Minute)
			fetchWork(t, p)
			return tok
		}},
		{name: "work item: expired", work: true, also: ErrLockExpired, abandonOK: true, stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 1, Name: "a", Input: "x"}))
			tok := fetchWork(t, p)
			clk.Advance(2 * time.Minute)
			return tok
		}},
		{name: "work item: cancelled (its instance deleted)", work: true, also: ErrNotFound, stale: func(t *testing.T, p *FSProvider, clk *clock.Manual) string {
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 1, Name: "a", Input: "x"}))
			tok := fetchWork(t, p)
			if _, err := p.DeleteInstancesAtomic(ctx, []string{"wi"}, true); err != nil {
				t.Fatal(err)
			}
			return tok
		}},
	}
	for _, c := range cases {
		ops := orchOps
		if c.work {
			ops = workOps
		}
		for _, o := range ops {
			t.Run(c.name+"/"+o.name, func(t *testing.T) {
				p, clk := open(t)
				tok := c.stale(t, p, clk)
				err := o.call(p, tok)
				if o.name == "abandon" && c.abandonOK {
					mustNoErr(t, err)
					return
				}
				if err == nil || IsRetryable(err) || !errors.Is(err, ErrInvalidLockToken) {
					t.Fatalf("%s = %v; want a permanent error matching ErrInvalidLockToken", o.name, err)
				}
				if c.also != nil && !errors.Is(err, c.also) {
					t.Errorf("%s = %v; want it to match %v too", o.name, err, c.also)
				}
			})
		}
	}
}
