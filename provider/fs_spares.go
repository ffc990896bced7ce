package provider

// Recycled files: why a commit allocates no inode for its records.
//
// Three files change on every commit of an instance: its commit record
// (commits/<key>.json), instance.json, and the execution's state.json. An
// atomic replace - write a new temporary file, rename it over the target -
// allocates an inode and frees the old one each time. On ext4 without a
// journal (the benchmark machine: journal_task <none>) the inode allocator
// skips every inode freed in the last minute (find_inode_bit →
// recently_deleted, one buffer-cache lookup each), so under a steady commit
// rate each allocation scanned thousands of them: a third of all CPU at 4
// processes went to openat2(O_CREAT), and replaces in tmp/ ran at ~3,000/s
// where exchanging a recycled inode runs at ~19,000/s (BENCHMARKS.md).
//
// So these files are replaced with vfs.ReplaceVia: the new content goes to a
// spare file of this process's pool (tmp/.spare-<pool>-<n>), which is then
// exchanged with the target (renameat2 RENAME_EXCHANGE); the target's old
// inode becomes the spare for the next replace, of any file. Where the file
// system cannot exchange (not Linux, or a file system without the flag) the
// pool is nil and replaces are the plain temporary-file kind.
//
// Crash safety is the replace's as before - the target names the old or the
// new complete content, never a mix - plus one rule, because the next
// replace overwrites the inode that a swap moved away, and on disk the
// target may still name that inode until the swap's directory entry is
// written: a spare goes back to the pool only once the swap is durable or
// something that redoes it is sure to outlive the overwrite.
//   - Commit records: the swap is followed by the fsync of commits/ (both
//     modes) before the spare returns to the pool.
//   - instance.json and state.json in per-file mode: the apply fsyncs the
//     target's directory before returning the spare.
//   - instance.json and state.json in barrier mode: nothing is synced, but
//     the swap is part of an apply whose commit record stays in commits/
//     until a barrier that started after the apply finished has completed
//     (the cleaner; a later commit of the instance runs its own barrier
//     first). If the spare's inode is overwritten before that barrier, a
//     power loss may leave the target naming it on disk - but the record
//     is still there, and recovery applies it again, rewriting the target.
//     If it is overwritten after that barrier, the barrier made the swap
//     durable first: on disk the target no longer names that inode.
//
// Readers without the instance lock. Writers hold the instance's flock;
// the admin API and inspection read instance.json and state.json (and
// inspection the commit record) without it. Such a reader may open the old
// inode just before a swap and still be reading when a later replace
// overwrites it as a spare - with the next version of the same file or with
// another instance's file. Every write of these files is therefore sealed
// (internal/seal: a CRC-32C over the file's path below the directory and its
// content) and every read checks the seal, retrying a mismatch a few times
// (the overwrite that caused it takes microseconds); a file that still
// mismatches is corrupt. A file without a seal (written by a durofs before
// this change) is read as before.

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/seal"
	"github.com/durofs/durofs/internal/vfs"
)

// sealID is the identity a file is sealed with: its slash-separated path
// below the data directory (so moving the directory keeps seals valid).
func (p *FSProvider) sealID(path string) string {
	rel, err := filepath.Rel(p.dir, path)
	if err != nil {
		return filepath.ToSlash(path)
	}
	return filepath.ToSlash(rel)
}

// sealJSON seals data (a compact JSON object from jsonMarshal) for path.
func (p *FSProvider) sealJSON(path string, data []byte) ([]byte, error) {
	return seal.Seal(p.sealID(path), data)
}

// marshalSealed encodes v (a struct: a JSON object) sealed for path, for
// the writers of recycled files that replace them by rename (deletion
// intents, prune, fsck repairs): an inode they write may later enter the
// spare pool, so its content must be sealed too.
func (p *FSProvider) marshalSealed(path string, v any) ([]byte, error) {
	data, err := jsonMarshal(v)
	if err != nil {
		return nil, err
	}
	return p.sealJSON(path, data)
}

// replaceSealed atomically replaces path with data sealed for it, through
// fsys (p.fs, or an apply's NoSync view in barrier mode). With a spare pool
// it recycles inodes (vfs.ReplaceVia, see above); barrier and syncDir are
// ReplaceVia's: with a barrier the new content is made durable by it instead
// of an fsync; syncDir (nil: fsys.SyncDir) must make the swap durable
// before the spare may be reused, unless the caller's commit record
// guarantees a redo (the barrier-mode apply). Without a pool it is a
// temporary-file replace (in tmp/, or beside path after a barrier).
func (p *FSProvider) replaceSealed(fsys vfs.FS, path string, data []byte, barrier, syncDir func() error) error {
	sealed, err := p.sealJSON(path, data)
	if err != nil {
		return err
	}
	if !p.spares.Enabled() {
		if barrier != nil {
			return vfs.WriteFileAfterBarrier(fsys, path, sealed, barrier, syncDir)
		}
		return vfs.WriteFileVia(fsys, p.tmpDir, path, sealed)
	}
	spare := p.spares.Get()
	kept, err := vfs.ReplaceVia(fsys, spare, path, sealed, barrier, syncDir)
	if kept || err != nil {
		p.spares.Put(spare)
	} else {
		p.spares.PutEmpty(spare)
	}
	return err
}

// sealReadAttempts bounds how often a read whose seal does not match is
// retried before the file is called corrupt; sealRetryDelay is the pause
// between attempts. A mismatch from a concurrent overwrite clears in
// microseconds; one that persists is damage.
const (
	sealReadAttempts = 8
	sealRetryDelay   = 200 * time.Microsecond
)

// errUnsealedJSON marks an unsealed file that is not valid JSON: possibly a
// torn read of a recycled inode (a prefix of the next write), so it is
// retried like a mismatch.
var errUnsealedJSON = errors.New("not valid JSON")

// readSealed reads path and checks its seal, returning the JSON object
// without it. A file without a seal is returned as it is. A seal that keeps
// failing, or content that keeps failing to be JSON, gives an error
// wrapping ErrCorrupt (and seal.ErrMismatch for a bad seal); I/O errors are
// returned as they are (fs.ErrNotExist included).
//
// A read is retried, too, if path no longer names the inode that was read
// once the read is done: a reader that stalled between open and read
// through a whole commit of the instance could otherwise return a version
// written into that inode as a spare before its swap - genuine, sealed,
// but not yet (or no longer) the file's content.
func (p *FSProvider) readSealed(path string) ([]byte, error) {
	id := p.sealID(path)
	var last error
	for attempt := 0; attempt < sealReadAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(sealRetryDelay)
		}
		data, swapped, err := vfs.ReadStable(p.fs, path)
		if err != nil {
			return nil, err
		}
		if swapped {
			last = errSwapped
			continue
		}
		obj, sealed, err := seal.Open(id, data)
		switch {
		case err != nil:
			last = err
		case !sealed && !json.Valid(obj):
			last = errUnsealedJSON
		default:
			return obj, nil
		}
	}
	return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, last)
}

// errSwapped: the file kept being replaced while it was read.
var errSwapped = errors.New("replaced while being read")

// queueRecycler lends the queues this process's spare pool in barrier mode
// and in ProcessCrashSafe mode (fsqueue.Recycler): claims are replaced
// through spares, staged messages are written into spares, and removed
// messages and claims become spares instead of being unlinked, so a chain
// turn allocates no inode for them.
//
// The rule of fsqueue.Recycler.Hold - an inode moved out of a queue path
// is not overwritten until the move is durable - is kept with the barrier:
// a held spare is handed out again only once a barrier that started after
// the move has completed (covered). Without that, a power loss could leave
// the old queue path naming the inode with new content: a removed message
// back as another message's bytes, or a claim path naming a commit record.
// Barriers run for every commit, and the cleaner runs one when none did,
// so a spare is held for milliseconds under load. In ProcessCrashSafe mode
// (no barrier) nothing survives a power loss anyway, and a kill -9 leaves
// every completed rename in place, so a held spare is reusable at once.
// (Durable per-file mode does not recycle queue files.)
//
// The pool keeps at most maxIdleSpares files; beyond that removals unlink,
// so a process that consumes more than it produces does not hoard inodes.
type queueRecycler struct {
	pool    *vfs.SparePool
	barrier *groupBarrier

	mu   sync.Mutex
	held []heldSpare // in Hold order
}

// heldSpare is a spare waiting for a barrier after epoch.
type heldSpare struct {
	path  string
	epoch uint64
}

// maxIdleSpares bounds the spare files a process keeps (held or idle).
const maxIdleSpares = 256

// Get implements fsqueue.Recycler.
func (r *queueRecycler) Get() string {
	r.release()
	return r.pool.Get()
}

// Put implements fsqueue.Recycler.
func (r *queueRecycler) Put(spare string, hasFile bool) {
	if hasFile {
		r.pool.Put(spare)
	} else {
		r.pool.PutEmpty(spare)
	}
}

// Retire implements fsqueue.Recycler.
func (r *queueRecycler) Retire() string {
	r.release()
	r.mu.Lock()
	n := len(r.held)
	r.mu.Unlock()
	if n+r.pool.Idle() >= maxIdleSpares {
		return ""
	}
	return r.pool.Reserve()
}

// Hold implements fsqueue.Recycler: the move that made spare is complete,
// so a barrier that starts after this epoch makes it durable.
func (r *queueRecycler) Hold(spare string) {
	if r.barrier == nil {
		r.pool.Put(spare) // ProcessCrashSafe: see the type's comment
		return
	}
	epoch := r.barrier.epoch()
	r.mu.Lock()
	r.held = append(r.held, heldSpare{spare, epoch})
	r.mu.Unlock()
}

// release hands the held spares that a barrier covers to the pool.
func (r *queueRecycler) release() {
	if r.barrier == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.held {
		if r.barrier.covered(h.epoch) {
			r.pool.Put(h.path)
			continue
		}
		r.held[n] = h
		n++
	}
	clear(r.held[n:])
	r.held = r.held[:n]
}

// recyclerOrNil returns p.recycler as an fsqueue.Recycler, or a nil
// interface (not a typed nil) when there is none.
func (p *FSProvider) recyclerOrNil() fsqueue.Recycler {
	if p.recycler == nil {
		return nil
	}
	return p.recycler
}
