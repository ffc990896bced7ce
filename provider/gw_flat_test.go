package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/jsonseal"
)

// gwExecRef is execution k (1-based) of gwEternal's instance.
func gwExecRef(inst string, k int) WorkflowRef { return WorkflowRef{inst, fmt.Sprintf("e%d", k)} }

// gwContinue completes the task of inst's execution k (fetched by the
// caller) by continuing as new: execution k+1 is started, k is kept
// (go-workflows' default, RemoveContinuedAsNewInstances false).
func gwContinue(t testing.TB, p *FSProvider, task *WorkflowTask, inst string, k int) {
	t.Helper()
	mustNoErr(t, p.CompleteWorkflowTask(context.Background(), task, WorkflowTaskResult{
		State: WorkflowContinuedAsNew,
		Executed: []WorkflowEvent{gwEv(fmt.Sprintf("ts%d", k), "WorkflowTaskStarted", 1), gwEv(fmt.Sprintf("start%d", k), "WorkflowExecutionStarted", 2),
			gwEv(fmt.Sprintf("can%d", k), "WorkflowExecutionContinuedAsNew", 3)},
		Sends: []WorkflowSend{{Target: gwExecRef(inst, k+1), Start: &WorkflowStart{Queue: "default", Name: "E"},
			Events: []WorkflowEvent{gwEv(fmt.Sprintf("start%d", k+1), "WorkflowExecutionStarted", 0)}}},
		Worker: "w", Sticky: time.Minute,
	}))
}

// gwEternal creates inst and runs it through k executions: executions 1
// to k-1 continued as new (and kept), k active with its start pending.
func gwEternal(t testing.TB, p *FSProvider, inst string, k int) {
	t.Helper()
	mustNoErr(t, p.CreateWorkflow(context.Background(), gwExecRef(inst, 1), WorkflowStart{Queue: "default", Name: "E"}, gwEv("start1", "WorkflowExecutionStarted", 0)))
	for n := 1; n < k; n++ {
		task, err := p.FetchWorkflowTask(context.Background(), []string{"default"}, "w", time.Minute, time.Second)
		mustNoErr(t, err)
		if task == nil || task.Execution.ExecutionID != gwExecRef(inst, n).ExecutionID {
			t.Fatalf("execution %d: task %+v", n, task)
		}
		gwContinue(t, p, task, inst, n)
	}
}

// gwCANCost runs a workflow through k executions and returns the log
// bytes of the commit that continues execution k as new, and the size of
// instance.json after it.
func gwCANCost(t *testing.T, k int) (walBytes, instSize int64) {
	t.Helper()
	// Segments large enough that the measured record is in the same one.
	p := openT(t, t.TempDir(), Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1, SegmentSize: 64 << 20})
	const inst = "eternal"
	gwEternal(t, p, inst, k)
	task := gwFetchOf(t, p, inst)
	before := p.wal.End()
	gwContinue(t, p, task, inst, k)
	after := p.wal.End()
	if before.Segment() != after.Segment() {
		t.Fatalf("the measured record crossed a segment boundary")
	}
	fi, err := p.fs.Lstat(p.instFilePath(instanceKey(inst)))
	mustNoErr(t, err)
	return int64(after.Offset()) - int64(before.Offset()), fi.Size()
}

// TestGWContinueAsNewCostStaysFlat: a go-workflows workflow that continues
// as new (keeping its executions, go-workflows' default) commits the same
// bytes at its 1,000th execution as at its 10th. instance.json, which every
// workflow task commit writes whole and logs whole, listed the record of
// every execution (format 7): 4,490 log bytes at execution 10, 175,638 at
// 1,000, and instance.json 2,560 vs 173,568 bytes. It lists only the
// latest execution now (format 8): 3,123 vs 3,189 log bytes, 1,024 bytes
// (one block) at both.
func TestGWContinueAsNewCostStaysFlat(t *testing.T) {
	small, large := 10, 1000
	if testing.Short() {
		large = 300
	}
	ws, is := gwCANCost(t, small)
	wl, il := gwCANCost(t, large)
	t.Logf("execution %d: continue-as-new commit appended %d log bytes, instance.json %d bytes; execution %d: %d log bytes, instance.json %d bytes",
		small, ws, is, large, wl, il)
	wantFlatCost(t, "log bytes of a continue-as-new commit", small, large, func(n int) int64 {
		return map[int]int64{small: ws, large: wl}[n]
	})
	if il > is+64 {
		t.Errorf("instance.json is %d bytes at execution %d, %d at %d: it grows with the executions run", il, large+1, is, small+1)
	}
}

// TestGWMovedOutExecutionsStayReadable: executions that instance.json no
// longer lists (every one but the latest) are read, looked up by id,
// listed, refused as duplicate ids, removed one by one and by age, shown
// by durofs show and checked clean by fsck, exactly as the latest one.
func TestGWMovedOutExecutionsStayReadable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1})
	const inst, k = "w", 5
	gwEternal(t, p, inst, k)
	key := instanceKey(inst)

	inf, err := p.readGWInstance(key)
	mustNoErr(t, err)
	if len(inf.GW.Executions) != 1 || inf.GW.Executions[0].ID != "e5" || inf.Executions.String() != "[[1,5]]" || inf.TotalEvents != 3*(k-1) {
		t.Fatalf("instance.json gw %+v, executions %v, total %d: want only e5 listed, [[1,5]], %d events", inf.GW, inf.Executions, inf.TotalEvents, 3*(k-1))
	}
	checkAll := func(want []string) {
		t.Helper()
		for n := 1; n <= k; n++ {
			ref := gwExecRef(inst, n)
			x, err := p.WorkflowExecutionInfo(ctx, ref)
			if !slices.Contains(want, ref.ExecutionID) {
				if !errors.Is(err, ErrWorkflowNotFound) {
					t.Errorf("%s after its removal: %+v, %v", ref.ExecutionID, x, err)
				}
				continue
			}
			mustNoErr(t, err)
			wantState, wantEvents := WorkflowContinuedAsNew, 3
			if n == k {
				wantState, wantEvents = WorkflowActive, 0
			}
			if x.Number != uint64(n) || x.State != wantState || x.Events != wantEvents || x.Queue != "default" || x.Name != "E" {
				t.Errorf("%s: %+v", ref.ExecutionID, x)
			}
			h, err := p.WorkflowHistory(ctx, ref, nil)
			mustNoErr(t, err)
			if len(h) != wantEvents || (n < k && h[2].ID != fmt.Sprintf("can%d", n)) {
				t.Errorf("%s: history %+v", ref.ExecutionID, h)
			}
			after := int64(1)
			if h, err := p.WorkflowHistory(ctx, ref, &after); err != nil || len(h) != max(wantEvents-1, 0) {
				t.Errorf("%s: history after 1: %d events, %v", ref.ExecutionID, len(h), err)
			}
		}
		all, err := p.WorkflowExecutions(ctx)
		mustNoErr(t, err)
		var ids []string
		for _, x := range all {
			ids = append(ids, x.ExecutionID)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("listed executions %v, want %v", ids, want)
		}
		d, err := p.InstanceDetail(ctx, inst)
		mustNoErr(t, err)
		ids = nil
		for _, s := range d.Workflow {
			ids = append(ids, s.ExecutionID)
		}
		if !slices.Equal(ids, want) || d.Problem != "" {
			t.Errorf("durofs show: executions %v (problem %q), want %v", ids, d.Problem, want)
		}
		if rep := fsckT(t, dir, false); !rep.Clean() {
			t.Errorf("fsck: %+v", rep.Findings)
		}
	}
	checkAll([]string{"e1", "e2", "e3", "e4", "e5"})

	// An event to an execution that is no longer active is not delivered;
	// to an unknown one, not found.
	mustNoErr(t, p.SendWorkflowEvent(ctx, inst, "e2", gwEv("late", "SignalReceived", 0)))
	if err := p.SendWorkflowEvent(ctx, inst, "e9", gwEv("x", "SignalReceived", 0)); !errors.Is(err, ErrWorkflowNotFound) {
		t.Errorf("event to an unknown execution: %v", err)
	}
	// The latest finishes; a new execution with an old execution's id is
	// refused, as is one while an execution is active.
	task := gwFetchOf(t, p, inst)
	if len(task.NewEvents) != 1 || task.NewEvents[0].ID != "start5" {
		t.Fatalf("task of e5: %+v", task.NewEvents)
	}
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowFinished,
		Executed: []WorkflowEvent{gwEv("ts5", "WorkflowTaskStarted", 1), gwEv("start5", "WorkflowExecutionStarted", 2), gwEv("fin5", "WorkflowExecutionFinished", 3)}}))
	for _, id := range []string{"e2", "e5"} {
		if err := p.CreateWorkflow(ctx, WorkflowRef{inst, id}, WorkflowStart{Name: "E"}, gwEv("again", "WorkflowExecutionStarted", 0)); !errors.Is(err, ErrWorkflowExists) {
			t.Errorf("create with existing execution id %s: %v, want ErrWorkflowExists", id, err)
		}
	}

	// Removal of an execution instance.json does not list, then of the
	// latest (the one before it is listed again), then by age.
	mustNoErr(t, p.RemoveWorkflow(ctx, gwExecRef(inst, 2)))
	if err := p.RemoveWorkflow(ctx, gwExecRef(inst, 2)); !errors.Is(err, ErrWorkflowNotFound) {
		t.Errorf("second removal of e2: %v", err)
	}
	mustNoErr(t, p.RemoveWorkflow(ctx, gwExecRef(inst, 5)))
	inf, err = p.readGWInstance(key)
	mustNoErr(t, err)
	if len(inf.GW.Executions) != 1 || inf.GW.Executions[0].ID != "e4" || inf.Status != "ContinuedAsNew" || inf.CurrentExecutionID != 4 {
		t.Fatalf("after removing the latest: gw %+v, status %s, current %d", inf.GW, inf.Status, inf.CurrentExecutionID)
	}
	if _, err := os.Stat(p.gwIDPath(key, "e4")); !os.IsNotExist(err) {
		t.Errorf("the by-id entry of e4, listed again, stays: %v", err)
	}
	checkAll([]string{"e1", "e3", "e4"})
	// A new execution after the removals gets a new number.
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{inst, "e6"}, WorkflowStart{Name: "E"}, gwEv("start6", "WorkflowExecutionStarted", 0)))
	if x, err := p.WorkflowExecutionInfo(ctx, WorkflowRef{inst, "e6"}); err != nil || x.Number != 6 {
		t.Fatalf("e6: %+v, %v", x, err)
	}
	n, err := p.RemoveWorkflows(ctx, time.Now().Add(time.Hour), 2)
	mustNoErr(t, err)
	if n != 3 {
		t.Fatalf("removed by age %d executions, want 3 (e1, e3, e4)", n)
	}
	all, err := p.WorkflowExecutions(ctx)
	mustNoErr(t, err)
	if len(all) != 1 || all[0].ExecutionID != "e6" || all[0].State != WorkflowActive {
		t.Fatalf("after the removal by age: %+v", all)
	}
	if names, _ := os.ReadDir(p.gwIDDir(key)); len(names) != 0 {
		t.Errorf("by-id entries left: %v", names)
	}
	if rep := fsckT(t, dir, false); !rep.Clean() {
		t.Errorf("fsck: %+v", rep.Findings)
	}
}

// gwDowngrade rewrites instance key of a closed directory as format 7 wrote
// it: every execution's record in instance.json, none in the state.json
// files, no by-id entries; and FORMAT says 7.
func gwDowngrade(t *testing.T, dir, key string) {
	t.Helper()
	p := &FSProvider{dir: dir}
	read := func(path string, v any) {
		data, err := os.ReadFile(path)
		mustNoErr(t, err)
		body, _, err := jsonseal.Unseal(data)
		mustNoErr(t, err)
		mustNoErr(t, jsonUnmarshal(body, v))
	}
	write := func(path string, v any) {
		body, err := jsonMarshal(v)
		mustNoErr(t, err)
		mustNoErr(t, os.WriteFile(path, jsonseal.Seal(body), 0o600))
	}
	var inf gwInstanceFile
	read(p.instFilePath(key), &inf)
	var execs []gwExec
	for n := range inf.Executions.All() {
		var ef executionFile
		read(p.execStatePath(key, n), &ef)
		rec := ef.GW
		if rec == nil { // the listed execution's record is in instance.json alone
			rec = inf.listed(n)
		}
		if rec == nil {
			t.Fatalf("execution %d has no record in its state.json or instance.json", n)
		}
		execs = append(execs, *rec)
		ef.GW = nil
		write(p.execStatePath(key, n), ef)
	}
	inf.GW.Executions = execs
	write(p.instFilePath(key), inf)
	mustNoErr(t, os.RemoveAll(p.gwIDDir(key)))
	mustNoErr(t, os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(`{"format":"durofs","version":7}`), 0o600))
}

// TestGWUpgradeFromFormat7: a version-7 directory whose instance.json lists
// every execution is upgraded by the first process to open it alone and
// read as it is; the next commits of the instance move the executions out
// in their records (gwMoveOutMax at a time), and every one stays readable
// and found by id at every stage.
func TestGWUpgradeFromFormat7(t *testing.T) {
	for _, moveMax := range []int{gwMoveOutMax, 2} {
		t.Run(fmt.Sprintf("%d moved per commit", moveMax), func(t *testing.T) {
			defer func(old int) { gwMoveOutMax = old }(gwMoveOutMax)
			gwMoveOutMax = moveMax
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{SweepInterval: -1, Logger: quietLog}
			p := openT(t, dir, opts)
			const inst, k = "w", 6
			gwEternal(t, p, inst, k)
			key := instanceKey(inst)
			mustNoErr(t, p.Close())
			gwDowngrade(t, dir, key)

			p = openT(t, dir, opts)
			if data, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(data) != `{"format":"durofs","version":8}` {
				t.Fatalf("FORMAT = %s after a lone open, want version 8", data)
			}
			listed := k
			check := func(when string, total int) {
				t.Helper()
				inf, err := p.readGWInstance(key)
				mustNoErr(t, err)
				if len(inf.GW.Executions) != listed {
					t.Errorf("%s: instance.json lists %d executions, want %d", when, len(inf.GW.Executions), listed)
				}
				all, err := p.WorkflowExecutions(ctx)
				mustNoErr(t, err)
				if len(all) != total {
					t.Errorf("%s: %d executions listed, want %d", when, len(all), total)
				}
				for n := 1; n < k; n++ {
					x, err := p.WorkflowExecutionInfo(ctx, gwExecRef(inst, n))
					if err != nil || x.State != WorkflowContinuedAsNew || x.Events != 3 || x.Number != uint64(n) {
						t.Errorf("%s: e%d: %+v, %v", when, n, x, err)
					}
					if h, err := p.WorkflowHistory(ctx, gwExecRef(inst, n), nil); err != nil || len(h) != 3 {
						t.Errorf("%s: e%d: history of %d events, %v", when, n, len(h), err)
					}
				}
				if rep := fsckT(t, dir, false); !rep.Clean() {
					t.Errorf("%s: fsck: %+v", when, rep.Findings)
				}
			}
			check("format 7 file", k)
			// The next commit moves e1..e6 out (moveMax of them), in its
			// record.
			gwContinue(t, p, gwFetchOf(t, p, inst), inst, k)
			listed = 1 + max(0, k-moveMax)
			check("after a commit", k+1)
			if x, err := p.WorkflowExecutionInfo(ctx, gwExecRef(inst, k+1)); err != nil || x.State != WorkflowActive || x.Number != k+1 {
				t.Errorf("e%d: %+v, %v", k+1, x, err)
			}
			// The next finishes the latest (and moves more out). Nothing
			// active: an old execution's id is still refused.
			mustNoErr(t, p.CompleteWorkflowTask(ctx, gwFetchOf(t, p, inst), WorkflowTaskResult{State: WorkflowFinished}))
			listed = 1 + max(0, listed-1-moveMax)
			check("after a second commit", k+1)
			for _, n := range []int{1, k, k + 1} {
				if err := p.CreateWorkflow(ctx, gwExecRef(inst, n), WorkflowStart{Name: "E"}, gwEv("x", "WorkflowExecutionStarted", 0)); !errors.Is(err, ErrWorkflowExists) {
					t.Errorf("create e%d again: %v, want ErrWorkflowExists", n, err)
				}
			}
			for n := 1; n <= k; n++ {
				_, err := os.Stat(p.gwIDPath(key, gwExecRef(inst, n).ExecutionID))
				if moved := n <= 2*moveMax; moved != (err == nil) {
					t.Errorf("by-id entry of e%d: %v (moved out: %v)", n, err, moved)
				}
			}
		})
	}
}

// gwTree reads every file of the instances and of the go-workflows queues
// (published messages) but leases and lock files, by path.
func gwTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := gwSnapshot(t, dir)
	_ = filepath.WalkDir(filepath.Join(dir, "instances"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(path)) != "by-id" {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		mustNoErr(t, err)
		out[rel] = string(data)
		return nil
	})
	return out
}

// TestGWReplayRestoresMovedOutExecutions: continue-as-new commits that move
// executions out of instance.json (the first one of a format-7 file moves
// every older one) are rebuilt by a replay from the log alone, whichever of
// their applied writes a power loss took: instance.json, the state.json
// files that now hold the records, the by-id entries, or all of them.
func TestGWReplayRestoresMovedOutExecutions(t *testing.T) {
	for _, lose := range []string{"everything", "records", "instance.json"} {
		t.Run("lost "+lose, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
			p := openT(t, dir, opts)
			const inst = "w"
			key := instanceKey(inst)
			gwEternal(t, p, inst, 3)
			mustNoErr(t, p.Close()) // a checkpoint
			gwDowngrade(t, dir, key)
			p = openT(t, dir, opts)
			mustNoErr(t, p.Close())
			p = openT(t, dir, opts)
			before := gwTree(t, dir)
			if inf, err := p.readGWInstance(key); err != nil || len(inf.GW.Executions) != 3 {
				t.Fatalf("format-7 instance.json after the upgrade: %+v, %v", inf, err)
			}
			for k := 3; k <= 4; k++ { // k=3 moves e1 and e2 out, k=4 e3
				gwContinue(t, p, gwFetchOf(t, p, inst), inst, k)
			}
			want := gwTree(t, dir)
			closeKeepingLog(t, p, dir)
			// The power loss: what the commits applied since the
			// checkpoint goes back to what it was (or is gone).
			for path := range want {
				abs := filepath.Join(dir, path)
				isRecord := filepath.Base(path) == "state.json" || filepath.Base(filepath.Dir(path)) == "by-id"
				switch {
				case lose == "records" && !isRecord, lose == "instance.json" && filepath.Base(path) != "instance.json":
					continue
				}
				if old, ok := before[path]; ok {
					mustNoErr(t, os.WriteFile(abs, []byte(old), 0o600))
				} else {
					mustNoErr(t, os.Remove(abs))
				}
			}
			if got := gwTree(t, dir); maps.Equal(got, want) {
				t.Fatal("the simulated power loss changed nothing")
			}
			p2 := replayAfterReboot(t, dir, opts)
			wantSameFiles(t, "after the replay", gwTree(t, dir), want)
			all, err := p2.WorkflowExecutions(ctx)
			mustNoErr(t, err)
			if len(all) != 5 {
				t.Fatalf("after the replay: %d executions listed, want 5", len(all))
			}
			for n := 1; n <= 4; n++ {
				x, err := p2.WorkflowExecutionInfo(ctx, gwExecRef(inst, n))
				if err != nil || x.State != WorkflowContinuedAsNew || x.Events != 3 {
					t.Errorf("after the replay: e%d: %+v, %v", n, x, err)
				}
			}
			mustNoErr(t, p2.Close())
			if rep := fsckT(t, dir, false); !rep.Clean() {
				t.Errorf("fsck after the replay: %+v", rep.Findings)
			}
		})
	}
}

// TestFsckGWByIDEntries: fsck reports a moved-out execution whose by-id
// entry is missing (a lookup by id would not find it) and rewrites it from
// the execution's state.json, and removes an entry that names no such
// execution.
func TestFsckGWByIDEntries(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
	const inst = "w"
	key := instanceKey(inst)
	gwEternal(t, p, inst, 3)
	mustNoErr(t, p.Close())
	mustNoErr(t, os.Remove(p.gwIDPath(key, "e2")))
	body, _ := jsonMarshal(gwIDEntry{ID: "zz", N: 9})
	mustNoErr(t, os.WriteFile(p.gwIDPath(key, "zz"), jsonseal.Seal(body), 0o600))
	rep := fsckT(t, dir, false)
	if f := findingOf(rep, FsckCounterDrift, "executions/by-id/e2"); f == nil || f.Severity != SeverityError {
		t.Errorf("missing entry not reported: %+v", rep.Findings)
	}
	if f := findingOf(rep, FsckCounterDrift, "executions/by-id/zz"); f == nil {
		t.Errorf("stray entry not reported: %+v", rep.Findings)
	}
	rep = fsckT(t, dir, true)
	if len(rep.Findings) != 2 || !rep.Findings[0].Repaired || !rep.Findings[1].Repaired {
		t.Errorf("repair: %+v", rep.Findings)
	}
	if rep := fsckT(t, dir, false); !rep.Clean() {
		t.Errorf("after the repair: %+v", rep.Findings)
	}
	p = openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
	if x, err := p.WorkflowExecutionInfo(ctx, gwExecRef(inst, 2)); err != nil || x.Number != 2 {
		t.Errorf("e2 after the repair: %+v, %v", x, err)
	}
}
