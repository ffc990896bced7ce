package workload

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/durofs/durofs/provider"
)

// Violation is one broken expectation or invariant.
type Violation struct {
	// Instance is the instance concerned.
	Instance string `json:"instance"`
	// ExecutionID is the execution concerned (0: the instance as a whole).
	ExecutionID uint64 `json:"execution_id,omitempty"`
	// Check names the check: "status", "output", "metadata", "executions",
	// "event_ids", "history", "completion" or "child".
	Check string `json:"check"`
	// Detail says what was found.
	Detail string `json:"detail"`
}

// String formats the violation for humans.
func (v Violation) String() string {
	where := v.Instance
	if v.ExecutionID > 0 {
		where += "#" + strconv.FormatUint(v.ExecutionID, 10)
	}
	return where + ": " + v.Check + ": " + v.Detail
}

// Report is Verify's result.
type Report struct {
	// Instances is the number of specs checked.
	Instances int `json:"instances"`
	// Completed is how many of them reached their expected status and output.
	Completed int `json:"completed"`
	// Children is the number of sub-orchestration instances checked.
	Children int `json:"children"`
	// Executions is the number of executions read, children included.
	Executions int `json:"executions"`
	// Events is the number of history events read, children included.
	Events int `json:"events"`
	// OrchestrationStarts counts OrchestrationStarted events read.
	OrchestrationStarts int `json:"orchestration_starts"`
	// ActivityResults counts ActivityCompleted and ActivityFailed events read.
	ActivityResults int `json:"activity_results"`
	// TimersFired counts TimerFired events read.
	TimersFired int `json:"timers_fired"`
	// QueueDepths is the provider's queue depths (only with an Admin).
	QueueDepths *provider.QueueDepths `json:"queue_depths,omitempty"`
	// Violations lists every problem found; empty means the check passed.
	Violations []Violation `json:"violations,omitempty"`
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// String summarises the report on one line.
func (r Report) String() string {
	return fmt.Sprintf("%d/%d instances as expected (+%d sub-orchestrations), %d executions, %d events, %d violations",
		r.Completed, r.Instances, r.Children, r.Executions, r.Events, len(r.Violations))
}

// Verify checks the provider's final state against specs:
//
//   - every spec's instance reached its expected status and output (from
//     adm.GetInstanceInfo when adm is non-nil, which must then also agree
//     with the history; otherwise from the latest execution's last event);
//   - per execution, event ids are contiguous from 1 and unique; the first
//     event is OrchestrationStarted; only the last event is terminal, and
//     every execution but the latest ended with continue-as-new; every
//     completion names an existing scheduling event of the right kind, and
//     no operation completed twice;
//   - continue-as-new specs have N+1 executions;
//   - every sub-orchestration a checked instance scheduled is checked the
//     same way, with the result its parent recorded as expectation.
//
// Violations are reported in the Report; the error is for reads that
// failed (after a few retries of retryable errors).
func Verify(ctx context.Context, p provider.Provider, adm provider.Admin, specs []Spec) (Report, error) {
	v := &verifier{p: p, adm: adm, seen: map[string]bool{}}
	for _, s := range specs {
		v.r.Instances++
		exp := expectation{status: s.ExpectStatus, output: &s.ExpectOutput}
		if s.Kind == KindContinueAsNew {
			exp.executions = s.N + 1
		}
		ok, err := v.instance(ctx, s.Instance, exp)
		if err != nil {
			return v.r, err
		}
		if ok {
			v.r.Completed++
		}
	}
	if adm != nil {
		d, err := adm.GetQueueDepths(ctx)
		if err != nil {
			return v.r, fmt.Errorf("workload: verify: queue depths: %w", err)
		}
		v.r.QueueDepths = &d
	}
	return v.r, nil
}

// expectation is what one instance must look like.
type expectation struct {
	status string  // "" means any terminal status
	output *string // nil means any output
	// executions, if positive, is the required number of executions.
	executions int
	// parent and parentID, if set, must be in the OrchestrationStarted.
	parent   string
	parentID uint64
}

type verifier struct {
	p    provider.Provider
	adm  provider.Admin
	r    Report
	seen map[string]bool
}

func (v *verifier) violate(instance string, exec uint64, check, format string, args ...any) {
	v.r.Violations = append(v.r.Violations, Violation{Instance: instance, ExecutionID: exec, Check: check, Detail: fmt.Sprintf(format, args...)})
}

// retry runs f, retrying retryable provider errors a few times.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for i := 0; ; i++ {
		t, err := f()
		if err == nil || !provider.IsRetryable(err) || i >= 4 || ctx.Err() != nil {
			return t, err
		}
		sleepCtx(ctx, backoff(i))
	}
}

// executions reads every execution's history, oldest first.
func (v *verifier) executions(ctx context.Context, instance string) ([][]provider.Event, error) {
	var out [][]provider.Event
	if v.adm != nil {
		ids, err := retry(ctx, func() ([]uint64, error) { return v.adm.ListExecutions(ctx, instance) })
		if err != nil {
			return nil, fmt.Errorf("workload: verify %q: list executions: %w", instance, err)
		}
		for i, id := range ids {
			if id != uint64(i+1) {
				v.violate(instance, 0, "executions", "execution ids %v are not 1..%d", ids, len(ids))
				break
			}
		}
		for _, id := range ids {
			h, err := retry(ctx, func() ([]provider.Event, error) { return v.p.ReadWithExecution(ctx, instance, id) })
			if err != nil {
				return nil, fmt.Errorf("workload: verify %q: read execution %d: %w", instance, id, err)
			}
			out = append(out, h)
		}
		return out, nil
	}
	for id := provider.InitialExecutionID; id < 100_000; id++ {
		h, err := retry(ctx, func() ([]provider.Event, error) { return v.p.ReadWithExecution(ctx, instance, id) })
		if err != nil {
			return nil, fmt.Errorf("workload: verify %q: read execution %d: %w", instance, id, err)
		}
		if len(h) == 0 {
			break
		}
		out = append(out, h)
	}
	return out, nil
}

// instance checks one instance (and its children) against exp and reports
// whether its status and output were as expected.
func (v *verifier) instance(ctx context.Context, instance string, exp expectation) (bool, error) {
	if v.seen[instance] {
		return true, nil
	}
	v.seen[instance] = true
	execs, err := v.executions(ctx, instance)
	if err != nil {
		return false, err
	}
	latest, err := retry(ctx, func() ([]provider.Event, error) { return v.p.Read(ctx, instance) })
	if err != nil {
		return false, fmt.Errorf("workload: verify %q: read: %w", instance, err)
	}
	if len(execs) == 0 {
		if len(latest) > 0 {
			v.violate(instance, 0, "executions", "Read returns %d events but execution 1 is empty", len(latest))
		}
		v.violate(instance, 0, "status", "never started (no history)")
		return false, nil
	}
	last := execs[len(execs)-1]
	if len(latest) != len(last) || latest[len(latest)-1].EventID != last[len(last)-1].EventID {
		v.violate(instance, 0, "executions", "Read returns %d events, but the latest of %d executions has %d", len(latest), len(execs), len(last))
	}
	if exp.executions > 0 && len(execs) != exp.executions {
		v.violate(instance, 0, "executions", "%d executions, want %d", len(execs), exp.executions)
	}
	for i, h := range execs {
		v.r.Executions++
		v.history(instance, uint64(i+1), h, i == len(execs)-1, exp)
	}

	// Status and output.
	got := statusFromHistory(last)
	if v.adm != nil {
		info, err := retry(ctx, func() (provider.InstanceInfo, error) { return v.adm.GetInstanceInfo(ctx, instance) })
		if err != nil {
			v.violate(instance, 0, "metadata", "GetInstanceInfo: %v", err)
		} else {
			out := ""
			if info.Output != nil {
				out = *info.Output
			}
			if info.Status != got.Status || out != got.Output || info.CurrentExecutionID != uint64(len(execs)) {
				v.violate(instance, 0, "metadata", "instance info says %s %q at execution %d, history says %s %q at execution %d",
					info.Status, out, info.CurrentExecutionID, got.Status, got.Output, len(execs))
			}
			got.Status, got.Output = info.Status, out
		}
	}
	ok := true
	switch {
	case exp.status != "" && got.Status != exp.status:
		v.violate(instance, 0, "status", "status %s (output %q), want %s", got.Status, got.Output, exp.status)
		ok = false
	case exp.status == "" && !got.Terminal():
		v.violate(instance, 0, "status", "status %s, want a terminal status", got.Status)
		ok = false
	}
	if exp.output != nil && got.Output != *exp.output {
		v.violate(instance, 0, "output", "output %q, want %q", got.Output, *exp.output)
		ok = false
	}

	// Children: each must have ended the way this instance recorded.
	for _, h := range execs {
		results := map[uint64]provider.Event{}
		for _, e := range h {
			if e.SourceEventID != nil {
				results[*e.SourceEventID] = e
			}
		}
		for _, e := range h {
			s, isSub := e.Kind.(provider.SubOrchestrationScheduled)
			if !isSub {
				continue
			}
			cexp := expectation{parent: instance, parentID: e.EventID}
			switch k := results[e.EventID].Kind.(type) {
			case provider.SubOrchestrationCompleted:
				cexp.status, cexp.output = StatusCompleted, &k.Result
			case provider.SubOrchestrationFailed:
				cexp.status = StatusFailed
				if k.Details != nil {
					m := k.Details.DisplayMessage()
					cexp.output = &m
				}
			}
			v.r.Children++
			if _, err := v.instance(ctx, s.Instance, cexp); err != nil {
				return ok, err
			}
		}
	}
	return ok, nil
}

// history checks one execution's history.
func (v *verifier) history(instance string, exec uint64, h []provider.Event, latest bool, exp expectation) {
	v.r.Events += len(h)
	if len(h) == 0 {
		v.violate(instance, exec, "history", "empty execution")
		return
	}
	// Event ids: contiguous from 1 and unique.
	var problems []string
	seen := map[uint64]bool{}
	for i, e := range h {
		switch {
		case seen[e.EventID]:
			problems = append(problems, fmt.Sprintf("duplicate id %d at position %d", e.EventID, i+1))
		case e.EventID != uint64(i+1):
			problems = append(problems, fmt.Sprintf("id %d at position %d", e.EventID, i+1))
		}
		seen[e.EventID] = true
	}
	if len(problems) > 0 {
		more := ""
		if len(problems) > 3 {
			more = fmt.Sprintf(" (+%d more)", len(problems)-3)
			problems = problems[:3]
		}
		v.violate(instance, exec, "event_ids", "not contiguous from 1: %s%s", strings.Join(problems, ", "), more)
	}

	// Shape: started first, terminal last (continue-as-new unless latest).
	st, ok := h[0].Kind.(provider.OrchestrationStarted)
	if !ok {
		v.violate(instance, exec, "history", "first event is %s, want OrchestrationStarted", h[0].Kind.Type())
	} else {
		v.r.OrchestrationStarts++
		if exec == 1 && exp.parent != "" {
			if st.ParentInstance == nil || *st.ParentInstance != exp.parent || st.ParentID == nil || *st.ParentID != exp.parentID {
				v.violate(instance, exec, "child", "OrchestrationStarted does not name parent %s/%d", exp.parent, exp.parentID)
			}
		}
	}
	for i, e := range h {
		if terminalKind(e.Kind) && i != len(h)-1 {
			v.violate(instance, exec, "history", "terminal event %s (id %d) is not the last event", e.Kind.Type(), e.EventID)
		}
	}
	if _, can := h[len(h)-1].Kind.(provider.OrchestrationContinuedAsNew); !latest && !can {
		v.violate(instance, exec, "history", "execution before the latest ends with %s, want OrchestrationContinuedAsNew", h[len(h)-1].Kind.Type())
	}

	// Completions: each names a scheduling event of its kind, once.
	byID := map[uint64]provider.EventKind{}
	for _, e := range h {
		byID[e.EventID] = e.Kind
	}
	done := map[uint64]uint64{}
	for _, e := range h {
		want := ""
		switch e.Kind.(type) {
		case provider.ActivityCompletedEvent, provider.ActivityFailedEvent:
			want = "ActivityScheduled"
			v.r.ActivityResults++
		case provider.TimerFiredEvent:
			want = "TimerCreated"
			v.r.TimersFired++
		case provider.SubOrchestrationCompleted, provider.SubOrchestrationFailed:
			want = "SubOrchestrationScheduled"
		default:
			continue
		}
		if e.SourceEventID == nil {
			v.violate(instance, exec, "completion", "%s (id %d) has no source_event_id", e.Kind.Type(), e.EventID)
			continue
		}
		src := *e.SourceEventID
		if k, ok := byID[src]; !ok || k.Type() != want {
			v.violate(instance, exec, "completion", "%s (id %d) names source %d, which is not a %s", e.Kind.Type(), e.EventID, src, want)
			continue
		}
		if prev, dup := done[src]; dup {
			v.violate(instance, exec, "completion", "operation %d completed twice (events %d and %d)", src, prev, e.EventID)
			continue
		}
		done[src] = e.EventID
	}
}
