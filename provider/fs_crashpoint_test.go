//go:build unix

package provider

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestMultiprocessCrashAtCommitPoints kills a helper process right after
// each kind of commit point and checks that recovery by other processes
// completes the operation exactly once.
func TestMultiprocessCrashAtCommitPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process tests skipped in -short mode")
	}
	ctx := context.Background()
	t.Run("test_multiprocess_crash_after_work_ack_commit", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			createInstance(t, p, "wk")
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wk", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}))
			h := startHelper(t, dir, append(env, "DUROFS_CRASH_AFTER_COMMIT=work_ack")...)
			if _, ok := h.do(helperCmd{Op: "wack"}); ok {
				t.Fatal("helper survived its crash point")
			}
			_ = h.cmd.Wait()
			q := openT(t, dir, opts) // Open recovers
			if it, err := q.FetchWorkItem(ctx, time.Second, 0, nil, DefaultOnlyTags()); err != nil || it != nil {
				t.Fatalf("acked work item still fetchable after recovery: %+v %v", it, err)
			}
			it, err := q.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil)
			if err != nil || it == nil || len(it.Item.Messages) != 1 || it.Item.Messages[0].Kind() != "ActivityCompleted" {
				t.Fatalf("want exactly one ActivityCompleted after recovery, got %+v %v", it, err)
			}
		})
	})
	t.Run("test_multiprocess_crash_after_delete_commit", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			for _, inst := range []string{"root", "root::c1", "root::c2"} {
				createInstance(t, p, inst)
			}
			setParent(t, p, "root::c1", "root")
			setParent(t, p, "root::c2", "root")
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "root::c1", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}))
			h := startHelper(t, dir, append(env, "DUROFS_CRASH_AFTER_COMMIT=delete")...)
			if _, ok := h.do(helperCmd{Op: "delete", Instance: "root"}); ok {
				t.Fatal("helper survived its crash point")
			}
			_ = h.cmd.Wait()
			// Touching one instance applies its part; Recover finishes the group.
			if it, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil); err != nil || it != nil {
				t.Fatalf("fetch after crashed delete = %+v %v", it, err)
			}
			q := openT(t, dir, opts)
			adm, _ := q.Admin()
			for _, inst := range []string{"root", "root::c1", "root::c2"} {
				if _, err := adm.GetInstanceInfo(ctx, inst); err == nil {
					t.Errorf("%s still exists after a committed delete was recovered", inst)
				}
			}
			if d, err := adm.GetQueueDepths(ctx); err != nil || d.WorkerQueue != 0 {
				t.Errorf("queue depths after recovered delete = %+v %v", d, err)
			}
			noPendingState(t, q)
		})
	})
	t.Run("test_multiprocess_crash_after_prune_commit", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			createInstance(t, p, "pr")
			for e := uint64(2); e <= 3; e++ {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "pr", Name: "n", Data: "x"}, 0))
				it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
				if err != nil || it == nil {
					t.Fatal(it, err)
				}
				ev := started("pr")
				ev.ExecutionID = e
				st := "ContinuedAsNew"
				m := md("TestOrch", "1.0.0")
				m.Status = &st
				mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, e, []Event{ev}, nil, nil, m, nil))
			}
			h := startHelper(t, dir, append(env, "DUROFS_CRASH_AFTER_COMMIT=prune")...)
			if _, ok := h.do(helperCmd{Op: "prune", Instance: "pr"}); ok {
				t.Fatal("helper survived its crash point")
			}
			_ = h.cmd.Wait()
			q := openT(t, dir, opts)
			adm, _ := q.Admin()
			ids, err := adm.ListExecutions(ctx, "pr")
			if err != nil || fmt.Sprint(ids) != "[3]" {
				t.Fatalf("executions after recovered prune = %v %v, want [3]", ids, err)
			}
			m, _ := adm.GetSystemMetrics(ctx)
			if m.TotalExecutions != 1 || m.TotalEvents != 1 {
				t.Errorf("metrics after prune = %+v, want 1 execution and 1 event", m)
			}
		})
	})
}

func createInstance(t *testing.T, p *FSProvider, inst string) {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(inst), 0))
	it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
	if err != nil || it == nil || it.Item.Instance != inst {
		t.Fatalf("create %s: %+v %v", inst, it, err)
	}
	st, out := "Completed", "done"
	m := md("TestOrch", "1.0.0")
	m.Status, m.Output = &st, &out
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(inst)}, nil, nil, m, nil))
}

// setParent rewrites an instance record's parent, and adds it to the
// parent's children index as an ack creating the record with that parent
// would (test setup only).
func setParent(t *testing.T, p *FSProvider, inst, parent string) {
	t.Helper()
	key := instanceKey(inst)
	f, err := p.readInstanceFile(key)
	if err != nil || f == nil || f.Record == nil {
		t.Fatal(f, err)
	}
	mustNoErr(t, p.addChild(parent, key))
	f.Record.ParentInstanceID = &parent
	data, _ := jsonMarshal(f)
	mustNoErr(t, writeFileForTest(p, p.instFilePath(key), data))
}
