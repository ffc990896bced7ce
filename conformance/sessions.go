package conformance

import (
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// P. sessions: activities carrying a session id are pinned to the owner that
// claimed the session, for as long as the session's lease lives. The lease
// is independent of the items' own locks, survives acks, is renewed by
// renew_session_lock only while not idle, and an expired lease makes the
// session claimable by anyone. Every work-item fetch here uses a 5 s lock.

const (
	// sessWorkLock is the work-item lock of the session tests' fetches.
	sessWorkLock = 5 * time.Second
	// sessLock is the session lock of cfg(owner).
	sessLock = 30 * time.Second
	ownerA   = "worker-A"
	ownerB   = "worker-B"
)

// sessionActivity is ActivityExecute{instance, execution 1, id,
// "SessionActivity", session sid}.
func sessionActivity(instance string, id uint64, sid string) provider.ActivityExecute {
	ae := activityExecute(instance, provider.InitialExecutionID, id, "SessionActivity")
	ae.SessionID = ptr(sid)
	return ae
}

// plainActivity is sessionActivity without a session.
func plainActivity(instance string, id uint64) provider.ActivityExecute {
	return activityExecute(instance, provider.InitialExecutionID, id, "PlainActivity")
}

// cfg is SessionFetchConfig{owner, 30 s}.
func cfg(owner string) *provider.SessionFetchConfig {
	return cfgL(owner, sessLock)
}

// cfgL is SessionFetchConfig{owner, lock}.
func cfgL(owner string, lock time.Duration) *provider.SessionFetchConfig {
	return &provider.SessionFetchConfig{OwnerID: owner, LockTimeout: lock}
}

// sfetchSome is FetchWorkItem(5 s, poll 0, session, DefaultOnly) that fails
// the test unless an ActivityExecute is returned.
func (h *harness) sfetchSome(session *provider.SessionFetchConfig, why string) (*provider.LockedWorkItem, provider.ActivityExecute) {
	h.t.Helper()
	return h.wfetchWithSome(sessWorkLock, session, provider.DefaultOnlyTags(), why)
}

// sfetchNone is FetchWorkItem(5 s, poll 0, session, DefaultOnly) that fails
// the test if an item is returned.
func (h *harness) sfetchNone(session *provider.SessionFetchConfig, why string) {
	h.t.Helper()
	h.wfetchWithNone(sessWorkLock, session, provider.DefaultOnlyTags(), why)
}

// claim is "owner claims sid (lock)": enqueue a session item, fetch it with
// cfgL(owner, lock) and ack it with no completion.
func (h *harness) claim(owner string, lock time.Duration, instance string, id uint64, sid string) {
	h.t.Helper()
	h.enqueueWorker(sessionActivity(instance, id, sid))
	item, ae := h.sfetchSome(cfgL(owner, lock), owner+" claims session "+sid)
	if ae.SessionID == nil || *ae.SessionID != sid {
		h.t.Fatalf("%s claiming session %q: fetched %s, want the item of session %q", owner, sid, describeWork(item.Item), sid)
	}
	h.wackOK(item.LockToken, nil)
}

// renewSessions calls RenewSessionLock; an error fails the test.
func (h *harness) renewSessions(owners []string, extendFor, idle time.Duration) int {
	h.t.Helper()
	n, err := h.p.RenewSessionLock(h.ctx, owners, extendFor, idle)
	if err != nil {
		h.t.Fatalf("RenewSessionLock(%q, extend %v, idle %v): unexpected error: %s", owners, extendFor, idle, describeErr(err))
	}
	return n
}

// wantRenewed fails the test unless RenewSessionLock renews want sessions.
func (h *harness) wantRenewed(owners []string, extendFor, idle time.Duration, want int, why string) {
	h.t.Helper()
	if n := h.renewSessions(owners, extendFor, idle); n != want {
		h.t.Errorf("RenewSessionLock(%q, extend %v, idle %v) = %d, want %d (%s)", owners, extendFor, idle, n, want, why)
	}
}

// wantCleaned fails the test unless CleanupOrphanedSessions removes want sessions.
func (h *harness) wantCleaned(idle time.Duration, want int, why string) {
	h.t.Helper()
	n, err := h.p.CleanupOrphanedSessions(h.ctx, idle)
	if err != nil {
		h.t.Fatalf("CleanupOrphanedSessions(%v): unexpected error: %s", idle, describeErr(err))
	}
	if n != want {
		h.t.Errorf("CleanupOrphanedSessions(%v) = %d, want %d (%s)", idle, n, want, why)
	}
}

// wantSession fails the test unless ae belongs to session sid.
func (h *harness) wantSession(what string, ae provider.ActivityExecute, sid string) {
	h.t.Helper()
	h.wantOptString(what+": session_id", ae.SessionID, &sid)
}

// wantNoSession fails the test unless ae has no session.
func (h *harness) wantNoSession(what string, ae provider.ActivityExecute) {
	h.t.Helper()
	h.wantOptString(what+": session_id", ae.SessionID, nil)
}

// wantID fails the test unless ae has the activity id want.
func (h *harness) wantID(what string, ae provider.ActivityExecute, want uint64) {
	h.t.Helper()
	if ae.ID != want {
		h.t.Errorf("%s: activity id %d (%q, session %s), want %d", what, ae.ID, ae.Name, optString(ae.SessionID), want)
	}
}

// 129. An item without a session is fetchable with a session config.
func testNonSessionItemsFetchableByAnyWorker(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(plainActivity("inst-1", 1))
	h.sfetchSome(cfg(ownerA), "an item without a session is fetchable by any worker")
}

// 130. An item of an unclaimed session is fetchable and keeps its session id.
func testSessionItemClaimableWhenNoSession(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "session-1"))
	_, ae := h.sfetchSome(cfg(ownerA), "session-1 is unclaimed")
	h.wantSession("fetched item", ae, "session-1")
}

// 131. The owner of a session gets its later items.
func testSessionAffinitySameWorker(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, sessLock, "inst-1", 1, "session-1")
	h.enqueueWorker(sessionActivity("inst-1", 2, "session-1"))
	h.sfetchSome(cfg(ownerA), "worker-A owns session-1")
}

// 132. Another worker cannot get the items of an owned session; the ack did
// not end the ownership.
func testSessionAffinityBlocksOtherWorker(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, sessLock, "inst-1", 1, "session-1")
	h.enqueueWorker(sessionActivity("inst-1", 2, "session-1"))
	h.sfetchNone(cfg(ownerB), "session-1 is owned by worker-A (acking its item does not release the session)")
}

// 133. Different sessions can be owned by different workers.
func testDifferentSessionsDifferentWorkers(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, sessLock, "inst-1", 1, "session-1")
	h.claim(ownerB, sessLock, "inst-2", 1, "session-2")
	h.enqueueWorker(sessionActivity("inst-1", 2, "session-1"))
	h.enqueueWorker(sessionActivity("inst-2", 2, "session-2"))

	_, ae := h.sfetchSome(cfg(ownerA), "worker-A owns session-1, which has an item")
	h.wantSession("worker-A's fetch", ae, "session-1")
	_, ae = h.sfetchSome(cfg(ownerB), "worker-B owns session-2, which has an item")
	h.wantSession("worker-B's fetch", ae, "session-2")
}

// 134. Items of sessions owned by others are skipped, not blocking.
func testMixedSessionAndNonSessionItems(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, sessLock, "inst-1", 1, "session-1")
	h.enqueueWorker(sessionActivity("inst-1", 2, "session-1"))
	h.enqueueWorker(plainActivity("inst-2", 1))

	_, ae := h.sfetchSome(cfg(ownerB), "worker-B must skip session-1's item (owned by worker-A) and get the plain item")
	h.wantNoSession("worker-B's fetch", ae)
}

// 135. A session whose lease expired can be claimed by another worker.
func testSessionClaimableAfterLockExpiry(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "session-1")
	sleep(100 * ms)
	h.enqueueWorker(sessionActivity("inst-1", 2, "session-1"))
	h.sfetchSome(cfg(ownerB), "worker-A's 50 ms session lock expired")
}

// 136. A fetch without a session config only sees items without a session.
func testNoneSessionSkipsSessionItems(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "session-1"))
	h.enqueueWorker(plainActivity("inst-2", 2))

	item, ae := h.sfetchSome(nil, "the plain item is fetchable without a session config")
	h.wantNoSession("fetch without a session config", ae)
	h.wantID("fetch without a session config", ae, 2)
	h.wackOK(item.LockToken, nil)

	h.sfetchNone(nil, "the only item left has a session, which a fetch without a session config must not see")
	_, ae = h.sfetchSome(cfg(ownerA), "the session item is visible with a session config")
	h.wantSession("fetch with a session config", ae, "session-1")
}

// 137. A session config sees every session's items and plain items, in FIFO
// order; the provider has no per-owner session cap.
func testSomeSessionReturnsAllItems(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "sess-A"))
	h.enqueueWorker(sessionActivity("inst-2", 2, "sess-B"))
	h.enqueueWorker(sessionActivity("inst-3", 3, "sess-C"))
	h.enqueueWorker(plainActivity("inst-4", 4))

	var ids []uint64
	for range 4 {
		item, ae := h.sfetchSome(cfg("shared-proc"), "four items are queued for three unclaimed sessions and none")
		ids = append(ids, ae.ID)
		h.wackOK(item.LockToken, nil)
	}
	if want := []uint64{1, 2, 3, 4}; !slices.Equal(ids, want) {
		t.Errorf("fetched activity ids %v, want %v (every item, FIFO)", ids, want)
	}
	h.sfetchNone(cfg("shared-proc"), "all four items were acked")
}

// 138. renew_session_lock extends the owner's live sessions and counts them.
func testRenewSessionLockActive(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 5*time.Second, "inst-1", 1, "session-1")
	h.wantRenewed([]string{ownerA}, 30*time.Second, 300*time.Second, 1, "worker-A owns one live session")

	h.claim(ownerA, sessLock, "inst-2", 1, "session-2")
	h.wantRenewed([]string{ownerA}, 30*time.Second, 300*time.Second, 2, "worker-A owns two live sessions")
}

// 139. renew_session_lock skips idle sessions (a strict comparison).
func testRenewSessionLockSkipsIdle(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, sessLock, "inst-1", 1, "session-1")
	h.wantRenewed([]string{ownerA}, 30*time.Second, 0, 0,
		"with an idle timeout of 0 every session is idle (last_activity_at > now - 0 is false)")
}

// 140. renew_session_lock of an owner with no sessions renews nothing.
func testRenewSessionLockNoSessions(t *testing.T, f Factory) {
	h := setup(t, f)
	h.wantRenewed([]string{ownerA}, 30*time.Second, 300*time.Second, 0, "no session was ever claimed")
}

// 141. Cleanup removes an expired session with no items.
func testCleanupRemovesExpiredNoItems(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "session-1")
	sleep(100 * ms)
	h.wantCleaned(300*time.Second, 1, "session-1's 50 ms lock expired and it has no queued items")
}

// 142. Cleanup keeps an expired session that still has queued items.
func testCleanupKeepsSessionsWithPendingItems(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "session-1")
	h.enqueueWorker(sessionActivity("inst-1", 2, "session-1"))
	sleep(100 * ms)
	h.wantCleaned(300*time.Second, 0, "session-1 expired but has a queued item")
}

// 143. Cleanup keeps a live session.
func testCleanupKeepsActiveSessions(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 300*time.Second, "inst-1", 1, "session-1")
	h.wantCleaned(300*time.Second, 0, "session-1's 300 s lock is live")
}

// 144. A work-item ack refreshes its session's last activity.
func testAckUpdatesSessionLastActivity(t *testing.T, f Factory) {
	h := setup(t, f)
	const idle = 200 * ms
	h.enqueueWorker(sessionActivity("inst-1", 1, "session-1"))
	item, _ := h.sfetchSome(cfg(ownerA), "session-1 is unclaimed")

	sleep(idle + 50*ms)
	h.wackOK(item.LockToken, activityCompleted("inst-1", 1))
	h.wantRenewed([]string{ownerA}, 30*time.Second, idle, 1,
		"the ack 0 ms ago must have refreshed last_activity_at (the fetch was 250 ms ago, beyond the 200 ms idle window)")
}

// 145. A work-item lock renewal refreshes its session's last activity.
func testRenewWorkItemUpdatesSessionLastActivity(t *testing.T, f Factory) {
	h := setup(t, f)
	const idle = 200 * ms
	h.enqueueWorker(sessionActivity("inst-1", 1, "session-1"))
	item, _ := h.sfetchSome(cfg(ownerA), "session-1 is unclaimed")

	sleep(idle + 50*ms)
	h.renewWorkOK(item.LockToken, 30*time.Second, "the work-item lock is live")
	h.wantRenewed([]string{ownerA}, 30*time.Second, idle, 1,
		"the work-item lock renewal must have refreshed last_activity_at (the fetch was 250 ms ago, beyond the 200 ms idle window)")
}

// 146. A session's items come in FIFO order.
func testSessionItemsProcessedInOrder(t *testing.T, f Factory) {
	h := setup(t, f)
	for id := uint64(1); id <= 3; id++ {
		h.enqueueWorker(sessionActivity("inst-1", id, "session-1"))
	}
	for want := uint64(1); want <= 3; want++ {
		item, ae := h.sfetchSome(cfg(ownerA), "three session-1 items were queued")
		h.wantID("fetch in order", ae, want)
		h.wackOK(item.LockToken, nil)
	}
}

// 147. A session owner also gets items without a session.
func testNonSessionItemsReturnedWithSessionConfig(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, sessLock, "inst-1", 1, "session-1")
	h.enqueueWorker(plainActivity("inst-2", 1))
	_, ae := h.sfetchSome(cfg(ownerA), "a plain item is queued")
	h.wantNoSession("fetch of the plain item", ae)
}

// 148. Every caller using the owner id can serve the owner's session; a
// different owner cannot.
func testSharedWorkerIDAnyCallerCanFetchOwnedSession(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "shared-sess"))
	h.enqueueWorker(sessionActivity("inst-1", 2, "shared-sess"))

	item, ae := h.sfetchSome(cfg("process-1"), "shared-sess is unclaimed")
	h.wantID("first process-1 fetch", ae, 1)
	h.wackOK(item.LockToken, nil)
	item, ae = h.sfetchSome(cfg("process-1"), "process-1 owns shared-sess, which has item 2")
	h.wantID("second process-1 fetch", ae, 2)
	h.wackOK(item.LockToken, nil)

	h.enqueueWorker(sessionActivity("inst-1", 3, "shared-sess"))
	h.sfetchNone(cfg("process-2"), "shared-sess is owned by process-1")
}

// 149. While one worker owns a session, another gets none of its items, even
// unlocked ones.
func testConcurrentSessionClaimOnlyOneWins(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "contested-sess"))
	h.enqueueWorker(sessionActivity("inst-1", 2, "contested-sess"))

	item, _ := h.sfetchSome(cfg(ownerA), "contested-sess is unclaimed")
	h.sfetchNone(cfg(ownerB), "worker-A owns contested-sess, so its unlocked item 2 is not worker-B's")
	h.wackOK(item.LockToken, nil)
}

// 150. After the lease expires another worker takes the session over.
func testSessionTakeoverAfterLockExpiry(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "takeover-sess")
	h.enqueueWorker(sessionActivity("inst-1", 2, "takeover-sess"))
	sleep(100 * ms)
	_, ae := h.sfetchSome(cfg(ownerB), "worker-A's 50 ms session lock expired")
	h.wantSession("worker-B's fetch", ae, "takeover-sess")
}

// 151. After cleanup removed a session, a new item re-creates it on fetch.
func testCleanupThenNewItemRecreatesSession(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "ephemeral-sess")
	sleep(100 * ms)
	h.wantCleaned(300*time.Second, 1, "ephemeral-sess expired and has no items")

	h.enqueueWorker(sessionActivity("inst-1", 2, "ephemeral-sess"))
	_, ae := h.sfetchSome(cfg(ownerB), "the session was cleaned up, so its new item is claimable")
	h.wantID("worker-B's fetch", ae, 2)
	h.wantSession("worker-B's fetch", ae, "ephemeral-sess")
}

// 152. An abandoned session item is redelivered with attempt 2.
func testAbandonedSessionItemRetryable(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "retry-sess"))

	item, ae := h.sfetchSome(cfg(ownerA), "retry-sess is unclaimed")
	h.wantAttempt("first fetch", item.AttemptCount, 1)
	h.wantID("first fetch", ae, 1)
	h.wabandonOK(item.LockToken, 0, false)

	item, ae = h.sfetchSome(cfg(ownerA), "the item was abandoned")
	h.wantAttempt("fetch after the abandon", item.AttemptCount, 2)
	h.wantID("fetch after the abandon", ae, 1)
	h.wackOK(item.LockToken, nil)
	h.sfetchNone(cfg(ownerA), "the only item was acked")
}

// 153. An ignoreAttempt abandon of a session item does not inflate its
// attempt count.
func testAbandonedSessionItemIgnoreAttempt(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "ignore-sess"))

	item, _ := h.sfetchSome(cfg(ownerA), "ignore-sess is unclaimed")
	h.wantAttempt("first fetch", item.AttemptCount, 1)
	h.wabandonOK(item.LockToken, time.Millisecond, true)
	sleep(10 * ms)

	item, _ = h.sfetchSome(cfg(ownerA), "the item was abandoned with a 1 ms delay")
	h.wantAttempt("fetch after the ignoreAttempt abandon", item.AttemptCount, 1)
	h.wackOK(item.LockToken, nil)
}

// 154. renew_session_lock does not revive an expired session.
func testRenewSessionLockAfterExpiryReturnsZero(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "expired-sess")
	sleep(100 * ms)
	h.wantRenewed([]string{ownerA}, 30*time.Second, 300*time.Second, 0, "the 50 ms session lock expired")
}

// 155. The original owner can re-claim its expired session.
func testOriginalWorkerReclaimsExpiredSession(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 50*ms, "inst-1", 1, "reclaim-sess")
	h.enqueueWorker(sessionActivity("inst-1", 2, "reclaim-sess"))
	sleep(100 * ms)
	_, ae := h.sfetchSome(cfg(ownerA), "the expired session is claimable, by its former owner too")
	h.wantID("worker-A's fetch", ae, 2)
}

// 156. When an item's lock expires but its session lease is live, only the
// session owner gets the redelivery.
func testActivityLockExpiresSessionLockValidSameWorkerRefetches(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "sticky-sess"))
	h.wfetchWithSome(500*ms, cfg(ownerA), provider.DefaultOnlyTags(), "sticky-sess is unclaimed")

	sleep(600 * ms)
	h.sfetchNone(cfg(ownerB), "the item's 500 ms lock expired but worker-A's 30 s session lease is live")
	item, ae := h.sfetchSome(cfg(ownerA), "worker-A owns the session and the item's lock expired")
	h.wantID("worker-A's refetch", ae, 1)
	h.wantAttempt("worker-A's refetch", item.AttemptCount, 2)
	h.wackOK(item.LockToken, nil)
}

// 157. When the session lease expires while an item is still locked, a new
// owner takes the session and gets the item once the old lock is released.
func testSessionLockExpiresNewOwnerGetsRedelivery(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "takeover2-sess"))
	itemA, _ := h.wfetchWithSome(5*time.Second, cfgL(ownerA, 200*ms), provider.DefaultOnlyTags(), "takeover2-sess is unclaimed")

	sleep(300 * ms)
	h.enqueueWorker(sessionActivity("inst-1", 2, "takeover2-sess"))
	item, ae := h.sfetchSome(cfg(ownerB), "worker-A's 200 ms session lease expired; item 2 is unlocked")
	h.wantID("worker-B's fetch", ae, 2)
	h.wackOK(item.LockToken, nil)

	_ = h.p.AbandonWorkItem(h.ctx, itemA.LockToken, 0, false) // the result is not part of the test

	item, ae = h.sfetchSome(cfg(ownerB), "worker-B owns the session and worker-A abandoned item 1")
	h.wantID("worker-B's second fetch", ae, 1)
	h.wantAttempt("worker-B's second fetch", item.AttemptCount, 2)
	h.wackOK(item.LockToken, nil)
}

// 158. The same worker re-acquires its session after the lease expired.
func testSessionLockExpiresSameWorkerReacquires(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, 200*ms, "inst-1", 1, "reacq-sess")
	sleep(300 * ms)
	h.enqueueWorker(sessionActivity("inst-1", 2, "reacq-sess"))
	item, ae := h.sfetchSome(cfgL(ownerA, 200*ms), "worker-A's expired session is claimable")
	h.wantID("worker-A's fetch", ae, 2)
	h.wackOK(item.LockToken, nil)
}

// 159. When both the item's lock and the session lease expired, another
// worker gets the item.
func testBothLocksExpireDifferentWorkerClaims(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "both-expire-sess"))
	h.wfetchWithSome(200*ms, cfgL(ownerA, 200*ms), provider.DefaultOnlyTags(), "both-expire-sess is unclaimed")

	sleep(400 * ms)
	item, ae := h.sfetchSome(cfg(ownerB), "the item's 200 ms lock and the 200 ms session lease both expired")
	h.wantID("worker-B's fetch", ae, 1)
	h.wantSession("worker-B's fetch", ae, "both-expire-sess")
	h.wantAttempt("worker-B's fetch", item.AttemptCount, 2)
	h.wackOK(item.LockToken, nil)
}

// 160. An item's lock does not depend on its session lease.
func testSessionLockExpiresActivityLockValidAckSucceeds(t *testing.T, f Factory) {
	h := setup(t, f)
	h.enqueueWorker(sessionActivity("inst-1", 1, "sess-expires"))
	item, _ := h.wfetchWithSome(30*time.Second, cfgL(ownerA, 200*ms), provider.DefaultOnlyTags(), "sess-expires is unclaimed")

	sleep(300 * ms)
	if err := h.wack(item.LockToken, activityCompleted("inst-1", 1)); err != nil {
		t.Errorf("AckWorkItem after the session lease expired but within the 30 s work-item lock: %s, want success", describeErr(err))
	}
}

// 161. A session lease renewed before it expires outlives its original
// expiry.
func testSessionLockRenewalExtendsPastOriginalTimeout(t *testing.T, f Factory) {
	h := setup(t, f)
	h.claim(ownerA, time.Second, "inst-1", 1, "renew-ext-sess")

	sleep(600 * ms)
	h.wantRenewed([]string{ownerA}, time.Second, 300*time.Second, 1, "the 1 s session lease is live and not idle")

	sleep(400 * ms) // past the original expiry, within the renewed one
	h.enqueueWorker(sessionActivity("inst-1", 2, "renew-ext-sess"))
	h.sfetchNone(cfg(ownerB), "worker-A's renewed lease outlives the original 1 s expiry")
	h.sfetchSome(cfg(ownerA), "worker-A still owns the session")
}
