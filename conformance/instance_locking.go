package conformance

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// D. instance_locking: one lock per instance, unique tokens, and a batch is
// exactly the messages visible at fetch time.

// 14. A locked instance is not fetchable until its lock expires; the new lock
// has a new token.
func testExclusiveInstanceLock(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	first := h.fetchSome(h.lt, inst, "the start was just enqueued")
	h.fetchNone(h.lt, "the instance is locked")

	sleep(h.lt + 100*ms)
	second := h.fetchSome(h.lt, inst, "the first lock expired")
	if second.LockToken == first.LockToken {
		t.Errorf("fetch after expiry returned the same lock token %q, want a new one", first.LockToken)
	}
}

// 15. Five fetches of five instances return five distinct tokens.
func testLockTokenUniqueness(t *testing.T, f Factory) {
	h := setup(t, f)

	for i := range 5 {
		h.enqueue(startItem(fmt.Sprintf("inst-%d", i)), 0)
	}
	tokens := map[string]string{}
	for i := range 5 {
		item := h.fetchSome(longLock, "", fmt.Sprintf("fetch %d of 5: five starts were enqueued", i+1))
		if prev, dup := tokens[item.LockToken]; dup {
			t.Errorf("lock token %q was returned for both %q and %q, want distinct tokens", item.LockToken, prev, item.Item.Instance)
		}
		tokens[item.LockToken] = item.Item.Instance
	}
}

// 16. An unknown token fails ack and abandon, and leaves the real lock alone.
func testInvalidLockTokenRejection(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	h.fetchSome(longLock, inst, "the start was just enqueued")
	h.ackErr("invalid-token", 1, []provider.Event{started(inst)}, provider.ExecutionMetadata{}, "the token is invalid")
	if err := h.p.AbandonOrchestrationItem(h.ctx, "invalid-token", 0, false); err == nil {
		t.Errorf("AbandonOrchestrationItem(%q): succeeded, want an error", "invalid-token")
	}
	h.fetchNone(longLock, "the instance's lock must be untouched by the invalid ack and abandon")
}

// 17. Ten concurrent fetchers of ten instances each get a different instance.
func testConcurrentInstanceFetching(t *testing.T, f Factory) {
	h := setup(t, f)
	const n = 10

	for i := range n {
		h.enqueue(startItem(fmt.Sprintf("concurrent-%d", i)), 0)
	}
	var (
		wg        sync.WaitGroup
		instances [n]string
		got       [n]bool
		errs      [n]error
	)
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 30 * ms)
			item, err := h.p.FetchOrchestrationItem(h.ctx, longLock, 0, nil)
			errs[i] = err
			if item != nil {
				got[i] = true
				instances[i] = item.Item.Instance
			}
		})
	}
	wg.Wait()

	distinct := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("task %d: FetchOrchestrationItem: unexpected error: %s", i, describeErr(errs[i]))
			continue
		}
		if got[i] {
			distinct[instances[i]] = true
		}
	}
	if len(distinct) != n {
		t.Errorf("concurrent fetches returned %d distinct instances %v, want exactly %d (every task a different instance)",
			len(distinct), instances, n)
	}
}

// 18. Completions enqueued while the instance is locked wait; after expiry
// they are delivered together with the earlier messages.
func testCompletionsArrivingDuringLockBlocked(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.enqueue(startItem(inst), 0)
	h.fetchSome(h.lt, inst, "the start was just enqueued")
	for id := uint64(1); id <= 3; id++ {
		h.enqueue(activityCompleted(inst, id), 0)
	}
	h.fetchNone(h.lt, "the instance is locked; completions arriving now must wait")

	sleep(h.lt + 100*ms)
	item := h.fetchSome(h.lt, inst, "the lock expired")
	msgs := item.Item.Messages
	if len(msgs) != 4 {
		t.Fatalf("fetch after expiry: %d messages %v, want 4 (the original start plus 3 completions)", len(msgs), itemKinds(msgs))
	}
	starts := 0
	for _, m := range msgs {
		if _, ok := itemAs[provider.StartOrchestration](m); ok {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("fetch after expiry: %d StartOrchestration messages in %v, want 1 (the re-delivered start)", starts, itemKinds(msgs))
	}
	if ids := activityCompletedIDs(msgs); !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Errorf("fetch after expiry: ActivityCompleted ids %v, want [1 2 3] in order", ids)
	}
}

// 19. Fetch order is the global FIFO of the oldest visible message, and a
// locked instance does not block others.
func testCrossInstanceLockIsolation(t *testing.T, f Factory) {
	h := setup(t, f)
	const a, b = "instance-A", "instance-B"

	h.createInstance(a)
	h.createInstance(b)
	h.enqueue(startItem(a), 0)
	h.enqueue(startItem(b), 0)

	h.fetchSome(longLock, a, "A's message is the oldest visible message")
	itemB := h.fetchSome(longLock, b, "A is locked and B has a message")
	h.ackOK(itemB.LockToken, 1, nil, nil, nil, mdNameVersion(testOrchName, testOrchVersion))

	h.enqueue(activityCompleted(b, 1), 0)
	h.fetchSome(longLock, b, "B has a new completion and A's lock must not block it")
}

// 20. An ack deletes only the messages fetched under its token.
func testMessageTaggingDuringLock(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.createInstance(inst)
	h.enqueue(activityCompleted(inst, 1), 0)
	h.enqueue(activityCompleted(inst, 2), 0)
	item := h.fetchSome(longLock, inst, "two completions were enqueued")
	if n := len(item.Item.Messages); n != 2 {
		t.Fatalf("first fetch: %d messages %v, want 2", n, itemKinds(item.Item.Messages))
	}
	h.enqueue(activityCompleted(inst, 3), 0)
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})

	item = h.fetchSome(longLock, inst, "the completion enqueued during the lock must survive the ack")
	if ids := activityCompletedIDs(item.Item.Messages); len(item.Item.Messages) != 1 || !slices.Equal(ids, []uint64{3}) {
		t.Errorf("fetch after ack: messages %v with completion ids %v, want exactly one ActivityCompleted with id 3",
			itemKinds(item.Item.Messages), ids)
	}
}

// 21. Messages enqueued while locked are neither fetched nor deleted by the ack.
func testAckOnlyAffectsLockedMessages(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "instance-A"

	h.createInstance(inst)
	h.enqueue(activityCompleted(inst, 1), 0)
	item := h.fetchSome(longLock, inst, "a completion was enqueued")
	if n := len(item.Item.Messages); n != 1 {
		t.Fatalf("first fetch: %d messages %v, want 1", n, itemKinds(item.Item.Messages))
	}
	h.enqueue(activityCompleted(inst, 2), 0)
	h.enqueue(activityCompleted(inst, 3), 0)
	h.fetchNone(longLock, "the instance is locked")
	h.ackOK(item.LockToken, 1, nil, nil, nil, provider.ExecutionMetadata{})

	item = h.fetchSome(longLock, inst, "the completions enqueued during the lock must survive the ack")
	if ids := activityCompletedIDs(item.Item.Messages); !slices.Equal(ids, []uint64{2, 3}) {
		t.Errorf("fetch after ack: ActivityCompleted ids %v (messages %v), want [2 3]", ids, itemKinds(item.Item.Messages))
	}
}

// 22. Ten concurrent fetchers of one instance: exactly one wins.
func testMultiThreadedLockContention(t *testing.T, f Factory) {
	h := setup(t, f)
	const n = 10
	const inst = "contention-instance"

	h.enqueue(startItem(inst), 0)
	var (
		wg   sync.WaitGroup
		got  [n]bool
		errs [n]error
	)
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * ms)
			item, err := h.p.FetchOrchestrationItem(h.ctx, longLock, 0, nil)
			errs[i] = err
			got[i] = item != nil
		})
	}
	wg.Wait()

	wins := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("task %d: FetchOrchestrationItem: unexpected error: %s", i, describeErr(errs[i]))
		}
		if got[i] {
			wins++
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d concurrent fetches of one instance returned an item, want exactly 1", wins, n)
	}
	h.fetchNone(longLock, "the single instance is locked by the winner")
}

// 23. Forty concurrent fetchers over twenty instances never get the same
// instance twice. Only retryable errors are retried.
func testMultiThreadedNoDuplicateProcessing(t *testing.T, f Factory) {
	h := setup(t, f)
	const (
		instances  = 20
		tasks      = 40
		maxRetries = 3
	)

	for i := range instances {
		h.enqueue(startItem(fmt.Sprintf("dup-test-%d", i)), 0)
	}
	var (
		wg      sync.WaitGroup
		results [tasks]string
	)
	for i := range tasks {
		wg.Go(func() {
			time.Sleep(time.Duration((i*3)%50) * ms)
			for retry := 0; ; retry++ {
				item, err := h.p.FetchOrchestrationItem(h.ctx, longLock, 0, nil)
				if err == nil {
					if item != nil {
						results[i] = item.Item.Instance
					}
					return
				}
				if !provider.IsRetryable(err) {
					t.Errorf("task %d: FetchOrchestrationItem: non-retryable error under contention: %s", i, describeErr(err))
					return
				}
				if retry == maxRetries {
					t.Logf("task %d: giving up after %d retries; last retryable error: %v", i, maxRetries, err)
					return
				}
				backoff := 10 * ms
				if retry > 0 {
					backoff = 20 * ms
				}
				time.Sleep(backoff)
			}
		})
	}
	wg.Wait()

	seen := map[string]int{}
	for i, inst := range results {
		if inst == "" {
			continue
		}
		if prev, dup := seen[inst]; dup {
			t.Errorf("instance %q was fetched by both task %d and task %d, want every instance at most once", inst, prev, i)
		}
		seen[inst] = i
	}
	if len(seen) > instances {
		t.Errorf("%d distinct instances fetched, want at most %d", len(seen), instances)
	}
}

// 24. While one task holds the lock another gets nothing; after expiry a third
// takes the instance over.
func testMultiThreadedLockExpirationRecovery(t *testing.T, f Factory) {
	h := setup(t, f)
	const inst = "expiration-instance"

	h.enqueue(startItem(inst), 0)
	type result struct {
		item *provider.LockedOrchestrationItem
		err  error
	}
	var (
		wg         sync.WaitGroup
		start      = make(chan struct{})
		r1, r2, r3 result
	)
	fetch := func(r *result) {
		r.item, r.err = h.p.FetchOrchestrationItem(h.ctx, h.lt, 0, nil)
	}
	wg.Go(func() { // T1 takes the lock and holds it
		<-start
		fetch(&r1)
	})
	wg.Go(func() { // T2 tries while T1 holds it
		<-start
		time.Sleep(200 * ms)
		fetch(&r2)
	})
	wg.Go(func() { // T3 tries after T1's lock expired
		<-start
		time.Sleep(h.lt + 100*ms)
		fetch(&r3)
	})
	close(start)
	wg.Wait()

	for i, r := range []result{r1, r2, r3} {
		if r.err != nil {
			t.Errorf("T%d: FetchOrchestrationItem: unexpected error: %s", i+1, describeErr(r.err))
		}
	}
	if r1.item == nil || r1.item.Item.Instance != inst {
		t.Errorf("T1: got %v, want the lock on %q", describeItem(r1.item), inst)
	}
	if r2.item != nil {
		t.Errorf("T2 (after 200 ms): got %v, want no item (T1 holds the lock)", describeItem(r2.item))
	}
	if r3.item == nil || r3.item.Item.Instance != inst {
		t.Errorf("T3 (after lock timeout + 100 ms): got %v, want %q (T1's lock expired)", describeItem(r3.item), inst)
	}
}

// describeItem summarizes a fetch result for failure messages.
func describeItem(item *provider.LockedOrchestrationItem) string {
	if item == nil {
		return "no item"
	}
	return fmt.Sprintf("instance %q with messages %v", item.Item.Instance, itemKinds(item.Item.Messages))
}
