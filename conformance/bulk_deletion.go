package conformance

import (
	"fmt"
	"testing"

	"github.com/durofs/durofs/provider"
)

// N. bulk_deletion: DeleteInstanceBulk deletes terminal root instances
// matching a filter, with their trees.

// 105. Filters by ids, ignores unknown ids, and an empty filter selects every
// terminal root.
func testDeleteInstanceBulkFilterCombinations(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	var insts []string
	for i := range 5 {
		inst := fmt.Sprintf("bulk-del-filter-%d", i)
		h.createCompletedInstance(inst)
		insts = append(insts, inst)
	}

	filter := provider.InstanceFilter{InstanceIDs: []string{insts[0], insts[1]}}
	if res := h.bulkDelete(filter); res.InstancesDeleted != 2 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted 2", describeInstanceFilter(filter), res)
	}
	h.wantGone(insts[0], "it was bulk-deleted by id")
	h.wantGone(insts[1], "it was bulk-deleted by id")
	h.wantExists(insts[2], "it was not in the filter")

	filter = provider.InstanceFilter{InstanceIDs: []string{"does-not-exist-1", "does-not-exist-2"}}
	if res := h.bulkDelete(filter); res.InstancesDeleted != 0 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted 0 (the ids do not exist)", describeInstanceFilter(filter), res)
	}

	if res := h.bulkDelete(provider.InstanceFilter{}); res.InstancesDeleted < 3 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted ≥ 3 (every remaining terminal instance)",
			describeInstanceFilter(provider.InstanceFilter{}), res)
	}
	for _, inst := range insts[2:] {
		h.wantGone(inst, "the empty filter selects every terminal root instance")
	}
}

// 106. Running instances are skipped, and the limit applies after that.
func testDeleteInstanceBulkSafetyAndLimits(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const (
		completed1 = "bulk-del-safe-completed-1"
		completed2 = "bulk-del-safe-completed-2"
		running1   = "bulk-del-safe-running-1"
		running2   = "bulk-del-safe-running-2"
	)
	h.createCompletedInstance(completed1)
	h.createCompletedInstance(completed2)
	h.createInstance(running1)
	h.createInstance(running2)

	filter := provider.InstanceFilter{InstanceIDs: []string{completed1, completed2, running1, running2}}
	if res := h.bulkDelete(filter); res.InstancesDeleted != 2 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted 2 (only the completed ones)", describeInstanceFilter(filter), res)
	}
	h.wantExists(running1, "bulk deletion skips running instances")
	h.wantExists(running2, "bulk deletion skips running instances")

	for i := range 4 {
		h.createCompletedInstance(fmt.Sprintf("bulk-del-batch-%d", i))
	}
	filter = provider.InstanceFilter{Limit: ptr[uint32](2)}
	for i, want := range []uint64{2, 2, 0} {
		if res := h.bulkDelete(filter); res.InstancesDeleted != want {
			t.Errorf("DeleteInstanceBulk(%s) call %d = %+v, want instances_deleted %d "+
				"(the limit applies after filtering out the running instances)", describeInstanceFilter(filter), i+1, res, want)
		}
	}
	h.wantExists(running1, "bulk deletion skips running instances")
	h.wantExists(running2, "bulk deletion skips running instances")
}

// 107. completed_before compares the current execution's completion time,
// strictly.
func testDeleteInstanceBulkCompletedBeforeFilter(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst1, inst2 = "bulk-del-time-1", "bulk-del-time-2"
	ids := []string{inst1, inst2}

	before := epochMsNow()
	sleep(10 * ms)
	h.createCompletedInstance(inst1)
	h.createCompletedInstance(inst2)
	sleep(10 * ms)
	after := epochMsNow()

	filter := provider.InstanceFilter{InstanceIDs: ids, CompletedBeforeMs: ptr(before)}
	if res := h.bulkDelete(filter); res.InstancesDeleted != 0 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted 0 (both completed after the cutoff)", describeInstanceFilter(filter), res)
	}
	h.wantExists(inst1, "it completed after the cutoff")
	h.wantExists(inst2, "it completed after the cutoff")

	filter = provider.InstanceFilter{InstanceIDs: ids, CompletedBeforeMs: ptr(after)}
	if res := h.bulkDelete(filter); res.InstancesDeleted != 2 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted 2 (both completed before the cutoff)", describeInstanceFilter(filter), res)
	}
	h.wantGone(inst1, "it completed before the cutoff")
	h.wantGone(inst2, "it completed before the cutoff")
}

// 108. Deleting roots deletes their children, and the count includes them.
func testDeleteInstanceBulkCascadesToChildren(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const (
		parent1    = "bulk-del-cascade-parent1"
		child1     = "bulk-del-cascade-child1"
		parent2    = "bulk-del-cascade-parent2"
		child2a    = "bulk-del-cascade-child2a"
		child2b    = "bulk-del-cascade-child2b"
		child2c    = "bulk-del-cascade-child2c"
		standalone = "bulk-del-cascade-standalone"
	)
	h.createCompletedInstance(parent1)
	h.createCompletedInstanceWithParent(child1, parent1)
	h.createCompletedInstance(parent2)
	for _, c := range []string{child2a, child2b, child2c} {
		h.createCompletedInstanceWithParent(c, parent2)
	}
	h.createCompletedInstance(standalone)
	all := []string{parent1, child1, parent2, child2a, child2b, child2c, standalone}
	for _, inst := range all {
		h.info(inst)
	}

	filter := provider.InstanceFilter{InstanceIDs: []string{parent1, parent2, standalone}}
	if res := h.bulkDelete(filter); res.InstancesDeleted != 7 {
		t.Errorf("DeleteInstanceBulk(%s) = %+v, want instances_deleted 7 (3 roots and their 4 children)", describeInstanceFilter(filter), res)
	}
	for _, inst := range all {
		h.wantGone(inst, "bulk deletion deletes each root's tree")
	}
}
