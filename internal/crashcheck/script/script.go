// Package script is the fixed, deterministic sequence of provider operations
// that the crash suites run: the crash-point sweep (scripts/crashtest) kills
// a process running it at every failpoint, and the power-loss simulation
// (provider/powerloss_test.go) takes a crash image at every sync point. A
// second script, GWSteps (gw.go), drives the go-workflows engine operations
// the same way; the crash-point sweep runs both.
//
// The script touches every multi-file operation of the provider: enqueues to
// both queues, orchestration turns whose acks carry worker items, orchestrator
// items to other instances, due and future timers, cancelled activities
// (queued, and scheduled in the same ack), continue-as-new, work-item fetch,
// abandon and ack, orchestration abandon, prune, the atomic deletion of an
// instance tree with queued and locked messages, and checkpoints of the
// write-ahead log.
//
// Every event, work item and message payload of the script is distinct, and
// each step checks what it fetched, so a run is reproducible: two runs on
// fresh directories leave equal [crashcheck.Snapshot] facts after every step.
// A step that runs again after a crash (on the state before it) does the
// same thing; a lease or claim left behind by a killed process must have
// expired first, which a runner arranges by skewing its clock forward.
package script

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/durofs/durofs/provider"
)

// Step is one operation of the script.
type Step struct {
	// Name describes the step ("turn A#2", "prune C", ...).
	Name string
	run  func(ctx context.Context, e *Env) error
}

// Env is what the steps run against.
type Env struct {
	// P is the provider.
	P *provider.FSProvider
	// Lock is the lock timeout of fetches (default 30 s).
	Lock time.Duration
}

func (e *Env) lock() time.Duration {
	if e.Lock <= 0 {
		return 30 * time.Second
	}
	return e.Lock
}

// Fixed values that keep every run identical.
const (
	baseTimestampMs = 1_700_000_000_000
	duroxideVersion = "0.1.26"
	orchName        = "CrashOrch"
	orchVersion     = "1.0.0"
	dueFireAtMs     = 1_000             // a timer already due
	futureFireAtMs  = 4_102_444_800_000 // 2100-01-01: a timer that stays queued
)

func ev(inst string, exec, id uint64, k provider.EventKind) provider.Event {
	return provider.Event{EventID: id, InstanceID: inst, ExecutionID: exec, TimestampMs: baseTimestampMs + id, DuroxideVersion: duroxideVersion, Kind: k}
}

func completion(inst string, exec, id, src uint64, result string) provider.Event {
	e := ev(inst, exec, id, provider.ActivityCompletedEvent{Result: result})
	e.SourceEventID = &src
	return e
}

func started(inst string, exec uint64, input string, parent *string, parentID *uint64) provider.Event {
	return ev(inst, exec, 1, provider.OrchestrationStarted{Name: orchName, Version: orchVersion, Input: input, ParentInstance: parent, ParentID: parentID})
}

func startItem(inst string, parent *string, parentID *uint64) provider.StartOrchestration {
	v := orchVersion
	return provider.StartOrchestration{Instance: inst, Orchestration: orchName, Input: "in-" + inst, Version: &v, ParentInstance: parent, ParentID: parentID, ExecutionID: 1}
}

func activity(inst string, exec, id uint64) provider.ActivityExecute {
	return provider.ActivityExecute{Instance: inst, ExecutionID: exec, ID: id, Name: fmt.Sprintf("act-%s-%d", inst, id), Input: fmt.Sprintf("%d", id)}
}

func md(status, output string, parent *string) provider.ExecutionMetadata {
	n, v := orchName, orchVersion
	m := provider.ExecutionMetadata{OrchestrationName: &n, OrchestrationVersion: &v, ParentInstanceID: parent}
	if status != "" {
		m.Status, m.Output = &status, &output
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// turn fetches one orchestration item, checks that it is inst's with
// messages of the given kinds, and acks it.
type turn struct {
	inst      string
	exec      uint64
	kinds     []string
	delta     []provider.Event
	worker    []provider.WorkItem
	orch      []provider.WorkItem
	md        provider.ExecutionMetadata
	cancelled []provider.ScheduledActivityIdentifier
	abandon   bool // abandon (ignoring the attempt) instead of acking
}

func (t turn) run(ctx context.Context, e *Env) error {
	it, err := fetchOrch(ctx, e, t.inst, t.kinds)
	if err != nil {
		return err
	}
	if t.abandon {
		return e.P.AbandonOrchestrationItem(ctx, it.LockToken, 0, true)
	}
	return e.P.AckOrchestrationItem(ctx, it.LockToken, t.exec, t.delta, t.worker, t.orch, t.md, t.cancelled)
}

func fetchOrch(ctx context.Context, e *Env, inst string, kinds []string) (*provider.LockedOrchestrationItem, error) {
	it, err := e.P.FetchOrchestrationItem(ctx, e.lock(), 0, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	if it == nil {
		return nil, fmt.Errorf("fetch: no orchestration item, want %s %v", inst, kinds)
	}
	var got []string
	for _, m := range it.Item.Messages {
		got = append(got, m.Kind())
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(kinds))
	if it.Item.Instance != inst || !slices.Equal(got, want) {
		return nil, fmt.Errorf("fetch: got %s %v, want %s %v", it.Item.Instance, got, inst, want)
	}
	return it, nil
}

// work fetches one work item, checks it is want, and acks it with a
// completion, abandons it, or keeps its lock (hold).
type work struct {
	want    provider.ActivityExecute
	result  string
	abandon bool
	hold    bool
}

func (w work) run(ctx context.Context, e *Env) error {
	it, err := e.P.FetchWorkItem(ctx, e.lock(), 0, nil, provider.DefaultOnlyTags())
	if err != nil {
		return fmt.Errorf("fetch work: %w", err)
	}
	if it == nil {
		return fmt.Errorf("fetch work: no work item, want %s/%d", w.want.Instance, w.want.ID)
	}
	ae, ok := it.Item.(provider.ActivityExecute)
	if !ok || ae.Instance != w.want.Instance || ae.ID != w.want.ID || ae.ExecutionID != w.want.ExecutionID {
		return fmt.Errorf("fetch work: got %+v, want %s/%d", it.Item, w.want.Instance, w.want.ID)
	}
	switch {
	case w.hold:
		return nil
	case w.abandon:
		return e.P.AbandonWorkItem(ctx, it.LockToken, 0, false)
	}
	return e.P.AckWorkItem(ctx, it.LockToken, provider.ActivityCompleted{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID, Result: w.result})
}

// checkpoint runs a checkpoint: it fsyncs what the records since the last
// one touched and trims the write-ahead log.
func checkpoint(ctx context.Context, e *Env) error { return e.P.Checkpoint(ctx) }

// Steps returns the script. Step numbers in reports are 1-based indexes into
// it.
func Steps() []Step {
	const a, b, c, r, rc, w = "A", "B", "C", "R", "R::c", "W"
	r2 := uint64(2)
	return []Step{
		{"enqueue start A", func(ctx context.Context, e *Env) error {
			return e.P.EnqueueForOrchestrator(ctx, startItem(a, nil, nil), 0)
		}},
		{"turn A#1: 3 activities (1 cancelled in the same ack), 2 timers, start B, raise B", turn{
			inst: a, exec: 1, kinds: []string{"StartOrchestration"},
			delta: []provider.Event{
				started(a, 1, "in-A", nil, nil),
				ev(a, 1, 2, provider.ActivityScheduled{Name: "act-A-2", Input: "2"}),
				ev(a, 1, 3, provider.ActivityScheduled{Name: "act-A-3", Input: "3"}),
				ev(a, 1, 4, provider.ActivityScheduled{Name: "act-A-4", Input: "4"}),
				ev(a, 1, 5, provider.TimerCreated{FireAtMs: dueFireAtMs}),
				ev(a, 1, 6, provider.TimerCreated{FireAtMs: futureFireAtMs}),
				ev(a, 1, 7, provider.CustomStatusUpdated{Status: ptr("scheduled")}),
			},
			worker:    []provider.WorkItem{activity(a, 1, 2), activity(a, 1, 3), activity(a, 1, 4)},
			cancelled: []provider.ScheduledActivityIdentifier{{Instance: a, ExecutionID: 1, ActivityID: 4}},
			orch: []provider.WorkItem{
				startItem(b, nil, nil),
				provider.ExternalRaised{Instance: b, Name: "ping", Data: "from-A"},
				provider.TimerFired{Instance: a, ExecutionID: 1, ID: 5, FireAtMs: dueFireAtMs},
				provider.TimerFired{Instance: a, ExecutionID: 1, ID: 6, FireAtMs: futureFireAtMs},
			},
			md: md("", "", nil),
		}.run},
		{"turn B#1: complete, raise A", turn{
			inst: b, exec: 1, kinds: []string{"StartOrchestration", "ExternalRaised"},
			delta: []provider.Event{
				started(b, 1, "in-B", nil, nil),
				ev(b, 1, 2, provider.ExternalEvent{Name: "ping", Data: "from-A"}),
				ev(b, 1, 3, provider.OrchestrationCompleted{Output: "b-done"}),
			},
			orch: []provider.WorkItem{provider.ExternalRaised{Instance: a, Name: "pong", Data: "from-B"}},
			md:   md("Completed", "b-done", nil),
		}.run},
		{"work A/2: ack", work{want: activity(a, 1, 2), result: "r-A-2"}.run},
		{"turn A#2: timer, event, completion; cancel queued A/3; schedule A/12", turn{
			inst: a, exec: 1, kinds: []string{"TimerFired", "ExternalRaised", "ActivityCompleted"},
			delta: []provider.Event{
				ev(a, 1, 8, provider.TimerFiredEvent{FireAtMs: dueFireAtMs}),
				ev(a, 1, 9, provider.ExternalEvent{Name: "pong", Data: "from-B"}),
				completion(a, 1, 10, 2, "r-A-2"),
				ev(a, 1, 11, provider.ActivityCancelRequested{Reason: "crash test"}),
				ev(a, 1, 12, provider.ActivityScheduled{Name: "act-A-12", Input: "12"}),
			},
			worker:    []provider.WorkItem{activity(a, 1, 12)},
			cancelled: []provider.ScheduledActivityIdentifier{{Instance: a, ExecutionID: 1, ActivityID: 3}},
			md:        md("", "", nil),
		}.run},
		{"checkpoint", checkpoint},
		{"work A/12: abandon", work{want: activity(a, 1, 12), abandon: true}.run},
		{"work A/12: ack", work{want: activity(a, 1, 12), result: "r-A-12"}.run},
		{"fetch A, abandon", turn{inst: a, kinds: []string{"ActivityCompleted"}, abandon: true}.run},
		{"turn A#3: complete", turn{
			inst: a, exec: 1, kinds: []string{"ActivityCompleted"},
			delta: []provider.Event{
				completion(a, 1, 13, 12, "r-A-12"),
				ev(a, 1, 14, provider.OrchestrationCompleted{Output: "a-done"}),
			},
			md: md("Completed", "a-done", nil),
		}.run},
		{"enqueue start C", func(ctx context.Context, e *Env) error {
			return e.P.EnqueueForOrchestrator(ctx, startItem(c, nil, nil), 0)
		}},
		{"turn C#1: continue as new", turn{
			inst: c, exec: 1, kinds: []string{"StartOrchestration"},
			delta: []provider.Event{started(c, 1, "in-C", nil, nil), ev(c, 1, 2, provider.OrchestrationContinuedAsNew{Input: "C2"})},
			orch:  []provider.WorkItem{provider.ContinueAsNew{Instance: c, Orchestration: orchName, Input: "C2", Version: ptr(orchVersion)}},
			md:    md("ContinuedAsNew", "C2", nil),
		}.run},
		{"turn C#2: continue as new", turn{
			inst: c, exec: 2, kinds: []string{"ContinueAsNew"},
			delta: []provider.Event{started(c, 2, "C2", nil, nil), ev(c, 2, 2, provider.OrchestrationContinuedAsNew{Input: "C3"})},
			orch:  []provider.WorkItem{provider.ContinueAsNew{Instance: c, Orchestration: orchName, Input: "C3", Version: ptr(orchVersion)}},
			md:    md("ContinuedAsNew", "C3", nil),
		}.run},
		{"turn C#3: complete", turn{
			inst: c, exec: 3, kinds: []string{"ContinueAsNew"},
			delta: []provider.Event{started(c, 3, "C3", nil, nil), ev(c, 3, 2, provider.OrchestrationCompleted{Output: "c-done"})},
			md:    md("Completed", "c-done", nil),
		}.run},
		{"prune C (keep last 1)", func(ctx context.Context, e *Env) error {
			adm, _ := e.P.Admin()
			res, err := adm.PruneExecutions(ctx, c, provider.PruneOptions{KeepLast: ptr(uint32(1))})
			if err == nil && res.ExecutionsDeleted != 2 {
				err = fmt.Errorf("prune deleted %d executions, want 2", res.ExecutionsDeleted)
			}
			return err
		}},
		{"enqueue start R", func(ctx context.Context, e *Env) error {
			return e.P.EnqueueForOrchestrator(ctx, startItem(r, nil, nil), 0)
		}},
		{"turn R#1: start child R::c, schedule R/3", turn{
			inst: r, exec: 1, kinds: []string{"StartOrchestration"},
			delta: []provider.Event{
				started(r, 1, "in-R", nil, nil),
				ev(r, 1, 2, provider.SubOrchestrationScheduled{Name: orchName, Instance: rc, Input: "in-R::c"}),
				ev(r, 1, 3, provider.ActivityScheduled{Name: "act-R-3", Input: "3"}),
			},
			worker: []provider.WorkItem{activity(r, 1, 3)},
			orch:   []provider.WorkItem{startItem(rc, ptr(r), &r2)},
			md:     md("", "", nil),
		}.run},
		{"turn R::c#1: schedule R::c/2, raise R", turn{
			inst: rc, exec: 1, kinds: []string{"StartOrchestration"},
			delta: []provider.Event{
				started(rc, 1, "in-R::c", ptr(r), &r2),
				ev(rc, 1, 2, provider.ActivityScheduled{Name: "act-R::c-2", Input: "2"}),
			},
			worker: []provider.WorkItem{activity(rc, 1, 2)},
			orch:   []provider.WorkItem{provider.ExternalRaised{Instance: r, Name: "child", Data: "up"}},
			md:     md("", "", ptr(r)),
		}.run},
		{"work R/3: fetch and keep locked", work{want: activity(r, 1, 3), hold: true}.run},
		{"delete tree R (force)", func(ctx context.Context, e *Env) error {
			adm, _ := e.P.Admin()
			res, err := adm.DeleteInstance(ctx, r, true)
			if err == nil && (res.InstancesDeleted != 2 || res.QueueMessagesDeleted != 3) {
				err = fmt.Errorf("delete = %+v, want 2 instances and 3 messages", res)
			}
			return err
		}},
		{"checkpoint", checkpoint},
		{"enqueue work W/1", func(ctx context.Context, e *Env) error {
			return e.P.EnqueueForWorker(ctx, activity(w, 1, 1))
		}},
		{"work W/1: ack", work{want: activity(w, 1, 1), result: "r-W-1"}.run},
	}
}

// CheckReads reads every listed instance's executions through the provider
// API (Admin.ListInstances, ListExecutions, ReadWithExecution) and returns a
// problem for each history whose event ids are not contiguous from 1 and
// unique, or that cannot be read.
func CheckReads(ctx context.Context, p *provider.FSProvider) []string {
	adm, _ := p.Admin()
	insts, err := adm.ListInstances(ctx)
	if err != nil {
		return []string{fmt.Sprintf("list instances: %v", err)}
	}
	var problems []string
	for _, inst := range insts {
		execs, err := adm.ListExecutions(ctx, inst)
		if err != nil {
			problems = append(problems, fmt.Sprintf("list executions of %s: %v", inst, err))
			continue
		}
		for _, e := range execs {
			h, err := p.ReadWithExecution(ctx, inst, e)
			if err != nil {
				problems = append(problems, fmt.Sprintf("read %s/%d: %v", inst, e, err))
				continue
			}
			for i, ev := range h {
				if ev.EventID != uint64(i+1) {
					problems = append(problems, fmt.Sprintf("read %s/%d: event #%d has id %d (want ids contiguous from 1, unique)", inst, e, i+1, ev.EventID))
					break
				}
			}
		}
	}
	return problems
}
