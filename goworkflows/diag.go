package goworkflows

import (
	"context"
	"errors"
	"sort"

	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/diag"

	"github.com/durofs/durofs/provider"
)

func refOf(x provider.WorkflowExecution) *diag.WorkflowInstanceRef {
	r := &diag.WorkflowInstanceRef{
		Instance:    instanceOf(x),
		CreatedAt:   x.CreatedAt,
		CompletedAt: x.CompletedAt,
		State:       core.WorkflowInstanceState(x.State),
		Queue:       x.Queue,
	}
	return r
}

// GetWorkflowInstance implements diag.Backend (nil if unknown).
func (b *Backend) GetWorkflowInstance(ctx context.Context, instance *core.WorkflowInstance) (*diag.WorkflowInstanceRef, error) {
	x, err := b.p.WorkflowExecutionInfo(ctx, ref(instance))
	if errors.Is(err, provider.ErrWorkflowNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return refOf(x), nil
}

// GetWorkflowInstances implements diag.Backend: executions newest first
// (by creation time, then instance id, then execution id), count at a time,
// starting after the given execution.
func (b *Backend) GetWorkflowInstances(ctx context.Context, afterInstanceID, afterExecutionID string, count int) ([]*diag.WorkflowInstanceRef, error) {
	all, err := b.p.WorkflowExecutions(ctx)
	if err != nil {
		return nil, err
	}
	less := func(a, b provider.WorkflowExecution) bool { // a before b
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		if a.InstanceID != b.InstanceID {
			return a.InstanceID > b.InstanceID
		}
		return a.ExecutionID > b.ExecutionID
	}
	sort.Slice(all, func(i, j int) bool { return less(all[i], all[j]) })
	start := 0
	if afterInstanceID != "" {
		start = len(all)
		for i, x := range all {
			if x.InstanceID == afterInstanceID && x.ExecutionID == afterExecutionID {
				start = i + 1
				break
			}
		}
	}
	out := []*diag.WorkflowInstanceRef{}
	for i := start; i < len(all) && len(out) < count; i++ {
		out = append(out, refOf(all[i]))
	}
	return out, nil
}

// GetWorkflowTree implements diag.Backend.
func (b *Backend) GetWorkflowTree(ctx context.Context, instance *core.WorkflowInstance) (*diag.WorkflowInstanceTree, error) {
	return diag.NewInstanceTreeBuilder(b).BuildWorkflowInstanceTree(ctx, instance)
}
