package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/internal/calltime"
	"github.com/durofs/durofs/provider"
)

// Line types (Line.Type).
const (
	// TypeReady: the worker opened the provider (recovery ran in Open).
	TypeReady = "ready"
	// TypeIntent: an AckOrchestrationItem call is about to be made.
	TypeIntent = "intent"
	// TypeOK: the call returned nil (reported by the runtime's OnAck).
	TypeOK = "ok"
	// TypeErr: the call returned an error.
	TypeErr = "err"
	// TypeActivity: an activity work item was fetched (it is about to run).
	TypeActivity = "act"
	// TypeWorkAckRejected: an AckWorkItem failed because the work item's
	// lock was lost (expired or taken over) or the item was cancelled.
	TypeWorkAckRejected = "wack"
	// TypeWorkAck: an AckWorkItem returned nil (with its latency; other
	// failures than TypeWorkAckRejected's come as TypeWorkAckFailed).
	TypeWorkAck = "wok"
	// TypeWorkAckFailed: an AckWorkItem failed with a retryable error.
	TypeWorkAckFailed = "wfail"
	// TypeSlow: an ack call has been running for long (the stall test);
	// Err says what the worker's calls wait for and who holds it.
	TypeSlow = "slow"
	// TypeStats: the worker's counters (periodically and at a graceful exit).
	TypeStats = "stats"

	// The supervisor adds two types of its own to its log of worker lines,
	// so that Replay can rebuild the oracle from the log alone.

	// TypeGone: the incarnation has exited and its output was read to the
	// end (Killed: it was SIGKILLed).
	TypeGone = "gone"
	// TypeRaise: the driver tried to raise Instance's external event.
	TypeRaise = "raise"
)

// Line is one line of a worker's stdout, as JSON.
type Line struct {
	Type string `json:"t"`
	// Seq numbers the worker's ack calls (intent, ok, err).
	Seq uint64 `json:"seq,omitempty"`
	// Instance and Exec name an execution (intent, ok, err, act).
	Instance string `json:"instance,omitempty"`
	Exec     uint64 `json:"exec,omitempty"`
	// Events are the history delta's exact JSON (intent, ok).
	Events []json.RawMessage `json:"events,omitempty"`
	// Activity is the activity id (act).
	Activity uint64 `json:"activity,omitempty"`
	// Err is the error (err, wack); Stale says it was a lost lock, Taken
	// that another holder had taken the lock over (not merely expired).
	Err   string `json:"err,omitempty"`
	Stale bool   `json:"stale,omitempty"`
	Taken bool   `json:"taken,omitempty"`
	// Armed marks an intent delayed on the parent's request; Paused says
	// the delay overran by more than the lock timeout (err, ok).
	Armed  bool `json:"armed,omitempty"`
	Paused bool `json:"paused,omitempty"`
	// AckMs is how long the provider call took, in milliseconds (ok, err,
	// wok, wack, wfail; an armed ack's delay is not included).
	AckMs float64 `json:"ack_ms,omitempty"`
	// AckAtUs is when that call began (Unix microseconds).
	AckAtUs int64 `json:"ack_at_us,omitempty"`
	// SyncMs is how much of AckMs the call waited for the log's group
	// fdatasync (internal/calltime): time on the disk, which another
	// process delays by at most the log's lead bound (ok, err, wok, wack,
	// wfail).
	SyncMs float64 `json:"sync_ms,omitempty"`
	// PID, OpenMs and Recovery describe a ready worker; Recovery and Stats
	// also come with stats lines.
	PID      int                     `json:"pid,omitempty"`
	OpenMs   float64                 `json:"open_ms,omitempty"`
	Recovery *provider.RecoveryStats `json:"recovery,omitempty"`
	Stats    *workload.Stats         `json:"stats,omitempty"`
	Final    bool                    `json:"final,omitempty"`
	// Killed says a gone worker was SIGKILLed.
	Killed bool `json:"killed,omitempty"`
}

// Encode returns l as one JSON line. HTML characters are not escaped, so
// the events' bytes are exactly the provider's.
func (l Line) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Recorder wraps a provider and reports every orchestration ack and every
// activity fetch through emit. Wire the runtime's OnAck hook to
// Recorder.OnAck. emit is called from several goroutines, never
// concurrently for one call, and must have written the line before it
// returns (the worker continues only then).
type Recorder struct {
	provider.Provider
	emit func(Line)
	// armDelay is how long an armed ack waits before calling the provider,
	// and pauseAfter how much longer it must have taken to count as paused.
	armDelay, pauseAfter time.Duration

	// SlowAck, if set, is called (from another goroutine) when an ack call
	// is still running SlowAfter after it began: the stall test's workers
	// dump their goroutines then, to show what the call waits for.
	SlowAck   func(kind string, began time.Time)
	SlowAfter time.Duration

	mu     sync.Mutex
	seq    uint64
	armed  bool
	tokens map[string]string // orchestration lock token → instance
	okSeq  map[string]okInfo // instance → its last successful ack, until OnAck
}

// okInfo is what OnAck reports about the ack it follows.
type okInfo struct {
	seq           uint64
	armed, paused bool
	ackMs, syncMs float64
	ackAt         int64
}

// NewRecorder wraps p. armDelay and pauseAfter configure [Recorder.Arm]
// (zero values: no delay).
func NewRecorder(p provider.Provider, emit func(Line), armDelay, pauseAfter time.Duration) *Recorder {
	return &Recorder{
		Provider: p, emit: emit, armDelay: armDelay, pauseAfter: pauseAfter,
		tokens: map[string]string{}, okSeq: map[string]okInfo{},
	}
}

// Arm delays the next orchestration ack by the arm delay, after its intent
// has been reported with Armed set: the parent stops the worker (SIGSTOP)
// when it sees that intent, so the worker holds the instance's lease while
// it is stopped (a zombie holder).
func (r *Recorder) Arm() {
	r.mu.Lock()
	r.armed = true
	r.mu.Unlock()
}

// FetchOrchestrationItem implements provider.Provider, remembering which
// instance a lock token belongs to.
func (r *Recorder) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*provider.LockedOrchestrationItem, error) {
	li, err := r.Provider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
	if err == nil && li != nil {
		r.mu.Lock()
		r.tokens[li.LockToken] = li.Item.Instance
		r.mu.Unlock()
	}
	return li, err
}

// AckOrchestrationItem implements provider.Provider: it reports the intent,
// makes the call and reports a failure.
func (r *Recorder) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []provider.Event, workerItems, orchestratorItems []provider.WorkItem, metadata provider.ExecutionMetadata, cancelledActivities []provider.ScheduledActivityIdentifier) error {
	r.mu.Lock()
	r.seq++
	seq := r.seq
	instance := r.tokens[lockToken]
	armed := r.armed && r.armDelay > 0
	r.armed = r.armed && !armed
	r.mu.Unlock()

	// The clock starts before the intent is reported: the parent may stop
	// this process as soon as the line is written.
	start := time.Now()
	r.emit(Line{Type: TypeIntent, Seq: seq, Instance: instance, Exec: executionID, Events: eventJSON(historyDelta), Armed: armed})
	paused := false
	if armed {
		t := time.NewTimer(r.armDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		paused = time.Since(start) >= r.armDelay+r.pauseAfter
	}
	callStart := time.Now()
	defer r.watch("orch", callStart)()
	var times calltime.Times
	err := r.Provider.AckOrchestrationItem(calltime.With(ctx, &times), lockToken, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelledActivities)
	ackMs, syncMs := msSince(callStart), ms(times.LogSync())
	if err != nil {
		r.emit(Line{Type: TypeErr, Seq: seq, Instance: instance, Exec: executionID, Err: err.Error(), Stale: lockLost(err),
			Taken: errors.Is(err, provider.ErrInvalidLockToken), Armed: armed, Paused: paused, AckMs: ackMs, AckAtUs: callStart.UnixMicro(), SyncMs: syncMs})
		return err
	}
	r.mu.Lock()
	delete(r.tokens, lockToken)
	r.okSeq[instance] = okInfo{seq: seq, armed: armed, paused: paused, ackMs: ackMs, syncMs: syncMs, ackAt: callStart.UnixMicro()}
	r.mu.Unlock()
	return nil
}

// AbandonOrchestrationItem implements provider.Provider.
func (r *Recorder) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	err := r.Provider.AbandonOrchestrationItem(ctx, lockToken, delay, ignoreAttempt)
	r.mu.Lock()
	delete(r.tokens, lockToken)
	r.mu.Unlock()
	return err
}

// OnAck is the runtime's OnAck hook: it reports the successful ack.
func (r *Recorder) OnAck(instance string, executionID uint64, events []provider.Event) {
	r.mu.Lock()
	info := r.okSeq[instance]
	delete(r.okSeq, instance)
	r.mu.Unlock()
	r.emit(Line{Type: TypeOK, Seq: info.seq, Instance: instance, Exec: executionID, Events: eventJSON(events),
		Armed: info.armed, Paused: info.paused, AckMs: info.ackMs, AckAtUs: info.ackAt, SyncMs: info.syncMs})
}

// FetchWorkItem implements provider.Provider, reporting every activity
// fetched (it is about to run: at-least-once executions are counted from
// these reports).
func (r *Recorder) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *provider.SessionFetchConfig, tagFilter provider.TagFilter) (*provider.LockedWorkItem, error) {
	li, err := r.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tagFilter)
	if err == nil && li != nil {
		if ae, ok := li.Item.(provider.ActivityExecute); ok {
			r.emit(Line{Type: TypeActivity, Instance: ae.Instance, Exec: ae.ExecutionID, Activity: ae.ID})
		}
	}
	return li, err
}

// AckWorkItem implements provider.Provider, reporting every call with its
// latency: acks rejected because the lock was lost (or the item was
// cancelled), other failures, and successes.
func (r *Recorder) AckWorkItem(ctx context.Context, token string, completion provider.WorkItem) error {
	start := time.Now()
	stopWatch := r.watch("work", start)
	var times calltime.Times
	err := r.Provider.AckWorkItem(calltime.With(ctx, &times), token, completion)
	stopWatch()
	ackMs, syncMs := msSince(start), ms(times.LogSync())
	switch {
	case err == nil:
		r.emit(Line{Type: TypeWorkAck, AckMs: ackMs, AckAtUs: start.UnixMicro(), SyncMs: syncMs})
	case !provider.IsRetryable(err):
		r.emit(Line{Type: TypeWorkAckRejected, Err: err.Error(), Stale: lockLost(err), AckMs: ackMs, AckAtUs: start.UnixMicro(), SyncMs: syncMs})
	default:
		r.emit(Line{Type: TypeWorkAckFailed, Err: err.Error(), AckMs: ackMs, AckAtUs: start.UnixMicro(), SyncMs: syncMs})
	}
	return err
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// watch calls SlowAck if the call that began at began is still running
// SlowAfter later; the returned function ends the watch.
func (r *Recorder) watch(kind string, began time.Time) func() {
	if r.SlowAck == nil || r.SlowAfter <= 0 {
		return func() {}
	}
	t := time.AfterFunc(r.SlowAfter, func() { r.SlowAck(kind, began) })
	return func() { t.Stop() }
}

// msSince returns the time since start in milliseconds (at least 0.001, so
// that a reported latency is never omitted as zero).
func msSince(start time.Time) float64 {
	return max(float64(time.Since(start).Microseconds())/1000, 0.001)
}

// lockLost reports whether err says the caller's lock had expired or been
// taken over.
func lockLost(err error) bool {
	return errors.Is(err, provider.ErrLockExpired) || errors.Is(err, provider.ErrInvalidLockToken)
}

// eventJSON returns each event's exact JSON (what the provider stores).
func eventJSON(events []provider.Event) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(events))
	for _, e := range events {
		raw, err := e.MarshalJSON()
		if err != nil {
			// The provider rejects the ack too; report something parsable.
			raw, _ = json.Marshal(map[string]any{"event_id": e.EventID, "unencodable": err.Error()})
		}
		var buf bytes.Buffer
		if json.Compact(&buf, raw) == nil {
			raw = buf.Bytes()
		}
		out = append(out, raw)
	}
	return out
}
