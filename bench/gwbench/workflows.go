package gwbench

import (
	"context"
	"strings"

	"github.com/cschleiden/go-workflows/workflow"
)

// The scenario of go-workflows' own bench tool (its bench/workflows.go,
// v1.2.0): a root workflow starts FanOut mid workflows, each mid of depth
// d > 0 starts FanOut mids of depth d-1, each mid of depth 0 starts
// LeafFanOut leaf workflows, each leaf runs Activities activities at once.
// With go-workflows' defaults (depth 2, fan-out 2, leaf fan-out 2, 2
// activities, 100-byte results) one root is 15 workflows and 16 activities.

// TreeInput is a root's or mid's input.
type TreeInput struct {
	FanOut, LeafFanOut, Depth int
	Activities                int
	PayloadSizeBytes          int
}

// LeafInput is a leaf's input.
type LeafInput struct {
	Activities       int
	PayloadSizeBytes int
}

func waitAll[T any](ctx workflow.Context, fs []workflow.Future[T]) error {
	for _, f := range fs {
		if _, err := f.Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Root is the tree's root workflow.
func Root(ctx workflow.Context, in *TreeInput) error {
	var fs []workflow.Future[any]
	for range in.FanOut {
		next := *in
		next.Depth--
		fs = append(fs, workflow.CreateSubWorkflowInstance[any](ctx, workflow.DefaultSubWorkflowOptions, Mid, &next))
	}
	return waitAll(ctx, fs)
}

// Mid is an inner workflow of the tree.
func Mid(ctx workflow.Context, in *TreeInput) error {
	var fs []workflow.Future[any]
	if in.Depth == 0 {
		for range in.LeafFanOut {
			fs = append(fs, workflow.CreateSubWorkflowInstance[any](ctx, workflow.DefaultSubWorkflowOptions, Leaf,
				&LeafInput{Activities: in.Activities, PayloadSizeBytes: in.PayloadSizeBytes}))
		}
		return waitAll(ctx, fs)
	}
	for range in.FanOut {
		next := *in
		next.Depth--
		fs = append(fs, workflow.CreateSubWorkflowInstance[any](ctx, workflow.DefaultSubWorkflowOptions, Mid, &next))
	}
	return waitAll(ctx, fs)
}

// Leaf runs its activities at once.
func Leaf(ctx workflow.Context, in *LeafInput) error {
	var fs []workflow.Future[string]
	for range in.Activities {
		fs = append(fs, workflow.ExecuteActivity[string](ctx, workflow.DefaultActivityOptions, Payload, in.PayloadSizeBytes))
	}
	return waitAll(ctx, fs)
}

// Payload is the activity: a result of n bytes.
func Payload(ctx context.Context, n int) (string, error) { return strings.Repeat("x", n), nil }

// Chain runs n activities one after the other.
func Chain(ctx workflow.Context, n int) (int, error) {
	sum := 0
	for i := range n {
		r, err := workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, Step, i).Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += r
	}
	return sum, nil
}

// Step is the chain's activity.
func Step(ctx context.Context, i int) (int, error) { return i + 1, nil }

// treeSize is the number of workflows of one root's tree (the root
// included).
func treeSize(in TreeInput) int {
	n, level := 1, 1
	for range in.Depth {
		level *= in.FanOut
		n += level
	}
	return n + level*in.LeafFanOut
}
