package fsqueue

import (
	"io/fs"

	"github.com/durofs/durofs/internal/vfs"
)

// Recycler lends a queue spare files to write claims and staged messages
// into, and takes back the files of removed messages and claims, so that a
// steady stream of messages allocates and frees no inodes. (On ext4
// without a journal every inode allocation scans past each inode freed in
// the last minute; with one create and one unlink per message and per
// claim, that was the largest CPU cost of a busy queue.) Set it in
// [Options.Recycler]; nil means every write creates a file and every
// removal unlinks it.
//
// Every spare path must be on the queue's file system and outside the
// queue's directories. The recycler decides when a spare may be
// overwritten; the rule it must keep is Hold's.
type Recycler interface {
	// Get returns a spare path for one write. The file may not exist (it
	// is then created); if it does, its content is garbage nobody reads.
	Get() string
	// Put gives back a spare from Get, or a name from Retire, that may be
	// handed out again at once. hasFile is false if the name has no file
	// any more (the write renamed it into the queue, or a retire's rename
	// did not happen), true if it may have one (a write that failed).
	Put(spare string, hasFile bool)
	// Retire returns a spare name that has no file, to move a removed
	// message or claim into instead of unlinking it; "" means unlink it
	// (the recycler has spares enough).
	Retire() string
	// Hold gives back a spare that now names an inode just moved out of a
	// queue path - by a claim replace (an exchange) or a removal (a rename
	// to a name from Retire). Nothing may overwrite it until that move is
	// durable: a power loss before then could leave the queue path naming
	// the inode again, with the new content. The recycler hands it out
	// again only then (for example, after the next file-system barrier
	// that starts once Hold was called).
	Hold(spare string)
}

// replaceClaim atomically replaces a claim file with data. Without a
// recycler it is a temporary-file replace ([vfs.WriteFile], or
// [vfs.WriteFileAfterBarrier] if barrier is not nil); with one it is
// [vfs.ReplaceVia] through a spare, whose old claim inode the recycler
// holds until the swap is durable. fsys is q.fsys or its NoSync view
// (VolatileClaims).
func (q *Queue) replaceClaim(fsys vfs.FS, path string, data []byte, barrier, syncDir func() error) error {
	r := q.opts.Recycler
	if r == nil {
		if barrier != nil {
			return vfs.WriteFileAfterBarrier(fsys, path, data, barrier, syncDir)
		}
		return vfs.WriteFile(fsys, path, data)
	}
	spare := r.Get()
	kept, err := vfs.ReplaceVia(fsys, spare, path, data, barrier, syncDir)
	if kept {
		r.Hold(spare)
	} else {
		r.Put(spare, err != nil)
	}
	return err
}

// writeStaged writes a staged message file (a fresh name): without a
// recycler with [vfs.WriteNew] (synced) or its NoSync view, or as a
// temporary file renamed into place ([vfs.WriteFileNoDirSync]) when
// viaTemp; with one through a spare ([vfs.MoveVia], fsynced if sync).
// Either way nothing syncs the directory.
func (q *Queue) writeStaged(path string, data []byte, sync, viaTemp bool) error {
	r := q.opts.Recycler
	if r == nil {
		switch {
		case viaTemp:
			return vfs.WriteFileNoDirSync(q.fsys, path, data)
		case sync:
			return vfs.WriteNew(q.fsys, path, data)
		default:
			return vfs.WriteNew(vfs.NoSync(q.fsys), path, data)
		}
	}
	spare := r.Get()
	err := vfs.MoveVia(q.fsys, spare, path, data, sync)
	r.Put(spare, err != nil) // consumed (no file left), or garbage
	return err
}

// removeFile removes a message or claim file (see RemoveVia).
func (q *Queue) removeFile(path string) error { return RemoveVia(q.fsys, q.opts.Recycler, path) }

// RemoveVia removes the file path: with a recycler r it moves the file to a
// spare name instead (held until the removal is durable); with a nil r, or
// when r has spares enough, it unlinks it. Like an unlink, the rename needs
// a SyncDir of path's directory to be durable. A missing file gives an
// error wrapping fs.ErrNotExist. Queues use it for messages and claims;
// callers with files of their own to remove on the same file system may
// share a recycler this way.
func RemoveVia(fsys vfs.FS, r Recycler, path string) error {
	if r != nil {
		if spare := r.Retire(); spare != "" {
			err := fsys.Rename(path, spare)
			if err == nil {
				r.Hold(spare)
				return nil
			}
			r.Put(spare, false)
			if vfs.IsNotExist(err) {
				return err
			}
			// Whatever stopped the move (a spare directory we cannot
			// write, say) need not stop the removal.
		}
	}
	return fsys.Remove(path)
}

// readMessageFile reads a message or staged file. Message names are never
// reused and files are replaced by nothing, so a path that stops naming
// the inode that was read has been removed - and with a recycler that
// inode may have been overwritten with another file while it was read:
// that read reports fs.ErrNotExist ([vfs.ReadStable]).
func (q *Queue) readMessageFile(path string) ([]byte, error) {
	data, moved, err := vfs.ReadStable(q.fsys, path)
	if err != nil {
		return nil, err
	}
	if moved {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fs.ErrNotExist}
	}
	return data, nil
}
