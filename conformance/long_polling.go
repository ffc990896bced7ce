package conformance

import (
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// I. long_polling: how fetches treat poll_timeout on an empty store.
// Short-polling providers return at once; long-polling providers wait up to
// poll_timeout; both return within poll_timeout + 200 ms.

// timedFetch runs an orchestration fetch on h's empty store and returns how
// long it took. It fails the test on an error or an item.
func (h *harness) timedFetch(poll time.Duration) time.Duration {
	h.t.Helper()
	begin := time.Now()
	item, err := h.p.FetchOrchestrationItem(h.ctx, longLock, poll, nil)
	elapsed := time.Since(begin)
	if err != nil {
		h.t.Fatalf("FetchOrchestrationItem(poll %v) on an empty store: unexpected error after %v: %s", poll, elapsed, describeErr(err))
	}
	if item != nil {
		h.t.Fatalf("FetchOrchestrationItem(poll %v) on an empty store: got %s, want no item", poll, describeItem(item))
	}
	return elapsed
}

// timedWorkFetch is timedFetch for the worker queue.
func (h *harness) timedWorkFetch(poll time.Duration) time.Duration {
	h.t.Helper()
	begin := time.Now()
	item, err := h.p.FetchWorkItem(h.ctx, longLock, poll, nil, provider.DefaultOnlyTags())
	elapsed := time.Since(begin)
	if err != nil {
		h.t.Fatalf("FetchWorkItem(poll %v) on an empty store: unexpected error after %v: %s", poll, elapsed, describeErr(err))
	}
	if item != nil {
		h.t.Fatalf("FetchWorkItem(poll %v) on an empty store: got a %s, want no item", poll, itemKind(item.Item))
	}
	return elapsed
}

// 58. A short-polling provider ignores poll_timeout.
func testShortPollReturnsImmediately(t *testing.T, f Factory) {
	h := setup(t, f)
	threshold := shortPollThreshold(f)

	if elapsed := h.timedFetch(500 * ms); elapsed >= threshold {
		t.Errorf("short-poll FetchOrchestrationItem(poll 500ms) took %v, want < %v (ShortPollThreshold)", elapsed, threshold)
	}
}

// 59. A long-polling provider waits the whole poll_timeout when there is no work.
func testLongPollWaitsForTimeout(t *testing.T, f Factory) {
	h := setup(t, f)

	if elapsed := h.timedFetch(500 * ms); elapsed < 500*ms {
		t.Errorf("long-poll FetchOrchestrationItem(poll 500ms) returned after %v, want ≥ 500ms", elapsed)
	}
}

// 60. No fetch waits much longer than poll_timeout.
func testFetchRespectsTimeoutUpperBound(t *testing.T, f Factory) {
	h := setup(t, f)

	if elapsed := h.timedFetch(300 * ms); elapsed >= 500*ms {
		t.Errorf("FetchOrchestrationItem(poll 300ms) took %v, want < 500ms (poll timeout + 200ms tolerance)", elapsed)
	}
}

// 61. A short-polling provider's work-item fetch ignores poll_timeout.
func testShortPollWorkItemReturnsImmediately(t *testing.T, f Factory) {
	h := setup(t, f)
	threshold := shortPollThreshold(f)

	if elapsed := h.timedWorkFetch(500 * ms); elapsed >= threshold {
		t.Errorf("short-poll FetchWorkItem(poll 500ms) took %v, want < %v (ShortPollThreshold)", elapsed, threshold)
	}
}

// 62. A long-polling provider's work-item fetch waits the whole poll_timeout.
func testLongPollWorkItemWaitsForTimeout(t *testing.T, f Factory) {
	h := setup(t, f)

	if elapsed := h.timedWorkFetch(500 * ms); elapsed < 500*ms {
		t.Errorf("long-poll FetchWorkItem(poll 500ms) returned after %v, want ≥ 500ms", elapsed)
	}
}
