package conformance

import (
	"fmt"
	"slices"
	"testing"

	"github.com/durofs/durofs/provider"
)

// F. multi_execution: history is kept per execution, and the current
// execution is the highest one acked.

// 38. Each execution has its own history; Read returns the latest.
func testExecutionIsolation(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(item.LockToken, 1, []provider.Event{
		started(inst),
		activityScheduledEvent(inst, 1, 2, "Activity"),
		event(inst, 1, 3, provider.OrchestrationCompleted{Output: "done"}),
	}, nil, nil, provider.ExecutionMetadata{})

	h.enqueue(startItemExec(inst, 2), 0)
	item = h.fetchSome(longLock, inst, "a start for execution 2 was enqueued")
	h.ackOK(item.LockToken, 2, []provider.Event{
		startedEvent(inst, 2, testOrchName, testOrchVersion),
		event(inst, 2, 2, provider.OrchestrationCompleted{Output: "done"}),
	}, nil, nil, provider.ExecutionMetadata{})

	want1 := []string{"OrchestrationStarted", "ActivityScheduled", "OrchestrationCompleted"}
	want2 := []string{"OrchestrationStarted", "OrchestrationCompleted"}
	if got := kinds(h.readExec(inst, 1)); !slices.Equal(got, want1) {
		t.Errorf("ReadWithExecution(%q, 1) = %v, want %v", inst, got, want1)
	}
	if got := kinds(h.readExec(inst, 2)); !slices.Equal(got, want2) {
		t.Errorf("ReadWithExecution(%q, 2) = %v, want %v", inst, got, want2)
	}
	if got := kinds(h.read(inst)); !slices.Equal(got, want2) {
		t.Errorf("Read(%q) = %v, want execution 2's history %v", inst, got, want2)
	}
}

// 39. Read returns the latest execution even without instance records or
// OrchestrationStarted events.
func testLatestExecutionDetection(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(item.LockToken, 1, []provider.Event{activityScheduledEvent(inst, 1, 1, "A")}, nil, nil, provider.ExecutionMetadata{})

	h.enqueue(startItemExec(inst, 2), 0)
	item = h.fetchSome(longLock, inst, "a start for execution 2 was enqueued (name and version come from the message)")
	h.ackOK(item.LockToken, 2, []provider.Event{activityScheduledEvent(inst, 2, 1, "B")}, nil, nil, provider.ExecutionMetadata{})

	if got := activityNames(h.read(inst)); !slices.Equal(got, []string{"B"}) {
		t.Errorf("Read(%q): ActivityScheduled names %q, want one event named %q (execution 2)", inst, got, "B")
	}
	if got := activityNames(h.readExec(inst, 1)); !slices.Equal(got, []string{"A"}) {
		t.Errorf("ReadWithExecution(%q, 1): ActivityScheduled names %q, want one event named %q", inst, got, "A")
	}
}

// 40. The current execution is the highest execution id acked.
func testExecutionIDSequencing(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	if got := item.Item.ExecutionID; got != 1 {
		t.Errorf("first fetch: execution id = %d, want 1", got)
	}
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, mdNameVersion(testOrchName, testOrchVersion))

	h.enqueue(startItemExec(inst, 2), 0)
	item = h.fetchSome(longLock, inst, "a start for execution 2 was enqueued")
	h.ackOK(item.LockToken, 2, []provider.Event{startedEvent(inst, 2, testOrchName, testOrchVersion)}, nil, nil,
		mdNameVersion(testOrchName, testOrchVersion))

	h.enqueue(startItemExec(inst, 3), 0)
	item = h.fetchSome(longLock, inst, "a start for execution 3 was enqueued")
	if got := item.Item.ExecutionID; got != 2 {
		t.Errorf("third fetch: execution id = %d, want 2 (the highest execution acked)", got)
	}
}

// 41. Continue-as-new acked as execution 2 makes execution 2 current.
func testContinueAsNewCreatesNewExecution(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, provider.ExecutionMetadata{})

	h.enqueue(provider.ContinueAsNew{
		Instance:           inst,
		Orchestration:      testOrchName,
		Input:              "new-input",
		Version:            ptr(testOrchVersion),
		CarryForwardEvents: [][2]string{},
	}, 0)
	item = h.fetchSome(longLock, inst, "a ContinueAsNew was enqueued")
	newStarted := event(inst, 2, 1, provider.OrchestrationStarted{Name: testOrchName, Version: testOrchVersion, Input: "new-input"})
	h.ackOK(item.LockToken, 2, []provider.Event{newStarted}, nil, nil, provider.ExecutionMetadata{})

	if item := h.fetch(longLock); item != nil && item.Item.ExecutionID != 2 {
		t.Errorf("fetch after continue-as-new: execution id = %d, want 2", item.Item.ExecutionID)
	}
}

// 42. Three executions each keep their own one-event history.
func testExecutionHistoryPersistence(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	for n := uint64(1); n <= 3; n++ {
		h.enqueue(startItemExec(inst, n), 0)
		item := h.fetchSome(longLock, inst, fmt.Sprintf("a start for execution %d was enqueued", n))
		h.ackOK(item.LockToken, n, []provider.Event{activityScheduledEvent(inst, n, 1, fmt.Sprintf("Activity-%d", n))},
			nil, nil, provider.ExecutionMetadata{})
	}
	for n := uint64(1); n <= 3; n++ {
		want := []string{fmt.Sprintf("Activity-%d", n)}
		if got := activityNames(h.readExec(inst, n)); !slices.Equal(got, want) {
			t.Errorf("ReadWithExecution(%q, %d): ActivityScheduled names %q, want exactly %q", inst, n, got, want)
		}
	}
	if got := activityNames(h.read(inst)); !slices.Equal(got, []string{"Activity-3"}) {
		t.Errorf("Read(%q): ActivityScheduled names %q, want exactly [Activity-3]", inst, got)
	}
}
