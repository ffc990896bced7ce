package conformance

import (
	"fmt"
	"slices"
	"testing"

	"github.com/durofs/durofs/provider"
)

// M. prune: deleting old executions of an instance, never the current one
// and never a running one.

// 101. keep_last keeps the newest executions; empty options keep only the
// current execution.
func testPruneOptionsCombinations(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "prune-options-test"
	h.createMultiExecutionInstance(inst, 4, false)

	if got := h.executions(inst); len(got) != 4 {
		t.Fatalf("ListExecutions(%q) = %v, want 4 executions", inst, got)
	}
	opts := provider.PruneOptions{KeepLast: ptr[uint32](2)}
	if res := h.prune(inst, opts); res.InstancesProcessed != 1 {
		t.Errorf("PruneExecutions(%q, %s) = %+v, want instances_processed 1", inst, describePruneOptions(opts), res)
	}
	got := h.executions(inst)
	if len(got) != 2 {
		t.Errorf("ListExecutions(%q) after pruning with keep_last 2 = %v, want 2 executions", inst, got)
	}
	if !slices.Contains(got, 3) && !slices.Contains(got, 4) {
		t.Errorf("ListExecutions(%q) after pruning with keep_last 2 = %v, want the newest executions (3 or 4) kept", inst, got)
	}

	const inst2 = "prune-options-empty"
	h.createMultiExecutionInstance(inst2, 3, false)
	current := h.info(inst2).CurrentExecutionID
	h.prune(inst2, provider.PruneOptions{})
	if got := h.executions(inst2); !slices.Equal(got, []uint64{current}) {
		t.Errorf("ListExecutions(%q) after pruning with empty options = %v, want only the current execution [%d]", inst2, got, current)
	}
}

// 102. Prune never deletes the current execution, fails for an unknown
// instance, and treats keep_last None, 0 and 1 alike.
func testPruneSafety(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "prune-safety-current"
	h.createMultiExecutionInstance(inst, 3, false)

	h.prune(inst, provider.PruneOptions{KeepLast: ptr[uint32](0)})
	if got := h.info(inst).CurrentExecutionID; got != 3 {
		t.Errorf("GetInstanceInfo(%q).CurrentExecutionID = %d after pruning with keep_last 0, want 3 (the current execution is kept)", inst, got)
	}

	const unknown = "does-not-exist-prune"
	if res, err := h.adm.PruneExecutions(h.ctx, unknown, provider.PruneOptions{KeepLast: ptr[uint32](1)}); err == nil {
		t.Errorf("PruneExecutions(%q) = %+v, want an error for an unknown instance", unknown, res)
	}

	for _, c := range []struct {
		label string
		keep  *uint32
	}{
		{"none", nil},
		{"some0", ptr[uint32](0)},
		{"some1", ptr[uint32](1)},
	} {
		inst := "prune-terminal-" + c.label
		h.createMultiExecutionInstance(inst, 4, false)
		info := h.info(inst)
		if info.Status != stCompleted {
			t.Errorf("GetInstanceInfo(%q).Status = %q, want %q", inst, info.Status, stCompleted)
		}
		opts := provider.PruneOptions{KeepLast: c.keep}
		res := h.prune(inst, opts)
		if got := h.executions(inst); !slices.Equal(got, []uint64{info.CurrentExecutionID}) {
			t.Errorf("ListExecutions(%q) after pruning with %s = %v, want only the current execution [%d]",
				inst, describePruneOptions(opts), got, info.CurrentExecutionID)
		}
		if res.ExecutionsDeleted < 3 {
			t.Errorf("PruneExecutions(%q, %s) = %+v, want executions_deleted ≥ 3", inst, describePruneOptions(opts), res)
		}
	}
}

// 103. PruneExecutionsBulk prunes exactly the instances of the filter.
func testPruneBulk(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	var insts []string
	for i := range 3 {
		inst := fmt.Sprintf("prune-bulk-%d", i)
		h.createMultiExecutionInstance(inst, 4, false)
		insts = append(insts, inst)
	}

	filter := provider.InstanceFilter{InstanceIDs: []string{insts[0], insts[1]}}
	opts := provider.PruneOptions{KeepLast: ptr[uint32](1)}
	res := h.pruneBulk(filter, opts)
	if res.InstancesProcessed != 2 || res.ExecutionsDeleted < 4 {
		t.Errorf("PruneExecutionsBulk(%s, %s) = %+v, want instances_processed 2 and executions_deleted ≥ 4",
			describeInstanceFilter(filter), describePruneOptions(opts), res)
	}
	for i, want := range []int{1, 1, 4} {
		if got := h.executions(insts[i]); len(got) != want {
			t.Errorf("ListExecutions(%q) after the bulk prune = %v, want %d executions", insts[i], got, want)
		}
	}
}

// 104. PruneExecutionsBulk prunes running instances too, keeping their
// current execution.
func testPruneBulkIncludesRunningInstances(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "prune-running-inst"
	h.createMultiExecutionInstance(inst, 3, true)

	if got := h.executions(inst); len(got) != 3 {
		t.Fatalf("ListExecutions(%q) = %v, want 3 executions", inst, got)
	}
	info := h.info(inst)
	if info.Status != stRunning || info.CurrentExecutionID != 3 {
		t.Fatalf("GetInstanceInfo(%q): status %q, current execution %d; want %q and 3", inst, info.Status, info.CurrentExecutionID, stRunning)
	}

	filter := provider.InstanceFilter{InstanceIDs: []string{inst}}
	opts := provider.PruneOptions{KeepLast: ptr[uint32](1)}
	res := h.pruneBulk(filter, opts)
	if res.InstancesProcessed != 1 || res.ExecutionsDeleted != 2 {
		t.Errorf("PruneExecutionsBulk(%s, %s) = %+v, want instances_processed 1 and executions_deleted 2 (running instances are not skipped)",
			describeInstanceFilter(filter), describePruneOptions(opts), res)
	}
	if got := h.executions(inst); !slices.Equal(got, []uint64{3}) {
		t.Errorf("ListExecutions(%q) after the bulk prune = %v, want [3]", inst, got)
	}
	if got := h.info(inst).Status; got != stRunning {
		t.Errorf("GetInstanceInfo(%q).Status = %q after the bulk prune, want %q", inst, got, stRunning)
	}
}
