package provider

// Fsck of the parent -> children index (children/, fs_reclaim.go): every
// instance whose record names a parent has its entry (checkChildEntry, with
// the instance, under its flock), and every entry names an instance whose
// record names that parent (scanChildren, each under the child's flock: its
// apply writes the entry and instance.json under it).

import (
	"context"
	"errors"
	"path/filepath"
	"sort"

	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// checkChildEntry checks that instance key, whose record names parent, has
// its entry in parent's children index (the caller holds key's flock).
func (r *fsckRun) checkChildEntry(key, parent string) {
	p := r.p
	path := filepath.Join(p.childrenDir(parent), key)
	_, err := p.fs.Lstat(path)
	if err == nil {
		return
	}
	if !vfs.IsNotExist(err) {
		r.ioError(path, err)
		return
	}
	f := r.add(FsckChildIndex, SeverityError, path, "instance %q names %q as its parent, but the children index of %q does not list it (list_children, get_instance_tree and deletions miss it)",
		instanceIDOf(key), parent, parent)
	f.Action = "fsck --repair adds the entry"
	if r.repair {
		r.fixed(f, p.addChild(parent, key), "added")
	}
}

// scanChildren checks that every entry of the children index names an
// instance whose record names the entry's parent.
func (r *fsckRun) scanChildren(ctx context.Context) error {
	p := r.p
	root := filepath.Join(p.dir, "children")
	parents, err := p.fs.ReadDirNames(root)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		r.ioError(root, err)
		return nil
	}
	sort.Strings(parents)
	for _, pk := range parents {
		if vfs.IsTemp(pk) {
			continue
		}
		dir := filepath.Join(root, pk)
		kids, err := p.fs.ReadDirNames(dir)
		if vfs.IsNotExist(err) {
			continue
		}
		if err != nil {
			r.ioError(dir, err)
			continue
		}
		sort.Strings(kids)
		for _, ck := range kids {
			if err := ctx.Err(); err != nil {
				return err
			}
			if vfs.IsTemp(ck) {
				continue
			}
			r.checkChildIndexEntry(ctx, pk, ck)
		}
		if r.repair { // an empty one is left by a crash in removeChild
			if err := p.rmdirIfEmpty(dir); err != nil {
				r.log.Warn("durofs fsck: an empty children directory stays", "path", dir, "err", err)
			}
		}
	}
	return nil
}

// checkChildIndexEntry checks the entry children/<pk>/<ck> under ck's
// flock. Without repair the flock is taken only if ck's lock file exists
// (looking creates nothing); a repair locks it anyway, so that no first
// ack of ck can write the entry between the check and the removal.
func (r *fsckRun) checkChildIndexEntry(ctx context.Context, pk, ck string) {
	p := r.p
	path := filepath.Join(p.dir, "children", pk, ck)
	var g *lease.Guard
	var err error
	if r.repair {
		g, err = p.lockInstance(ctx, ck)
	} else {
		g, _, err = p.lockExisting(ctx, ck, true)
	}
	if err != nil && !errors.Is(err, lease.ErrGone) {
		r.ioError(p.lockPath(ck), err)
		return
	}
	if g != nil {
		defer g.Unlock()
	}
	detail := ""
	f, ferr := p.readInstanceFile(ck)
	switch {
	case ferr != nil && !errors.Is(ferr, ErrCorrupt):
		r.ioError(p.instFilePath(ck), ferr)
		return
	case ferr != nil:
		return // unparseable: its own finding; its repair rebuilds the record
	case f == nil || f.Record == nil:
		detail = "no such instance (or it has no instance record)"
	case f.Record.ParentInstanceID == nil:
		detail = "its record names no parent"
	case instanceKey(*f.Record.ParentInstanceID) != pk:
		detail = "its record names parent " + *f.Record.ParentInstanceID
	default:
		return
	}
	fd := r.add(FsckChildIndex, SeverityError, path, "children index entry of instance %q under %q: %s", instanceIDOf(ck), instanceIDOf(pk), detail)
	fd.Action = "fsck --repair removes the entry"
	if r.repair {
		err := p.fs.Remove(path)
		if vfs.IsNotExist(err) {
			err = errVanished
		}
		r.fixed(fd, err, "removed")
		if rerr := p.reclaimIfEmpty(g, ck); rerr != nil { // locking may have created its directory
			r.log.Warn("durofs fsck: an empty instance directory stays", "key", ck, "err", rerr)
		}
	}
}
