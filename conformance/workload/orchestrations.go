package workload

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// orchestrations is the registry of scripted orchestrations, by name.
var orchestrations = map[string]orchFunc{
	OrchChain:         orchChain,
	OrchFanOut:        orchFanOut,
	OrchTimer:         orchTimer,
	OrchSub:           orchSub,
	OrchExternal:      orchExternal,
	OrchContinueAsNew: orchCounter,
	OrchCancel:        orchCancel,
	OrchFail:          orchFail,
}

// parsePair parses "n,x".
func parsePair(s string) (n, x int, err error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, fmt.Errorf("input %q is not \"n,x\"", s)
	}
	if n, err = strconv.Atoi(a); err != nil {
		return 0, 0, fmt.Errorf("input %q: %w", s, err)
	}
	if x, err = strconv.Atoi(b); err != nil {
		return 0, 0, fmt.Errorf("input %q: %w", s, err)
	}
	return n, x, nil
}

// orchChain: input "n,x"; n Step activities in sequence starting from x.
func orchChain(o *orch) {
	n, x, err := parsePair(o.input)
	if err != nil {
		o.fail(err.Error())
		return
	}
	v := strconv.Itoa(x)
	for range n {
		f := o.activity("Step", v)
		if !f.done() {
			return
		}
		if d, failed := f.failed(); failed {
			o.fail("activity Step failed: " + d.DisplayMessage())
			return
		}
		v = f.value()
	}
	o.complete(v)
}

// orchFanOut: input "n,x"; Square(x), …, Square(x+n-1) in parallel; the sum.
func orchFanOut(o *orch) {
	n, x, err := parsePair(o.input)
	if err != nil {
		o.fail(err.Error())
		return
	}
	fs := make([]*future, n)
	for i := range n {
		fs[i] = o.activity("Square", strconv.Itoa(x+i))
	}
	var sum int64
	for _, f := range fs {
		if !f.done() {
			return
		}
		if d, failed := f.failed(); failed {
			o.fail("activity Square failed: " + d.DisplayMessage())
			return
		}
		v, err := strconv.ParseInt(f.value(), 10, 64)
		if err != nil {
			o.fail(fmt.Sprintf("Square returned %q", f.value()))
			return
		}
		sum += v
	}
	o.complete(strconv.FormatInt(sum, 10))
}

// orchTimer: input "ms"; a durable timer, then complete.
func orchTimer(o *orch) {
	ms, err := strconv.Atoi(o.input)
	if err != nil {
		o.fail("timer input: " + err.Error())
		return
	}
	if !o.timer(time.Duration(ms) * time.Millisecond).done() {
		return
	}
	o.complete(timerOutput(ms))
}

// orchSub: input "n,x"; a Chain sub-orchestration with the same input.
func orchSub(o *orch) {
	f := o.subOrchestration(OrchChain, o.input)
	if !f.done() {
		return
	}
	if d, failed := f.failed(); failed {
		o.fail("sub-orchestration failed: " + d.DisplayMessage())
		return
	}
	o.complete(f.value())
}

// orchExternal waits for the "approve" event.
func orchExternal(o *orch) {
	f := o.waitEvent(ExternalEventName)
	if !f.done() {
		return
	}
	o.complete("approved:" + f.value())
}

// orchCounter: input "k"; Step(k), then continue as new with k-1, or
// complete with "done" when k is 0.
func orchCounter(o *orch) {
	k, err := strconv.Atoi(o.input)
	if err != nil {
		o.fail("counter input: " + err.Error())
		return
	}
	f := o.activity("Step", strconv.Itoa(k))
	if !f.done() {
		return
	}
	if d, failed := f.failed(); failed {
		o.fail("activity Step failed: " + d.DisplayMessage())
		return
	}
	if k <= 0 {
		o.complete("done")
		return
	}
	o.continueAsNew(strconv.Itoa(k - 1))
}

// orchCancel: input "ms"; a Slow activity raced against a timer. The timer
// wins: the activity is cancelled and the output is "cancelled".
func orchCancel(o *orch) {
	ms, err := strconv.Atoi(o.input)
	if err != nil {
		o.fail("cancel input: " + err.Error())
		return
	}
	slow := o.activity("Slow", o.input)
	t := o.timer(time.Duration(ms) * time.Millisecond)
	switch o.selectFirst(slow, t) {
	case -1:
		return
	case 1:
		o.cancelActivity(slow, "timer fired first")
		o.complete("cancelled")
	default:
		o.complete("slow activity finished first: " + slow.value())
	}
}

// orchFail runs Boom, which fails, and fails with its message.
func orchFail(o *orch) {
	f := o.activity("Boom", o.input)
	if !f.done() {
		return
	}
	if d, failed := f.failed(); failed {
		o.fail("activity Boom failed: " + d.DisplayMessage())
		return
	}
	o.complete("Boom unexpectedly succeeded: " + f.value())
}

// errActivity is an activity's application failure.
type errActivity struct{ msg string }

func (e errActivity) Error() string { return e.msg }

// runActivity runs the named activity. Activities are pure functions of
// their input, except Slow, which sleeps for slow (or until ctx is done).
// An errActivity is the activity's own failure; ctx.Err() means it was
// interrupted.
func runActivity(ctx context.Context, name, input string, slow time.Duration) (string, error) {
	switch name {
	case "Step", "Square":
		x, err := strconv.ParseInt(input, 10, 64)
		if err != nil {
			return "", errActivity{fmt.Sprintf("%s: bad input %q", name, input)}
		}
		if name == "Step" {
			return strconv.FormatInt(step(x), 10), nil
		}
		return strconv.FormatInt(square(x), 10), nil
	case "Slow":
		t := time.NewTimer(slow)
		defer t.Stop()
		select {
		case <-t.C:
			return "slow done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	case "Boom":
		return "", errActivity{"boom " + input}
	}
	return "", errActivity{"unregistered activity " + name}
}

// isActivityFailure reports whether err is the activity's own failure (as
// opposed to an interruption).
func isActivityFailure(err error) bool {
	var e errActivity
	return errors.As(err, &e)
}
