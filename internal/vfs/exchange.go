package vfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

func replaceVia(fsys FS, spare, path string, data []byte, barrier func() error) (bool, error) {
	f, err := fsys.OpenFile(spare, os.O_WRONLY|os.O_CREATE, FilePerm)
	if err != nil {
		return false, err
	}
	// Overwrite, then cut: the inode keeps its blocks when the new content
	// is no longer than the old (no block freed and allocated again).
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Truncate(int64(len(data)))
	}
	if werr == nil && barrier == nil {
		// An fsync error is fatal to this write (fsyncgate): never retried.
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil && barrier != nil {
		werr = barrier()
	}
	if werr != nil {
		return false, werr
	}
	err = Exchange(fsys, spare, path)
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

	mu   sync.Mutex
	free []string
	n    int
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

// Get takes a spare path for one ReplaceVia call; Put gives it back. The
// file may not exist (the first time, or after a rename consumed it).
func (sp *SparePool) Get() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if n := len(sp.free); n > 0 {
		s := sp.free[n-1]
		sp.free = sp.free[:n-1]
		return s
	}
	sp.n++
	return filepath.Join(sp.dir, SparePrefix+sp.id+"-"+strconv.Itoa(sp.n))
}

// Put returns a spare taken with Get.
func (sp *SparePool) Put(spare string) {
	sp.mu.Lock()
	sp.free = append(sp.free, spare)
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
