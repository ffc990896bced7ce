package provider

// The deletion marker: instances/<key>/deleting.
//
// No work ack of a worker item may commit after a deletion that lists the
// item: live, the deletion's redo deletes the completion the ack
// published, but a replay after a power loss redoes the deletion and then
// the ack, which publishes the completion again, for the next instance of
// the same id to receive (TestReplayDoesNotRestoreCompletionOfAnAckCommittedAfterADeletion,
// TestAckAfterTheDeleterDiedIsRefused). A deletion holds its members'
// instance flocks from before its marks through its apply; a work ack holds
// only its item's claim lock. What orders them:
//
//  1. The deletion, for each member that has worker items, creates an empty
//     file, instances/<key>/deleting, after marking its lease and before
//     appending its record (commitLocked, beforeDeletionAppend).
//  2. Then it takes and lets go of each listed item's claim lock in turn
//     (passClaims): a work ack that held one has committed and applied by
//     then, so its record precedes the deletion's, and the deletion's apply
//     deletes its completion. One lock at a time: a deletion of an instance
//     with a hundred thousand pending items needs no more descriptors than
//     one with one. A lock that stays busy (its holder stopped) makes the
//     deletion let everything go and wait for it alone, then start again.
//  3. A work ack, under its item's claim lock and with the item still
//     there, looks for the marker (deletionMarked: one failed stat when
//     there is none). If it is there the ack lets go of the claim lock and
//     takes the instance's flock (settleDeletion), bounded like every wait
//     of an ack, then the claim lock again, and finishes holding both. The
//     deleter held that flock from before it created the marker until its
//     apply deleted the item, so by the time the ack has it, the deletion
//     is applied (the item is gone: the ack fails), or it never committed,
//     or its deleter died or its apply failed - then the ack first finishes
//     it (redoPending; if it still cannot be applied, the ack fails for good
//     when it lists the item) - and no deletion can start while the ack
//     holds it.
//
// So an ack either finished before the deletion passed its claim lock, or
// saw the marker and is ordered after the deletion's apply: no ack record
// of a listed item follows the deletion's record in the log.
//
// The marker goes when the instance's directory is reclaimed
// (reclaimInstance, after the deletion deleted its items), or when a
// deletion mark is cleared without the deletion being applied - its append
// failed, or its redo found no record (its writer died before the append) -
// and the lease holds no other deletion mark (dropDeleting, under the
// flock); an ack that took the flock for a marker with no deletion behind
// it removes it the same way. Nothing here is synced: after a power loss
// (or a failed sync) the first process to open the directory alone replays
// the log before anyone acks, which applies every committed deletion or,
// if one cannot be applied, marks it again (setMarks), marker first. A
// format-5 directory (no markers) is replayed when it is upgraded
// (upgradeFormat).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// markDeleting creates instance key's deletion marker (unsynced). The
// caller holds the instance's flock, and has marked in its lease a deletion
// that lists worker items of the instance.
func (p *FSProvider) markDeleting(key string) error {
	f, err := p.fs.OpenFile(p.deletingPath(key), os.O_WRONLY|os.O_CREATE, vfs.FilePerm)
	if err != nil {
		return err
	}
	return f.Close()
}

// markDeletingFor creates instance key's deletion marker if marks, about
// to be set in its lease, hold a deletion's.
func (p *FSProvider) markDeletingFor(key string, marks []pendingMark) error {
	for _, m := range marks {
		if m.Kind == kindDelete {
			return p.markDeleting(key)
		}
	}
	return nil
}

// dropDeleting removes instance key's deletion marker if its lease, read
// under g, holds no deletion mark (see the file comment): called where a
// deletion's mark was cleared without the deletion being applied, and by a
// work ack that found the marker (settleDeletion).
func (p *FSProvider) dropDeleting(g *lease.Guard, key string) error {
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return err
	}
	st := decodeOrchState(cur)
	for _, m := range append(st.Queued, derefMark(st.Pending)...) {
		if deletionMark(m) {
			return nil
		}
	}
	if err := p.fs.Remove(p.deletingPath(key)); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	return nil
}

// workerItems names the worker items deletion member m deletes.
func workerItems(m deleteMember) []string {
	var items []string
	for _, r := range m.Delete {
		if r.Queue == "worker" {
			items = append(items, r.Name)
		}
	}
	return items
}

// markDeletingOf creates the deletion markers of rec's members that list
// worker items, if rec is a deletion (commitLocked, after the marks and
// before the append).
func (p *FSProvider) markDeletingOf(rec *commitRecord) error {
	if rec.Kind != kindDelete {
		return nil
	}
	for _, m := range rec.Members {
		if len(workerItems(m)) > 0 {
			if err := p.markDeleting(m.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropDeletingOf takes back markDeletingOf after rec did not commit and its
// marks were cleared: guards[i] is rec.Members[i]'s. Best effort: a marker
// left behind costs the next work ack of the instance a wait for its flock,
// under which it removes the marker.
func (p *FSProvider) dropDeletingOf(guards []*lease.Guard, rec *commitRecord) {
	if rec.Kind != kindDelete || len(guards) != len(rec.Members) {
		return
	}
	for i, m := range rec.Members {
		if len(workerItems(m)) == 0 {
			continue
		}
		if err := p.dropDeleting(guards[i], m.Key); err != nil {
			p.log.Warn("durofs: a deletion marker stays", "key", m.Key, "err", err)
		}
	}
}

// derefMark is mark as a slice of none or one.
func derefMark(mark *pendingMark) []pendingMark {
	if mark == nil {
		return nil
	}
	return []pendingMark{*mark}
}

// deletionMark reports whether mark may name a deletion: its kind says so,
// or it has none (written before marks had one).
func deletionMark(mark pendingMark) bool {
	return mark.Kind == "" || mark.Kind == kindDelete
}

// beforeDeletionAppend is what commitLocked does between a deletion's
// marks and its append: the markers, then the claim barrier (see the file
// comment). An error (a *claimBusyError if a claim lock stayed busy) means
// the deletion does not commit.
func (p *FSProvider) beforeDeletionAppend(ctx context.Context, rec *commitRecord) error {
	if rec.Kind != kindDelete {
		return nil
	}
	if err := p.markDeletingOf(rec); err != nil {
		return fmt.Errorf("create deletion marker: %w", err)
	}
	var items []string
	for _, m := range rec.Members {
		items = append(items, workerItems(m)...)
	}
	return p.passClaims(ctx, items)
}

// claimBusyError is passClaims' error for a claim lock that stayed busy.
type claimBusyError struct{ name string }

func (e *claimBusyError) Error() string {
	return fmt.Sprintf("durofs: the claim lock of worker item %s stayed busy", e.name)
}

// passClaims takes and lets go of the claim lock of each worker item of
// names, one at a time, waiting for each at most claimWaitMax (for the
// reason lockNext gives): a *claimBusyError names one that stayed busy.
func (p *FSProvider) passClaims(ctx context.Context, names []string) error {
	for _, name := range names {
		wctx, cancel := context.WithTimeout(ctx, claimWaitMax)
		err := p.workQ.WithClaim(wctx, name, func(*fsqueue.ClaimGuard) error { return nil })
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return &claimBusyError{name: name}
		}
		if err != nil && !errors.Is(err, fsqueue.ErrNotFound) {
			return fmt.Errorf("lock work item %s: %w", name, err)
		}
	}
	return nil
}

// deletionMarked reports whether instance key has a deletion marker.
func (p *FSProvider) deletionMarked(key string) (bool, error) {
	_, err := p.fs.Stat(p.deletingPath(key))
	if vfs.IsNotExist(err) {
		return false, nil
	}
	return err == nil, err
}

// errDeletionMarked is a work ack's signal, from under its claim lock, that
// the item's instance has a deletion marker: the ack takes the instance's
// flock (settleDeletion) and tries again.
type errDeletionMarked struct{ key string }

func (e *errDeletionMarked) Error() string {
	return "durofs: the work item's instance has a deletion marker"
}

// settleDeletion takes instance key's flock for a work ack of worker item
// item that found the instance's deletion marker (see the file comment),
// waiting as long as wctx allows, and finishes a deletion left pending
// (redoPending); a marker with no deletion mark behind it is removed. g is
// nil if the instance is gone (a deletion reclaimed it: the ack then finds
// its item gone too). If a commit of the instance cannot be applied
// (fs_stuck.go), what it is decides: a committed deletion that lists item
// - deleted is true, and the ack fails for good, as if the item were gone;
// another deletion - the error, retryable; no deletion at all - the marker
// was left behind, and the ack goes on (a stuck orchestration commit does
// not concern it).
func (p *FSProvider) settleDeletion(ctx, wctx context.Context, key, item string) (g *lease.Guard, deleted bool, err error) {
	g, _, err = p.lockExisting(wctx, key, true)
	if errors.Is(err, lease.ErrGone) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := p.redoPending(ctx, g, key); err != nil {
		listed, other, lerr := false, true, error(nil)
		if isStuck(err) {
			listed, other, lerr = p.deletionsListing(g, key, item)
		}
		switch {
		case lerr != nil:
			err = errors.Join(err, lerr)
		case listed:
			g.Unlock()
			return nil, true, nil
		case !other:
			err = nil // stale marker; the stuck commit is no deletion
		}
		if err != nil {
			g.Unlock()
			return nil, false, err
		}
	}
	if g.Reclaimed() {
		g.Unlock()
		return nil, false, nil
	}
	if err := p.dropDeleting(g, key); err != nil {
		g.Unlock()
		return nil, false, err
	}
	return g, false, nil
}

// deletionsListing reads the committed deletions that instance key's lease
// (read under g) marks: listed is true if one lists worker item item, other
// if one does not.
func (p *FSProvider) deletionsListing(g *lease.Guard, key, item string) (listed, other bool, err error) {
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return false, false, err
	}
	st := decodeOrchState(cur)
	for _, mark := range append(derefMark(st.Pending), st.Queued...) {
		if !deletionMark(mark) {
			continue
		}
		lr, err := p.findRecord(key, &mark)
		if err != nil {
			return false, false, err
		}
		if lr == nil || lr.rec.Kind != kindDelete {
			continue
		}
		lists := slices.ContainsFunc(lr.rec.Members, func(m deleteMember) bool {
			return m.Key == key && slices.Contains(workerItems(m), item)
		})
		listed, other = listed || lists, other || !lists
	}
	return listed, other, nil
}
