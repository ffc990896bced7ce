package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durofs/durofs/provider"
)

// InstanceStatus is what the provider says about an instance.
type InstanceStatus struct {
	// Started is true once the instance has a history.
	Started bool
	// ExecutionID is the latest execution (0 if not started).
	ExecutionID uint64
	// Status is "Running", "Completed", "Failed" or "ContinuedAsNew" ("" if
	// not started).
	Status string
	// Output is the terminal output or error message.
	Output string
}

// Terminal reports whether the instance has finished for good.
func (s InstanceStatus) Terminal() bool {
	return s.Status == StatusCompleted || s.Status == StatusFailed
}

// Status reads an instance's status: from adm.GetInstanceInfo when adm is
// non-nil (an instance it reports as missing, or any other permanent error,
// counts as not started yet), otherwise from the last event of the latest
// execution's history (OrchestrationCompleted's output, OrchestrationFailed's
// message).
func Status(ctx context.Context, p provider.Provider, adm provider.Admin, instance string) (InstanceStatus, error) {
	if adm != nil {
		info, err := adm.GetInstanceInfo(ctx, instance)
		if err != nil {
			if errors.Is(err, provider.ErrNotFound) || !provider.IsRetryable(err) {
				return InstanceStatus{}, nil // not created yet
			}
			return InstanceStatus{}, fmt.Errorf("workload: instance info of %q: %w", instance, err)
		}
		s := InstanceStatus{Started: true, ExecutionID: info.CurrentExecutionID, Status: info.Status}
		if info.Output != nil {
			s.Output = *info.Output
		}
		return s, nil
	}
	h, err := p.Read(ctx, instance)
	if err != nil {
		return InstanceStatus{}, fmt.Errorf("workload: read %q: %w", instance, err)
	}
	return statusFromHistory(h), nil
}

// statusFromHistory derives the status of an execution from its history.
func statusFromHistory(h []provider.Event) InstanceStatus {
	if len(h) == 0 {
		return InstanceStatus{}
	}
	last := h[len(h)-1]
	s := InstanceStatus{Started: true, ExecutionID: last.ExecutionID, Status: "Running"}
	switch k := last.Kind.(type) {
	case provider.OrchestrationCompleted:
		s.Status, s.Output = StatusCompleted, k.Output
	case provider.OrchestrationFailed:
		s.Status = StatusFailed
		if k.Details != nil {
			s.Output = k.Details.DisplayMessage()
		}
	case provider.OrchestrationContinuedAsNew:
		s.Status, s.Output = "ContinuedAsNew", k.Input
	}
	return s
}

// Await waits until every spec's instance is terminal, raising the
// external events of the specs that need one (Raise) as soon as their
// instance has started. It polls every 100 ms and calls progress (if
// non-nil) after every poll with the number of terminal instances. It
// returns ctx's error, wrapped, if ctx ends first.
func Await(ctx context.Context, p provider.Provider, adm provider.Admin, specs []Spec, progress func(done, total int)) error {
	raised := make([]bool, len(specs))
	done := make([]bool, len(specs))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n := 0
		for i, s := range specs {
			if done[i] {
				n++
				continue
			}
			st, err := Status(ctx, p, adm, s.Instance)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				continue // transient: try again next poll
			}
			if st.Started && NeedsRaise(s) && !raised[i] {
				if err := Raise(ctx, p, s); err == nil {
					raised[i] = true
				}
			}
			if st.Terminal() {
				done[i] = true
				n++
			}
		}
		if progress != nil {
			progress(n, len(specs))
		}
		if n == len(specs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workload: %d of %d instances still running: %w", len(specs)-n, len(specs), ctx.Err())
		case <-tick.C:
		}
	}
}
