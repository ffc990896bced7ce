package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/provider"
)

// RuntimeOptions configure a Runtime. Zero values select the defaults.
type RuntimeOptions struct {
	// Dispatchers is the number of orchestration dispatcher loops (default 1).
	Dispatchers int
	// Workers is the number of activity worker loops (default 1).
	Workers int
	// LockTimeout is the lock of every fetch (default 5 s).
	LockTimeout time.Duration
	// PollTimeout is the long-poll timeout of every fetch (default 200 ms).
	PollTimeout time.Duration
	// AbandonDelay is the delay of an abandoned orchestration item (default 50 ms).
	AbandonDelay time.Duration
	// MaxRetries is how many times a call that failed with a retryable error
	// is retried before giving up (default 3).
	MaxRetries int
	// MaxAttempts fails an orchestration with a poison error once a batch
	// was fetched more often than this (default 50).
	MaxAttempts uint32
	// ActivityDelay is added to every activity's run time (default none).
	ActivityDelay time.Duration
	// SlowActivity is how long the "Slow" activity runs unless cancelled
	// (default 30 s).
	SlowActivity time.Duration
	// RenewInterval is how often a running activity's lock is renewed; a
	// renewal that fails permanently (the item was cancelled or the lock
	// lost) interrupts the activity. Default min(LockTimeout/3, 500 ms).
	RenewInterval time.Duration
	// Logger receives the runtime's logs (default slog.Default()).
	Logger *slog.Logger
	// OnAck, if set, is called after every successful orchestration ack with
	// the instance, the execution acked and its history delta. It is called
	// from several goroutines at once and must not retain events' slices
	// beyond the call unless it copies them.
	OnAck func(instance string, executionID uint64, events []provider.Event)
}

func (o RuntimeOptions) withDefaults() RuntimeOptions {
	if o.Dispatchers <= 0 {
		o.Dispatchers = 1
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 5 * time.Second
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 200 * time.Millisecond
	}
	if o.AbandonDelay <= 0 {
		o.AbandonDelay = 50 * time.Millisecond
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 50
	}
	if o.SlowActivity <= 0 {
		o.SlowActivity = 30 * time.Second
	}
	if o.RenewInterval <= 0 {
		o.RenewInterval = min(o.LockTimeout/3, 500*time.Millisecond)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Stats are a Runtime's counters. JSON field names are stable: the demo's
// worker processes report them as one JSON line.
type Stats struct {
	// Turns counts successful orchestration acks.
	Turns int64 `json:"turns"`
	// Events counts history events appended by those acks.
	Events int64 `json:"events"`
	// ExecutionsEnded counts executions this runtime completed, failed or
	// continued as new.
	ExecutionsEnded int64 `json:"executions_ended"`
	// StaleMessages counts messages consumed without effect (late or for
	// another execution).
	StaleMessages int64 `json:"stale_messages"`
	// ActivitiesExecuted counts activity runs (including duplicates and
	// interrupted runs).
	ActivitiesExecuted int64 `json:"activities_executed"`
	// DuplicateActivityExecutions counts runs of an activity (instance,
	// execution, id) that this runtime had already run: redeliveries after a
	// lost lock. At-least-once execution makes them legal. A redelivery to
	// another Runtime (another process) is not seen here.
	DuplicateActivityExecutions int64 `json:"duplicate_activity_executions"`
	// ActivitiesAcked counts activity completions acked.
	ActivitiesAcked int64 `json:"activities_acked"`
	// ActivitiesDropped counts activities whose ack failed permanently
	// (cancelled, or the lock was lost to another worker).
	ActivitiesDropped int64 `json:"activities_dropped"`
	// ActivitiesCancelled counts running activities interrupted because a
	// lock renewal failed permanently.
	ActivitiesCancelled int64 `json:"activities_cancelled"`
	// AcksFailed counts orchestration ack calls that returned an error.
	AcksFailed int64 `json:"acks_failed"`
	// Abandons counts abandoned orchestration items.
	Abandons int64 `json:"abandons"`
	// FetchErrors counts fetch calls (both queues) that returned an error.
	FetchErrors int64 `json:"fetch_errors"`
}

// Runtime drives a provider like duroxide's runtime. Create it with
// NewRuntime and call Run once.
type Runtime struct {
	p    provider.Provider
	opts RuntimeOptions
	log  *slog.Logger

	turns, events, ended, stale             atomic.Int64
	actRun, actDup, actAcked, actDropped    atomic.Int64
	actCancelled, acksFailed, abandons, fer atomic.Int64

	mu   sync.Mutex
	runs map[provider.ScheduledActivityIdentifier]int
}

// NewRuntime returns a runtime for p.
func NewRuntime(p provider.Provider, opts RuntimeOptions) *Runtime {
	opts = opts.withDefaults()
	return &Runtime{p: p, opts: opts, log: opts.Logger, runs: map[provider.ScheduledActivityIdentifier]int{}}
}

// Stats returns a snapshot of the counters.
func (r *Runtime) Stats() Stats {
	return Stats{
		Turns: r.turns.Load(), Events: r.events.Load(), ExecutionsEnded: r.ended.Load(), StaleMessages: r.stale.Load(),
		ActivitiesExecuted: r.actRun.Load(), DuplicateActivityExecutions: r.actDup.Load(),
		ActivitiesAcked: r.actAcked.Load(), ActivitiesDropped: r.actDropped.Load(), ActivitiesCancelled: r.actCancelled.Load(),
		AcksFailed: r.acksFailed.Load(), Abandons: r.abandons.Load(), FetchErrors: r.fer.Load(),
	}
}

// Add returns the field-wise sum of s and o.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Turns: s.Turns + o.Turns, Events: s.Events + o.Events, ExecutionsEnded: s.ExecutionsEnded + o.ExecutionsEnded,
		StaleMessages: s.StaleMessages + o.StaleMessages, ActivitiesExecuted: s.ActivitiesExecuted + o.ActivitiesExecuted,
		DuplicateActivityExecutions: s.DuplicateActivityExecutions + o.DuplicateActivityExecutions,
		ActivitiesAcked:             s.ActivitiesAcked + o.ActivitiesAcked, ActivitiesDropped: s.ActivitiesDropped + o.ActivitiesDropped,
		ActivitiesCancelled: s.ActivitiesCancelled + o.ActivitiesCancelled, AcksFailed: s.AcksFailed + o.AcksFailed,
		Abandons: s.Abandons + o.Abandons, FetchErrors: s.FetchErrors + o.FetchErrors,
	}
}

// Run runs the dispatcher and worker loops until ctx is done, then waits
// for them to finish their current item and returns nil. A turn or activity
// ack that has started when ctx ends is still completed (with a bounded
// timeout), so a graceful stop loses no finished work.
func (r *Runtime) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range r.opts.Dispatchers {
		wg.Go(func() { r.dispatchLoop(ctx, i) })
	}
	for i := range r.opts.Workers {
		wg.Go(func() { r.workLoop(ctx, i) })
	}
	wg.Wait()
	return nil
}

// detached is the context of calls that finish an item after ctx ended.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// backoff is the wait before retry i (0-based) of a retryable call.
func backoff(i int) time.Duration { return time.Duration(10<<min(i, 6)) * time.Millisecond }

// ---- orchestration dispatcher ----

func (r *Runtime) dispatchLoop(ctx context.Context, n int) {
	log := r.log.With("dispatcher", n)
	errs := 0
	for ctx.Err() == nil {
		item, err := r.p.FetchOrchestrationItem(ctx, r.opts.LockTimeout, r.opts.PollTimeout, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fer.Add(1)
			errs++
			log.Warn("workload: fetch orchestration item", "err", err, "retryable", provider.IsRetryable(err))
			sleepCtx(ctx, backoff(errs))
			continue
		}
		errs = 0
		if item == nil {
			continue
		}
		r.processTurn(ctx, log, item)
	}
}

// processTurn decides and acks one fetched item, abandoning it if that
// fails.
func (r *Runtime) processTurn(ctx context.Context, log *slog.Logger, li *provider.LockedOrchestrationItem) {
	actx, cancel := detached(ctx)
	defer cancel()
	item := li.Item
	log = log.With("instance", item.Instance, "execution", item.ExecutionID)
	if item.HistoryError != nil {
		log.Warn("workload: history cannot be read; abandoning", "history_error", *item.HistoryError)
		r.abandon(actx, log, li.LockToken)
		return
	}
	var t turn
	if li.AttemptCount > r.opts.MaxAttempts {
		t = poisonTurn(item, li.AttemptCount, r.opts.MaxAttempts, uint64(time.Now().UnixMilli()))
	} else {
		t = decide(item, uint64(time.Now().UnixMilli()))
	}
	if t.notify != nil {
		pe, err := r.parentExecution(actx, t.notify.parent)
		if err != nil {
			log.Warn("workload: look up parent execution; abandoning", "parent", t.notify.parent, "err", err)
			r.abandon(actx, log, li.LockToken)
			return
		}
		if t.notify.details == nil {
			t.orchItems = append(t.orchItems, provider.SubOrchCompleted{
				ParentInstance: t.notify.parent, ParentExecutionID: pe, ParentID: t.notify.parentID, Result: t.notify.result,
			})
		} else {
			t.orchItems = append(t.orchItems, provider.SubOrchFailed{
				ParentInstance: t.notify.parent, ParentExecutionID: pe, ParentID: t.notify.parentID, Details: t.notify.details,
			})
		}
	}
	for i := 0; ; i++ {
		err := r.p.AckOrchestrationItem(actx, li.LockToken, t.execID, t.delta, t.worker, t.orchItems, t.metadata, t.cancelled)
		if err == nil {
			break
		}
		r.acksFailed.Add(1)
		if !provider.IsRetryable(err) || i >= r.opts.MaxRetries {
			log.Warn("workload: ack orchestration item failed; abandoning", "err", err, "attempts", i+1)
			r.abandon(actx, log, li.LockToken)
			return
		}
		log.Debug("workload: ack orchestration item: retrying", "err", err)
		sleepCtx(actx, backoff(i))
	}
	r.turns.Add(1)
	r.events.Add(int64(len(t.delta)))
	r.stale.Add(int64(t.skipped))
	if t.ended != "" {
		r.ended.Add(1)
	}
	if r.opts.OnAck != nil {
		r.opts.OnAck(item.Instance, t.execID, t.delta)
	}
}

func (r *Runtime) abandon(ctx context.Context, log *slog.Logger, token string) {
	r.abandons.Add(1)
	for i := 0; ; i++ {
		err := r.p.AbandonOrchestrationItem(ctx, token, r.opts.AbandonDelay, false)
		if err == nil || !provider.IsRetryable(err) || i >= r.opts.MaxRetries {
			if err != nil {
				// The lock expires on its own.
				log.Debug("workload: abandon orchestration item", "err", err)
			}
			return
		}
		sleepCtx(ctx, backoff(i))
	}
}

// parentExecution is the current execution of a sub-orchestration's parent
// (as duroxide's runtime looks it up when the child finishes).
func (r *Runtime) parentExecution(ctx context.Context, parent string) (uint64, error) {
	if adm, ok := r.p.Admin(); ok && adm != nil {
		id, err := adm.LatestExecutionID(ctx, parent)
		if err != nil {
			return 0, fmt.Errorf("latest execution of %q: %w", parent, err)
		}
		return id, nil
	}
	h, err := r.p.Read(ctx, parent)
	if err != nil {
		return 0, fmt.Errorf("read %q: %w", parent, err)
	}
	if len(h) > 0 && h[len(h)-1].ExecutionID > 0 {
		return h[len(h)-1].ExecutionID, nil
	}
	return provider.InitialExecutionID, nil
}

// poisonTurn fails an execution whose batch was fetched too often.
func poisonTurn(item provider.OrchestrationItem, attempts, maxAttempts uint32, nowMs uint64) turn {
	execID := max(item.ExecutionID, provider.InitialExecutionID)
	t := turn{execID: execID, skipped: len(item.Messages)}
	if len(item.History) == 0 || terminalKind(item.History[len(item.History)-1].Kind) {
		return t // nothing running: just consume the batch
	}
	d := provider.PoisonError{AttemptCount: attempts, MaxAttempts: maxAttempts, Message: "orchestration exceeded its attempts",
		MessageType: provider.PoisonMessageType{Kind: "Orchestration", Instance: item.Instance, ExecutionID: execID}}
	ev := newEvent(item.Instance, execID, maxEventID(item.History)+1, nil, nowMs, provider.OrchestrationFailed{Details: d})
	t.delta = []provider.Event{ev}
	status, output := StatusFailed, d.DisplayMessage()
	t.metadata.Status, t.metadata.Output = &status, &output
	t.ended = status
	return t
}

// ---- activity worker ----

func (r *Runtime) workLoop(ctx context.Context, n int) {
	log := r.log.With("worker", n)
	errs := 0
	for ctx.Err() == nil {
		li, err := r.p.FetchWorkItem(ctx, r.opts.LockTimeout, r.opts.PollTimeout, nil, provider.DefaultOnlyTags())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fer.Add(1)
			errs++
			log.Warn("workload: fetch work item", "err", err, "retryable", provider.IsRetryable(err))
			sleepCtx(ctx, backoff(errs))
			continue
		}
		errs = 0
		if li == nil {
			continue
		}
		r.processActivity(ctx, log, li)
	}
}

// errLockLost interrupts an activity whose lock renewal failed permanently.
var errLockLost = errors.New("work item lock lost or activity cancelled")

func (r *Runtime) processActivity(ctx context.Context, log *slog.Logger, li *provider.LockedWorkItem) {
	actx, cancel := detached(ctx)
	defer cancel()
	ae, ok := li.Item.(provider.ActivityExecute)
	if !ok {
		log.Warn("workload: unexpected worker item; abandoning", "kind", li.Item.Kind())
		_ = r.p.AbandonWorkItem(actx, li.LockToken, r.opts.AbandonDelay, false)
		return
	}
	log = log.With("instance", ae.Instance, "execution", ae.ExecutionID, "activity", ae.ID, "name", ae.Name)
	id := provider.ScheduledActivityIdentifier{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ActivityID: ae.ID}
	r.mu.Lock()
	r.runs[id]++
	dup := r.runs[id] > 1
	r.mu.Unlock()
	r.actRun.Add(1)
	if dup {
		r.actDup.Add(1)
	}

	// The activity runs under runCtx: cancelled when the runtime stops or a
	// renewal says the item is gone.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		r.renewWhileRunning(runCtx, log, li.LockToken, stop)
	}()
	result, err := func() (string, error) {
		if r.opts.ActivityDelay > 0 {
			sleepCtx(runCtx, r.opts.ActivityDelay)
			if runCtx.Err() != nil {
				return "", runCtx.Err()
			}
		}
		return runActivity(runCtx, ae.Name, ae.Input, r.opts.SlowActivity)
	}()
	stop(nil)
	<-renewDone

	var completion provider.WorkItem
	switch {
	case err == nil:
		completion = provider.ActivityCompleted{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID, Result: result}
	case isActivityFailure(err):
		completion = provider.ActivityFailed{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID,
			Details: provider.ApplicationError{Kind: provider.AppActivityFailed, Message: err.Error()}}
	case errors.Is(context.Cause(runCtx), errLockLost):
		r.actCancelled.Add(1)
		log.Debug("workload: activity interrupted: lock lost or cancelled")
		return
	default:
		// The runtime is stopping: hand the item back at once.
		if aerr := r.p.AbandonWorkItem(actx, li.LockToken, 0, true); aerr != nil {
			log.Debug("workload: abandon work item", "err", aerr)
		}
		return
	}
	for i := 0; ; i++ {
		err := r.p.AckWorkItem(actx, li.LockToken, completion)
		if err == nil {
			r.actAcked.Add(1)
			return
		}
		if !provider.IsRetryable(err) {
			// Cancelled, or the lock expired and another worker owns it.
			r.actDropped.Add(1)
			log.Debug("workload: ack work item failed permanently; dropping", "err", err)
			return
		}
		if i >= r.opts.MaxRetries {
			log.Warn("workload: ack work item failed; the item is redelivered after its lock expires", "err", err)
			return
		}
		sleepCtx(actx, backoff(i))
	}
}

// renewWhileRunning renews the work item's lock every RenewInterval until
// ctx is done; a permanent renewal failure cancels ctx with errLockLost.
func (r *Runtime) renewWhileRunning(ctx context.Context, log *slog.Logger, token string, stop context.CancelCauseFunc) {
	tick := time.NewTicker(r.opts.RenewInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := r.p.RenewWorkItemLock(ctx, token, r.opts.LockTimeout)
		if err == nil || ctx.Err() != nil {
			continue
		}
		if !provider.IsRetryable(err) {
			stop(errLockLost)
			return
		}
		log.Debug("workload: renew work item lock", "err", err)
	}
}
