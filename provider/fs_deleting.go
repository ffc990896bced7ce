package provider

// The deletion marker: instances/<key>/deleting.
//
// A forced deletion holds its worker items' claim locks from before its
// commit through its apply (deleteAtomic), so that no work ack of one of
// them commits after it. A deleter killed after its commit point, or whose
// apply fails, lets go of them with the items still there until the
// deletion's redo deletes them. A work ack in that gap must fail: its record
// would come after the deletion's in the log, and a replay after a power
// loss would redo the deletion and then the ack, which publishes its
// completion again, for the next instance of the same id to receive
// (TestAckAfterTheDeleterDiedIsRefused).
//
// The committed deletion's mark in the instance's lease says so, but a work
// ack that read the lease every time would parse the instance's whole queue
// state (a fan-out's batch: tens of kilobytes) on the hot path of every ack
// (+10 % on a fan-out, BENCHMARKS.md). So a deletion that lists worker items
// of an instance also creates an empty file, instances/<key>/deleting, under
// the instance flock and holding the items' claim locks, after it marks the
// lease and before it appends its record (commitLocked); and the file is
// removed only where no committed deletion can be left unapplied:
//
//   - when the instance's directory is reclaimed (reclaimInstance), which
//     happens after the deletion's apply deleted its items;
//   - when a deletion mark is cleared without the deletion being applied -
//     its append failed, or its redo finds no record (its writer died before
//     the append) - and the lease holds no other deletion mark
//     (dropDeleting, under the flock).
//
// A work ack holding an item's claim lock that finds the item still there
// therefore finds the file whenever a committed deletion listing the item
// is not yet applied; a missing file is one failed stat on the ack's path.
// A file found sends it to the lease for the mark (deletionCommitted): the
// file may be left over from a deletion that never committed.
//
// Nothing here is synced: after a power loss (or a failed sync) the first
// process to open the directory alone replays the log before anyone acks,
// which applies every committed deletion or, if one cannot be applied,
// marks it again (setMarks), creating the file again first. A format-5
// directory (no such files) is replayed when it is upgraded (upgradeFormat).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"

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
// under g, holds no deletion mark (see the file comment): called after a
// deletion's mark was cleared without the deletion being applied.
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
// left behind costs its instance's work acks a read of the lease.
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

// deletionCommitted reports whether a committed deletion of instance key
// that lists worker item name is still pending, not yet applied. The caller
// holds name's claim lock and saw the item still there; the work ack must
// then fail (see the file comment).
//
// No marker file: no such deletion (the file comment). Otherwise the
// instance's lease is read without its flock for the deletion's mark: a
// deletion sets it before its append, holding the claim locks of every
// item it lists, and clears it only once those items are deleted, so the
// caller sees the mark of every committed deletion listing name. A lease
// written in place can be read torn while its holder writes it: Inspect
// reads again then; one that stays unreadable is read as redoPending reads
// it, without marks (a corrupt lease is free, and the next holder writes a
// new one), so that it cannot fail the acks of the instance's items for
// good. Other commits' marks (an orchestration ack of the instance between
// its commit point and its apply) say their kind and are passed over.
func (p *FSProvider) deletionCommitted(ctx context.Context, key, name string) (bool, error) {
	if key == "" {
		return false, nil // an item with no instance key: no deletion lists it
	}
	if _, err := p.fs.Stat(p.deletingPath(key)); vfs.IsNotExist(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	l, exists, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key))
	if errors.Is(err, lease.ErrCorrupt) && !errors.Is(err, vfs.ErrSymlink) {
		return false, nil
	}
	if err != nil || !exists {
		return false, err
	}
	// A mark is always encoded under one of these two names.
	if !bytes.Contains(l.Data, []byte(`"pending"`)) && !bytes.Contains(l.Data, []byte(`"queued"`)) {
		return false, nil
	}
	var st struct {
		Pending *pendingMark  `json:"pending"`
		Queued  []pendingMark `json:"queued"`
	}
	if json.Unmarshal(l.Data, &st) != nil {
		return false, nil // as decodeOrchState reads it: no marks
	}
	for _, mark := range append(derefMark(st.Pending), st.Queued...) {
		if !deletionMark(mark) {
			continue
		}
		lr, err := p.findRecord(key, &mark)
		if err != nil {
			return false, err
		}
		if lr == nil || lr.rec.Kind != kindDelete {
			continue
		}
		for _, mem := range lr.rec.Members {
			for _, r := range mem.Delete {
				if mem.Key == key && r.Queue == "worker" && r.Name == name {
					return true, nil
				}
			}
		}
	}
	return false, nil
}
