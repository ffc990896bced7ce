package fsqueue

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/internal/vfs"
)

// A Recycler keeps the inodes of removed message and claim files for new
// ones, so that a busy queue neither allocates nor frees an inode per
// message. Queues opened with the same Recycler ([Options].Recycler) share
// its pool: one directory on the queues' file system.
//
// Why: on ext4 without a journal, creating a file scans past every inode of
// its block group freed in the last minute or more (the allocator will not
// reuse an inode whose deletion may not be on disk yet), so a queue that
// creates and unlinks three files per message makes every later creation
// slower, and its throughput falls as its own work goes on (BENCHMARKS.md,
// "recycled files").
//
// # Layout
//
//	<dir>/<boot id>/<uuid>        a pooled file: any content, at most recycleMaxSize bytes
//	<dir>/<boot id>/.p-<uuid>     a removed file waiting for its removal to be durable ([Recycler.Promote])
//	<dir>/<boot id>/.w-<uuid>     a pooled file being written by a take (see below)
//
// # The rules, and why they make recycling invisible
//
//  1. Only files whose name never comes back are recycled: a message file
//     (names are unique, and a consumed message is written again only by a
//     replay, which runs alone) and the claim of a message that is gone (a
//     claim is written only under its message's lock, which needs the
//     message file). So a reader that opened such a file just before it was
//     recycled, and read another file's bytes, finds the path gone: it
//     reports the file as gone, never as damaged ([Queue.Get], claims).
//  2. A file is written again only once the removal of its old name is
//     durable. A removed file waits under a private name (.p-) until the
//     remover's [Recycler.Promote] has fsynced the directory it was removed
//     from. Without that, a power loss could keep the old name (its
//     directory never synced) while the file's new bytes, or its new name
//     in another directory, reached the disk: the old name would come back
//     holding another file's bytes, or two live names would share one
//     inode, and a later take would overwrite both. Promote runs in the
//     background (the provider's, every 100 ms), never on an ack's path.
//  3. A take renames a pooled file to a private name in the pool (of two
//     processes, one gets it), writes it there, and only then renames it to
//     its target. The target never holds another file's bytes or a partial
//     write, and its modification time is that of the write: sweepers that
//     judge a staged file's age by it never see an old one.
//  4. A pool is used only in the boot it was filled in. A power loss can
//     leave a taken inode with two names (the take's rename durable in the
//     target directory and not in the pool): writing into it would
//     overwrite a live file. The pool directory is named by the boot id;
//     pools of other boots are removed by unlinking their names, never
//     written into. Without a boot id (no Linux, no simulated machine)
//     nothing is recycled.
//  5. Bounded: a Recycler holds at most maxPooled files that it knows of
//     (pooled and waiting together), only regular files of at most
//     recycleMaxSize bytes, and [NewRecycler] trims its boot's pool to
//     maxPooled files and removes private files older than a minute (left
//     by a killed take, or by a process that never promoted them).
//  6. A taken file nobody holds an flock on. A message file is its own
//     lock, and an ack removes (recycles) its message before it unlocks; a
//     process stopped in between (SIGSTOP, a frozen cgroup) still holds
//     the inode's flock, which would lock whatever message was written into
//     it. A take tries the lock first and gives a held file back, so a
//     stopped process holds up only its own message, as without recycling.
//     (A process that opened a message's old name and waits for its lock
//     takes it for an instant to see the name gone; stopped in that
//     instant, it holds up the new message until it continues.)
//
// Only Promote syncs anything: a pooled file holds no data anyone reads,
// and a new message's file is made durable by its own fsync and its
// directory's, as without recycling.
type Recycler struct {
	fsys vfs.FS
	dir  string // <dir>/<boot id>; "" when recycling is off
	log  *slog.Logger

	mu   sync.Mutex
	rand io.Reader // names and listing starts; read under mu
	// names are pooled files this process knows of, oldest first (another
	// process may take one first); waiting are the files it removed that
	// wait for Promote (rule 2).
	names   []string
	waiting []waitingFile
	// skip counts takes left to try without listing the pool, after a
	// listing found it empty.
	skip int
	// syncs counts Promote's directory fsyncs (Syncs).
	syncs atomic.Int64
}

// waitingFile is a removed file under its .p- name in the pool, and the
// directory it was removed from.
type waitingFile struct{ name, from string }

const (
	// maxPooled bounds the files a Recycler holds (pooled and waiting).
	maxPooled = 1024
	// recycleMaxSize: larger files are unlinked, not pooled (a pooled file
	// keeps its blocks).
	recycleMaxSize = 16 << 10
	// skipAfterEmpty is how many takes go without a listing of the pool
	// after one found it empty.
	skipAfterEmpty = 64
	// takingPrefix names a pooled file being written by a take, and
	// waitingPrefix a removed file waiting for Promote.
	takingPrefix  = ".w-"
	waitingPrefix = ".p-"
	// staleTaking is the age at which NewRecycler removes a private file: a
	// take's left by a killed process (a take holds it for microseconds),
	// or a waiting file of a process that died or stopped promoting.
	staleTaking = time.Minute
)

// RecyclerOptions configures [NewRecycler].
type RecyclerOptions struct {
	// BootID returns the running boot's id (Linux:
	// /proc/sys/kernel/random/boot_id); if it is nil or fails, the
	// Recycler recycles nothing (and removes nothing).
	BootID func() (string, error)
	// Logger receives debug messages; nil means slog.Default().
	Logger *slog.Logger
	// Rand, if set, is the source of the pooled files' names and of where
	// a process starts in a listing of the pool; nil means crypto/rand.
	// Tests set a seeded source so that a run repeats exactly.
	Rand io.Reader
}

// NewRecycler returns a Recycler whose pool is dir/<boot id>, creating it,
// after removing the pools of other boots and trimming this boot's. dir
// must be on the queues' file system and used for nothing else.
func NewRecycler(fsys vfs.FS, dir string, opts RecyclerOptions) (*Recycler, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	r := &Recycler{fsys: fsys, log: logger, rand: opts.Rand}
	if r.rand == nil {
		r.rand = rand.Reader
	}
	if opts.BootID == nil {
		return r, nil
	}
	boot, err := opts.BootID()
	if err != nil || boot == "" || strings.ContainsAny(boot, `/\`) || boot == "." || boot == ".." {
		logger.Debug("fsqueue: no boot id: files are not recycled", "dir", dir, "err", err)
		return r, nil
	}
	if err := fsys.MkdirAll(filepath.Join(dir, boot), vfs.DirPerm); err != nil {
		return nil, fmt.Errorf("fsqueue: recycler %s: %w", dir, err)
	}
	boots, err := fsys.ReadDirNames(dir)
	if err != nil {
		return nil, fmt.Errorf("fsqueue: recycler %s: %w", dir, err)
	}
	for _, b := range boots {
		if b == boot {
			continue
		}
		// Rule 4: unlink the names, never write into the files.
		if err := fsys.RemoveAll(filepath.Join(dir, b)); err != nil && !vfs.IsNotExist(err) {
			return nil, fmt.Errorf("fsqueue: recycler %s: remove the pool of boot %s: %w", dir, b, err)
		}
	}
	r.dir = filepath.Join(dir, boot)
	if err := r.trim(time.Now()); err != nil {
		return nil, err
	}
	return r, nil
}

// trim keeps at most maxPooled files in the pool and removes stale private
// files (rule 5).
func (r *Recycler) trim(now time.Time) error {
	names, err := r.fsys.ReadDirNames(r.dir)
	if err != nil {
		return fmt.Errorf("fsqueue: recycler %s: %w", r.dir, err)
	}
	kept := 0
	for _, n := range names {
		p := filepath.Join(r.dir, n)
		if private(n) {
			// ChangeTime: the rename that gave the private name sets it
			// (its ModTime is the old file's until a take's write).
			if fi, err := r.fsys.Lstat(p); err == nil && now.Sub(vfs.ChangeTime(fi)) > staleTaking {
				_ = r.fsys.Remove(p)
			}
			continue
		}
		if kept++; kept > maxPooled {
			if err := r.fsys.Remove(p); err != nil && !vfs.IsNotExist(err) {
				return fmt.Errorf("fsqueue: recycler %s: trim: %w", r.dir, err)
			}
		}
	}
	return nil
}

// on reports whether r recycles at all.
func (r *Recycler) on() bool { return r != nil && r.dir != "" }

// newNameLocked returns a fresh name for a file in the pool; r.mu is held.
func (r *Recycler) newNameLocked() string {
	u, err := uuid.NewRandomFromReader(r.rand)
	if err != nil {
		u = uuid.New()
	}
	return u.String()
}

// Pooled returns how many pooled files this process knows of, ready to be
// taken (for tests and metrics; another process may have taken some).
func (r *Recycler) Pooled() int {
	if !r.on() {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.names)
}

// Syncs returns how many directory fsyncs [Recycler.Promote] has made (for
// metrics: they are the only syncs recycling costs).
func (r *Recycler) Syncs() int64 {
	if r == nil {
		return 0
	}
	return r.syncs.Load()
}

// Waiting returns how many files this process removed that wait for
// [Recycler.Promote].
func (r *Recycler) Waiting() int {
	if !r.on() {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}

// remove removes path, a file that rule 1 allows to recycle: it moves it
// into the pool to wait for Promote if it can, and unlinks it if not. Its
// errors are those of Remove (a missing file is a "not exist" error).
func (r *Recycler) remove(fsys vfs.FS, path string) error {
	if !r.on() {
		return fsys.Remove(path)
	}
	fi, err := fsys.Lstat(path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	full := len(r.names)+len(r.waiting) >= maxPooled
	name := waitingPrefix + r.newNameLocked()
	r.mu.Unlock()
	if full || !fi.Mode().IsRegular() || fi.Size() > recycleMaxSize {
		return fsys.Remove(path)
	}
	err = fsys.Rename(path, filepath.Join(r.dir, name))
	if err != nil && vfs.IsNotExist(err) {
		if _, serr := fsys.Lstat(path); serr != nil {
			return err // path itself is gone: removed by someone else
		}
		// The pool directory is gone (removed by hand): unlink.
		return fsys.Remove(path)
	}
	if err != nil {
		// Another file system (EXDEV), a full directory...: unlink.
		r.log.Debug("fsqueue: not recycled", "path", path, "err", err)
		return fsys.Remove(path)
	}
	r.mu.Lock()
	r.waiting = append(r.waiting, waitingFile{name: name, from: filepath.Dir(path)})
	r.mu.Unlock()
	return nil
}

// Promote makes the files this process removed since the last Promote
// available for reuse: it fsyncs every directory they were removed from,
// in the order of their first removal, and then gives them pooled names
// (rule 2). Files whose directory's fsync failed are unlinked, never
// reused, and the error is returned: it is a failed fsync of a queue's
// directory, which the caller must treat as it treats any other (a
// removal, and any other change of that directory, may be lost). Call it
// in the background, off every acknowledgement's path; until it runs,
// removed files wait (at most maxPooled of them with the pooled ones).
func (r *Recycler) Promote() error {
	if !r.on() {
		return nil
	}
	r.mu.Lock()
	batch := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	var dirs []string
	failed := map[string]bool{}
	for _, w := range batch {
		if !slices.Contains(dirs, w.from) {
			dirs = append(dirs, w.from)
		}
	}
	var errs []error
	for _, d := range dirs {
		r.syncs.Add(1)
		if err := r.fsys.SyncDir(d); err != nil {
			failed[d] = true
			if !vfs.IsNotExist(err) { // a directory removed since: its files are just dropped
				errs = append(errs, fmt.Errorf("fsqueue: recycler: %w", err))
			}
		}
	}
	var promoted []string
	for _, w := range batch {
		from := filepath.Join(r.dir, w.name)
		if failed[w.from] {
			_ = r.fsys.Remove(from)
			continue
		}
		name := strings.TrimPrefix(w.name, waitingPrefix)
		if err := r.fsys.Rename(from, filepath.Join(r.dir, name)); err != nil {
			_ = r.fsys.Remove(from) // removed as stale by another process's NewRecycler
			continue
		}
		promoted = append(promoted, name)
	}
	r.mu.Lock()
	r.names = append(r.names, promoted...)
	if len(promoted) > 0 {
		r.skip = 0 // the pool is not empty any more
	}
	r.mu.Unlock()
	return errors.Join(errs...)
}

// pop returns a pooled file's name, listing the pool when r knows of none
// (and it has not found it empty in the last skipAfterEmpty takes).
func (r *Recycler) pop() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.names) == 0 {
		if r.skip > 0 {
			r.skip--
			return "", false
		}
		names, err := r.fsys.ReadDirNames(r.dir)
		if err != nil {
			r.skip = skipAfterEmpty
			return "", false
		}
		names = slices.DeleteFunc(names, private)
		if len(names) > 0 {
			// Processes that list the pool at once start at different
			// places.
			var b [4]byte
			if _, err := io.ReadFull(r.rand, b[:]); err != nil {
				b = [4]byte{}
			}
			k := int(binary.BigEndian.Uint32(b[:]) % uint32(len(names)))
			names = append(names[k:], names[:k]...)
		}
		if len(names) > maxPooled {
			names = names[:maxPooled]
		}
		r.names = names
		if len(names) == 0 {
			r.skip = skipAfterEmpty
			return "", false
		}
	}
	// The oldest first: its remover has long unlocked it (rule 6).
	n := r.names[0]
	r.names = r.names[1:]
	return n, true
}

// giveBack returns a taken file to the pool under its old name, as the
// newest (its flock was held: rule 6).
func (r *Recycler) giveBack(fsys vfs.FS, w, name string) {
	if err := fsys.Rename(w, filepath.Join(r.dir, name)); err != nil {
		_ = fsys.Remove(w)
		return
	}
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
}

// private reports whether a name in the pool is a take's or a waiting
// file's, not a pooled file.
func private(name string) bool {
	return strings.HasPrefix(name, takingPrefix) || strings.HasPrefix(name, waitingPrefix)
}

// errNoPooled: create found no pooled file to take.
var errNoPooled = errors.New("fsqueue: no pooled file")

// create makes path a file holding data, from a pooled inode (rule 3);
// errNoPooled if it took none (the caller creates a file). path must be a
// name that only this write creates (a staged message, a claim written
// under its message's lock): the last rename replaces what is there.
func (r *Recycler) create(fsys vfs.FS, path string, data []byte) error {
	if !r.on() {
		return errNoPooled
	}
	for tries, pops := 0, 0; tries < 4 && pops < 64; pops++ {
		name, ok := r.pop()
		if !ok {
			return errNoPooled
		}
		src := filepath.Join(r.dir, name)
		// Skip, without a rename that fails, a file another process took
		// since the listing (also keeps a run's mutating calls the same
		// whichever file it takes: the crash-point sweeps replay runs).
		if _, err := fsys.Lstat(src); err != nil {
			continue
		}
		tries++
		r.mu.Lock()
		w := filepath.Join(r.dir, takingPrefix+r.newNameLocked())
		r.mu.Unlock()
		if err := fsys.Rename(src, w); err != nil {
			if vfs.IsNotExist(err) {
				continue // another process took it
			}
			return errNoPooled
		}
		// A message file is its own lock, and an ack recycles its message
		// before it unlocks: if that process was stopped there, a message
		// written into the inode would be locked by it. Such a file goes
		// back to the pool (rule 6).
		u, ok, err := fsys.LockExisting(context.Background(), w, false)
		if err != nil || !ok {
			r.giveBack(fsys, w, name)
			continue
		}
		if err := u.Unlock(); err != nil {
			_ = fsys.Remove(w)
			continue
		}
		if err := overwrite(fsys, w, data); err != nil {
			_ = fsys.Remove(w)
			if vfs.IsNotExist(err) {
				return errNoPooled // w was removed as stale (see trim)
			}
			return err
		}
		if err := fsys.Rename(w, path); err != nil {
			_ = fsys.Remove(w)
			if vfs.IsNotExist(err) && !isMissingDir(fsys, path) {
				return errNoPooled // w was removed as stale (a take stopped for a minute)
			}
			return err
		}
		return nil
	}
	return errNoPooled
}

// isMissingDir reports whether path's directory does not exist.
func isMissingDir(fsys vfs.FS, path string) bool {
	_, err := fsys.Lstat(filepath.Dir(path))
	return vfs.IsNotExist(err)
}

// overwrite writes data over the start of the existing file path and cuts
// it to len(data), unsynced. (Not O_TRUNC: ext4 writes back a file
// truncated to zero when it is closed.)
func overwrite(fsys vfs.FS, path string, data []byte) error {
	f, err := fsys.OpenFile(path, os.O_WRONLY, vfs.FilePerm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
