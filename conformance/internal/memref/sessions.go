package memref

import (
	"context"
	"slices"
	"time"

	"github.com/durofs/durofs/provider"
)

// Sessions (duroxide-contract.md §2.9, §2.13, §2.14, §7.1). A session row
// pins the worker items carrying its session id to one owner while its
// lease (lockedTil) lives; lastActivity is the idle clock that
// RenewSessionLock consults. Session items are ordinary worker messages:
// their own locks are independent of the lease.

// session is one session row.
type session struct {
	owner        string
	lockedTil    time.Time
	lastActivity time.Time
}

// sessionEligible reports whether a fetch with cfg may take w, as far as
// sessions go (callers hold m.mu): items without a session always; session
// items only with a config, when the session has no row, an expired lease,
// or a live lease owned by cfg's owner.
func (m *Provider) sessionEligible(w *workMsg, cfg *provider.SessionFetchConfig, now time.Time) bool {
	sid := w.item.SessionID
	if sid == nil {
		return true
	}
	if cfg == nil {
		return false
	}
	s := m.sessions[*sid]
	return s == nil || !s.lockedTil.After(now) || s.owner == cfg.OwnerID
}

// claimSession upserts the session row of a fetched item for cfg's owner:
// owner, lease now+cfg.LockTimeout and last activity now. The caller has
// checked eligibility under the same lock, so the conditional upsert of the
// contract cannot lose.
func (m *Provider) claimSession(w *workMsg, cfg *provider.SessionFetchConfig, now time.Time) {
	if w.item.SessionID == nil || cfg == nil {
		return
	}
	if m.sessions == nil {
		m.sessions = map[string]*session{}
	}
	m.sessions[*w.item.SessionID] = &session{owner: cfg.OwnerID, lockedTil: now.Add(cfg.LockTimeout), lastActivity: now}
}

// touchSession bumps the last activity of w's session, only while its lease
// is live (an ack or a work-item lock renewal; best effort).
func (m *Provider) touchSession(w *workMsg, now time.Time) {
	if w.item.SessionID == nil {
		return
	}
	if s := m.sessions[*w.item.SessionID]; s != nil && s.lockedTil.After(now) {
		s.lastActivity = now
	}
}

// RenewSessionLock implements provider.Provider: it extends the live,
// non-idle sessions of the owners (last activity strictly after
// now-idleTimeout) to now+extendFor and counts them.
func (m *Provider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	idleSince := now.Add(-idleTimeout)
	n := 0
	for _, s := range m.sessions {
		if slices.Contains(ownerIDs, s.owner) && s.lockedTil.After(now) && s.lastActivity.After(idleSince) {
			s.lockedTil = now.Add(extendFor)
			n++
		}
	}
	if n > 0 {
		m.notify()
	}
	return n, nil
}

// CleanupOrphanedSessions implements provider.Provider: it deletes the
// sessions whose lease expired and that no worker message (locked or not)
// refers to. idleTimeout is ignored, as in the SQLite reference.
func (m *Provider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	referenced := map[string]bool{}
	for _, w := range m.work {
		if w.item.SessionID != nil {
			referenced[*w.item.SessionID] = true
		}
	}
	n := 0
	for sid, s := range m.sessions {
		if s.lockedTil.Before(now) && !referenced[sid] {
			delete(m.sessions, sid)
			n++
		}
	}
	if n > 0 {
		m.notify()
	}
	return n, nil
}
