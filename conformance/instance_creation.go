package conformance

import (
	"testing"

	"github.com/durofs/durofs/provider"
)

// A. instance_creation: instance records come from ack metadata, not from
// enqueues, and a fetch before any record exists takes its context from the
// queued start message.

// 1. The version reported by a fetch comes from the ack metadata, not from the
// start message.
func testInstanceCreationViaMetadata(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "the start message was just enqueued")
	if got := item.Item.OrchestrationName; got != testOrchName {
		t.Errorf("first fetch: orchestration name = %q, want %q", got, testOrchName)
	}
	if got := item.Item.ExecutionID; got != 1 {
		t.Errorf("first fetch: execution id = %d, want 1", got)
	}
	if n := len(item.Item.History); n != 0 {
		t.Errorf("first fetch: history has %d events %v, want none", n, kinds(item.Item.History))
	}
	h.ackOK(item.LockToken, 1, []provider.Event{startedEvent(inst, 1, testOrchName, "2.0.0")}, nil, nil,
		mdNameVersion(testOrchName, "2.0.0"))

	h.enqueue(startItem(inst), 0) // version 1.0.0 in the message
	item = h.fetchSome(longLock, inst, "a second start was enqueued")
	if got := item.Item.Version; got != "2.0.0" {
		t.Errorf("second fetch: version = %q, want %q (from the ack metadata, not the 1.0.0 start message)", got, "2.0.0")
	}
	if got := item.Item.ExecutionID; got != 1 {
		t.Errorf("second fetch: execution id = %d, want 1", got)
	}
	if n := len(item.Item.History); n != 1 {
		t.Errorf("second fetch: history has %d events %v, want 1", n, kinds(item.Item.History))
	}
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})
}

// 2. A start can be fetched before any instance record exists.
func testNoInstanceCreationOnEnqueue(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-B"

	h.enqueue(startItem(inst), 0)
	item := h.fetchSome(longLock, inst, "a start is fetchable although no instance record exists yet")
	h.ackOK(item.LockToken, 1, []provider.Event{started(inst)}, nil, nil, mdNameVersion(testOrchName, testOrchVersion))
}

// 3. A start without a version is fetchable; the version stored at ack wins later.
func testNullVersionHandling(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-C"

	h.enqueue(provider.StartOrchestration{
		Instance:      inst,
		Orchestration: testOrchName,
		Input:         "{}",
		Version:       nil,
		ExecutionID:   1,
	}, 0)
	item := h.fetchSome(longLock, inst, "a start with a null version must be fetchable")
	h.ackOK(item.LockToken, 1, []provider.Event{startedEvent(inst, 1, testOrchName, "3.0.0")}, nil, nil,
		provider.ExecutionMetadata{OrchestrationVersion: ptr("3.0.0")})

	h.enqueue(startItem(inst), 0)
	item = h.fetchSome(longLock, inst, "a second start was enqueued")
	if got := item.Item.Version; got != "3.0.0" {
		t.Errorf("second fetch: version = %q, want %q", got, "3.0.0")
	}
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})
}

// 4. A sub-orchestration start enqueued by the parent's ack is fetchable with
// the name from the message, and later fetches use the child's stored version.
func testSubOrchestrationInstanceCreation(t *testing.T, f Factory) {
	h := setup(t, f)
	const (
		parent = "parent-instance"
		child  = "parent-instance::child-instance"
	)

	h.enqueue(startItem(parent), 0)
	item := h.fetchSome(longLock, parent, "the parent's start was just enqueued")
	childStart := provider.StartOrchestration{
		Instance:       child,
		Orchestration:  "ChildOrch",
		Input:          "{}",
		Version:        nil,
		ParentInstance: ptr(parent),
		ParentID:       ptr(uint64(1)),
		ExecutionID:    1,
	}
	h.ackOK(item.LockToken, 1, []provider.Event{startedEvent(parent, 1, "ParentOrch", testOrchVersion)},
		nil, []provider.WorkItem{childStart}, mdNameVersion("ParentOrch", testOrchVersion))

	item = h.fetchSome(longLock, child, "the parent's ack enqueued the child's start")
	if got := item.Item.OrchestrationName; got != "ChildOrch" {
		t.Errorf("child fetch: orchestration name = %q, want %q (from the queued start message)", got, "ChildOrch")
	}
	childStarted := event(child, 1, 1, provider.OrchestrationStarted{
		Name:           "ChildOrch",
		Version:        "1.5.0",
		Input:          "{}",
		ParentInstance: ptr(parent),
		ParentID:       ptr(uint64(1)),
	})
	h.ackOK(item.LockToken, 1, []provider.Event{childStarted}, nil, nil, mdNameVersion("ChildOrch", "1.5.0"))

	h.enqueue(startItem(child), 0)
	item = h.fetchSome(longLock, child, "a start for the child was re-enqueued")
	if got := item.Item.Version; got != "1.5.0" {
		t.Errorf("child re-fetch: version = %q, want %q (from the child's ack metadata)", got, "1.5.0")
	}
}
