// Package wal is a write-ahead log shared by every process that opens one
// directory: the commit point of durofs.
//
// # Shape
//
// The log is a sequence of segment files <dir>/<id>.wal (id a 16-digit hex
// number, starting at 1). A frame is
//
//	0xFF 'W' 'A' 'L' | length u32 | crc32c(payload) u32 | crc32c(header[0:12]) u32 | payload
//
// (little endian). A payload never contains the byte 0xFF (Append refuses
// one; JSON, which is UTF-8, never does), so the only 0xFF bytes outside
// headers start frames. A frame's LSN is its segment id and byte offset,
// packed as id<<32 | offset, so LSNs order frames the way the log does.
//
// # One global order without a lock
//
// Every process opens the newest segment with O_APPEND and writes each frame
// with one write(2). The kernel picks the offset and writes the frame under
// the inode lock, so frames of different processes never interleave, and the
// order of the file is the order in which the writes happened: a global
// commit order that no process can stall. A process stopped (SIGSTOP, a
// frozen cgroup) is never stopped inside write(2), so it holds nothing
// another process waits for. Append reads its frame back where the kernel put
// it, so a frame that was split (a short write that Go's runtime completed
// after another process's frame) is reported as a failed append and never
// counted as committed.
//
// A segment is full once its size reaches the segment size. A frame that
// starts at or beyond that size is void: readers ignore it, and its writer
// moves on to the next segment (creating it if needed) and appends again.
// Hence every valid frame of segment n was written before segment n's size
// crossed the limit, and every frame of segment n+1 after it: the order of
// (segment, offset) is the order of time across segments too.
//
// # Durability and group commit
//
// Sync makes the caller's frames durable with one fdatasync(2) of the
// segment. Within a process one goroutine syncs for every append made before
// it started (group commit); across processes they share syncs through the
// group-commit page (below). A frame is acknowledged only after a sync that
// began after the frame was written returned, and the poison check after it
// passed, so every byte before an acknowledged frame - frames of every
// process - is durable too, except the fragments of writes cut short by a
// kill -9 (which can cut a write short, at a page boundary: the kernel copies
// a write into the page cache page by page). Scan skips such fragments by looking for the next 0xFF and
// checking both CRCs, so a torn frame in the middle of the log costs nothing
// but its own loss, and a frame after it is found.
//
// # Group commit across processes
//
// fdatasync(2) of a segment makes durable every byte written to it before
// the call, by any process. The processes share that through dir/group, a
// page of 64-bit words every process maps shared ([vfs.MapWords]) and nobody
// ever syncs; every word is read and written with atomic loads and
// compare-and-swaps, and no lock is taken:
//
//   - synced, an LSN S:X: a sync of segment S that began when S held X
//     bytes (fstat right before the fdatasync) returned success, and the
//     poison check after it passed. It only grows.
//   - from, an LSN S:O: every process that published a synced mark in S had
//     its descriptor of S open since S held at most O bytes. It only grows.
//   - lead: the wall-clock time at which a process claimed the next sync, or
//     0.
//   - done: a count of finished syncs, which waiting processes futex-wait on.
//
// A process whose unsynced frames are [lo, end) of segment S loops:
//
//  1. It reads done, synced, then from. If both marks are in S, from <= lo
//     and end <= synced, its frames are durable: after the poison check it
//     acknowledges them without a sync of its own.
//  2. Else, if lead is fresh (set less than the bound ago: 4 times the
//     process's mean fdatasync time, within 2 to 50 ms), it waits on done
//     until the leader finishes or the bound passes, and goes back to 1.
//  3. Else it claims lead (a compare-and-swap; a process that loses the race
//     goes back to 1), raises from to the size S had when it opened S, notes
//     S's size, fdatasyncs, checks the poison mark, raises synced to S and
//     that size, clears lead if it still holds its claim, bumps done and
//     wakes the waiters. A process that has waited twice the bound in all
//     syncs without claiming.
//
// Why a mark never covers a frame it should not:
//
//   - synced is written only after the sync it describes and the poison
//     check succeeded, and names the size seen before that sync began: every
//     byte below it was in the page cache when the sync started, so it is
//     durable. A frame written during the sync lies beyond it.
//   - Only marks of the frames' own segment count; offsets of segment n+1
//     say nothing about segment n.
//   - A sync reports the writeback errors of pages written since its
//     descriptor was opened, but not one that another process had already
//     been told of before (Linux errseq). Such an error can lose a frame
//     written before the syncer opened S, and the process told of it may
//     have died before writing POISONED. So a mark covers only frames at or
//     after from, which every publisher raises to its own opening offset
//     before it publishes; the writer of an older frame syncs it itself and
//     is told of the error.
//   - The page is never synced, so after a power loss it may hold any
//     written-back mix of old words. Each is a true statement about the disk:
//     S held at least X durable bytes, so every frame appended since starts
//     at or after X and no old mark covers it; segment ids are never reused,
//     and a process publishes marks of S only after S's directory entry was
//     made durable (openSegment), so S is the same file after the crash.
//   - lead and done only decide who waits. A stale or lost value costs at
//     most one bound of waiting: a claim older than the bound, or further in
//     the future (another boot, a clock step), is taken over.
//
// What a kill -9 or a SIGSTOP at each step leaves: a process stopped or
// killed while it holds lead (before, during or after its fdatasync) delays
// the others by at most the bound, after which the first to look claims the
// lead itself; one killed after its sync but before publishing leaves no
// mark, so the others sync themselves; one killed after publishing leaves a
// true mark and a claim that expires. A process stopped while it waits holds
// nothing. A power loss at any step leaves a page whose words are stale but
// true (above), or zeros, or no page: processes then sync on their own.
// Removing the page while processes run is harmless too: those that mapped
// the old one keep sharing it, new ones share a new one.
//
// # Failures stop, never lie
//
// A failed sync is final (PostgreSQL's fsync lesson: Linux may mark the
// pages clean without writing them, so a second fsync "succeeds"). The log
// then refuses every Append and Sync with [ErrPoisoned], and writes the file
// POISONED beside the segments; every process checks for it after each of
// its own syncs and before acknowledging anything, so one process's failure
// stops them all. Whoever recovers replays the log from the checkpoint by
// rewriting every byte it describes, then calls [Log.ClearPoison].
//
// # Checkpoints
//
// The checkpoint file names the LSN below which every frame's effects are
// durable elsewhere. [Log.SetCheckpoint] advances it (atomic replace, file
// and directory fsynced) and removes the segments wholly below it; the
// newest segment is never removed. Frames below the checkpoint are never read
// again.
//
// # Who is alive
//
// [Open] registers the process in <dir>/procs (a lock file it holds until
// Close) and tells, in [Log.Alone], whether any other registered process is
// alive. It does that under <dir>/open.lock, which it keeps until
// [Log.Ready], so a process that found itself alone can replay the log before
// any other process starts working.
package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/vfs"
)

// Errors returned by the log.
var (
	// ErrPoisoned means a sync failed in this process or another one: the
	// log accepts no commits until a process that is alone replays it.
	ErrPoisoned = errors.New("wal: a sync failed; no commit is acknowledged until the log is replayed by a process that has it alone")
	// ErrPayload means a payload contains the byte 0xFF, which only starts
	// frames.
	ErrPayload = errors.New("wal: payload contains byte 0xFF")
	// ErrTornAppend means an append did not land as one contiguous frame (a
	// short write completed after another process's write). The frame does
	// not count; retrying is safe.
	ErrTornAppend = errors.New("wal: append was split by a short write")
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("wal: closed")
)

// LSN is a log sequence number: segment id << 32 | byte offset.
type LSN uint64

// MakeLSN packs a segment id and an offset.
func MakeLSN(segment uint32, offset uint32) LSN { return LSN(segment)<<32 | LSN(offset) }

// Segment returns the segment id.
func (l LSN) Segment() uint32 { return uint32(l >> 32) }

// Offset returns the byte offset in the segment.
func (l LSN) Offset() uint32 { return uint32(l) }

// String formats the LSN as "segment:offset".
func (l LSN) String() string { return fmt.Sprintf("%d:%d", l.Segment(), l.Offset()) }

const (
	headerSize = 16
	segSuffix  = ".wal"
	// DefaultSegmentSize is the size at which a segment is full.
	DefaultSegmentSize = 16 << 20
	// MaxSegmentSize bounds Options.SegmentSize (an offset is 32 bits, and a
	// frame may end past the limit).
	MaxSegmentSize = 1 << 30
	checkpointName = "checkpoint"
	poisonName     = "POISONED"
	openLockName   = "open.lock"
	bootName       = "boot"
	procsDir       = "procs"
)

var (
	magic  = [4]byte{0xFF, 'W', 'A', 'L'}
	crcTab = crc32.MakeTable(crc32.Castagnoli)
)

// Options configure Open.
type Options struct {
	// SegmentSize is the size at which a segment is full (default
	// DefaultSegmentSize). Every process of a directory must use the same.
	SegmentSize int64
	// Logger receives poisoning and clean-up messages (default slog.Default()).
	Logger *slog.Logger
	// BootID returns an id of the running boot of the machine (Linux:
	// /proc/sys/kernel/random/boot_id; tests simulate reboots). Nil, or an
	// error, means unknown: every Open then counts as after a reboot.
	BootID func() (string, error)
}

// Log is one process's handle on the shared log. It is safe for concurrent
// use by goroutines.
type Log struct {
	fs      vfs.FS
	dir     string
	segSize int64
	log     *slog.Logger

	openLock vfs.Unlocker // held from Open until Ready
	procLock vfs.Unlocker // held until Close: this process is alive
	procPath string
	alone    bool
	sameBoot bool
	boot     string // the running boot's id, if known
	rebooted bool   // OpenReadOnly: the boot id is known and not the one in dir/boot
	readOnly bool   // OpenReadOnly: never writes, not even a poison mark

	mu      sync.Mutex // serializes this process's appends and rolls
	cur     *segment
	written LSN // end of this process's last append
	closed  bool

	smu     sync.Mutex // guards the fields below; scond waits on it
	scond   *sync.Cond
	durable LSN
	syncing bool
	err     error // sticky: ErrPoisoned (wrapping the cause)

	group     *group       // the group-commit page (group.go), nil if the FS cannot map it
	now       func() int64 // wall clock in ns (tests replace it)
	syncNanos atomic.Int64 // mean fdatasync time (group.go)

	appends, syncs, covered atomic.Int64
}

// Stats are a process's counts of log operations.
type Stats struct {
	// Appends counts frames appended (void frames not included).
	Appends int64
	// Syncs counts fdatasyncs of the log (group syncs, rolls, SyncThrough).
	Syncs int64
	// Covered counts group syncs this process did not run because another
	// process's fdatasync had made its frames durable.
	Covered int64
}

// Stats returns this process's counts so far.
func (l *Log) Stats() Stats {
	return Stats{Appends: l.appends.Load(), Syncs: l.syncs.Load(), Covered: l.covered.Load()}
}

// segment is an open segment file. A roll retires it; the last sync using
// it closes it.
type segment struct {
	id      uint32
	f       vfs.File
	from    uint32 // the segment's size right after f was opened
	refs    int
	retired bool
}

// Open opens (creating if needed) the log in dir, registers the process,
// and reports whether it is alone (Alone) and whether the machine was
// rebooted since the log was last used (SameBoot). It holds dir/open.lock until Ready (or Close):
// other processes' Open waits for it, up to ctx.
func Open(ctx context.Context, fsys vfs.FS, dir string, opts Options) (*Log, error) {
	size := opts.SegmentSize
	if size == 0 {
		size = DefaultSegmentSize
	}
	if size < 4096 || size > MaxSegmentSize {
		return nil, fmt.Errorf("wal: segment size %d out of range [4096, %d]", size, MaxSegmentSize)
	}
	l := &Log{fs: fsys, dir: dir, segSize: size, log: opts.Logger, now: wallNanos}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.scond = sync.NewCond(&l.smu)
	if err := fsys.MkdirAll(filepath.Join(dir, procsDir), vfs.DirPerm); err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	// The log's own directory entry must be durable before its first frame
	// is acknowledged (its parent is the caller's to make durable).
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := fsys.SyncDir(d); err != nil {
			return nil, fmt.Errorf("wal: open %s: %w", dir, err)
		}
	}
	ul, err := fsys.Lock(ctx, filepath.Join(dir, openLockName))
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: wait for other processes' Open: %w", dir, err)
	}
	l.openLock = ul
	if err := l.register(); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.openNewest(); err != nil {
		l.Close()
		return nil, err
	}
	if g, err := openGroup(fsys, dir); err == nil {
		l.group = g
	} else if !errors.Is(err, vfs.ErrNoMap) {
		l.log.Warn("durofs: the log's group commit across processes is off in this process", "dir", dir, "err", err)
	}
	if _, err := fsys.Stat(filepath.Join(dir, poisonName)); err == nil {
		l.err = fmt.Errorf("%w (marked by %s)", ErrPoisoned, poisonName)
	}
	l.checkBoot(opts.BootID)
	return l, nil
}

// checkBoot compares the boot id a process of this boot wrote into
// dir/boot (unsynced) with the running boot's. A power loss or an OS crash
// leaves the old boot's id, a torn file or none, so SameBoot is true only if
// the page cache the files were applied to is the one the machine still
// runs on. The running boot's id is written only by RecordBoot, once the
// replay a new boot calls for is complete: a replay cut short (the process
// killed inside it) leaves the old id, so the next Open replays again.
func (l *Log) checkBoot(bootID func() (string, error)) {
	if bootID == nil {
		return
	}
	boot, err := bootID()
	if err != nil || boot == "" {
		return
	}
	prev, _ := l.fs.ReadFile(filepath.Join(l.dir, bootName))
	l.sameBoot = string(prev) == boot
	l.boot = boot
}

// RecordBoot records the running boot's id in dir/boot (unsynced), after
// the caller replayed what a reboot since the log was last used calls for:
// from then on Open reports SameBoot in this boot. Before it, every process
// that opens the log alone sees a changed boot and replays.
func (l *Log) RecordBoot() error {
	if l.readOnly || l.boot == "" || l.sameBoot {
		return nil
	}
	f, err := l.fs.OpenFile(filepath.Join(l.dir, bootName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, vfs.FilePerm)
	if err != nil {
		return fmt.Errorf("wal: record boot: %w", err)
	}
	_, err = f.Write([]byte(l.boot))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: record boot: %w", err)
	}
	l.sameBoot = true
	return nil
}

// SameBoot reports whether every process that used the log since the
// machine last booted did so in this boot: no power loss or OS crash since,
// so whatever they applied is in the page cache. (False when the boot id is
// unknown.)
func (l *Log) SameBoot() bool { return l.sameBoot }

// RebootedSinceUse reports, for a log opened with OpenReadOnly, whether the
// machine booted since a process last opened the log: then the first
// process to open it alone replays it, and until then the files may lack
// what its records since the checkpoint hold. False when the boot id is
// unknown (no Options.BootID, or it failed), and for a log opened with Open
// (which has done that replay or is not alone).
func (l *Log) RebootedSinceUse() bool { return l.rebooted }

// OpenReadOnly opens the log in dir for reading (Scan, Checkpoint,
// CheckShared, SyncThrough): it writes nothing, registers nothing and takes
// no lock, so inspection tools can read a live directory. Append fails.
func OpenReadOnly(fsys vfs.FS, dir string, opts Options) (*Log, error) {
	size := opts.SegmentSize
	if size == 0 {
		size = DefaultSegmentSize
	}
	if _, err := fsys.Stat(dir); err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	l := &Log{fs: fsys, dir: dir, segSize: size, log: opts.Logger, closed: true, readOnly: true}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.scond = sync.NewCond(&l.smu)
	if opts.BootID != nil {
		if boot, err := opts.BootID(); err == nil && boot != "" {
			prev, _ := fsys.ReadFile(filepath.Join(dir, bootName))
			l.rebooted = string(prev) != boot
		}
	}
	return l, nil
}

// register locks a file in procs/ as this process's registration, and
// removes the files of dead processes (a lock file is removed only by
// whoever holds its lock, under open.lock, so no live process can be
// holding it). A free file (its process closed or died) is taken over
// rather than a new one created, so that Open needs no free space or
// inodes (a full disk must still allow inspecting and draining a
// directory): only an Open that finds none creates one, durably.
func (l *Log) register() error {
	pdir := filepath.Join(l.dir, procsDir)
	names, err := l.fs.ReadDirNames(pdir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", pdir, err)
	}
	l.alone = true
	for _, n := range names {
		p := filepath.Join(pdir, n)
		u, ok, err := l.fs.TryLock(p)
		if err != nil {
			return fmt.Errorf("wal: probe %s: %w", p, err)
		}
		if !ok {
			l.alone = false
			continue
		}
		if l.procLock == nil {
			l.procLock, l.procPath = u, p
			continue
		}
		_ = l.fs.Remove(p)
		_ = u.Unlock()
	}
	if l.procLock != nil {
		return nil
	}
	l.procPath = filepath.Join(pdir, uuid.NewString()+".lock")
	u, ok, err := l.fs.TryLock(l.procPath)
	if err != nil || !ok {
		return fmt.Errorf("wal: lock %s: ok=%v: %w", l.procPath, ok, err)
	}
	l.procLock = u
	// Durable, so that it is there to take over after a power loss too.
	if err := l.fs.SyncDir(pdir); err != nil {
		return fmt.Errorf("wal: sync %s: %w", pdir, err)
	}
	return nil
}

// Usable reports whether this process's handle on the log still works (a
// simulated power loss, vfs.MemFS.Crash, invalidates every open handle: the
// process is dead, and must not act on the files it left).
func (l *Log) Usable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return false
	}
	_, err := l.cur.f.Stat()
	return err == nil
}

// ReadOnly reports whether the log was opened with OpenReadOnly.
func (l *Log) ReadOnly() bool { return l.readOnly }

// Alone reports whether no other process had the log open when Open ran.
// Until Ready, no other process can open it either.
func (l *Log) Alone() bool { return l.alone }

// Ready lets other processes' Open proceed (call it after replaying).
func (l *Log) Ready() {
	if l.openLock != nil {
		_ = l.openLock.Unlock()
		l.openLock = nil
	}
}

// Close releases the process's registration and files. Frames not yet
// synced may or may not survive a power loss.
func (l *Log) Close() error {
	l.Ready()
	l.mu.Lock()
	l.closed = true
	if l.cur != nil {
		l.retire(l.cur)
		l.cur = nil
	}
	l.mu.Unlock()
	if l.procLock != nil {
		// The last registration stays, free, for the next Open to take
		// over (register: Open then needs no free space); any other is
		// removed - while still locked, so that no Open can take over a
		// file about to go (a lock taken on the path after the removal
		// creates a new, visible file).
		if names, err := l.fs.ReadDirNames(filepath.Dir(l.procPath)); err == nil && len(names) > 1 {
			_ = l.fs.Remove(l.procPath)
		}
		_ = l.procLock.Unlock()
		l.procLock = nil
	}
	if l.group != nil {
		l.group.close() // a sync still running finds its words dead and syncs alone
	}
	return nil
}

func wallNanos() int64 { return time.Now().UnixNano() }

func (l *Log) segPath(id uint32) string {
	return filepath.Join(l.dir, fmt.Sprintf("%016x%s", id, segSuffix))
}

// segments lists the segment ids in ascending order.
func (l *Log) segments() ([]uint32, error) {
	names, err := l.fs.ReadDirNames(l.dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	var ids []uint32
	for _, n := range names {
		hex, ok := strings.CutSuffix(n, segSuffix)
		if !ok || len(hex) != 16 {
			continue
		}
		id, err := strconv.ParseUint(hex, 16, 32)
		if err != nil || id == 0 {
			continue
		}
		ids = append(ids, uint32(id))
	}
	slices.Sort(ids)
	return ids, nil
}

// openNewest opens the newest segment for appending, creating segment 1 in
// an empty log.
func (l *Log) openNewest() error {
	ids, err := l.segments()
	if err != nil {
		return err
	}
	id := uint32(1)
	if len(ids) > 0 {
		id = ids[len(ids)-1]
	}
	s, err := l.openSegment(id)
	if err != nil {
		return err
	}
	l.cur = s
	l.written = MakeLSN(id, 0)
	l.durable = l.written
	return nil
}

// openSegment opens (creating) segment id for appending and makes its
// directory entry durable before any frame in it can be acknowledged.
func (l *Log) openSegment(id uint32) (*segment, error) {
	f, err := l.fs.OpenFile(l.segPath(id), os.O_RDWR|os.O_APPEND|os.O_CREATE, vfs.FilePerm)
	if err != nil {
		return nil, fmt.Errorf("wal: open segment: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: open segment: %w", err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		f.Close()
		return nil, l.poison(fmt.Errorf("sync %s: %w", l.dir, err))
	}
	return &segment{id: id, f: f, from: uint32(min(fi.Size(), int64(^uint32(0))))}, nil
}

// retire drops the log's reference to s (l.mu held).
func (l *Log) retire(s *segment) {
	s.retired = true
	if s.refs == 0 {
		_ = s.f.Close()
	}
}

// Encode returns the frame holding payload.
func encode(payload []byte) []byte {
	b := make([]byte, headerSize+len(payload))
	copy(b, magic[:])
	binary.LittleEndian.PutUint32(b[4:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(payload, crcTab))
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crcTab))
	copy(b[headerSize:], payload)
	return b
}

// decode returns the payload of the frame at the start of b, if b starts
// with a whole valid frame.
func decode(b []byte) (payload []byte, ok bool) {
	if len(b) < headerSize || !bytes.Equal(b[:4], magic[:]) {
		return nil, false
	}
	if crc32.Checksum(b[:12], crcTab) != binary.LittleEndian.Uint32(b[12:]) {
		return nil, false
	}
	n := int64(binary.LittleEndian.Uint32(b[4:]))
	if n > int64(len(b)-headerSize) {
		return nil, false
	}
	p := b[headerSize : headerSize+n]
	if crc32.Checksum(p, crcTab) != binary.LittleEndian.Uint32(b[8:]) {
		return nil, false
	}
	return p, true
}

// Append writes one frame and returns its LSN and the LSN just after it. It
// does not sync: call Sync(end) before acknowledging.
func (l *Log) Append(payload []byte) (lsn, end LSN, err error) {
	if bytes.IndexByte(payload, 0xFF) >= 0 {
		return 0, 0, ErrPayload
	}
	frame := encode(payload)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if err := l.Err(); err != nil {
			return 0, 0, err
		}
		if l.closed {
			return 0, 0, ErrClosed
		}
		s := l.cur
		if _, err := s.f.Write(frame); err != nil {
			// Whatever part was written is an invalid frame: skipped by Scan.
			return 0, 0, fmt.Errorf("wal: append: %w", err)
		}
		e, err := s.f.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, 0, fmt.Errorf("wal: append: %w", err)
		}
		start := e - int64(len(frame))
		back := make([]byte, len(frame))
		if start < 0 {
			return 0, 0, ErrTornAppend
		}
		if _, err := s.f.ReadAt(back, start); err != nil || !bytes.Equal(back, frame) {
			return 0, 0, ErrTornAppend
		}
		if start >= l.segSize {
			// Void: the segment was full before this write. Roll.
			if err := l.roll(s); err != nil {
				return 0, 0, err
			}
			continue
		}
		l.written = MakeLSN(s.id, uint32(e))
		l.appends.Add(1)
		return MakeLSN(s.id, uint32(start)), l.written, nil
	}
}

// roll moves this process to the segment after s (l.mu held). Frames this
// process wrote to s are synced first, so a sync of the new segment covers
// all of its earlier frames.
func (l *Log) roll(s *segment) error {
	l.syncs.Add(1)
	if err := vfs.Datasync(s.f); err != nil {
		return l.poison(fmt.Errorf("sync segment %d: %w", s.id, err))
	}
	l.smu.Lock()
	l.durable = max(l.durable, l.written)
	l.smu.Unlock()
	ids, err := l.segments()
	if err != nil {
		return err
	}
	next := s.id + 1
	if len(ids) > 0 {
		next = max(next, ids[len(ids)-1])
	}
	ns, err := l.openSegment(next)
	if err != nil {
		return err
	}
	l.retire(s)
	l.cur = ns
	return nil
}

// Sync returns once every frame this process appended up to end is durable,
// with one fdatasync shared by every goroutine waiting at the same time, and
// with other processes' (package doc, "Group commit across processes"). It
// fails with ErrPoisoned (wrapping the cause) if a sync failed here or in
// another process.
func (l *Log) Sync(ctx context.Context, end LSN) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	for {
		if l.err != nil {
			return l.err
		}
		if l.durable >= end {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if l.syncing {
			l.scond.Wait()
			continue
		}
		l.syncing = true
		l.smu.Unlock()
		err := l.syncOnce()
		l.smu.Lock()
		l.syncing = false
		l.scond.Broadcast()
		if err != nil {
			return err
		}
	}
}

// syncOnce is one group sync: the current segment up to this process's
// latest append (group.go: shared with other processes where possible),
// then the poison check.
func (l *Log) syncOnce() error {
	l.mu.Lock()
	s, target := l.cur, l.written
	if s == nil {
		l.mu.Unlock()
		return ErrClosed
	}
	s.refs++
	l.mu.Unlock()
	l.smu.Lock()
	lo := max(l.durable, MakeLSN(s.id, s.from)) // where this process's unsynced frames start
	l.smu.Unlock()
	var err error
	if l.group != nil && target.Segment() == s.id {
		err = l.groupSync(l.group, s, lo, target)
	} else {
		err = l.syncSegment(nil, s)
	}
	l.mu.Lock()
	s.refs--
	if s.retired && s.refs == 0 {
		_ = s.f.Close()
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	l.smu.Lock()
	l.durable = max(l.durable, target)
	l.smu.Unlock()
	return nil
}

// SyncThrough makes every frame before end durable, whoever wrote it: an
// fdatasync of end's segment (and of this process's older ones, which its
// rolls synced already). A process uses it before applying a frame another
// process wrote and may not have synced (it died right after appending).
func (l *Log) SyncThrough(end LSN) error {
	if err := l.Err(); err != nil {
		return err
	}
	f, err := l.fs.OpenFile(l.segPath(end.Segment()), os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("wal: sync segment %d: %w", end.Segment(), err)
	}
	defer f.Close()
	l.syncs.Add(1)
	if err := vfs.Datasync(f); err != nil {
		return l.poison(fmt.Errorf("sync segment %d: %w", end.Segment(), err))
	}
	return l.CheckShared()
}

// Commit appends payload and waits until it is durable.
func (l *Log) Commit(ctx context.Context, payload []byte) (LSN, error) {
	lsn, end, err := l.Append(payload)
	if err != nil {
		return 0, err
	}
	return lsn, l.Sync(ctx, end)
}

// Err returns the poison error, or nil.
func (l *Log) Err() error {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.err
}

// CheckShared returns ErrPoisoned if this process or another one poisoned the
// log (a stat of the mark).
func (l *Log) CheckShared() error {
	if err := l.Err(); err != nil {
		return err
	}
	if _, err := l.fs.Stat(filepath.Join(l.dir, poisonName)); err == nil {
		return l.poison(fmt.Errorf("another process marked the log %s", poisonName))
	}
	return nil
}

// Poison records a failed sync of state the log protects (the caller's
// checkpoint fsyncs too): from now on nothing is acknowledged, here or in any
// other process, until the log is replayed.
func (l *Log) Poison(cause error) error { return l.poison(cause) }

func (l *Log) poison(cause error) error {
	l.smu.Lock()
	first := l.err == nil
	if first {
		l.err = fmt.Errorf("%w: %w", ErrPoisoned, cause)
	}
	err := l.err
	l.scond.Broadcast()
	l.smu.Unlock()
	if first && !l.readOnly {
		l.log.Error("durofs: write-ahead log poisoned; no commit is acknowledged until it is replayed", "dir", l.dir, "cause", cause)
		p := filepath.Join(l.dir, poisonName)
		if werr := vfs.WriteFile(l.fs, p, []byte(cause.Error()+"\n")); werr == nil {
			_ = l.fs.SyncDir(l.dir)
		}
	}
	return err
}

// ClearPoison removes the poison mark after a replay made everything durable
// (the caller is alone, so no other process holds a poisoned handle).
func (l *Log) ClearPoison() error {
	if err := l.fs.Remove(filepath.Join(l.dir, poisonName)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("wal: clear poison: %w", err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("wal: clear poison: %w", err)
	}
	l.smu.Lock()
	l.err = nil
	l.smu.Unlock()
	return nil
}

// End returns the LSN just after this process's latest append, at least the
// start of its current segment; every frame written later by any process has
// a larger LSN.
func (l *Log) End() LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

type checkpointFile struct {
	LSN LSN `json:"lsn"`
}

// Checkpoint returns the checkpoint LSN (0 if none was ever set).
func (l *Log) Checkpoint() (LSN, error) {
	data, err := l.fs.ReadFile(filepath.Join(l.dir, checkpointName))
	if vfs.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wal: read checkpoint: %w", err)
	}
	var c checkpointFile
	if err := json.Unmarshal(data, &c); err != nil {
		return 0, fmt.Errorf("wal: checkpoint file is damaged: %w", err)
	}
	return c.LSN, nil
}

// SetCheckpoint records durably that every frame below lsn is durable
// elsewhere, then removes the segments wholly below it. It never moves the
// checkpoint back. Callers serialize checkpoints (across processes too).
func (l *Log) SetCheckpoint(lsn LSN) error {
	old, err := l.Checkpoint()
	if err != nil {
		return err
	}
	if lsn <= old {
		return nil
	}
	data, _ := json.Marshal(checkpointFile{LSN: lsn})
	if err := vfs.WriteFile(l.fs, filepath.Join(l.dir, checkpointName), data); err != nil {
		return l.poison(fmt.Errorf("write checkpoint: %w", err))
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.poison(fmt.Errorf("sync %s: %w", l.dir, err))
	}
	// A crash here leaves segments wholly below the checkpoint: never read
	// again, and removed by the next checkpoint.
	failpoint.Hit("checkpoint.before_trim")
	ids, err := l.segments()
	if err != nil {
		return err
	}
	for _, id := range ids[:max(len(ids)-1, 0)] {
		if id < lsn.Segment() {
			// Unsynced: a segment that comes back after a power loss lies
			// below the checkpoint and is skipped.
			if err := l.fs.Remove(l.segPath(id)); err != nil && !vfs.IsNotExist(err) {
				l.log.Warn("durofs: remove old log segment", "segment", id, "err", err)
			}
		}
	}
	return nil
}

// RemoveCheckpointTemps removes the temporary files SetCheckpoint leaves
// when its process dies mid-write. Call it holding the same exclusion
// SetCheckpoint's callers use (no checkpoint is being written meanwhile).
func (l *Log) RemoveCheckpointTemps() error {
	names, err := l.fs.ReadDirNames(l.dir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	for _, n := range names {
		if vfs.IsTemp(n) && strings.Contains(n, checkpointName) {
			if err := l.fs.Remove(filepath.Join(l.dir, n)); err != nil && !vfs.IsNotExist(err) {
				return fmt.Errorf("wal: remove %s: %w", n, err)
			}
		}
	}
	return nil
}

// Scan calls fn for every valid frame at or after from, in log order, up to
// the end of the log as it is when each segment is read. It returns the LSN
// just after the last valid frame it saw (from, if none): scanning again from
// there sees only frames written since (and frames that were still being
// written). fn must not keep payload.
func (l *Log) Scan(from LSN, fn func(lsn LSN, payload []byte) error) (LSN, error) {
	ids, err := l.segments()
	if err != nil {
		return from, err
	}
	end := from
	for _, id := range ids {
		if id < from.Segment() {
			continue
		}
		off := int64(0)
		if id == from.Segment() {
			off = int64(from.Offset())
		}
		data, err := l.readSegment(id, off)
		if err != nil {
			return end, err
		}
		pos := 0
		for pos < len(data) && off+int64(pos) < l.segSize {
			p, ok := decode(data[pos:])
			if !ok {
				next := bytes.IndexByte(data[pos+1:], 0xFF)
				if next < 0 {
					break
				}
				pos += 1 + next
				continue
			}
			lsn := MakeLSN(id, uint32(off+int64(pos)))
			if err := fn(lsn, p); err != nil {
				return end, err
			}
			pos += headerSize + len(p)
			end = MakeLSN(id, uint32(off+int64(pos)))
		}
		if end < MakeLSN(id, 0) {
			end = MakeLSN(id, 0)
		}
	}
	return end, nil
}

// readSegment reads segment id from offset off to its end.
func (l *Log) readSegment(id uint32, off int64) ([]byte, error) {
	f, err := l.fs.OpenFile(l.segPath(id), os.O_RDONLY, 0)
	if vfs.IsNotExist(err) {
		return nil, nil // removed below a checkpoint meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("wal: read segment %d: %w", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("wal: read segment %d: %w", id, err)
	}
	if fi.Size() <= off {
		return nil, nil
	}
	buf := make([]byte, fi.Size()-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("wal: read segment %d: %w", id, err)
	}
	return buf[:n], nil
}
