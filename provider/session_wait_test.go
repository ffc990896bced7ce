package provider

import (
	"context"
	"errors"
	"testing"
	"time"
)

// holdSessionLock holds the flock of session sid from another goroutine - a
// process stopped inside a session section (a claim of the session, a
// last-activity update, a renewal or cleanup pass) - until release is
// called (or the test ends).
func holdSessionLock(t *testing.T, p *FSProvider, sid string) (release func()) {
	t.Helper()
	lp, sp := p.sessionPaths(sid)
	g, err := p.leases.Lock(context.Background(), lp, sp)
	mustNoErr(t, err)
	done := make(chan struct{})
	release = func() {
		select {
		case <-done:
		default:
			close(done)
			_ = g.Unlock()
		}
	}
	t.Cleanup(release)
	return release
}

// TestSessionCallsDoNotWaitForAStoppedSessionLockHolder: a process stopped
// while it holds one session's flock must not hold up other workers' calls
// beyond a bounded wait: a renewal of their own sessions (RenewSessionLock
// visits every session row), the cleanup of orphaned sessions, a fetch of a
// session item (which must return within its poll timeout), and a work
// ack's last-activity update (after the ack is committed).
//
// On main each of them waited for the flock with the caller's context: they
// returned only when it ended.
func TestSessionCallsDoNotWaitForAStoppedSessionLockHolder(t *testing.T) {
	s1 := "s1"
	for _, tc := range []struct {
		name string
		// call runs with the flock of s1 held; it may check its results.
		call func(t *testing.T, ctx context.Context, p *FSProvider, token string)
	}{
		{"renew", func(t *testing.T, ctx context.Context, p *FSProvider, _ string) {
			n, err := p.RenewSessionLock(ctx, []string{"B"}, time.Minute, time.Hour)
			if err != nil || n != 1 {
				t.Errorf("RenewSessionLock(B) = %d, %v; want B's one session renewed", n, err)
			}
		}},
		{"cleanup", func(t *testing.T, ctx context.Context, p *FSProvider, _ string) {
			if _, err := p.CleanupOrphanedSessions(ctx, time.Minute); err != nil {
				t.Errorf("CleanupOrphanedSessions = %v", err)
			}
		}},
		{"fetch", func(t *testing.T, ctx context.Context, p *FSProvider, _ string) {
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 3, Name: "act", Input: "y", SessionID: &s1}))
			// An item of no session, queued after: the busy session's must
			// not keep it from being fetched.
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 4, Name: "act", Input: "z"}))
			it, err := p.FetchWorkItem(ctx, time.Minute, 100*time.Millisecond, &SessionFetchConfig{OwnerID: "A", LockTimeout: time.Minute}, DefaultOnlyTags())
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("FetchWorkItem = %+v, %v; want it to return within its poll timeout", it, err)
			} else if ae, ok := itemOf(it).(ActivityExecute); err != nil || !ok || ae.ID != 4 {
				t.Errorf("FetchWorkItem = %+v, %v; want the item of no session (id 4)", it, err)
			}
		}},
		{"work ack", func(t *testing.T, ctx context.Context, p *FSProvider, token string) {
			mustNoErr(t, p.AckWorkItem(ctx, token, ActivityCompleted{Instance: "a", ExecutionID: 1, ID: 2, Result: "r"}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			// A owns s1 (through a fetch of one of its items), B owns s2.
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x", SessionID: &s1}))
			it, err := p.FetchWorkItem(ctx, time.Minute, 0, &SessionFetchConfig{OwnerID: "A", LockTimeout: time.Minute}, DefaultOnlyTags())
			if err != nil || it == nil {
				t.Fatalf("fetch = %+v, %v", it, err)
			}
			if won, err := p.claimSession(ctx, "s2", "B", time.Minute); err != nil || !won {
				t.Fatalf("claim s2 for B = %v, %v", won, err)
			}

			release := holdSessionLock(t, p, s1)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_ = notStalled(t, "the "+tc.name, func() error { release(); return nil }, func() error {
				tc.call(t, cctx, p, it.LockToken)
				return nil
			})
			if cctx.Err() != nil {
				t.Fatalf("the %s returned only when its context ended: it waited for the stopped holder of a session's flock", tc.name)
			}
		})
	}
}

func itemOf(it *LockedWorkItem) WorkItem {
	if it == nil {
		return nil
	}
	return it.Item
}
