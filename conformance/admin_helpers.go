package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// Helpers of the categories that need the Admin capability: H management,
// L deletion, M prune and N bulk_deletion (duroxide-contract.md §1.5, with
// the semantics of §2.19).

// Names and statuses the admin helpers use.
const (
	childOrchName   = "ChildOrch"
	longRunningName = "LongRunning"

	stRunning        = "Running"
	stCompleted      = "Completed"
	stFailed         = "Failed"
	stContinuedAsNew = "ContinuedAsNew"
)

// adminHarness is a harness with the provider's Admin capability.
type adminHarness struct {
	*harness
	adm provider.Admin
}

// setupAdmin creates the test's fresh provider and skips the test when the
// provider has no Admin capability.
func setupAdmin(t *testing.T, f Factory) *adminHarness {
	t.Helper()
	h := setup(t, f)
	adm, ok := h.p.Admin()
	if !ok {
		t.Skip("provider has no Admin capability")
	}
	if adm == nil {
		t.Fatal("Provider.Admin() returned ok with a nil Admin")
	}
	return &adminHarness{harness: h, adm: adm}
}

// ---- instance builders ----

// startedWithParent is Started(TestOrch 1.0.0) naming its parent, as a
// sub-orchestration's first event does (parentID may be nil).
func startedWithParent(instance, name, parent string, parentID *uint64) provider.Event {
	return event(instance, provider.InitialExecutionID, provider.InitialEventID, provider.OrchestrationStarted{
		Name:           name,
		Version:        testOrchVersion,
		Input:          "{}",
		ParentInstance: ptr(parent),
		ParentID:       parentID,
	})
}

// createTerminalInstance enqueues start_item, fetches it and acks [Started]
// with md{status, output, TestOrch, 1.0.0}: deletion's create_completed,
// create_failed and create_cancelled helpers.
func (h *adminHarness) createTerminalInstance(instance, status, output string) {
	h.t.Helper()
	h.enqueue(startItem(instance), 0)
	item := h.fetchSome(longLock, instance, "creating a "+status+" instance: fetching the start just enqueued")
	md := mdNameVersion(testOrchName, testOrchVersion)
	md.Status, md.Output = ptr(status), ptr(output)
	h.ackOK(item.LockToken, provider.InitialExecutionID, []provider.Event{started(instance)}, nil, nil, md)
}

// createCompletedInstance is create_completed_instance: a Completed root
// instance with output "done".
func (h *adminHarness) createCompletedInstance(instance string) {
	h.t.Helper()
	h.createTerminalInstance(instance, stCompleted, "done")
}

// createCompletedInstanceWithParent is create_completed_instance_with_parent:
// the start names the parent (parent_id 1), and the ack sets
// md{Completed, "done", TestOrch, 1.0.0, parent_instance_id parent}.
func (h *adminHarness) createCompletedInstanceWithParent(instance, parent string) {
	h.t.Helper()
	start := startItem(instance)
	start.ParentInstance, start.ParentID = ptr(parent), ptr[uint64](1)
	h.enqueue(start, 0)
	item := h.fetchSome(longLock, instance, "creating a completed sub-orchestration: fetching the start just enqueued")
	md := mdNameVersion(testOrchName, testOrchVersion)
	md.Status, md.Output, md.ParentInstanceID = ptr(stCompleted), ptr("done"), ptr(parent)
	h.ackOK(item.LockToken, provider.InitialExecutionID,
		[]provider.Event{startedWithParent(instance, testOrchName, parent, ptr[uint64](1))}, nil, nil, md)
}

// createChildInstance is deletion's create_child_instance: enqueue a start
// naming the parent (create_instance_with_parent), fetch it with a 5 s lock
// and ack [Started(ChildOrch)] with md{Completed, "done", ChildOrch, 1.0.0,
// parent_instance_id parent}.
func (h *adminHarness) createChildInstance(instance, parent string) {
	h.t.Helper()
	start := startItem(instance)
	start.ParentInstance = ptr(parent)
	h.enqueue(start, 0)
	item := h.fetchSome(5*time.Second, instance, "creating a child instance: fetching the start just enqueued")
	md := mdNameVersion(childOrchName, testOrchVersion)
	md.Status, md.Output, md.ParentInstanceID = ptr(stCompleted), ptr("done"), ptr(parent)
	h.ackOK(item.LockToken, provider.InitialExecutionID,
		[]provider.Event{startedWithParent(instance, childOrchName, parent, nil)}, nil, nil, md)
}

// createMultiExecutionInstance is prune's create_multi_execution_instance
// (running false) and create_running_multi_execution_instance (running
// true): execution 1 starts from start_item, executions 2..n from a
// ContinueAsNew, and each is acked as its own execution with [Started] and
// status ContinuedAsNew, except the last, which is Completed (or Running,
// for the running variant, whose name is LongRunning).
func (h *adminHarness) createMultiExecutionInstance(instance string, n uint64, running bool) {
	h.t.Helper()
	name, lastStatus := testOrchName, stCompleted
	if running {
		name, lastStatus = longRunningName, stRunning
	}
	for exec := uint64(1); exec <= n; exec++ {
		var item provider.WorkItem = startItem(instance)
		if exec > 1 {
			item = provider.ContinueAsNew{
				Instance:           instance,
				Orchestration:      name,
				Input:              "{}",
				Version:            ptr(testOrchVersion),
				CarryForwardEvents: [][2]string{},
			}
		}
		h.enqueue(item, 0)
		locked := h.fetchSome(longLock, instance, fmt.Sprintf("creating execution %d of %d: fetching the %s just enqueued", exec, n, item.Kind()))
		status := stContinuedAsNew
		if exec == n {
			status = lastStatus
		}
		md := mdNameVersion(name, testOrchVersion)
		md.Status = ptr(status)
		h.ackOK(locked.LockToken, exec, []provider.Event{startedEvent(instance, exec, name, testOrchVersion)}, nil, nil, md)
	}
}

// ---- Admin calls that must succeed ----

// info is GetInstanceInfo; an error fails the test.
func (h *adminHarness) info(instance string) provider.InstanceInfo {
	h.t.Helper()
	info, err := h.adm.GetInstanceInfo(h.ctx, instance)
	if err != nil {
		h.t.Fatalf("GetInstanceInfo(%q): unexpected error: %s", instance, describeErr(err))
	}
	return info
}

// executions is ListExecutions; an error fails the test.
func (h *adminHarness) executions(instance string) []uint64 {
	h.t.Helper()
	ids, err := h.adm.ListExecutions(h.ctx, instance)
	if err != nil {
		h.t.Fatalf("ListExecutions(%q): unexpected error: %s", instance, describeErr(err))
	}
	return ids
}

// children is ListChildren; an error fails the test.
func (h *adminHarness) children(instance string) []string {
	h.t.Helper()
	ids, err := h.adm.ListChildren(h.ctx, instance)
	if err != nil {
		h.t.Fatalf("ListChildren(%q): unexpected error: %s", instance, describeErr(err))
	}
	return ids
}

// deleteOK is DeleteInstance; an error fails the test.
func (h *adminHarness) deleteOK(instance string, force bool) provider.DeleteInstanceResult {
	h.t.Helper()
	res, err := h.adm.DeleteInstance(h.ctx, instance, force)
	if err != nil {
		h.t.Fatalf("DeleteInstance(%q, force=%v): unexpected error: %s", instance, force, describeErr(err))
	}
	return res
}

// deleteErr is DeleteInstance; success fails the test.
func (h *adminHarness) deleteErr(instance string, force bool, why string) error {
	h.t.Helper()
	res, err := h.adm.DeleteInstance(h.ctx, instance, force)
	if err == nil {
		h.t.Fatalf("DeleteInstance(%q, force=%v): succeeded with %+v, want an error (%s)", instance, force, res, why)
	}
	return err
}

// deleteAtomicOK is DeleteInstancesAtomic; an error fails the test.
func (h *adminHarness) deleteAtomicOK(ids []string, force bool) provider.DeleteInstanceResult {
	h.t.Helper()
	res, err := h.adm.DeleteInstancesAtomic(h.ctx, ids, force)
	if err != nil {
		h.t.Fatalf("DeleteInstancesAtomic(%q, force=%v): unexpected error: %s", ids, force, describeErr(err))
	}
	return res
}

// deleteAtomicErr is DeleteInstancesAtomic; success fails the test.
func (h *adminHarness) deleteAtomicErr(ids []string, force bool, why string) error {
	h.t.Helper()
	res, err := h.adm.DeleteInstancesAtomic(h.ctx, ids, force)
	if err == nil {
		h.t.Fatalf("DeleteInstancesAtomic(%q, force=%v): succeeded with %+v, want an error (%s)", ids, force, res, why)
	}
	return err
}

// bulkDelete is DeleteInstanceBulk; an error fails the test.
func (h *adminHarness) bulkDelete(filter provider.InstanceFilter) provider.DeleteInstanceResult {
	h.t.Helper()
	res, err := h.adm.DeleteInstanceBulk(h.ctx, filter)
	if err != nil {
		h.t.Fatalf("DeleteInstanceBulk(%s): unexpected error: %s", describeInstanceFilter(filter), describeErr(err))
	}
	return res
}

// prune is PruneExecutions; an error fails the test.
func (h *adminHarness) prune(instance string, opts provider.PruneOptions) provider.PruneResult {
	h.t.Helper()
	res, err := h.adm.PruneExecutions(h.ctx, instance, opts)
	if err != nil {
		h.t.Fatalf("PruneExecutions(%q, %s): unexpected error: %s", instance, describePruneOptions(opts), describeErr(err))
	}
	return res
}

// pruneBulk is PruneExecutionsBulk; an error fails the test.
func (h *adminHarness) pruneBulk(filter provider.InstanceFilter, opts provider.PruneOptions) provider.PruneResult {
	h.t.Helper()
	res, err := h.adm.PruneExecutionsBulk(h.ctx, filter, opts)
	if err != nil {
		h.t.Fatalf("PruneExecutionsBulk(%s, %s): unexpected error: %s", describeInstanceFilter(filter), describePruneOptions(opts), describeErr(err))
	}
	return res
}

// ---- existence checks ----

// wantExists fails the test unless GetInstanceInfo succeeds.
func (h *adminHarness) wantExists(instance, why string) {
	h.t.Helper()
	if _, err := h.adm.GetInstanceInfo(h.ctx, instance); err != nil {
		h.t.Errorf("GetInstanceInfo(%q): error %s, want the instance to exist (%s)", instance, describeErr(err), why)
	}
}

// wantGone fails the test unless GetInstanceInfo gives an error.
func (h *adminHarness) wantGone(instance, why string) {
	h.t.Helper()
	if info, err := h.adm.GetInstanceInfo(h.ctx, instance); err == nil {
		h.t.Errorf("GetInstanceInfo(%q): found %+v, want an error: the instance must not exist (%s)", instance, info, why)
	}
}

// ---- assertions and descriptions ----

// lowerMentions reports whether err's lowercased text contains any of subs,
// as duroxide's to_string().to_lowercase().contains checks do.
func lowerMentions(err error, subs ...string) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, s := range subs {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// wantPermanent fails the test if err is retryable.
func (h *adminHarness) wantPermanent(err error, what string) {
	h.t.Helper()
	if provider.IsRetryable(err) {
		h.t.Errorf("%s: error %s is retryable, want a permanent error", what, describeErr(err))
	}
}

func describeInstanceFilter(f provider.InstanceFilter) string {
	var parts []string
	if f.InstanceIDs != nil {
		parts = append(parts, fmt.Sprintf("ids %q", f.InstanceIDs))
	}
	if f.CompletedBeforeMs != nil {
		parts = append(parts, fmt.Sprintf("completed_before %d", *f.CompletedBeforeMs))
	}
	if f.Limit != nil {
		parts = append(parts, fmt.Sprintf("limit %d", *f.Limit))
	}
	return "filter{" + strings.Join(parts, ", ") + "}"
}

func describePruneOptions(o provider.PruneOptions) string {
	keep, before := "None", "None"
	if o.KeepLast != nil {
		keep = fmt.Sprintf("Some(%d)", *o.KeepLast)
	}
	if o.CompletedBeforeMs != nil {
		before = fmt.Sprintf("Some(%d)", *o.CompletedBeforeMs)
	}
	return fmt.Sprintf("keep_last %s, completed_before %s", keep, before)
}

// epochMsNow is the wall clock in milliseconds since the Unix epoch.
func epochMsNow() uint64 { return uint64(time.Now().UnixMilli()) }
