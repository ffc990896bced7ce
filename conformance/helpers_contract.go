package conformance

import (
	"fmt"
	"time"

	"github.com/durofs/durofs/provider"
)

// Helpers of categories K, O, P, Q and R (cancellation, capability_filtering,
// sessions, custom_status, tag_filtering).

// ackFull calls AckOrchestrationItem with every argument, cancelled
// activities included, and fails the test on error.
func (h *harness) ackFull(token string, executionID uint64, delta []provider.Event, worker, orch []provider.WorkItem,
	md provider.ExecutionMetadata, cancelled []provider.ScheduledActivityIdentifier) {
	h.t.Helper()
	if err := h.p.AckOrchestrationItem(h.ctx, token, executionID, delta, worker, orch, md, cancelled); err != nil {
		h.t.Fatalf("AckOrchestrationItem(execution %d, %d events %v, %d worker items, %d orchestrator items, %d cancelled): unexpected error: %s",
			executionID, len(delta), kinds(delta), len(worker), len(orch), len(cancelled), describeErr(err))
	}
}

// startTurn enqueues start_item(instance), fetches it with a 30 s lock and
// returns the locked item; the caller acks it.
func (h *harness) startTurn(instance string) *provider.LockedOrchestrationItem {
	h.t.Helper()
	h.enqueue(startItem(instance), 0)
	return h.fetchSome(longLock, instance, "the start was just enqueued")
}

// triggerTurn enqueues ExternalRaised{instance, name, "{}"}, fetches the
// instance with a 30 s lock and returns the locked item.
func (h *harness) triggerTurn(instance, name string) *provider.LockedOrchestrationItem {
	h.t.Helper()
	h.enqueue(externalRaised(instance, name), 0)
	return h.fetchSome(longLock, instance, fmt.Sprintf("an ExternalRaised %q was just enqueued", name))
}

// externalRaised is ExternalRaised{instance, name, data "{}"}.
func externalRaised(instance, name string) provider.ExternalRaised {
	return provider.ExternalRaised{Instance: instance, Name: name, Data: "{}"}
}

// namedActivity is an ActivityExecute of execution 1 with the given id and name.
func namedActivity(instance string, id uint64, name string) provider.ActivityExecute {
	return activityExecute(instance, provider.InitialExecutionID, id, name)
}

// scheduledID is a ScheduledActivityIdentifier of execution 1.
func scheduledID(instance string, id uint64) provider.ScheduledActivityIdentifier {
	return provider.ScheduledActivityIdentifier{Instance: instance, ExecutionID: provider.InitialExecutionID, ActivityID: id}
}

// workItems converts activities to work items.
func workItems(items ...provider.ActivityExecute) []provider.WorkItem {
	out := make([]provider.WorkItem, len(items))
	for i, ae := range items {
		out[i] = ae
	}
	return out
}

// ---- work-item fetches with a session and a tag filter ----

// wfetchWith is FetchWorkItem(lock, poll 0, session, tags); an error fails the test.
func (h *harness) wfetchWith(lock time.Duration, session *provider.SessionFetchConfig, tags provider.TagFilter) *provider.LockedWorkItem {
	h.t.Helper()
	item, err := h.p.FetchWorkItem(h.ctx, lock, 0, session, tags)
	if err != nil {
		h.t.Fatalf("FetchWorkItem(lock %v, %s, %s): unexpected error: %s", lock, describeSession(session), describeTags(tags), describeErr(err))
	}
	return item
}

// wfetchWithSome is wfetchWith that fails the test unless an ActivityExecute is returned.
func (h *harness) wfetchWithSome(lock time.Duration, session *provider.SessionFetchConfig, tags provider.TagFilter, why string) (*provider.LockedWorkItem, provider.ActivityExecute) {
	h.t.Helper()
	item := h.wfetchWith(lock, session, tags)
	if item == nil {
		h.t.Fatalf("FetchWorkItem(%s, %s): got no item, want one (%s)", describeSession(session), describeTags(tags), why)
	}
	ae, ok := itemAs[provider.ActivityExecute](item.Item)
	if !ok {
		h.t.Fatalf("FetchWorkItem(%s, %s): got a %s, want an ActivityExecute (%s)", describeSession(session), describeTags(tags), itemKind(item.Item), why)
	}
	return item, ae
}

// wfetchWithNone is wfetchWith that fails the test if an item is returned.
func (h *harness) wfetchWithNone(lock time.Duration, session *provider.SessionFetchConfig, tags provider.TagFilter, why string) {
	h.t.Helper()
	if item := h.wfetchWith(lock, session, tags); item != nil {
		h.t.Fatalf("FetchWorkItem(%s, %s): got %s, want no item (%s)", describeSession(session), describeTags(tags), describeWork(item.Item), why)
	}
}

// describeWork names a work item for failure messages.
func describeWork(w provider.WorkItem) string {
	ae, ok := itemAs[provider.ActivityExecute](w)
	if !ok {
		return itemKind(w)
	}
	return fmt.Sprintf("activity %d %q of %q (session %s, tag %s)", ae.ID, ae.Name, ae.Instance, optString(ae.SessionID), optString(ae.Tag))
}

// describeSession formats a session config for failure messages.
func describeSession(s *provider.SessionFetchConfig) string {
	if s == nil {
		return "no session"
	}
	return fmt.Sprintf("session owner %q lock %v", s.OwnerID, s.LockTimeout)
}

// describeTags formats a tag filter for failure messages.
func describeTags(f provider.TagFilter) string {
	switch f.Mode {
	case provider.TagDefaultOnly:
		return "DefaultOnly"
	case provider.TagsOnly:
		return fmt.Sprintf("Tags%v", f.Set)
	case provider.TagDefaultAnd:
		return fmt.Sprintf("DefaultAnd%v", f.Set)
	case provider.TagAny:
		return "Any"
	case provider.TagNone:
		return "None"
	}
	return fmt.Sprintf("TagFilter(mode %d)", f.Mode)
}

// optString formats an optional string: its quoted value or "None".
func optString(s *string) string {
	if s == nil {
		return "None"
	}
	return fmt.Sprintf("%q", *s)
}

// wantOptString fails the test unless got is want (nil meaning None).
func (h *harness) wantOptString(what string, got, want *string) {
	h.t.Helper()
	if (got == nil) != (want == nil) || (got != nil && *got != *want) {
		h.t.Errorf("%s = %s, want %s", what, optString(got), optString(want))
	}
}

// renewWorkOK renews a work-item lock and fails the test on error.
func (h *harness) renewWorkOK(token string, extendFor time.Duration, why string) {
	h.t.Helper()
	if err := h.p.RenewWorkItemLock(h.ctx, token, extendFor); err != nil {
		h.t.Fatalf("RenewWorkItemLock(extend %v): unexpected error: %s (%s)", extendFor, describeErr(err), why)
	}
}
