package conformance

import (
	"testing"

	"github.com/durofs/durofs/provider"
)

// Q. custom_status: the provider materializes an instance's custom status
// from the last CustomStatusUpdated event of each ack's history delta, and
// bumps its version once per such ack.

// csUpdated is a CustomStatusUpdated event of execution 1 (status nil clears).
func csUpdated(instance string, eventID uint64, status *string) provider.Event {
	return event(instance, provider.InitialExecutionID, eventID, provider.CustomStatusUpdated{Status: status})
}

// pokeTurn is one turn: enqueue ExternalRaised "poke", fetch, and ack
// execution 1 with delta and md{}.
func (h *harness) pokeTurn(instance string, delta ...provider.Event) {
	h.t.Helper()
	item := h.triggerTurn(instance, "poke")
	h.ackOK(item.LockToken, provider.InitialExecutionID, delta, nil, nil, provider.ExecutionMetadata{})
}

// customStatus calls GetCustomStatus; an error fails the test.
func (h *harness) customStatus(instance string, lastSeen uint64) *provider.CustomStatus {
	h.t.Helper()
	cs, err := h.p.GetCustomStatus(h.ctx, instance, lastSeen)
	if err != nil {
		h.t.Fatalf("GetCustomStatus(%q, %d): unexpected error: %s", instance, lastSeen, describeErr(err))
	}
	return cs
}

// wantCustomStatus fails the test unless GetCustomStatus(instance, 0)
// returns Some((status, version)).
func (h *harness) wantCustomStatus(instance string, status *string, version uint64, why string) {
	h.t.Helper()
	cs := h.customStatus(instance, 0)
	if cs == nil {
		h.t.Fatalf("GetCustomStatus(%q, 0) = None, want (%s, %d) (%s)", instance, optString(status), version, why)
	}
	h.wantOptString("GetCustomStatus("+instance+", 0) status", cs.Status, status)
	if cs.Version != version {
		h.t.Errorf("GetCustomStatus(%q, 0) version = %d, want %d (%s)", instance, cs.Version, version, why)
	}
}

// 162. A CustomStatusUpdated event sets the status, at version 1.
func testCustomStatusSet(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "cs-set"

	h.createInstance(inst)
	h.pokeTurn(inst, csUpdated(inst, 100, ptr("progress")))
	h.wantCustomStatus(inst, ptr("progress"), 1, "one ack set the status")
}

// 163. A CustomStatusUpdated event with no status clears it, and bumps the version.
func testCustomStatusClear(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "cs-clear"

	h.createInstance(inst)
	h.pokeTurn(inst, csUpdated(inst, 100, ptr("temp")))
	cs := h.customStatus(inst, 0)
	if cs == nil {
		t.Fatalf("GetCustomStatus(%q, 0) after setting %q = None, want the status", inst, "temp")
	}
	h.wantOptString("GetCustomStatus after setting the status", cs.Status, ptr("temp"))

	h.pokeTurn(inst, csUpdated(inst, 101, nil))
	h.wantCustomStatus(inst, nil, 2, "the second ack cleared the status")
}

// 164. An ack without a CustomStatusUpdated event leaves status and version alone.
func testCustomStatusNonePreserves(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "cs-none-preserves"

	h.createInstance(inst)
	h.pokeTurn(inst, csUpdated(inst, 100, ptr("keep-me")))
	h.pokeTurn(inst)
	h.wantCustomStatus(inst, ptr("keep-me"), 1, "the second ack had no CustomStatusUpdated event and must not bump the version")
}

// 165. Every ack with a CustomStatusUpdated event bumps the version by one.
func testCustomStatusVersionIncrements(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "cs-version-inc"

	h.createInstance(inst)
	h.pokeTurn(inst, csUpdated(inst, 100, ptr("a")))
	h.wantCustomStatus(inst, ptr("a"), 1, "first update")
	h.pokeTurn(inst, csUpdated(inst, 101, ptr("b")))
	h.wantCustomStatus(inst, ptr("b"), 2, "second update")
	h.pokeTurn(inst, csUpdated(inst, 102, nil))
	h.wantCustomStatus(inst, nil, 3, "third update, a clear")
}

// 166. Polling with the current version returns None.
func testCustomStatusPollingNoChange(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "cs-polling"

	h.createInstance(inst)
	h.pokeTurn(inst, csUpdated(inst, 100, ptr("v1")))
	if cs := h.customStatus(inst, 1); cs != nil {
		t.Errorf("GetCustomStatus(%q, 1) = (%s, %d), want None (version 1 is not newer than last seen 1)", inst, optString(cs.Status), cs.Version)
	}
	if cs := h.customStatus(inst, 0); cs == nil {
		t.Errorf("GetCustomStatus(%q, 0) = None, want the status at version 1", inst)
	}
}

// 167. An unknown instance has no custom status, and that is not an error.
func testCustomStatusNonexistentInstance(t *testing.T, f Factory) {
	h := setup(t, f)
	if cs := h.customStatus("does-not-exist", 0); cs != nil {
		t.Errorf("GetCustomStatus(%q, 0) = (%s, %d), want None", "does-not-exist", optString(cs.Status), cs.Version)
	}
}

// 168. A new instance has no custom status (version 0 is not newer than 0).
func testCustomStatusDefaultOnNewInstance(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "cs-default"

	h.createInstance(inst)
	if cs := h.customStatus(inst, 0); cs != nil {
		t.Errorf("GetCustomStatus(%q, 0) on a new instance = (%s, %d), want None", inst, optString(cs.Status), cs.Version)
	}
}
