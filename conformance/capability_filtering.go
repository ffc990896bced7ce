package conformance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durofs/durofs/provider"
)

// O. capability_filtering: a fetch with a DispatcherCapabilityFilter skips,
// without locking, instances whose current execution is pinned (through ack
// metadata only) to a version outside the filter's first range; and a
// history that cannot be decoded is reported in the item, not as an error.

// sv is the version major.minor.patch.
func sv(major, minor, patch uint64) provider.SemVer {
	return provider.SemVer{Major: major, Minor: minor, Patch: patch}
}

// versionFilter is a capability filter with the single inclusive range [lo, hi].
func versionFilter(lo, hi provider.SemVer) *provider.DispatcherCapabilityFilter {
	return &provider.DispatcherCapabilityFilter{SupportedDuroxideVersions: []provider.SemverRange{{Min: lo, Max: hi}}}
}

// describeFilter formats a capability filter for failure messages.
func describeFilter(f *provider.DispatcherCapabilityFilter) string {
	if f == nil {
		return "no filter"
	}
	parts := make([]string, len(f.SupportedDuroxideVersions))
	for i, r := range f.SupportedDuroxideVersions {
		parts[i] = "[" + r.Min.String() + ", " + r.Max.String() + "]"
	}
	return "filter {" + strings.Join(parts, ", ") + "}"
}

// startedDV is Started (TestOrch 1.0.0) of an execution, stamped with the
// given duroxide_version.
func startedDV(instance string, executionID uint64, duroxideVersion string) provider.Event {
	e := startedEvent(instance, executionID, testOrchName, testOrchVersion)
	e.DuroxideVersion = duroxideVersion
	return e
}

// mdPinned is md{name TestOrch, version 1.0.0, pinned}.
func mdPinned(pinned *provider.SemVer) provider.ExecutionMetadata {
	md := mdNameVersion(testOrchName, testOrchVersion)
	md.PinnedDuroxideVersion = pinned
	return md
}

// fetchFiltered is FetchOrchestrationItem(30 s lock, poll 0, filter); an error fails the test.
func (h *harness) fetchFiltered(filter *provider.DispatcherCapabilityFilter) *provider.LockedOrchestrationItem {
	h.t.Helper()
	item, err := h.p.FetchOrchestrationItem(h.ctx, longLock, 0, filter)
	if err != nil {
		h.t.Fatalf("FetchOrchestrationItem(%s): unexpected error: %s", describeFilter(filter), describeErr(err))
	}
	return item
}

// fetchFilteredSome fails the test unless the filtered fetch returns an item
// (for instance, unless instance is "").
func (h *harness) fetchFilteredSome(filter *provider.DispatcherCapabilityFilter, instance, why string) *provider.LockedOrchestrationItem {
	h.t.Helper()
	item := h.fetchFiltered(filter)
	if item == nil {
		h.t.Fatalf("FetchOrchestrationItem(%s): got no item, want one (%s)", describeFilter(filter), why)
	}
	if instance != "" && item.Item.Instance != instance {
		h.t.Fatalf("FetchOrchestrationItem(%s): got instance %q, want %q (%s)", describeFilter(filter), item.Item.Instance, instance, why)
	}
	return item
}

// fetchFilteredNone fails the test if the filtered fetch returns an item.
func (h *harness) fetchFilteredNone(filter *provider.DispatcherCapabilityFilter, why string) {
	h.t.Helper()
	if item := h.fetchFiltered(filter); item != nil {
		h.t.Fatalf("FetchOrchestrationItem(%s): got an item for %q, want none (%s)", describeFilter(filter), item.Item.Instance, why)
	}
}

// seedInstanceWithVersion is duroxide's seed_instance_with_version: enqueue
// start_item, fetch (unfiltered) until instance comes up, ack execution 1
// with a Started stamped with v, the orchestrator item ExternalRaised "ping"
// and md{name, version, pinned v}, then abandon (ignoreAttempt) the other
// instances fetched on the way. The instance ends with execution 1 pinned to
// v and one visible message.
func (h *harness) seedInstanceWithVersion(instance string, v provider.SemVer) {
	h.t.Helper()
	h.enqueue(startItem(instance), 0)
	var others []string
	var item *provider.LockedOrchestrationItem
	for {
		item = h.fetch(longLock)
		if item == nil {
			h.t.Fatalf("seed %q: fetch returned no item before the instance's start (other instances fetched: %d)", instance, len(others))
		}
		if item.Item.Instance == instance {
			break
		}
		others = append(others, item.LockToken)
	}
	h.ackFull(item.LockToken, provider.InitialExecutionID, []provider.Event{startedDV(instance, provider.InitialExecutionID, v.String())},
		nil, []provider.WorkItem{externalRaised(instance, "ping")}, mdPinned(&v), nil)
	for _, tok := range others {
		_ = h.p.AbandonOrchestrationItem(h.ctx, tok, 0, true) // best effort, as in duroxide
	}
}

// withProvider returns a harness for another provider of the same test.
func (h *harness) withProvider(p provider.Provider) *harness {
	return &harness{t: h.t, f: h.f, p: p, ctx: h.ctx, lt: h.lt}
}

// wantHistoryError fails the test unless item reports a history error with
// an empty history, for instance.
func (h *harness) wantHistoryError(item *provider.LockedOrchestrationItem, instance, what string) {
	h.t.Helper()
	if item.Item.Instance != instance {
		h.t.Fatalf("%s: got instance %q, want %q", what, item.Item.Instance, instance)
	}
	if item.Item.HistoryError == nil {
		h.t.Fatalf("%s: history_error is None, want it set (the history is corrupted); history has %d events", what, len(item.Item.History))
	}
	if len(item.Item.History) != 0 {
		h.t.Fatalf("%s: history has %d events %v, want none when history_error is set", what, len(item.Item.History), kinds(item.Item.History))
	}
}

// 109. An unfiltered fetch returns a pinned instance.
func testFetchWithFilterNoneReturnsAnyItem(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-1", sv(1, 2, 3))
	if h.fetchFiltered(nil) == nil {
		t.Errorf("FetchOrchestrationItem(no filter): got no item, want the seeded instance")
	}
}

// 110. A filter whose range holds the pin returns the instance.
func testFetchWithCompatibleFilterReturnsItem(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-2", sv(1, 2, 3))
	h.fetchFilteredSome(versionFilter(sv(1, 0, 0), sv(1, 9, 9)), "", "1.2.3 is in [1.0.0, 1.9.9]")
}

// 111. A filter whose range excludes the pin returns nothing.
func testFetchWithIncompatibleFilterSkipsItem(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-3", sv(1, 2, 3))
	h.fetchFilteredNone(versionFilter(sv(2, 0, 0), sv(2, 9, 9)), "1.2.3 is not in [2.0.0, 2.9.9]")
}

// 112. An incompatible head-of-queue instance is skipped and the search
// continues to a compatible one.
func testFetchFilterSkipsIncompatibleSelectsCompatible(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-v1", sv(1, 0, 0))
	h.seedInstanceWithVersion("inst-v2", sv(2, 0, 0))

	item := h.fetchFilteredSome(versionFilter(sv(2, 0, 0), sv(2, 9, 9)), "inst-v2",
		"inst-v1's older message is incompatible and must be skipped, not end the search")
	h.abandonOK(item.LockToken, 0, true)
	h.fetchFilteredSome(versionFilter(sv(1, 0, 0), sv(1, 9, 9)), "inst-v1", "inst-v1 is pinned to 1.0.0")
}

// 113. A filtered fetch does not lock the instances it skips.
func testFetchFilterDoesNotLockSkippedInstances(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-5", sv(1, 0, 0))
	h.fetchFilteredNone(versionFilter(sv(2, 0, 0), sv(2, 9, 9)), "1.0.0 is not in [2.0.0, 2.9.9]")
	h.fetchFilteredSome(versionFilter(sv(0, 0, 0), sv(1, 9, 9)), "",
		"the incompatible fetch must not have locked the instance it skipped")
}

// 114. An execution with no pin is compatible with every filter; the pin is
// never derived from the events' duroxide_version.
func testFetchFilterNullPinnedVersionAlwaysCompatible(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-null"

	item := h.startTurn(inst)
	h.ackFull(item.LockToken, 1, []provider.Event{startedDV(inst, 1, "0.0.0")}, nil, nil, mdPinned(nil), nil)
	h.enqueue(externalRaised(inst, "ping"), 0)
	h.fetchFilteredSome(versionFilter(sv(99, 0, 0), sv(99, 9, 9)), "",
		"an execution without a pinned version is compatible with any filter (the pin must not come from event.duroxide_version)")
}

// 115. Both bounds of a range are inclusive.
func testFetchFilterBoundaryVersions(t *testing.T, f Factory) {
	h := setup(t, f)
	filter := versionFilter(sv(1, 0, 0), sv(1, 9, 99))

	h.seedInstanceWithVersion("v1-low", sv(1, 0, 0))
	item := h.fetchFilteredSome(filter, "v1-low", "1.0.0 is the range's inclusive lower bound")
	h.abandonOK(item.LockToken, 0, true)

	h.seedInstanceWithVersion("v1-high", sv(1, 9, 99))
	item = h.fetchFilteredSome(filter, "", "1.9.99 is the range's inclusive upper bound")
	h.abandonOK(item.LockToken, 0, true)

	// Just outside the range, on a second, isolated provider so that the v1
	// instances above cannot answer the fetch.
	h2 := h.withProvider(f.NewProvider(t))
	if h2.p == nil {
		t.Fatal("Factory.NewProvider returned a nil provider")
	}
	h2.seedInstanceWithVersion("v2-exact", sv(2, 0, 0))
	h2.fetchFilteredNone(filter, "2.0.0 is above [1.0.0, 1.9.99]")
	if h2.fetchFiltered(nil) == nil {
		t.Errorf("FetchOrchestrationItem(no filter) on the second provider: got no item, want v2-exact")
	}
}

// 116. The pin stored through ack metadata is what the filter compares.
func testPinnedVersionStoredViaAckMetadata(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-8", sv(3, 1, 4))
	h.fetchFilteredSome(versionFilter(sv(3, 0, 0), sv(3, 9, 9)), "", "the ack metadata pinned 3.1.4")
}

// 117. An ack whose metadata carries no pin leaves the stored pin unchanged.
func testPinnedVersionImmutableAcrossAckCycles(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-9"
	filter := versionFilter(sv(0, 0, 0), sv(1, 9, 9))

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	item := h.fetchFilteredSome(filter, inst, "the instance is pinned to 1.0.0")
	h.ackFull(item.LockToken, 1, nil, nil, nil, mdPinned(nil), nil)

	h.enqueue(externalRaised(inst, "ping2"), 0)
	h.fetchFilteredSome(filter, "", "an ack with pinned None must leave the pin (1.0.0) unchanged")
}

// 118. A new execution (continue-as-new) has its own pin and does not
// inherit the previous execution's; the filter uses the current execution.
func testContinueAsNewExecutionGetsOwnPinnedVersion(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-can"

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	item := h.fetchFilteredSome(versionFilter(sv(0, 0, 0), sv(1, 9, 9)), inst, "execution 1 is pinned to 1.0.0")
	md := mdPinned(nil)
	md.Status = ptr("ContinuedAsNew")
	can := provider.ContinueAsNew{
		Instance: inst, Orchestration: testOrchName, Input: "{}", Version: ptr(testOrchVersion),
		CarryForwardEvents: [][2]string{},
	}
	h.ackFull(item.LockToken, 1, []provider.Event{event(inst, 1, 2, provider.OrchestrationContinuedAsNew{Input: "{}"})},
		nil, []provider.WorkItem{can}, md, nil)

	item = h.fetchFilteredSome(nil, inst, "the ack enqueued a ContinueAsNew")
	h.ackFull(item.LockToken, 2, []provider.Event{startedDV(inst, 2, "2.0.0")}, nil, nil, mdPinned(ptr(sv(2, 0, 0))), nil)

	h.enqueue(externalRaised(inst, "ping"), 0)
	item = h.fetchFilteredSome(versionFilter(sv(2, 0, 0), sv(2, 9, 9)), inst, "the current execution 2 is pinned to 2.0.0")
	h.abandonOK(item.LockToken, 0, true)
	h.fetchFilteredNone(versionFilter(sv(1, 0, 0), sv(1, 9, 9)),
		"execution 2 is pinned to 2.0.0 and must not inherit execution 1's 1.0.0")
}

// 119. A filter with no ranges matches nothing.
func testFilterWithEmptySupportedVersionsReturnsNothing(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-empty", sv(1, 0, 0))
	h.fetchFilteredNone(&provider.DispatcherCapabilityFilter{SupportedDuroxideVersions: []provider.SemverRange{}},
		"an empty supported_duroxide_versions list matches nothing")
}

// 120. A filtered fetch locks the instance it returns.
func testConcurrentFilteredFetchNoDoubleLock(t *testing.T, f Factory) {
	h := setup(t, f)
	filter := versionFilter(sv(0, 0, 0), sv(1, 9, 9))

	h.seedInstanceWithVersion("inst-conc", sv(1, 0, 0))
	h.fetchFilteredSome(filter, "", "the instance is pinned to 1.0.0")
	h.fetchFilteredNone(filter, "the only instance is locked by the first fetch")
}

// 121. A pin can be stored by a later ack (a backfill).
func testAckStoresPinnedVersionViaMetadataUpdate(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-backfill"

	item := h.startTurn(inst)
	h.ackFull(item.LockToken, 1, []provider.Event{startedDV(inst, 1, "1.2.3")}, nil, nil, mdPinned(nil), nil)

	item = h.triggerTurn(inst, "ping")
	h.ackFull(item.LockToken, 1, nil, nil, nil, mdPinned(ptr(sv(1, 2, 3))), nil)

	h.enqueue(externalRaised(inst, "ping2"), 0)
	h.fetchFilteredSome(versionFilter(sv(1, 0, 0), sv(1, 9, 9)), "", "the second ack pinned 1.2.3")
}

// 122. The provider overwrites the pin whenever the metadata carries one.
func testProviderUpdatesPinnedVersionWhenTold(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-update"

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	item := h.fetchFilteredSome(versionFilter(sv(0, 0, 0), sv(1, 9, 9)), inst, "the instance is pinned to 1.0.0")
	h.ackFull(item.LockToken, 1, nil, nil, nil, mdPinned(ptr(sv(2, 0, 0))), nil)

	h.enqueue(externalRaised(inst, "ping2"), 0)
	item = h.fetchFilteredSome(versionFilter(sv(2, 0, 0), sv(2, 0, 0)), "", "the ack re-pinned the execution to 2.0.0")
	h.abandonOK(item.LockToken, 0, true)
	h.fetchFilteredNone(versionFilter(sv(1, 0, 0), sv(1, 0, 0)), "the pin was overwritten with 2.0.0 (there is no write-once rule)")
}

// 123. A corrupted history excluded by the filter gives no item and no
// error; unfiltered, it gives an item with history_error set.
func testFetchCorruptedHistoryFilteredVsUnfiltered(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-corrupt-39"

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	f.CorruptInstanceHistory(t, h.p, inst)

	h.fetchFilteredNone(versionFilter(sv(2, 0, 0), sv(2, 9, 9)), "the filter excludes 1.0.0, so the corrupted history must not even be read")
	item := h.fetchFilteredSome(nil, "", "an instance with a corrupted history is still fetched, with history_error set")
	h.wantHistoryError(item, inst, "unfiltered fetch of the corrupted instance")
	h.abandonOK(item.LockToken, 0, true)
}

// 124. Fetches of a corrupted history still count attempts.
func testFetchDeserializationErrorIncrementsAttemptCount(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-deser-41"

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	f.CorruptInstanceHistory(t, h.p, inst)

	item := h.fetchSome(50*ms, "", "the corrupted instance has a pending message")
	h.wantHistoryError(item, inst, "fetch 1")
	h.abandonOK(item.LockToken, 0, false) // possibly after the 50 ms lease: abandon does not check expiry

	sleep(100 * ms)
	item = h.fetchSome(50*ms, "", "the abandoned message is visible again")
	h.wantHistoryError(item, inst, "fetch 2")
	h.abandonOK(item.LockToken, 0, false)

	if n := f.MaxAttemptCount(t, h.p, inst); n < 2 {
		t.Errorf("MaxAttemptCount(%q) after two fetches = %d, want ≥ 2", inst, n)
	}
}

// 125. Repeated fetches of a corrupted history drive the attempt count up to
// the poison threshold.
func testFetchDeserializationErrorEventuallyReachesPoison(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-poison-42"
	const cycles = 5

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	f.CorruptInstanceHistory(t, h.p, inst)

	for i := range cycles {
		item := h.fetchSome(50*ms, "", "the corrupted instance's message is visible")
		h.wantHistoryError(item, inst, fmt.Sprintf("fetch %d", i+1))
		h.abandonOK(item.LockToken, 0, false)
		sleep(100 * ms)
	}
	if n := f.MaxAttemptCount(t, h.p, inst); n < cycles {
		t.Errorf("MaxAttemptCount(%q) after %d fetches = %d, want ≥ %d", inst, cycles, n, cycles)
	}
}

// 126. The filter is applied before the history is decoded.
func testFetchFilterAppliedBeforeHistoryDeserialization(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-order-43"

	h.seedInstanceWithVersion(inst, sv(99, 0, 0))
	f.CorruptInstanceHistory(t, h.p, inst)

	h.fetchFilteredNone(versionFilter(sv(1, 0, 0), sv(2, 0, 0)),
		"99.0.0 is excluded, and the filter must run before the history is decoded")
	item := h.fetchFilteredSome(nil, "", "unfiltered, the corrupted instance is fetched with history_error set")
	if item.Item.HistoryError == nil {
		t.Fatalf("unfiltered fetch of the corrupted instance %q: history_error is None, want it set", item.Item.Instance)
	}
	h.abandonOK(item.LockToken, 0, true)
}

// 127. Only the filter's first range is used (duroxide's phase-1 contract);
// a provider honouring every range passes too, since inst-range-a is older.
func testFetchSingleRangeOnlyUsesFirstRange(t *testing.T, f Factory) {
	h := setup(t, f)
	h.seedInstanceWithVersion("inst-range-a", sv(1, 0, 0))
	h.seedInstanceWithVersion("inst-range-b", sv(3, 0, 0))
	filter := &provider.DispatcherCapabilityFilter{SupportedDuroxideVersions: []provider.SemverRange{
		{Min: sv(1, 0, 0), Max: sv(1, 5, 0)},
		{Min: sv(3, 0, 0), Max: sv(3, 5, 0)},
	}}

	item := h.fetchFilteredSome(filter, "inst-range-a", "inst-range-a (1.0.0) is in the first range")
	h.abandonOK(item.LockToken, 0, true)
	if item := h.fetchFiltered(filter); item != nil && item.Item.Instance != "inst-range-a" {
		t.Errorf("second filtered fetch: got %q, want inst-range-a or no item (only the first range [1.0.0, 1.5.0] is used)", item.Item.Instance)
	}
}

// 128. An ack appends to a corrupted history: the ack path never reads or
// re-encodes the stored events.
func testAckAppendsEventToCorruptedHistory(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "inst-ack-corrupt-45"

	h.seedInstanceWithVersion(inst, sv(1, 0, 0))
	f.CorruptInstanceHistory(t, h.p, inst)

	item := h.fetchFilteredSome(nil, "", "the corrupted instance has a pending message")
	h.wantHistoryError(item, inst, "fetch of the corrupted instance")
	herr := *item.Item.HistoryError

	details := provider.PoisonError{
		AttemptCount: 4,
		MaxAttempts:  3,
		MessageType:  provider.PoisonMessageType{Kind: "FailedDeserialization", Instance: inst, ExecutionID: item.Item.ExecutionID, Error: herr},
		Message:      herr,
	}
	failed := event(inst, item.Item.ExecutionID, 99999, provider.OrchestrationFailed{Details: details})
	md := provider.ExecutionMetadata{
		Status:               ptr("Failed"),
		Output:               ptr(details.DisplayMessage()),
		OrchestrationName:    ptr(item.Item.OrchestrationName),
		OrchestrationVersion: ptr(item.Item.Version),
	}
	if err := h.ack(item.LockToken, item.Item.ExecutionID, []provider.Event{failed}, nil, nil, md); err != nil {
		t.Fatalf("AckOrchestrationItem appending OrchestrationFailed to the corrupted history: %s, want success "+
			"(the ack path must only append, never read or re-encode the stored events)", describeErr(err))
	}

	admin, ok := h.p.Admin()
	if !ok || admin == nil {
		t.Log("the provider has no management capability (Admin() ok=false): the ack succeeded; " +
			"the get_instance_info check (status Failed, output mentioning the deserialization failure) is skipped")
		return
	}
	info, err := admin.GetInstanceInfo(h.ctx, inst)
	if err != nil {
		t.Fatalf("GetInstanceInfo(%q): unexpected error: %s", inst, describeErr(err))
	}
	if info.Status != "Failed" {
		t.Errorf("GetInstanceInfo(%q).Status = %q, want %q", inst, info.Status, "Failed")
	}
	if info.Output == nil || !strings.Contains(*info.Output, "deserialization failed") {
		t.Errorf("GetInstanceInfo(%q).Output = %s, want it to contain %q", inst, optString(info.Output), "deserialization failed")
	}
}
