package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// Constants shared by the tests (duroxide-contract.md §1.3, §1.4).
const (
	testOrchName    = "TestOrch"
	testOrchVersion = "1.0.0"
	// duroxideVersion is the crate version duroxide's event helper stamps on events.
	duroxideVersion = provider.DuroxideVersion
	// longLock is the "effectively forever" lock of most fetches.
	longLock = 30 * time.Second
	// testTimeout bounds each test's context.
	testTimeout = 30 * time.Second
)

// ms is a millisecond, for the catalog's timings.
const ms = time.Millisecond

// sleep waits d on the real clock. The suite's timings are the catalog's and
// must not be shortened.
func sleep(d time.Duration) { time.Sleep(d) }

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }

// harness is one test's provider, context and factory.
type harness struct {
	t   *testing.T
	f   Factory
	p   provider.Provider
	ctx context.Context
	// lt is Factory.LockTimeout().
	lt time.Duration
}

// setup creates the test's fresh provider and its 30 s context.
func setup(t *testing.T, f Factory) *harness {
	t.Helper()
	p := f.NewProvider(t)
	if p == nil {
		t.Fatal("Factory.NewProvider returned a nil provider")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return &harness{t: t, f: f, p: p, ctx: ctx, lt: f.LockTimeout()}
}

// ---- work items and events ----

// startItem is duroxide's start_item: a StartOrchestration of TestOrch 1.0.0
// with input "{}" for execution 1.
func startItem(instance string) provider.StartOrchestration {
	return provider.StartOrchestration{
		Instance:      instance,
		Orchestration: testOrchName,
		Input:         "{}",
		Version:       ptr(testOrchVersion),
		ExecutionID:   provider.InitialExecutionID,
	}
}

// startItemExec is startItem for another execution id.
func startItemExec(instance string, executionID uint64) provider.StartOrchestration {
	s := startItem(instance)
	s.ExecutionID = executionID
	return s
}

// event builds a history event stamped with now and the crate version.
func event(instance string, executionID, eventID uint64, kind provider.EventKind) provider.Event {
	return provider.Event{
		EventID:         eventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: duroxideVersion,
		Kind:            kind,
	}
}

// startedEvent is an OrchestrationStarted with event id 1 and input "{}".
func startedEvent(instance string, executionID uint64, name, version string) provider.Event {
	return event(instance, executionID, provider.InitialEventID, provider.OrchestrationStarted{
		Name:    name,
		Version: version,
		Input:   "{}",
	})
}

// started is startedEvent of TestOrch 1.0.0 for execution 1.
func started(instance string) provider.Event {
	return startedEvent(instance, provider.InitialExecutionID, testOrchName, testOrchVersion)
}

// activityScheduledEvent is an ActivityScheduled event.
func activityScheduledEvent(instance string, executionID, eventID uint64, name string) provider.Event {
	return event(instance, executionID, eventID, provider.ActivityScheduled{Name: name, Input: "{}"})
}

// activityExecute is a worker item for instance's execution.
func activityExecute(instance string, executionID, id uint64, name string) provider.ActivityExecute {
	return provider.ActivityExecute{
		Instance:    instance,
		ExecutionID: executionID,
		ID:          id,
		Name:        name,
		Input:       "{}",
	}
}

// activityCompleted is AC(id): an ActivityCompleted for execution 1.
func activityCompleted(instance string, id uint64) provider.ActivityCompleted {
	return provider.ActivityCompleted{
		Instance:    instance,
		ExecutionID: provider.InitialExecutionID,
		ID:          id,
		Result:      `"result"`,
	}
}

// mdNameVersion is md{name, version}.
func mdNameVersion(name, version string) provider.ExecutionMetadata {
	return provider.ExecutionMetadata{OrchestrationName: ptr(name), OrchestrationVersion: ptr(version)}
}

// ---- type helpers ----

// kindAs returns an event's kind as T, accepting T or *T.
func kindAs[T provider.EventKind](k provider.EventKind) (T, bool) {
	switch v := any(k).(type) {
	case T:
		return v, true
	case *T:
		if v != nil {
			return *v, true
		}
	}
	var zero T
	return zero, false
}

// itemAs returns a work item as T, accepting T or *T.
func itemAs[T provider.WorkItem](w provider.WorkItem) (T, bool) {
	switch v := any(w).(type) {
	case T:
		return v, true
	case *T:
		if v != nil {
			return *v, true
		}
	}
	var zero T
	return zero, false
}

// kindName returns an event's type tag, or "<nil>".
func kindName(e provider.Event) string {
	if e.Kind == nil {
		return "<nil>"
	}
	return e.Kind.Type()
}

// itemKind returns a work item's variant name, or "<nil>".
func itemKind(w provider.WorkItem) string {
	if w == nil {
		return "<nil>"
	}
	return w.Kind()
}

// kinds lists the type tags of events.
func kinds(events []provider.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = kindName(e)
	}
	return out
}

// itemKinds lists the variants of work items.
func itemKinds(items []provider.WorkItem) []string {
	out := make([]string, len(items))
	for i, w := range items {
		out[i] = itemKind(w)
	}
	return out
}

// activityCompletedIDs returns the ids of the ActivityCompleted messages, in order.
func activityCompletedIDs(items []provider.WorkItem) []uint64 {
	var ids []uint64
	for _, w := range items {
		if ac, ok := itemAs[provider.ActivityCompleted](w); ok {
			ids = append(ids, ac.ID)
		}
	}
	return ids
}

// activityNames returns the names of the ActivityScheduled events ("" for other kinds).
func activityNames(events []provider.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		if as, ok := kindAs[provider.ActivityScheduled](e.Kind); ok {
			out[i] = as.Name
		}
	}
	return out
}

// describeErr formats an error with its retryability, for failure messages.
func describeErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%v (retryable=%v)", err, provider.IsRetryable(err))
}

// ---- orchestrator queue ----

// enqueue enqueues an orchestrator item; an error fails the test.
func (h *harness) enqueue(item provider.WorkItem, delay time.Duration) {
	h.t.Helper()
	if err := h.p.EnqueueForOrchestrator(h.ctx, item, delay); err != nil {
		h.t.Fatalf("EnqueueForOrchestrator(%s for %q, delay %v): unexpected error: %s",
			itemKind(item), provider.TargetInstance(item), delay, describeErr(err))
	}
}

// fetch is duroxide's "fetch": FetchOrchestrationItem(lock, poll 0, no filter).
// An error fails the test.
func (h *harness) fetch(lock time.Duration) *provider.LockedOrchestrationItem {
	h.t.Helper()
	item, err := h.p.FetchOrchestrationItem(h.ctx, lock, 0, nil)
	if err != nil {
		h.t.Fatalf("FetchOrchestrationItem(lock %v): unexpected error: %s", lock, describeErr(err))
	}
	return item
}

// fetchSome fetches and fails the test unless an item for instance is
// returned (any instance when instance is "").
func (h *harness) fetchSome(lock time.Duration, instance, why string) *provider.LockedOrchestrationItem {
	h.t.Helper()
	item := h.fetch(lock)
	if item == nil {
		h.t.Fatalf("FetchOrchestrationItem: got no item, want an item for %q (%s)", instance, why)
	}
	if instance != "" && item.Item.Instance != instance {
		h.t.Fatalf("FetchOrchestrationItem: got instance %q, want %q (%s)", item.Item.Instance, instance, why)
	}
	return item
}

// fetchNone fetches and fails the test if an item is returned.
func (h *harness) fetchNone(lock time.Duration, why string) {
	h.t.Helper()
	if item := h.fetch(lock); item != nil {
		h.t.Fatalf("FetchOrchestrationItem: got an item for %q with messages %v, want none (%s)",
			item.Item.Instance, itemKinds(item.Item.Messages), why)
	}
}

// ack calls AckOrchestrationItem with no cancelled activities and returns its error.
func (h *harness) ack(token string, executionID uint64, delta []provider.Event, worker, orch []provider.WorkItem, md provider.ExecutionMetadata) error {
	return h.p.AckOrchestrationItem(h.ctx, token, executionID, delta, worker, orch, md, nil)
}

// ackOK acks and fails the test on error.
func (h *harness) ackOK(token string, executionID uint64, delta []provider.Event, worker, orch []provider.WorkItem, md provider.ExecutionMetadata) {
	h.t.Helper()
	if err := h.ack(token, executionID, delta, worker, orch, md); err != nil {
		h.t.Fatalf("AckOrchestrationItem(execution %d, %d events %v): unexpected error: %s",
			executionID, len(delta), kinds(delta), describeErr(err))
	}
}

// ackErr acks and fails the test unless the ack fails.
func (h *harness) ackErr(token string, executionID uint64, delta []provider.Event, md provider.ExecutionMetadata, why string) error {
	h.t.Helper()
	err := h.ack(token, executionID, delta, nil, nil, md)
	if err == nil {
		h.t.Fatalf("AckOrchestrationItem(token %q): succeeded, want an error (%s)", token, why)
	}
	return err
}

// abandonOK abandons an orchestration item and fails the test on error.
func (h *harness) abandonOK(token string, delay time.Duration, ignoreAttempt bool) {
	h.t.Helper()
	if err := h.p.AbandonOrchestrationItem(h.ctx, token, delay, ignoreAttempt); err != nil {
		h.t.Fatalf("AbandonOrchestrationItem(delay %v, ignoreAttempt %v): unexpected error: %s",
			delay, ignoreAttempt, describeErr(err))
	}
}

// createInstance is duroxide's create_instance: enqueue start_item, fetch with
// a 30 s lock and ack execution 1 with [Started] and md{TestOrch, 1.0.0}.
func (h *harness) createInstance(instance string) {
	h.t.Helper()
	h.enqueue(startItem(instance), 0)
	item := h.fetchSome(longLock, instance, "create_instance: fetching the start just enqueued")
	if err := h.ack(item.LockToken, provider.InitialExecutionID, []provider.Event{started(instance)}, nil, nil,
		mdNameVersion(testOrchName, testOrchVersion)); err != nil {
		h.t.Fatalf("create_instance(%q): AckOrchestrationItem: unexpected error: %s", instance, describeErr(err))
	}
}

// read returns the latest execution's history; an error fails the test.
func (h *harness) read(instance string) []provider.Event {
	h.t.Helper()
	events, err := h.p.Read(h.ctx, instance)
	if err != nil {
		h.t.Fatalf("Read(%q): unexpected error: %s", instance, describeErr(err))
	}
	return events
}

// readExec returns one execution's history; an error fails the test.
func (h *harness) readExec(instance string, executionID uint64) []provider.Event {
	h.t.Helper()
	events, err := h.p.ReadWithExecution(h.ctx, instance, executionID)
	if err != nil {
		h.t.Fatalf("ReadWithExecution(%q, %d): unexpected error: %s", instance, executionID, describeErr(err))
	}
	return events
}

// ---- worker queue ----

// enqueueWorker enqueues a worker item; an error fails the test.
func (h *harness) enqueueWorker(item provider.ActivityExecute) {
	h.t.Helper()
	if err := h.p.EnqueueForWorker(h.ctx, item); err != nil {
		h.t.Fatalf("EnqueueForWorker(activity %d %q of %q): unexpected error: %s",
			item.ID, item.Name, item.Instance, describeErr(err))
	}
}

// wfetch is duroxide's "wfetch": FetchWorkItem(lock, poll 0, no session,
// DefaultOnly). An error fails the test.
func (h *harness) wfetch(lock time.Duration) *provider.LockedWorkItem {
	h.t.Helper()
	item, err := h.p.FetchWorkItem(h.ctx, lock, 0, nil, provider.DefaultOnlyTags())
	if err != nil {
		h.t.Fatalf("FetchWorkItem(lock %v): unexpected error: %s", lock, describeErr(err))
	}
	return item
}

// wfetchSome wfetches and fails the test unless an ActivityExecute is returned.
func (h *harness) wfetchSome(lock time.Duration, why string) (*provider.LockedWorkItem, provider.ActivityExecute) {
	h.t.Helper()
	item := h.wfetch(lock)
	if item == nil {
		h.t.Fatalf("FetchWorkItem: got no item, want one (%s)", why)
	}
	ae, ok := itemAs[provider.ActivityExecute](item.Item)
	if !ok {
		h.t.Fatalf("FetchWorkItem: got a %s, want an ActivityExecute (%s)", itemKind(item.Item), why)
	}
	return item, ae
}

// wfetchNone wfetches and fails the test if an item is returned.
func (h *harness) wfetchNone(lock time.Duration, why string) {
	h.t.Helper()
	if item := h.wfetch(lock); item != nil {
		desc := itemKind(item.Item)
		if ae, ok := itemAs[provider.ActivityExecute](item.Item); ok {
			desc = fmt.Sprintf("activity %d %q", ae.ID, ae.Name)
		}
		h.t.Fatalf("FetchWorkItem: got %s, want no item (%s)", desc, why)
	}
}

// wack calls AckWorkItem and returns its error.
func (h *harness) wack(token string, completion provider.WorkItem) error {
	return h.p.AckWorkItem(h.ctx, token, completion)
}

// wackOK acks a work item and fails the test on error.
func (h *harness) wackOK(token string, completion provider.WorkItem) {
	h.t.Helper()
	if err := h.wack(token, completion); err != nil {
		h.t.Fatalf("AckWorkItem(completion %s): unexpected error: %s", itemKind(completion), describeErr(err))
	}
}

// wabandonOK abandons a work item and fails the test on error.
func (h *harness) wabandonOK(token string, delay time.Duration, ignoreAttempt bool) {
	h.t.Helper()
	if err := h.p.AbandonWorkItem(h.ctx, token, delay, ignoreAttempt); err != nil {
		h.t.Fatalf("AbandonWorkItem(delay %v, ignoreAttempt %v): unexpected error: %s",
			delay, ignoreAttempt, describeErr(err))
	}
}

// ---- assertions ----

// wantAttempt fails the test unless got == want.
func (h *harness) wantAttempt(what string, got, want uint32) {
	h.t.Helper()
	if got != want {
		h.t.Fatalf("%s: attempt count = %d, want %d", what, got, want)
	}
}

// errorMentions reports whether err's text contains any of subs (case-sensitive).
func errorMentions(err error, subs ...string) bool {
	if err == nil {
		return false
	}
	for _, s := range subs {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}
