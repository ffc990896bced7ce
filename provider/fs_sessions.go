package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// Sessions. A session pins every worker item with its session_id to one
// owner. Ownership is a lease file sessions/<key>.json (lock file
// sessions/<key>.lock, never deleted), so it is safe across processes:
//
//	Owner        the owning worker's owner_id
//	ExpiresAtMs  the session lease (locked_until), kept alive by RenewSessionLock
//	Data         {"session_id", "last_activity_at_ms"}
//
// Token is the constant "session" while a session row exists. The item's
// own claim is independent of the session lease (contract test 160).
// Session leases are not fsynced, like instance leases: after a power loss
// every owner is gone anyway.

type sessionData struct {
	SessionID      string `json:"session_id"`
	LastActivityMs int64  `json:"last_activity_at_ms"`
}

const sessionRowToken = "session"

func (p *FSProvider) sessionPaths(sid string) (lockPath, leasePath string) {
	k := instanceKey(sid)
	d := filepath.Join(p.dir, "sessions")
	return filepath.Join(d, k+".lock"), filepath.Join(d, k+".json")
}

// sessionClaimable reports whether owner may take items of session sid now:
// no row, an expired row, or a row it owns. Read without the flock (the file
// is replaced atomically); claimSession re-checks under it.
func (p *FSProvider) sessionClaimable(sid, owner string) bool {
	lp, sp := p.sessionPaths(sid)
	l, exists, err := p.leases.Inspect(context.Background(), lp, sp)
	if isCorruptLease(err) {
		return true // free by the lease rule; claimSession decides under the flock
	}
	if err != nil || !exists || l.Token == "" {
		return err == nil || !exists
	}
	return !l.HeldAt(p.nowMs()) || l.Owner == owner
}

// sessionLockWait bounds how long a session operation waits for a
// session's flock. Its holders keep it for one short read-check-write, but
// a process stopped inside one (SIGSTOP, a frozen cgroup) keeps it until it
// resumes, and no other process may wait that long (design.md §7): past
// the bound the operation passes the session over (errSessionBusy).
const sessionLockWait = claimWaitMax

// errSessionBusy: a session's flock stayed held for sessionLockWait.
var errSessionBusy = errors.New("durofs: session's lock is held by another process")

// lockSession takes the flock of session sid, waiting at most
// sessionLockWait (errSessionBusy past it, ctx's error if ctx ended).
func (p *FSProvider) lockSession(ctx context.Context, lp, sp string) (*lease.Guard, error) {
	wctx, cancel := context.WithTimeout(ctx, sessionLockWait)
	defer cancel()
	g, err := p.leases.Lock(wctx, lp, sp)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: %w", errSessionBusy, err)
	}
	return g, err
}

// claimSession upserts the session row for owner if it is new, expired or
// already owner's. It reports false if another owner holds it. A session
// whose flock stays busy gives errSessionBusy.
func (p *FSProvider) claimSession(ctx context.Context, sid, owner string, lockTimeout time.Duration) (bool, error) {
	lp, sp := p.sessionPaths(sid)
	g, err := p.lockSession(ctx, lp, sp)
	if err != nil {
		return false, err
	}
	defer g.Unlock()
	cur, _, err := g.Read()
	if err != nil && !isCorruptLease(err) {
		return false, err
	}
	now := g.Now().UnixMilli()
	if cur.Token != "" && cur.HeldAt(now) && cur.Owner != owner {
		return false, nil
	}
	next := cur
	if cur.Owner != owner || !cur.HeldAt(now) {
		next.Fence++
		next.AcquiredAtMs = now
	}
	next.Token, next.Owner, next.ExpiresAtMs = sessionRowToken, owner, now+lockTimeout.Milliseconds()
	next.Data, _ = json.Marshal(sessionData{SessionID: sid, LastActivityMs: now})
	return true, g.Write(next)
}

// touchSession bumps last_activity_at, only while the session lease is valid
// (a former owner must not refresh a session someone else now owns). Best
// effort: a session whose flock stays busy is not touched.
func (p *FSProvider) touchSession(ctx context.Context, sid string) {
	lp, sp := p.sessionPaths(sid)
	g, err := p.lockSession(ctx, lp, sp)
	if err != nil {
		return
	}
	defer g.Unlock()
	cur, exists, err := g.Read()
	now := g.Now().UnixMilli()
	if err != nil || !exists || !cur.HeldAt(now) {
		return
	}
	var d sessionData
	_ = json.Unmarshal(cur.Data, &d)
	d.SessionID, d.LastActivityMs = sid, now
	cur.Data, _ = json.Marshal(d)
	if err := g.Write(cur); err != nil {
		p.log.Warn("durofs: session last-activity update failed", "session", sid, "err", err)
	}
}

// eachSession runs fn for every session row under its flock. A row whose
// flock stays busy for sessionLockWait is passed over (its holder is in a
// section on it, or stopped in one).
func (p *FSProvider) eachSession(ctx context.Context, fn func(g *lease.Guard, cur lease.Lease, d sessionData, leasePath string) error) error {
	dir := filepath.Join(p.dir, "sessions")
	entries, err := p.fs.ReadDirNames(dir)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range entries {
		k, ok := strings.CutSuffix(n, ".json")
		if !ok || vfs.IsTemp(n) {
			continue
		}
		lp, sp := filepath.Join(dir, k+".lock"), filepath.Join(dir, n)
		g, err := p.lockSession(ctx, lp, sp)
		if errors.Is(err, errSessionBusy) {
			continue
		}
		if err != nil {
			return err
		}
		cur, exists, rerr := g.Read()
		if rerr == nil && exists && cur.Token != "" {
			var d sessionData
			_ = json.Unmarshal(cur.Data, &d)
			err = fn(g, cur, d, sp)
		}
		g.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// RenewSessionLock implements Provider: it extends sessions owned by one of
// ownerIDs whose lease is live and that were active within idleTimeout
// (strictly), and returns how many.
func (p *FSProvider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "renew_session_lock"
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	owners := map[string]bool{}
	for _, o := range ownerIDs {
		owners[o] = true
	}
	n := 0
	err := p.eachSession(ctx, func(g *lease.Guard, cur lease.Lease, d sessionData, _ string) error {
		now := g.Now().UnixMilli()
		if !owners[cur.Owner] || !cur.HeldAt(now) || d.LastActivityMs <= now-idleTimeout.Milliseconds() {
			return nil
		}
		cur.ExpiresAtMs = now + extendFor.Milliseconds()
		if err := g.Write(cur); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, Retryablef(op, err, "%v", err)
	}
	return n, nil
}

// CleanupOrphanedSessions implements Provider: it removes session rows whose
// lease has expired and that no worker item (locked or not) references. The
// lock file stays (it may be held). idleTimeout is not used, as in the SQLite
// reference.
func (p *FSProvider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	const op = "cleanup_orphaned_sessions"
	// Which sessions worker items reference is in the items' bodies: read
	// them only if some session has expired (usually none has).
	expired := false
	err := p.eachSession(ctx, func(g *lease.Guard, cur lease.Lease, _ sessionData, _ string) error {
		expired = expired || cur.ExpiresAtMs < g.Now().UnixMilli()
		return nil
	})
	if err != nil {
		return 0, Retryablef(op, err, "%v", err)
	}
	if !expired {
		return 0, nil
	}
	referenced := map[string]bool{}
	err = eachQueued(p.workQ, func(m queued) error {
		if s, ok := m.Attrs[attrSession]; ok {
			referenced[s] = true
		}
		return nil
	})
	if err != nil {
		return 0, Retryablef(op, err, "list worker queue: %v", err)
	}
	n := 0
	err = p.eachSession(ctx, func(g *lease.Guard, cur lease.Lease, d sessionData, leasePath string) error {
		now := g.Now().UnixMilli()
		if cur.ExpiresAtMs >= now || referenced[d.SessionID] {
			return nil
		}
		if err := g.RemoveLease(); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, Retryablef(op, err, "%v", err)
	}
	return n, nil
}

func isCorruptLease(err error) bool { return err != nil && errorsIs(err, lease.ErrCorrupt) }
