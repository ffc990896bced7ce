package vfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrNoExchange is returned by [Exchange] when a file system cannot swap two
// names atomically.
var ErrNoExchange = errors.New("vfs: atomic exchange (renameat2 RENAME_EXCHANGE) not supported")

// Exchanger is implemented by file systems that can swap two existing names
// atomically (renameat2(2) with RENAME_EXCHANGE on Linux; ext4, xfs, btrfs
// and tmpfs support it). Like Rename it changes only directory entries:
// it makes nothing durable and needs a SyncDir of each directory involved.
type Exchanger interface {
	// Exchange atomically swaps the inodes that a and b name. Both must
	// exist (fs.ErrNotExist otherwise). It returns an error wrapping
	// [ErrNoExchange] where the file system cannot do it.
	Exchange(a, b string) error
}

// Exchange calls fsys's [Exchanger.Exchange], or returns [ErrNoExchange].
func Exchange(fsys FS, a, b string) error {
	x, ok := fsys.(Exchanger)
	if !ok {
		return ErrNoExchange
	}
	return x.Exchange(a, b)
}

// Exchange implements [Exchanger] by asking the wrapped FS.
func (n noSyncFS) Exchange(a, b string) error { return Exchange(n.FS, a, b) }

// Exchange implements [Exchanger] by asking the wrapped FS.
func (c *CountingFS) Exchange(a, b string) error { return Exchange(c.FS, a, b) }

// exchangeUnsupported maps the errors with which renameat2 says "not on this
// file system" (EINVAL, EOPNOTSUPP, ENOSYS) to ErrNoExchange.
func exchangeUnsupported(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) && (errno == syscall.EINVAL || errno == syscall.ENOSYS || errno == syscall.EOPNOTSUPP) {
		return fmt.Errorf("%w: %w", ErrNoExchange, err)
	}
	return err
}

// SparePrefix starts the name of every spare file of a [SparePool].
const SparePrefix = ".spare-"

// IsSpare reports whether a directory entry is a spare file of a [SparePool].
func IsSpare(name string) bool { return strings.HasPrefix(name, SparePrefix) }

// ReplaceVia atomically replaces path with data by way of the file spare:
// it overwrites spare with data, makes it durable (barrier, if not nil,
// else File.Sync) and swaps spare and path with [Exchange]. The inode that
// path named before is left at spare, ready to be overwritten by the next
// call, so a stream of replaces allocates and frees no inodes. (On ext4
// without a journal - this project's benchmark machine - every inode
// allocation scans past each inode freed in the last minute, which made
// create-write-rename replaces the largest single CPU cost of a commit.)
// Where path does not exist yet, or the file system cannot exchange, spare
// is renamed to path instead and kept is false: the spare is gone and the
// next call creates a new one. Finally path's directory is fsynced
// (syncDir, or fsys.SyncDir if nil); spare's directory is not: after a power
// loss, a spare may still name any inode it named since its directory was
// last synced, which is harmless, since nobody reads spares.
//
// The caller must be the only writer of both spare and path for the call.
//
// Crash analysis: until the exchange, path names its old inode, whose data
// is untouched (spare is a different inode), and spare holds garbage. After
// the exchange a kill -9 leaves the new content at path (the swap is one
// kernel operation). A power loss before the directory fsync may leave the
// old or the new entry; both inodes' data was made durable before the swap
// - the old one when it was written through its own call, the new one by the
// barrier or fsync above - so path is never a mix or empty. But the next call
// overwrites the inode that was moved to spare, and that inode may still be
// path's on disk if the directory entry of the swap has not reached the disk
// yet. Callers therefore pass a spare to the next call only once the swap
// is durable (this call's syncDir) or once whatever redoes the swap (a
// commit record) is sure to outlive the overwrite; see provider/fs_spares.go.
//
// Readers that do not hold the writer's lock can open path's old inode
// just before the swap and read it while a later call overwrites it as a
// spare; they must detect that (the provider seals such files with a
// checksum over their identity; see internal/seal).
func ReplaceVia(fsys FS, spare, path string, data []byte, barrier, syncDir func() error) (kept bool, err error) {
	for attempt := 0; ; attempt++ {
		kept, err = replaceVia(fsys, spare, path, data, barrier)
		if !errors.Is(err, errSpareLost) || attempt > 0 {
			break
		}
		// A sweeper removed the spare while we wrote it (it looked
		// abandoned): write a new one. Nothing was published.
	}
	if err != nil {
		return false, fmt.Errorf("vfs: write %s: %w", path, err)
	}
	if syncDir == nil {
		syncDir = func() error { return fsys.SyncDir(filepath.Dir(path)) }
	}
	if err := syncDir(); err != nil {
		return kept, fmt.Errorf("vfs: write %s: sync dir: %w", path, err)
	}
	return kept, nil
}

var errSpareLost = errors.New("spare file removed while in use")

// writeSpare overwrites spare (creating it if needed) with data, fsynced
// if syncFile. A spare that is not a regular file we may write (a symlink
// planted in its place) is removed and created afresh.
func writeSpare(fsys FS, spare string, data []byte, syncFile bool) error {
	f, err := fsys.OpenFile(spare, os.O_WRONLY|os.O_CREATE, FilePerm)
	if errors.Is(err, ErrSymlink) {
		if rerr := fsys.Remove(spare); rerr != nil && !IsNotExist(rerr) {
			return err
		}
		f, err = fsys.OpenFile(spare, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FilePerm)
	}
	if err != nil {
		return err
	}
	// Overwrite, then cut: the inode keeps its blocks when the new content
	// is no longer than the old (no block freed and allocated again).
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Truncate(int64(len(data)))
	}
	if werr == nil && syncFile {
		// An fsync error is fatal to this write (fsyncgate): never retried.
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// MoveVia writes data to path, a name that does not exist yet, by way of
// the file spare: it overwrites spare with data (fsynced if syncFile) and
// renames it to path, so that a stream of new files written this way
// allocates no inodes while the spares it uses are inodes that other files
// left (see [ReplaceVia] and [SparePool.Reserve]). After it, spare names no
// file. Nothing else is synced: the caller makes the rename durable (a
// directory fsync, or a file-system barrier that covers the unsynced data
// as well).
//
// The caller must be the only writer of spare, and path must be a fresh
// name: an existing file there would be replaced (and its inode freed).
//
// Crash analysis: before the rename path does not exist and spare holds
// garbage. After it, a kill -9 leaves path complete. A power loss before
// the caller's sync may leave path missing, or - with syncFile false, and
// before a barrier - naming the spare's inode with any mix of its old and
// new content: callers give path a role only through something written and
// made durable after it (a commit record), as for [WriteNew].
func MoveVia(fsys FS, spare, path string, data []byte, syncFile bool) error {
	for attempt := 0; ; attempt++ {
		if err := writeSpare(fsys, spare, data, syncFile); err != nil {
			return fmt.Errorf("vfs: write %s: %w", path, err)
		}
		err := fsys.Rename(spare, path)
		if err == nil {
			return nil
		}
		if !IsNotExist(err) || attempt > 0 {
			return fmt.Errorf("vfs: write %s: %w", path, err)
		}
		// A sweeper removed the spare while we wrote it: write a new one.
	}
}

func replaceVia(fsys FS, spare, path string, data []byte, barrier func() error) (bool, error) {
	werr := writeSpare(fsys, spare, data, barrier == nil)
	if werr == nil && barrier != nil {
		werr = barrier()
	}
	if werr != nil {
		return false, werr
	}
	err := Exchange(fsys, spare, path)
	switch {
	case err == nil:
		return true, nil
	case IsNotExist(err):
		if _, serr := fsys.Lstat(spare); IsNotExist(serr) {
			return false, errSpareLost
		}
		// path does not exist yet: publish the spare itself.
	case errors.Is(err, ErrNoExchange):
	default:
		return false, err
	}
	if err := fsys.Rename(spare, path); err != nil {
		if IsNotExist(err) {
			if _, serr := fsys.Lstat(spare); IsNotExist(serr) {
				return false, errSpareLost
			}
		}
		return false, err
	}
	return false, nil
}

// SparePool hands out the spare files of one process for [ReplaceVia], one
// per concurrent writer, in one directory (which must be on the same file
// system as every path replaced through it). Spare names are
// SparePrefix + a random pool id + "-" + a number, so pools of different
// processes never share a file; a pool whose process died leaves at most
// one file per writer it ever had at once, for a sweeper to remove once old
// (see [IsSpare]; removing a spare that is in use is safe, ReplaceVia
// notices).
type SparePool struct {
	fsys FS
	dir  string
	id   string

	mu    sync.Mutex
	free  []string // spares that hold a file (or may)
	empty []string // spare names known to have no file
	n     int
}

// NewSparePool returns a pool of spare files in dir. It returns nil if fsys
// cannot exchange names in dir (see [ProbeExchange]); a nil pool's
// [SparePool.Enabled] is false.
func NewSparePool(fsys FS, dir string) (*SparePool, error) {
	ok, err := ProbeExchange(fsys, dir)
	if err != nil || !ok {
		return nil, err
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &SparePool{fsys: fsys, dir: dir, id: hex.EncodeToString(b[:])}, nil
}

// Enabled reports whether the pool exists (replaces may exchange).
func (sp *SparePool) Enabled() bool { return sp != nil }

// Owns reports whether name (a base name) is one of this pool's spares.
func (sp *SparePool) Owns(name string) bool {
	return sp != nil && strings.HasPrefix(name, SparePrefix+sp.id+"-")
}

// Get takes a spare path for one ReplaceVia or MoveVia call; Put (or
// PutEmpty) gives it back. A spare that holds a file is preferred; the
// file may not exist (it is then created).
func (sp *SparePool) Get() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if n := len(sp.free); n > 0 {
		s := sp.free[n-1]
		sp.free = sp.free[:n-1]
		return s
	}
	return sp.nameLocked()
}

// nameLocked returns a spare name without a file: a known empty one, or a
// new one.
func (sp *SparePool) nameLocked() string {
	if n := len(sp.empty); n > 0 {
		s := sp.empty[n-1]
		sp.empty = sp.empty[:n-1]
		return s
	}
	sp.n++
	return filepath.Join(sp.dir, SparePrefix+sp.id+"-"+strconv.Itoa(sp.n))
}

// Reserve returns a spare name that has no file, to move a file that is
// no longer needed into (a rename) instead of removing it; give it to Put
// once the file may be overwritten, or to PutEmpty if the move did not
// happen. Reserve does not limit how many files the pool collects:
// callers bound it with [SparePool.Idle].
func (sp *SparePool) Reserve() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.nameLocked()
}

// Idle returns how many spares that hold a file are in the pool.
func (sp *SparePool) Idle() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.free)
}

// Put returns a spare taken with Get (or a name from Reserve) that holds
// a file, or may.
func (sp *SparePool) Put(spare string) {
	sp.mu.Lock()
	sp.free = append(sp.free, spare)
	sp.mu.Unlock()
}

// PutEmpty returns a spare name that has no file: its file was renamed
// away (MoveVia, or ReplaceVia with kept false), or a Reserve was not used.
func (sp *SparePool) PutEmpty(name string) {
	sp.mu.Lock()
	sp.empty = append(sp.empty, name)
	sp.mu.Unlock()
}

// Close removes the pool's spare files (best effort; a spare another
// goroutine still holds is removed too, which ReplaceVia survives).
func (sp *SparePool) Close() error {
	if sp == nil {
		return nil
	}
	sp.mu.Lock()
	n := sp.n
	sp.mu.Unlock()
	var first error
	for i := 1; i <= n; i++ {
		err := sp.fsys.Remove(filepath.Join(sp.dir, SparePrefix+sp.id+"-"+strconv.Itoa(i)))
		if err != nil && !IsNotExist(err) && first == nil {
			first = err
		}
	}
	return first
}

// ProbeExchange reports whether fsys can exchange two names in dir, by
// trying it on two temporary files (removed again).
func ProbeExchange(fsys FS, dir string) (bool, error) {
	if _, ok := fsys.(Exchanger); !ok {
		return false, nil
	}
	a, b := tempName(filepath.Join(dir, "xa")), tempName(filepath.Join(dir, "xb"))
	defer func() { _ = fsys.Remove(a); _ = fsys.Remove(b) }()
	for _, p := range []struct {
		name string
		data string
	}{{a, "a"}, {b, "b"}} {
		if err := WriteNew(NoSync(fsys), p.name, []byte(p.data)); err != nil {
			return false, err
		}
	}
	if err := Exchange(fsys, a, b); err != nil {
		if errors.Is(err, ErrNoExchange) {
			return false, nil
		}
		return false, err
	}
	got, err := fsys.ReadFile(a)
	if err != nil {
		return false, err
	}
	return string(got) == "b", nil
}

// ReadStable reads path and reports whether, by the end of the read, path
// no longer named the inode that was read (replaced, or removed: moved is
// true in both cases). A reader of a file whose inodes are recycled (see
// [ReplaceVia]) without the writer's lock uses it: content read from an
// inode that path still names afterwards was not overwritten as a spare
// during the read, since an inode is recycled only after it left its path.
// A file system without inode identities (the in-memory test FS) never
// reports a move.
func ReadStable(fsys FS, path string) (data []byte, moved bool, err error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(f)
	if err != nil {
		return nil, false, err
	}
	read, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	now, err := fsys.Lstat(path)
	if IsNotExist(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if read.Sys() == nil || now.Sys() == nil {
		return data, false, nil
	}
	return data, !os.SameFile(read, now), nil
}
