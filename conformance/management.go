package conformance

import (
	"fmt"
	"slices"
	"testing"

	"github.com/durofs/durofs/provider"
)

// H. management: the Admin capability's listing and inspection calls.

// 51. ListInstances includes every created instance.
func testListInstances(t *testing.T, f Factory) {
	h := setupAdmin(t, f)

	var want []string
	for i := range 3 {
		inst := fmt.Sprintf("mgmt-inst-%d", i)
		h.createInstance(inst)
		want = append(want, inst)
	}
	got, err := h.adm.ListInstances(h.ctx)
	if err != nil {
		t.Fatalf("ListInstances: unexpected error: %s", describeErr(err))
	}
	if len(got) < 3 {
		t.Errorf("ListInstances = %q (%d ids), want at least 3", got, len(got))
	}
	for _, inst := range want {
		if !slices.Contains(got, inst) {
			t.Errorf("ListInstances = %q, want it to include %q", got, inst)
		}
	}
}

// 52. ListInstancesByStatus("Completed") includes a completed instance.
func testListInstancesByStatus(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "mgmt-completed"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	md := mdNameVersion(testOrchName, testOrchVersion)
	md.Status, md.Output = ptr(stCompleted), ptr("done")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, md)

	got, err := h.adm.ListInstancesByStatus(h.ctx, stCompleted)
	if err != nil {
		t.Fatalf("ListInstancesByStatus(%q): unexpected error: %s", stCompleted, describeErr(err))
	}
	if !slices.Contains(got, inst) {
		t.Errorf("ListInstancesByStatus(%q) = %q, want it to include %q", stCompleted, got, inst)
	}
}

// 53. ListExecutions includes execution 1 of an instance acked without metadata.
func testListExecutions(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "mgmt-multi-exec"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})

	if got := h.executions(inst); !slices.Contains(got, 1) {
		t.Errorf("ListExecutions(%q) = %v, want it to include 1", inst, got)
	}
}

// 54. GetInstanceInfo reports the name and version from the metadata.
func testGetInstanceInfo(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "mgmt-info"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	ev := event(inst, 1, provider.InitialEventID, provider.OrchestrationStarted{Name: "InfoOrch", Version: "2.0.0", Input: "test"})
	h.ackOK(item.LockToken, 1, []provider.Event{ev}, nil, nil, mdNameVersion("InfoOrch", "2.0.0"))

	info := h.info(inst)
	if info.InstanceID != inst {
		t.Errorf("GetInstanceInfo(%q).InstanceID = %q, want %q", inst, info.InstanceID, inst)
	}
	if info.OrchestrationName != "InfoOrch" {
		t.Errorf("GetInstanceInfo(%q).OrchestrationName = %q, want %q", inst, info.OrchestrationName, "InfoOrch")
	}
	if info.OrchestrationVersion != "2.0.0" {
		t.Errorf("GetInstanceInfo(%q).OrchestrationVersion = %q, want %q", inst, info.OrchestrationVersion, "2.0.0")
	}
	if info.CurrentExecutionID != 1 {
		t.Errorf("GetInstanceInfo(%q).CurrentExecutionID = %d, want 1", inst, info.CurrentExecutionID)
	}
}

// 55. GetExecutionInfo reports status and output of an execution acked
// without name or version, whose event names another instance: records are
// keyed by the locked instance.
func testGetExecutionInfo(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "mgmt-exec-info"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	// The event's instance_id deliberately names a different instance.
	md := provider.ExecutionMetadata{Status: ptr(stCompleted), Output: ptr("result")}
	h.ackOK(item.LockToken, 1, []provider.Event{started("mgmt-bulk-del")}, nil, nil, md)

	info, err := h.adm.GetExecutionInfo(h.ctx, inst, 1)
	if err != nil {
		t.Fatalf("GetExecutionInfo(%q, 1): unexpected error: %s (the execution record is keyed by the locked instance, "+
			"not by event.instance_id, and must exist without instance metadata)", inst, describeErr(err))
	}
	if info.ExecutionID != 1 {
		t.Errorf("GetExecutionInfo(%q, 1).ExecutionID = %d, want 1", inst, info.ExecutionID)
	}
	if info.Status != stCompleted {
		t.Errorf("GetExecutionInfo(%q, 1).Status = %q, want %q", inst, info.Status, stCompleted)
	}
	if info.Output == nil {
		t.Errorf("GetExecutionInfo(%q, 1).Output = None, want %q", inst, "result")
	} else if *info.Output != "result" {
		t.Errorf("GetExecutionInfo(%q, 1).Output = %q, want %q", inst, *info.Output, "result")
	}
}

// 56. GetSystemMetrics counts a new instance and its events.
func testGetSystemMetrics(t *testing.T, f Factory) {
	h := setupAdmin(t, f)
	const inst = "mgmt-metrics"

	before, err := h.adm.GetSystemMetrics(h.ctx)
	if err != nil {
		t.Fatalf("GetSystemMetrics (baseline): unexpected error: %s", describeErr(err))
	}

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	// The event's instance_id deliberately names a different instance.
	h.ackOK(item.LockToken, 1, []provider.Event{started("mgmt-cancel")}, nil, nil, mdNameVersion(testOrchName, testOrchVersion))

	after, err := h.adm.GetSystemMetrics(h.ctx)
	if err != nil {
		t.Fatalf("GetSystemMetrics: unexpected error: %s", describeErr(err))
	}
	if after.TotalInstances <= before.TotalInstances {
		t.Errorf("GetSystemMetrics: total_instances = %d after creating %q, want more than the baseline %d",
			after.TotalInstances, inst, before.TotalInstances)
	}
	if after.TotalEvents == 0 {
		t.Errorf("GetSystemMetrics: total_events = 0 after acking an event, want > 0")
	}
}

// 57. GetQueueDepths counts a newly enqueued orchestrator message.
func testGetQueueDepths(t *testing.T, f Factory) {
	h := setupAdmin(t, f)

	before, err := h.adm.GetQueueDepths(h.ctx)
	if err != nil {
		t.Fatalf("GetQueueDepths (baseline): unexpected error: %s", describeErr(err))
	}
	h.enqueue(startItem("mgmt-queue"), 0)
	after, err := h.adm.GetQueueDepths(h.ctx)
	if err != nil {
		t.Fatalf("GetQueueDepths: unexpected error: %s", describeErr(err))
	}
	if after.OrchestratorQueue <= before.OrchestratorQueue {
		t.Errorf("GetQueueDepths: orchestrator_queue = %d after an enqueue, want more than the baseline %d",
			after.OrchestratorQueue, before.OrchestratorQueue)
	}
}
