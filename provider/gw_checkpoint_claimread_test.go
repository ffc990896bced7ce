package provider

import (
	"context"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// failClaimReads is a MemFS whose reads of queue claims fail with EIO while
// on is set (a transient I/O error: EIO, EMFILE, ENOMEM).
type failClaimReads struct {
	*vfs.MemFS
	on atomic.Bool
}

func (f *failClaimReads) ReadFile(name string) ([]byte, error) {
	if f.on.Load() && strings.Contains(name, "/claims/") {
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
	}
	return f.MemFS.ReadFile(name)
}

// TestGWCheckpointDoesNotPassUnreadActivityCompletion: an activity
// completion committed by a process that died before applying it is marked
// in the task's claim; the checkpoint must not pass its record before it
// has seen it applied. A checkpoint whose read of the claim fails (a
// transient I/O error) knows nothing of it, and passing it makes the mark
// name a record below the checkpoint: the next redo takes that for
// "settled", removes the staged result and puts the claim back - the
// committed completion never reaches the workflow (the activity runs
// again after the claim's expiry). The work-item ack's checkpoint path
// (ensureApplied) treats such an error as "not known to be applied".
func TestGWCheckpointDoesNotPassUnreadActivityCompletion(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	mem.MarkAllSynced()
	ffs := &failClaimReads{MemFS: mem}
	opts := Options{fs: ffs, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	p := openT(t, "/d", opts)
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"x", "e1"}, WorkflowStart{Queue: "default", Name: "W"}, gwEv("s1", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "x")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
		Executed:   []WorkflowEvent{gwEv("s1", "WorkflowExecutionStarted", 1), gwEv("act", "ActivityScheduled", 2)},
		Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: []byte(`{}`)}}}))
	at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if at == nil {
		t.Fatal("no activity task")
	}
	crashAfterCommit(t, "gw_act", func() { _ = p.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0)) })

	ffs.on.Store(true)
	_ = p.checkpointOnce(ctx, true, true) // may fail: it must not pass the completion
	ffs.on.Store(false)
	mustNoErr(t, p.Recover(ctx))
	task = gwFetchOf(t, p, "x")
	if len(task.NewEvents) != 1 || task.NewEvents[0].ID != "done" {
		t.Fatalf("the workflow's new events: %+v, want the committed completion", task.NewEvents)
	}
}
