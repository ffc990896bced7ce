package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/durofs/durofs/provider"
)

// The workload kinds. Each names a scripted orchestration (see Spec.Kind).
const (
	// KindChain runs N "Step" activities in sequence, each fed the previous
	// output; the output is the last activity's result.
	KindChain = "chain"
	// KindFanOut runs N "Square" activities in parallel; the output is the
	// sum of their results.
	KindFanOut = "fanout"
	// KindTimer waits on a durable timer of N milliseconds, then completes.
	KindTimer = "timer"
	// KindSub starts a KindChain sub-orchestration of length N and returns
	// its output.
	KindSub = "sub"
	// KindExternal waits for the external event "approve", which the driver
	// raises (Raise, Await) once the instance has started; the output is
	// "approved:" followed by the event's data.
	KindExternal = "external"
	// KindContinueAsNew runs one "Step" activity per execution and continues
	// as new with counter k-1 until k is 0 (N+1 executions); the last
	// execution's output is "done".
	KindContinueAsNew = "continue"
	// KindCancel schedules a "Slow" activity and an N-millisecond timer;
	// when the timer fires first it cancels the activity and completes with
	// "cancelled".
	KindCancel = "cancel"
	// KindFail runs a "Boom" activity, which fails; the orchestration fails
	// with the message "activity Boom failed: boom <input>".
	KindFail = "fail"
)

// Kinds lists every workload kind, in the order Mix cycles through them.
var Kinds = []string{KindChain, KindFanOut, KindTimer, KindSub, KindExternal, KindContinueAsNew, KindCancel, KindFail}

// Orchestration names registered by the runtime, one per kind.
const (
	OrchChain         = "Chain"
	OrchFanOut        = "FanOut"
	OrchTimer         = "Timer"
	OrchSub           = "Sub"
	OrchExternal      = "External"
	OrchContinueAsNew = "Counter"
	OrchCancel        = "Cancel"
	OrchFail          = "Fail"
)

// OrchestrationVersion is the version every scripted orchestration is
// started with.
const OrchestrationVersion = "1.0.0"

// DuroxideVersion is the runtime version stamped on every event and pinned
// on every execution.
const DuroxideVersion = provider.DuroxideVersion

// ExternalEventName is the event a KindExternal orchestration waits for.
const ExternalEventName = "approve"

// Terminal statuses (provider.InstanceInfo.Status).
const (
	StatusCompleted = "Completed"
	StatusFailed    = "Failed"
)

// Spec is one scripted orchestration instance with the terminal status and
// output it must reach.
type Spec struct {
	// Instance is the instance id.
	Instance string `json:"instance"`
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// N is the kind's size: activities for chain, fanout and sub, timer
	// milliseconds for timer and cancel, continue-as-new count for continue.
	N int `json:"n"`
	// Input is the orchestration's input (derived from Kind, N and a seed).
	Input string `json:"input"`
	// ExpectStatus is StatusCompleted or StatusFailed.
	ExpectStatus string `json:"expect_status"`
	// ExpectOutput is the expected output (the error message for a failure).
	ExpectOutput string `json:"expect_output"`
}

// NewSpec builds the Spec of one instance: kind with size n and seed value x
// (the first activity input, or the external event's data). It fails for an
// unknown kind or a negative size.
func NewSpec(instance, kind string, n, x int) (Spec, error) {
	if n < 0 {
		return Spec{}, fmt.Errorf("workload: spec %q: negative size %d", instance, n)
	}
	s := Spec{Instance: instance, Kind: kind, N: n, ExpectStatus: StatusCompleted}
	switch kind {
	case KindChain, KindSub:
		s.Input = pair(n, x)
		s.ExpectOutput = strconv.FormatInt(chainResult(n, int64(x)), 10)
	case KindFanOut:
		s.Input = pair(n, x)
		var sum int64
		for i := range n {
			sum += square(int64(x + i))
		}
		s.ExpectOutput = strconv.FormatInt(sum, 10)
	case KindTimer:
		s.Input = strconv.Itoa(n)
		s.ExpectOutput = timerOutput(n)
	case KindExternal:
		s.Input = "token-" + strconv.Itoa(x)
		s.ExpectOutput = "approved:" + s.Input
	case KindContinueAsNew:
		s.Input = strconv.Itoa(n)
		s.ExpectOutput = "done"
	case KindCancel:
		s.Input = strconv.Itoa(n)
		s.ExpectOutput = "cancelled"
	case KindFail:
		s.Input = strconv.Itoa(x)
		s.ExpectStatus = StatusFailed
		s.ExpectOutput = failMessage(strconv.Itoa(x))
	default:
		return Spec{}, fmt.Errorf("workload: spec %q: unknown kind %q", instance, kind)
	}
	return s, nil
}

// Mix returns n specs of mixed kinds, a pure function of seed. Kinds are
// dealt in rounds of every kind (shuffled per round), so any n ≥ len(Kinds)
// covers all of them. Instance ids are "wl<seed>-<index>-<kind>".
func Mix(seed int64, n int) []Spec {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6475726f6673))
	specs := make([]Spec, 0, max(n, 0))
	var round []string
	for i := range n {
		if len(round) == 0 {
			round = append([]string(nil), Kinds...)
			rng.Shuffle(len(round), func(a, b int) { round[a], round[b] = round[b], round[a] })
		}
		kind := round[0]
		round = round[1:]
		var size int
		switch kind {
		case KindChain:
			size = 2 + rng.IntN(5)
		case KindFanOut:
			size = 2 + rng.IntN(7)
		case KindTimer:
			size = 100 + rng.IntN(201)
		case KindSub:
			size = 1 + rng.IntN(4)
		case KindContinueAsNew:
			size = 1 + rng.IntN(4)
		case KindCancel:
			size = 100
		}
		x := 1 + rng.IntN(1000)
		s, err := NewSpec(fmt.Sprintf("wl%d-%03d-%s", seed, i, kind), kind, size, x)
		if err != nil {
			// Unreachable: kinds and sizes come from the tables above.
			continue
		}
		specs = append(specs, s)
	}
	return specs
}

// OrchestrationName returns the orchestration a kind runs ("" if unknown).
func OrchestrationName(kind string) string {
	switch kind {
	case KindChain:
		return OrchChain
	case KindFanOut:
		return OrchFanOut
	case KindTimer:
		return OrchTimer
	case KindSub:
		return OrchSub
	case KindExternal:
		return OrchExternal
	case KindContinueAsNew:
		return OrchContinueAsNew
	case KindCancel:
		return OrchCancel
	case KindFail:
		return OrchFail
	}
	return ""
}

// StartItem is the StartOrchestration that starts s.
func StartItem(s Spec) provider.StartOrchestration {
	v := OrchestrationVersion
	return provider.StartOrchestration{
		Instance:      s.Instance,
		Orchestration: OrchestrationName(s.Kind),
		Input:         s.Input,
		Version:       &v,
		ExecutionID:   provider.InitialExecutionID,
	}
}

// Start enqueues the start of s.
func Start(ctx context.Context, p provider.Provider, s Spec) error {
	if OrchestrationName(s.Kind) == "" {
		return fmt.Errorf("workload: start %q: unknown kind %q", s.Instance, s.Kind)
	}
	if err := p.EnqueueForOrchestrator(ctx, StartItem(s), 0); err != nil {
		return fmt.Errorf("workload: start %q: %w", s.Instance, err)
	}
	return nil
}

// NeedsRaise reports whether s waits for an external event the driver must
// raise (with Raise).
func NeedsRaise(s Spec) bool { return s.Kind == KindExternal }

// Raise enqueues the external event s waits for; it does nothing for kinds
// that wait for none. Raise it after the instance has started (Await does).
func Raise(ctx context.Context, p provider.Provider, s Spec) error {
	if !NeedsRaise(s) {
		return nil
	}
	ev := provider.ExternalRaised{Instance: s.Instance, Name: ExternalEventName, Data: s.Input}
	if err := p.EnqueueForOrchestrator(ctx, ev, 0); err != nil {
		return fmt.Errorf("workload: raise %q on %q: %w", ExternalEventName, s.Instance, err)
	}
	return nil
}

// ---- the pure functions behind activities and expected results ----

// stepModulus keeps Step's results small.
const stepModulus = 1_000_003

// step is the "Step" activity: x → (31x + 7) mod 1000003.
func step(x int64) int64 { return ((x%stepModulus)*31 + 7) % stepModulus }

// square is the "Square" activity.
func square(x int64) int64 { return x * x }

// chainResult applies step n times.
func chainResult(n int, x int64) int64 {
	for range n {
		x = step(x)
	}
	return x
}

func pair(n, x int) string { return strconv.Itoa(n) + "," + strconv.Itoa(x) }

func timerOutput(ms int) string { return "timer fired after " + strconv.Itoa(ms) + "ms" }

func failMessage(input string) string { return "activity Boom failed: boom " + input }
