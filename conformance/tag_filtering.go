package conformance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// R. tag_filtering: fetch_work_item selects worker items by tag. Every fetch
// here has no session config and a 5 s lock unless stated.

// tagLock is the work-item lock of the tag tests' fetches.
const tagLock = 5 * time.Second

// tagged is ActivityExecute{instance, execution 1, id, "Activity{id}", tag}
// (tag "" for an untagged item).
func tagged(instance string, id uint64, tag string) provider.ActivityExecute {
	ae := activityExecute(instance, provider.InitialExecutionID, id, fmt.Sprintf("Activity%d", id))
	if tag != "" {
		ae.Tag = ptr(tag)
	}
	return ae
}

// tagOf returns tag as an optional string ("" is None).
func tagOf(tag string) *string {
	if tag == "" {
		return nil
	}
	return &tag
}

// tfetchSome fetches with filter and fails the test unless an item comes back.
func (h *harness) tfetchSome(lock time.Duration, filter provider.TagFilter, why string) (*provider.LockedWorkItem, provider.ActivityExecute) {
	h.t.Helper()
	return h.wfetchWithSome(lock, nil, filter, why)
}

// tfetchNone fetches with filter and fails the test if an item comes back.
func (h *harness) tfetchNone(lock time.Duration, filter provider.TagFilter, why string) {
	h.t.Helper()
	h.wfetchWithNone(lock, nil, filter, why)
}

// wantTagged fails the test unless ae has id and tag ("" is untagged).
func (h *harness) wantTagged(what string, ae provider.ActivityExecute, id uint64, tag string) {
	h.t.Helper()
	if ae.ID != id {
		h.t.Errorf("%s: activity id %d (tag %s), want %d", what, ae.ID, optString(ae.Tag), id)
	}
	h.wantOptString(what+": tag", ae.Tag, tagOf(tag))
}

// 169. DefaultOnly fetches untagged items only.
func testDefaultOnlyFetchesUntagged(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, ""))
	h.enqueueWorker(tagged("inst-1", 2, "gpu"))
	h.enqueueWorker(tagged("inst-1", 3, ""))

	_, ae := h.tfetchSome(tagLock, provider.DefaultOnlyTags(), "item 1 is untagged")
	h.wantTagged("first DefaultOnly fetch", ae, 1, "")
	_, ae = h.tfetchSome(tagLock, provider.DefaultOnlyTags(), "item 3 is untagged")
	h.wantTagged("second DefaultOnly fetch", ae, 3, "")
	h.tfetchNone(tagLock, provider.DefaultOnlyTags(), "only the gpu item is left")
}

// 170. Tags fetches only items with a tag in the set.
func testTagsFetchesOnlyMatching(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, ""))
	h.enqueueWorker(tagged("inst-1", 2, "gpu"))
	h.enqueueWorker(tagged("inst-1", 3, "cpu"))
	h.enqueueWorker(tagged("inst-1", 4, "gpu"))
	gpu := provider.MustTags("gpu")

	_, ae := h.tfetchSome(tagLock, gpu, "item 2 is tagged gpu")
	h.wantTagged("first Tags{gpu} fetch", ae, 2, "gpu")
	_, ae = h.tfetchSome(tagLock, gpu, "item 4 is tagged gpu")
	h.wantTagged("second Tags{gpu} fetch", ae, 4, "gpu")
	h.tfetchNone(tagLock, gpu, "no gpu item is left")
}

// 171. DefaultAnd fetches untagged items and items with a tag in the set.
func testDefaultAndFetchesUntaggedAndMatching(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, ""))
	h.enqueueWorker(tagged("inst-1", 2, "gpu"))
	h.enqueueWorker(tagged("inst-1", 3, "cpu"))
	filter := provider.MustDefaultAndTags("gpu")

	_, ae := h.tfetchSome(tagLock, filter, "item 1 is untagged")
	if ae.ID != 1 {
		t.Errorf("first DefaultAnd{gpu} fetch: activity id %d, want 1", ae.ID)
	}
	_, ae = h.tfetchSome(tagLock, filter, "item 2 is tagged gpu")
	h.wantTagged("second DefaultAnd{gpu} fetch", ae, 2, "gpu")
	h.tfetchNone(tagLock, filter, "only the cpu item is left, which DefaultAnd{gpu} must not fetch")
}

// 172. The None filter fetches nothing.
func testNoneFilterReturnsNothing(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, ""))
	h.enqueueWorker(tagged("inst-1", 2, "gpu"))
	h.tfetchNone(tagLock, provider.NoTags(), "TagFilter None never returns an item")
}

// 173. A Tags filter with several tags fetches items with any of them.
func testMultiTagFilter(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, "gpu"))
	h.enqueueWorker(tagged("inst-1", 2, "tpu"))
	h.enqueueWorker(tagged("inst-1", 3, "cpu"))
	h.enqueueWorker(tagged("inst-1", 4, ""))
	filter := provider.MustTags("gpu", "tpu")

	_, ae := h.tfetchSome(tagLock, filter, "item 1 is tagged gpu")
	h.wantOptString("first Tags{gpu,tpu} fetch: tag", ae.Tag, ptr("gpu"))
	_, ae = h.tfetchSome(tagLock, filter, "item 2 is tagged tpu")
	h.wantOptString("second Tags{gpu,tpu} fetch: tag", ae.Tag, ptr("tpu"))
	h.tfetchNone(tagLock, filter, "only the cpu and untagged items are left")
}

// 174. A fetched item keeps its tag and name.
func testTagRoundTripPreservation(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, "gpu"))

	_, ae := h.tfetchSome(tagLock, provider.MustTags("gpu"), "item 1 is tagged gpu")
	h.wantOptString("fetched item: tag", ae.Tag, ptr("gpu"))
	if ae.Name != "Activity1" {
		t.Errorf("fetched item: name %q, want %q", ae.Name, "Activity1")
	}
}

// 175. The Any filter fetches every item.
func testAnyFilterFetchesEverything(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, ""))
	h.enqueueWorker(tagged("inst-2", 2, "gpu"))
	h.enqueueWorker(tagged("inst-3", 3, "cpu"))

	for i := range 3 {
		h.tfetchSome(tagLock, provider.AnyTag(), fmt.Sprintf("fetch %d of 3: Any fetches untagged and tagged items", i+1))
	}
	h.tfetchNone(tagLock, provider.AnyTag(), "all three items are locked")
}

// 176. An abandoned tagged item comes back with its tag, a higher attempt
// count and a new token.
func testTagSurvivesAbandonAndRefetch(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(tagged("inst-1", 1, "gpu"))
	h.enqueueWorker(tagged("inst-1", 2, ""))
	gpu := provider.MustTags("gpu")

	item, ae := h.tfetchSome(tagLock, gpu, "item 1 is tagged gpu")
	h.wantTagged("first Tags{gpu} fetch", ae, 1, "gpu")
	h.wabandonOK(item.LockToken, 0, false)

	again, ae := h.tfetchSome(tagLock, gpu, "the gpu item was abandoned")
	h.wantTagged("Tags{gpu} fetch after the abandon", ae, 1, "gpu")
	if again.AttemptCount < 2 {
		t.Errorf("Tags{gpu} fetch after the abandon: attempt count %d, want ≥ 2", again.AttemptCount)
	}
	if again.LockToken == item.LockToken {
		t.Errorf("Tags{gpu} fetch after the abandon: lock token %q is the old one, want a new token", again.LockToken)
	}

	_, ae = h.tfetchSome(tagLock, provider.DefaultOnlyTags(), "item 2 is untagged")
	h.wantTagged("DefaultOnly fetch", ae, 2, "")
}

// 177. Fetchers with different filters share the queue without overlap
// beyond their filters.
func testMultiRuntimeTagIsolation(t *testing.T, f Factory) {
	h := setup(t, f)
	const lock = 30 * time.Second
	h.enqueueWorker(tagged("inst-1", 1, ""))
	h.enqueueWorker(tagged("inst-2", 2, "gpu"))
	h.enqueueWorker(tagged("inst-3", 3, "cpu"))
	h.enqueueWorker(tagged("inst-4", 4, "fpga"))
	h.enqueueWorker(tagged("inst-5", 5, "gpu"))

	_, ae := h.tfetchSome(lock, provider.DefaultOnlyTags(), "item 1 is untagged")
	h.wantTagged("DefaultOnly fetch", ae, 1, "")
	h.tfetchNone(lock, provider.DefaultOnlyTags(), "no other item is untagged")

	gpuCPU := provider.MustTags("gpu", "cpu")
	_, ae1 := h.tfetchSome(lock, gpuCPU, "items 2 (gpu) and 3 (cpu) match Tags{gpu,cpu}")
	_, ae2 := h.tfetchSome(lock, gpuCPU, "items 2 (gpu) and 3 (cpu) match Tags{gpu,cpu}")
	ids := []uint64{ae1.ID, ae2.ID}
	slices.Sort(ids)
	if !slices.Equal(ids, []uint64{2, 3}) {
		t.Errorf("two Tags{gpu,cpu} fetches returned ids %v, want {2, 3}", ids)
	}

	cpuFPGA := provider.MustTags("cpu", "fpga")
	_, ae = h.tfetchSome(lock, cpuFPGA, "item 4 is tagged fpga")
	h.wantTagged("Tags{cpu,fpga} fetch", ae, 4, "fpga")
	h.tfetchNone(lock, cpuFPGA, "the cpu item 3 is locked and the fpga item 4 was fetched")

	_, ae = h.tfetchSome(lock, provider.AnyTag(), "item 5 (gpu) is the only unlocked item")
	h.wantTagged("Any fetch", ae, 5, "gpu")
	h.tfetchNone(lock, provider.AnyTag(), "every item is locked")
}

// 178. Tags of worker items enqueued through an orchestration ack are kept.
func testTagPreservedThroughAckOrchestrationItem(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "tag-ack-inst"
	const lock = 30 * time.Second

	gpuWork := namedActivity(inst, 10, "GpuWork")
	gpuWork.Input = `"model-v3"`
	gpuWork.Tag = ptr("gpu")
	cpuWork := namedActivity(inst, 11, "CpuWork")
	cpuWork.Input = `"data"`

	item := h.startTurn(inst)
	h.ackFull(item.LockToken, 1, []provider.Event{started(inst)}, workItems(gpuWork, cpuWork), nil, provider.ExecutionMetadata{}, nil)

	witem, ae := h.tfetchSome(lock, provider.DefaultOnlyTags(), "the ack enqueued the untagged CpuWork")
	if ae.Name != "CpuWork" {
		t.Errorf("DefaultOnly fetch: activity %q (tag %s), want %q", ae.Name, optString(ae.Tag), "CpuWork")
	}
	h.wantOptString("DefaultOnly fetch: tag", ae.Tag, nil)
	h.wackOK(witem.LockToken, nil)

	h.tfetchNone(lock, provider.DefaultOnlyTags(), "only the gpu-tagged GpuWork is left (its tag must be kept on the ack path)")

	_, ae = h.tfetchSome(lock, provider.MustTags("gpu"), "the ack enqueued GpuWork tagged gpu")
	if ae.Name != "GpuWork" {
		t.Errorf("Tags{gpu} fetch: activity %q, want %q", ae.Name, "GpuWork")
	}
	h.wantOptString("Tags{gpu} fetch: tag", ae.Tag, ptr("gpu"))
}
