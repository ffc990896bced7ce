package provider

// Instance directories: creating, locking and reclaiming them.
//
// An instance's directory instances/<key>/ exists while the instance does
// (or while something is on its way: a fetch of its start, a commit marked
// in its lease), and goes with it: deleting an instance (DeleteInstance and
// friends, DrainOrphanMessages, a go-workflows removal of its last
// execution) reclaims the directory, lock file included, so instances/
// holds only live instances. This is safe against a process that holds or
// is about to take the instance's flock because every lock is
// lock-then-verify (package lease, "Reclaiming a resource"): a waiter that
// was blocked on a lock file its holder removed finds the path no longer
// names it and locks again.
//
// The directory is born with its lock file and dies after it:
//
//   - lockInstance (a fetch, a replay, an append, a deletion, a go-workflows
//     operation: anything that may create the instance) makes the directory
//     and the lock file, locks, and verifies; a reclaimer removing them
//     meanwhile makes it start again.
//   - lockExisting (an ack, an abandon, a renew, a prune, a read, the
//     checkpoint and the sweep finishing a marked commit, fsck) creates
//     nothing: a missing lock file means there is no instance (lease.ErrGone).
//   - reclaimInstance, under the flock, once everything else of the
//     instance is gone: the deletion marker (fs_deleting.go), the lease
//     file (and with it the marks of the commit being applied), then the
//     lock file, then the directory (rmdir: a locker that came after the
//     lock file went may have made a new one there; then the directory is
//     its).
//
// So a directory without a lock file is empty (a crash between the lock
// file's removal and the rmdir, or between a creator's mkdir and its lock
// file), and one holding only its lock file, and perhaps a deletion marker
// (a crash between the lease's removal and the lock file's, or between the
// marker's and the lease's) is an instance with nothing: both are
// garbage that the next deletion of the id, the next creator, or fsck
// --repair removes. A reclaimed instance leaves no lease, so no token of it
// is accepted by a new instance of the same id, whose fences start again;
// commits of the old one can never be applied to the new one, because a
// record is applied only under the mark its own commit set (or by a replay,
// in log order, where the deletion's record comes between them).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// lockInstance takes the flock of instance key, creating its directory and
// lock file if need be, waiting until ctx is done.
func (p *FSProvider) lockInstance(ctx context.Context, key string) (*lease.Guard, error) {
	return p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
}

// multiLockWait bounds how long a caller that already holds instance
// flocks waits for the next one (lockNext).
const multiLockWait = claimWaitMax

// lockNext takes instance key's flock (creating its lock file, as
// lockInstance) for a caller that takes several in sorted order (so that
// two callers never deadlock) and already holds held of them. With none
// held it waits as long as ctx allows. With some held it waits at most
// multiLockWait: every holder keeps a flock for one short section (a
// fetch's look, an ack, a renewal), but one stopped inside it (SIGSTOP, a
// frozen cgroup) keeps it until it resumes, and waiting for it with other
// flocks held would stall every ack of those instances for as long
// (design.md §7). busy is then true (with a nil error): the caller lets
// everything go, waits for key alone (awaitFree), and starts again.
func (p *FSProvider) lockNext(ctx context.Context, key string, held int) (g *lease.Guard, busy bool, err error) {
	if held == 0 {
		g, err = p.lockInstance(ctx, key)
		return g, false, err
	}
	lctx, cancel := context.WithTimeout(ctx, multiLockWait)
	defer cancel()
	g, err = p.lockInstance(lctx, key)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, true, nil
	}
	return g, false, err
}

// awaitFree waits, holding no flock, until instance key's flock is free
// (or the instance is gone): what a caller of lockNext does after a busy
// flock, before it starts again.
func (p *FSProvider) awaitFree(ctx context.Context, key string) error {
	g, _, err := p.lockExisting(ctx, key, true)
	if errors.Is(err, lease.ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	return g.Unlock()
}

// tryLockInstance is lockInstance without waiting: ok is false if the flock
// is held.
func (p *FSProvider) tryLockInstance(key string) (*lease.Guard, bool, error) {
	return p.leases.TryLock(p.lockPath(key), p.leasePath(key))
}

// lockExisting takes the flock of instance key without creating anything:
// an error wrapping lease.ErrGone if the instance has no lock file. Without
// wait, ok is false if the flock is held.
func (p *FSProvider) lockExisting(ctx context.Context, key string, wait bool) (*lease.Guard, bool, error) {
	return p.leases.LockExisting(ctx, p.lockPath(key), p.leasePath(key), wait)
}

// reclaimInstance removes instance key's deletion marker (fs_deleting.go),
// lease file, lock file and directory, under its flock, once everything else
// of the instance is gone (see the top of this file). The lease goes before
// the lock file: it may mark the commit
// being applied, which is finished once nothing of the instance is left.
// A lock file or directory that cannot be removed leaves an empty instance
// (logged, not an error: the instance is gone); a lease file that cannot be
// removed is an error (the apply is not finished).
func (p *FSProvider) reclaimInstance(g *lease.Guard, key string) error {
	p.dropHeld(key)
	// The deletion marker before the lease: a deletion mark without the
	// marker is harmless once the items it lists are gone (fs_deleting.go).
	if err := p.fs.Remove(p.deletingPath(key)); err != nil && !vfs.IsNotExist(err) {
		return err
	}
	if err := g.RemoveLease(); err != nil {
		return err
	}
	failpoint.Hit("reclaim.after_lease")
	if err := g.Reclaim(); err != nil {
		p.log.Warn("durofs: the lock file of a deleted instance stays", "key", key, "err", err)
		return nil
	}
	failpoint.Hit("reclaim.after_lock")
	if err := p.rmdirIfEmpty(p.instDir(key)); err != nil {
		p.log.Warn("durofs: the directory of a deleted instance stays", "key", key, "err", err)
	}
	return nil
}

// rmdirIfEmpty removes the directory path if it is empty: one that is gone
// or not empty (someone put a file there since) is left without an error.
func (p *FSProvider) rmdirIfEmpty(path string) error {
	err := p.fs.Remove(path)
	if err == nil || vfs.IsNotExist(err) {
		return nil
	}
	if fi, serr := p.fs.Lstat(path); serr == nil && fi.IsDir() {
		if names, lerr := p.fs.ReadDirNames(path); lerr == nil && len(names) > 0 {
			return nil // not empty
		}
	}
	return err
}

// emptyInstance reports whether instance key's directory holds nothing of
// an instance (the caller holds its flock): only its lock file, and maybe a
// lease that nobody holds and that keeps no queue state and no mark (as
// deletions before directories were reclaimed left them).
func (p *FSProvider) emptyInstance(g *lease.Guard, key string) (bool, error) {
	names, err := p.fs.ReadDirNames(p.instDir(key))
	if err != nil {
		return false, err
	}
	for _, n := range names {
		switch n {
		case "lock", "deleting": // a marker with no deletion mark is stale
		case "lease.json":
			l, _, err := g.Read()
			if err != nil || l.Token != "" || len(l.Data) > 0 {
				return false, nil
			}
		default:
			return false, nil
		}
	}
	return true, nil
}

// reclaimIfEmpty reclaims instance key's directory if it holds nothing of
// an instance (the caller holds its flock): what a lock taken to look at an
// instance that does not exist, or a crash during a reclaim, leaves.
func (p *FSProvider) reclaimIfEmpty(g *lease.Guard, key string) error {
	if g.Reclaimed() {
		return nil
	}
	empty, err := p.emptyInstance(g, key)
	if err != nil || !empty {
		return err
	}
	return p.reclaimInstance(g, key)
}

// The parent -> children index.
//
// children/<parent key>/<child key> is an empty file for every instance
// whose instance record names a parent (a sub-orchestration, a go-workflows
// sub-workflow): ListChildren, GetInstanceTree and the orphan check of a
// deletion read the children of one instance there, and each child's
// instance.json, rather than every instance.json. The entry is written by
// the apply of the commit that gives the child's record its parent (the
// child's first ack with a record; a go-workflows commit that changes the
// current execution's parent) before that apply writes instance.json, and
// removed by the apply of the child's deletion after it removed
// instance.json, each under the child's flock and redone with it. So an
// instance.json naming a parent always has its entry; an entry whose child
// does not name that parent (a crash between the two writes, finished by
// the redo) is ignored by readers, who check each child's record. fsck
// reports a missing or extra entry and --repair rebuilds them.

// childrenDir is the index directory of the children of parent (an id).
func (p *FSProvider) childrenDir(parent string) string {
	return filepath.Join(p.dir, "children", instanceKey(parent))
}

// maxChildRetries bounds how often addChild recreates a children directory
// that a concurrent removeChild removed between its mkdir and its create.
const maxChildRetries = 100

// addChild makes sure the index names child key as a child of parent.
func (p *FSProvider) addChild(parent, key string) error {
	dir := p.childrenDir(parent)
	for try := 1; ; try++ {
		err := p.fs.MkdirAll(dir, vfs.DirPerm)
		if err == nil {
			var f vfs.File
			if f, err = p.fs.OpenFile(filepath.Join(dir, key), os.O_WRONLY|os.O_CREATE, vfs.FilePerm); err == nil {
				err = f.Close()
			}
		}
		if err == nil || !vfs.IsNotExist(err) || try == maxChildRetries {
			if err != nil {
				return fmt.Errorf("index child %s of %s: %w", key, parent, err)
			}
			return nil
		}
	}
}

// removeChild removes child key's entry under parent, and parent's index
// directory if it is empty then.
func (p *FSProvider) removeChild(parent, key string) error {
	dir := p.childrenDir(parent)
	if err := p.fs.Remove(filepath.Join(dir, key)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("unindex child %s of %s: %w", key, parent, err)
	}
	return p.rmdirIfEmpty(dir)
}

// childrenOf returns the children of instance parent, sorted by key: the
// index entries whose instance record names parent as its parent. Cost:
// one listing and one instance.json per entry.
func (p *FSProvider) childrenOf(parent string) ([]scannedInstance, error) {
	keys, err := p.fs.ReadDirNames(p.childrenDir(parent))
	if vfs.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keys = slices.DeleteFunc(keys, vfs.IsTemp)
	slices.Sort(keys)
	recs, err := p.readInstances(keys)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(recs, func(c scannedInstance) bool {
		return c.f.Record == nil || c.f.Record.ParentInstanceID == nil || *c.f.Record.ParentInstanceID != parent
	}), nil
}

// treeIDs returns root and all its descendants, breadth first, through the
// index.
func (p *FSProvider) treeIDs(root string) ([]string, error) {
	ids := []string{root}
	seen := map[string]bool{root: true}
	for i := 0; i < len(ids); i++ {
		kids, err := p.childrenOf(ids[i])
		if err != nil {
			return nil, err
		}
		for _, c := range kids {
			if !seen[c.f.Instance] {
				seen[c.f.Instance] = true
				ids = append(ids, c.f.Instance)
			}
		}
	}
	return ids, nil
}
