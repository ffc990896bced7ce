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
// Segments are preallocated: a segment is created with a chunk of zeros,
// synced, and grown by further chunks of zeros (appended, then synced, in
// the background once frames come within half a chunk of the end) before
// frames reach them, so the fdatasync that commits a frame writes the
// frame's pages and a cache flush - never the file's size or block map. (On
// a journaled file system that is a journal commit less per sync.) A frame
// that does reach zeros whose sync has not returned yet is still safe: its
// own fdatasync then writes the size too, as for any file that grew.
//
// Frames go where the shared page (below) says: its tail word is the LSN of
// the next free byte. A process reserves [o, o+n) for its frame by a
// compare-and-swap of the tail from o to o+n, writes the frame there with one
// pwrite, and is done. Reservations never overlap, and their order is one
// global order of commits; no lock is taken, so no process can stall another:
// a process stopped between its reservation and its write holds up nobody's
// append. Its unwritten range holds zeros, and a reader skips any bytes that
// do not form a frame (below), so a hole left by a process killed there costs
// nothing but its own frame.
//
// What readers may assume of a range still being written is what the
// in-flight words are for: before its compare-and-swap a process stores the
// tail it read in its own slot of the page, and clears the slot once its
// pwrite returned. So every frame below writtenThrough - the tail, lowered
// to the lowest slot set - is whole (the tail is read before the slots).
// Group-commit marks and checkpoints go only that far (Scan); a look-up of
// one record goes to the tail (ScanAll).
//
// A segment is full when a frame would end past the segment size. The
// process that finds it so creates the next segment (zeros, synced, its
// directory entry synced) and moves the tail to its start with a
// compare-and-swap; a process that loses that race, or was stopped
// meanwhile, finds the tail moved and follows it. A frame larger than a
// segment gets a segment of its own. Hence the order of (segment, offset) is
// the order of reservations, across segments too.
//
// The page is never synced and is rebuilt by every process that opens the
// log alone (no other process registered, see "Who is alive"): the tail goes
// after the last whole frame of the newest segment (read from the checkpoint
// when the checkpoint is in that segment), every slot to zero. A
// process that finds others registered trusts the page they share (they
// could not run without it), and refuses to open if it is not set up.
//
// # Durability and group commit
//
// Sync makes the caller's frames durable with one fdatasync(2) of the
// segment. Within a process one goroutine syncs for every append made before
// it started (group commit); across processes they share syncs through the
// group-commit page (below). A frame is acknowledged only after a sync that
// began after the frame was written returned, and the poison check after it
// passed. Scan skips whatever is not a whole frame - zeros of a reservation
// never written, the fragment of a write cut short by a kill -9 (which can
// cut a write at a page boundary: the kernel copies a write into the page
// cache page by page), pages a power loss did not keep - by looking for the
// next 0xFF and checking both CRCs, so a torn frame in the middle of the log
// costs nothing but its own loss, and a frame after it is found.
//
// # Group commit across processes
//
// fdatasync(2) of a segment makes durable every byte written to it before
// the call, by any process. The processes share that through dir/group, a
// page of 64-bit words every process maps shared ([vfs.MapWords]) and nobody
// ever syncs (it also holds the tail, the in-flight slots, the poison word,
// and the stamp word of [Log.Stamp]); every word is
// read and written with atomic loads and compare-and-swaps, and no lock is
// taken:
//
//   - synced, an LSN S:X: a sync of segment S that began when every frame
//     of S below X had been written (writtenThrough, read right before the
//     fdatasync) returned success, and the poison check after it passed. It
//     only grows.
//   - from, an LSN S:O: every process that published a synced mark in S had
//     its descriptor of S open since the tail was at most S:O. It only grows.
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
//     goes back to 1), raises from to the tail it saw when it opened S,
//     notes writtenThrough, fdatasyncs, checks the poison mark, raises
//     synced to what it noted, clears lead if it still holds its claim,
//     bumps done and wakes the waiters. A process that has waited twice the bound in all
//     syncs without claiming.
//
// Why a mark never covers a frame it should not:
//
//   - synced is written only after the sync it describes and the poison
//     check succeeded, and names a point below which every frame was
//     written before that sync began, so it is durable. A frame reserved
//     later lies beyond it; one still being written lowered it.
//   - Only marks of the frames' own segment count; offsets of segment n+1
//     say nothing about segment n.
//   - A sync reports the writeback errors of pages written since its
//     descriptor was opened, but not one that another process had already
//     been told of before (Linux errseq). Such an error can lose a frame
//     written before the syncer opened S, and the process told of it may
//     have died before writing POISONED. So a mark covers only frames at or
//     after from, which every publisher raises to the tail it saw right
//     after opening S (a frame reserved later was written later) before it
//     publishes; the writer of an older frame syncs it itself and is told
//     of the error.
//   - The page is never synced, but it is rebuilt by whoever opens the log
//     alone, which is the first process after a power loss.
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
// nothing. A process stopped or killed while its slot is set (between
// reservation and write) keeps writtenThrough below its frame: marks then
// cover nobody's later frames, so each process syncs its own (slower, never
// stuck), and checkpoints stop there; a dead process's slot is cleared by
// the next checkpoint (reapSlots) or by whoever takes its registration.
// Removing the page while processes run makes new processes refuse to open
// the log (the running ones keep their mapping); do not.
//
// # Failures stop, never lie
//
// A failed sync is final (PostgreSQL's fsync lesson: Linux may mark the
// pages clean without writing them, so a second fsync "succeeds"). The log
// then refuses every Append and Sync with [ErrPoisoned] and marks itself
// poisoned twice: the shared page's poison word (which needs no free space
// and which a lone opener's rebuild of the page keeps; a read-only log
// reads it from the file) and the file POISONED beside the segments (for
// the page's loss); if the file cannot be written - a failing or full disk, the very
// conditions of a failed sync - it removes the boot id instead, so that the
// next process to open the log alone replays it. Every process checks the
// marks after each of its own syncs and before acknowledging anything (and
// a checkpoint before it moves), so one process's failure stops them all.
// Whoever recovers replays the log from the checkpoint by rewriting every
// byte it describes, then calls [Log.ClearPoison].
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
	// ErrTooManyProcesses means MaxProcesses processes have the log open.
	ErrTooManyProcesses = errors.New("wal: too many processes have the log open")
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("wal: closed")
	// ErrModeMismatch means the processes that have the log open sync
	// (Options.NoSync false) and this one would not, or the other way round.
	ErrModeMismatch = errors.New("wal: the processes that have the log open use the other sync mode")
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
	// frame larger than a segment gets one of its own).
	MaxSegmentSize = 1 << 30
	// chunkSize is how much zeroed space a segment grows by at a time.
	chunkSize      = 256 << 10
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
	// NoSync says the caller's FS makes every sync a no-op (the provider's
	// ProcessCrashSafe mode). Every process that has a log open at the same
	// time must say the same: a no-op sync publishes the shared synced mark
	// like a real one (group commit), so a process whose syncs are real
	// would acknowledge frames no fdatasync wrote. Open refuses a process
	// whose NoSync differs from that of the processes already there
	// (ErrModeMismatch); a process that has the log alone sets the mode.
	NoSync bool
	// AnyMode is for a process that appends nothing (a repairing fsck): it
	// joins processes of either mode, and alone it leaves the mode unset,
	// for the first process that joins it to set. NoSync then says only
	// how its own syncs behave.
	AnyMode bool
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
	slot     int // this process's in-flight word: wSlot0+slot; procs/<slot>.lock
	alone    bool
	sameBoot bool
	boot     string // the running boot's id, if known
	rebooted bool   // OpenReadOnly: the boot id is known and not the one in dir/boot
	readOnly bool   // OpenReadOnly: never writes, not even a poison mark
	mode     uint64 // modeDurable or modeNoSync (Options.NoSync); 0 with Options.AnyMode

	mu      sync.Mutex // serializes this process's appends and rolls
	gmu     sync.Mutex // serializes this process's grows (grow)
	cur     *segment
	written LSN // end of this process's last append
	slotVal LSN // what this process's in-flight word holds
	closed  bool

	smu     sync.Mutex // guards the fields below; scond waits on it
	scond   *sync.Cond
	durable LSN
	syncing bool
	err     error // sticky: ErrPoisoned (wrapping the cause)

	group     *group        // the shared page (group.go); nil only in a read-only log
	stamp     atomic.Uint64 // the last value Stamp returned here (its fallback without a live page)
	now       func() int64  // wall clock in ns (tests replace it)
	syncNanos atomic.Int64  // mean fdatasync time (group.go)

	appends, syncs, covered, grows, growWaits atomic.Int64

	growing atomic.Bool    // a background grow (growAhead) is running
	bg      sync.WaitGroup // background grows; Close waits for them
}

// Stats are a process's counts of log operations.
type Stats struct {
	// Appends counts frames appended.
	Appends int64
	// Syncs counts fdatasyncs of the log (group syncs, rolls, SyncThrough).
	Syncs int64
	// Covered counts group syncs this process did not run because another
	// process's fdatasync had made its frames durable.
	Covered int64
	// Grows counts chunks of zeros this process appended to segments (each
	// with an fdatasync of its own, not counted in Syncs), most of them in
	// the background, ahead of the frames. GrowWaits counts appends that
	// waited for zeros instead: the next segment's, or the current one's
	// when a burst of appends outran the background grow.
	Grows, GrowWaits int64
}

// Stats returns this process's counts so far.
func (l *Log) Stats() Stats {
	return Stats{Appends: l.appends.Load(), Syncs: l.syncs.Load(), Covered: l.covered.Load(), Grows: l.grows.Load(), GrowWaits: l.growWaits.Load()}
}

// segment is an open segment file. A roll retires it; the last sync using
// it closes it.
type segment struct {
	id      uint32
	f       vfs.File
	from    uint32 // the tail's offset in it right after f was opened (MaxUint32: the tail had left it)
	size    int64  // its size as last seen: zeroed space up to here
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
	g, err := openGroup(fsys, dir)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("wal: open %s: the processes of a log share a mapped page: %w", dir, err)
	}
	l.group = g
	l.mode = modeDurable
	if opts.NoSync {
		l.mode = modeNoSync
	}
	if opts.AnyMode {
		l.mode = 0
	}
	if err := l.openNewest(); err != nil {
		l.Close()
		return nil, err
	}
	if l.marked() {
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
// CheckShared; and SyncThrough for a repair, which writes a frame's own
// bytes again): it writes nothing else, registers nothing and takes
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

// register locks procs/<i>.lock as this process's registration, i its slot
// in the page (0 <= i < MaxProcesses), and removes the files of dead
// processes beyond the one it takes (a lock file is removed only by whoever
// holds its lock, under open.lock, so no live process can be holding it). A
// free file (its process closed or died) is taken over rather than a new
// one created, so that Open needs no free space or inodes (a full disk must
// still allow inspecting and draining a directory): only an Open that finds
// none creates one, durably.
func (l *Log) register() error {
	pdir := filepath.Join(l.dir, procsDir)
	names, err := l.fs.ReadDirNames(pdir)
	if err != nil {
		return fmt.Errorf("wal: list %s: %w", pdir, err)
	}
	l.alone = true
	used := map[int]bool{}
	for _, n := range names {
		p := filepath.Join(pdir, n)
		i, isSlot := slotOf(n)
		u, ok, err := l.fs.TryLock(p)
		if err != nil {
			return fmt.Errorf("wal: probe %s: %w", p, err)
		}
		if !ok {
			l.alone = false
			used[i] = isSlot
			continue
		}
		if l.procLock == nil && isSlot {
			l.procLock, l.procPath, l.slot = u, p, i
			used[i] = true
			continue
		}
		_ = l.fs.Remove(p)
		_ = u.Unlock()
	}
	if l.procLock != nil {
		return nil
	}
	l.slot = -1
	for i := range MaxProcesses {
		if !used[i] {
			l.slot = i
			break
		}
	}
	if l.slot < 0 {
		return fmt.Errorf("%w (%d)", ErrTooManyProcesses, MaxProcesses)
	}
	l.procPath = filepath.Join(pdir, strconv.Itoa(l.slot)+".lock")
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

// slotOf parses a registration file name "<i>.lock".
func slotOf(name string) (int, bool) {
	d, ok := strings.CutSuffix(name, ".lock")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(d)
	if err != nil || i < 0 || i >= MaxProcesses || strconv.Itoa(i) != d {
		return 0, false
	}
	return i, true
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
	l.bg.Wait()
	if l.group != nil {
		// Before the registration goes: once it is free, a process can
		// open the log alone and rebuild the page, and a sync of ours still
		// running must not publish its mark into that page. It finds its
		// words dead and syncs alone.
		l.group.close()
	}
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

// openNewest sets up the page if this process is alone (the tail after the
// newest segment's last whole frame, every slot free), and opens the
// segment the tail is in.
func (l *Log) openNewest() error {
	g := l.group
	if l.alone {
		ids, err := l.segments()
		if err != nil {
			return err
		}
		id := uint32(1)
		if len(ids) > 0 {
			id = ids[len(ids)-1]
		}
		if err := l.prepareSegment(id); err != nil {
			return err
		}
		end, err := l.lastFrameEnd(id)
		if err != nil {
			return err
		}
		g.reset(MakeLSN(id, end), l.mode)
	} else if g.w.Load(wMagic) != groupMagic || g.w.Load(wTail) == 0 {
		return fmt.Errorf("wal: open %s: other processes have the log open, but %s is not set up for this version (removed while they ran, or they run an older durofs)", l.dir, groupName)
	} else if l.mode != 0 && !g.w.CompareAndSwap(wMode, 0, l.mode) && g.w.Load(wMode) != l.mode {
		// The mode is set (by the first process that had the log alone,
		// or the first to join one that left it unset, AnyMode), and it
		// is the other one.
		return fmt.Errorf("%w: open %s: every process that has a directory open at the same time must use one durability mode (this one: NoSync=%v)", ErrModeMismatch, l.dir, l.mode == modeNoSync)
	} else {
		// Our slot's last owner is dead (we hold its lock): its write, if
		// any, is over.
		g.store(wSlot0+l.slot, 0)
	}
	t := LSN(g.w.Load(wTail))
	s, err := l.openSegment(t.Segment())
	if err != nil {
		return err
	}
	l.cur = s
	l.written = MakeLSN(s.id, 0)
	l.durable = l.written
	return nil
}

// lastFrameEnd returns the offset just after segment id's last whole frame
// (0 if it has none). It reads the segment from the checkpoint when the
// checkpoint is in it: the checkpoint is a frame boundary below which every
// frame is whole and durable (it is only set once they are), so what a
// restart reads grows with the log since the checkpoint, not with the
// segment (a busy segment holds tens of MiB).
func (l *Log) lastFrameEnd(id uint32) (uint32, error) {
	cp, err := l.Checkpoint()
	if err != nil {
		return 0, err
	}
	start := int64(0)
	if cp.Segment() == id {
		start = int64(cp.Offset())
	}
	data, err := l.readSegment(id, start, -1)
	if err != nil {
		return 0, err
	}
	end := start
	walkFrames(data, start, l.segSize, func(pos int, p []byte) error {
		end = start + int64(pos+headerSize+len(p))
		return nil
	})
	return uint32(end), nil
}

// prepareSegment makes segment id exist with at least one chunk of zeros,
// durably (data and directory entry), before any frame can be reserved in
// it. Several processes may prepare the same segment at once: each appends
// its zeros at the end (O_APPEND), so none overwrites a frame.
func (l *Log) prepareSegment(id uint32) error {
	f, err := l.fs.OpenFile(l.segPath(id), os.O_RDWR|os.O_CREATE, vfs.FilePerm)
	if err != nil {
		return fmt.Errorf("wal: create segment %d: %w", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("wal: create segment %d: %w", id, err)
	}
	if fi.Size() < min(chunkSize, l.segSize) {
		if err := l.grow(id, fi.Size()); err != nil {
			return err
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.poison(fmt.Errorf("sync %s: %w", l.dir, err))
	}
	return nil
}

// grow appends a chunk of zeros to segment id, whose size was seen to be
// seen, and syncs it, so that frames written there later need no metadata
// in their sync - unless the segment has grown since (another grow of this
// process or of another one). Zeros are appended (O_APPEND): whoever else
// grows the segment at the same time appends after them, and nobody's frame
// is overwritten. It never grows a segment past the segment size, but for
// two processes growing it at the same moment (harmless zeros past the end).
func (l *Log) grow(id uint32, seen int64) error {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	f, err := l.fs.OpenFile(l.segPath(id), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("wal: grow segment %d: %w", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("wal: grow segment %d: %w", id, err)
	}
	n := min(int64(chunkSize), l.segSize-fi.Size())
	if fi.Size() > seen || n <= 0 {
		return nil
	}
	if _, err := f.Write(make([]byte, n)); err != nil {
		return fmt.Errorf("wal: grow segment %d: %w", id, err)
	}
	failpoint.Hit("wal.grow")
	l.grows.Add(1)
	if err := vfs.Datasync(f); err != nil {
		return l.poison(fmt.Errorf("sync segment %d: %w", id, err))
	}
	return nil
}

// openSegment opens segment id, which prepareSegment made durable, for
// writing frames.
func (l *Log) openSegment(id uint32) (*segment, error) {
	f, err := l.fs.OpenFile(l.segPath(id), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: open segment: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: open segment: %w", err)
	}
	s := &segment{id: id, f: f, size: fi.Size(), from: ^uint32(0)}
	switch t := LSN(l.group.w.Load(wTail)); {
	case t.Segment() == id:
		s.from = t.Offset()
	case t.Segment() < id:
		s.from = 0
	}
	return s, nil
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
	n := int64(len(frame))
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.group
	for {
		if err := l.Err(); err != nil {
			return 0, 0, err
		}
		if l.closed || !g.live() {
			return 0, 0, ErrClosed
		}
		s := l.cur
		t := LSN(g.w.Load(wTail))
		if t.Segment() != s.id {
			if err := l.follow(s, t.Segment()); err != nil {
				return 0, 0, err
			}
			continue
		}
		o := int64(t.Offset())
		if o > 0 && o+n > l.segSize {
			// Full: prepare the next segment and move the tail there
			// (unless another process did first).
			l.growWaits.Add(1)
			if err := l.prepareSegment(s.id + 1); err != nil {
				return 0, 0, err
			}
			g.w.CompareAndSwap(wTail, uint64(t), uint64(MakeLSN(s.id+1, 0)))
			continue
		}
		if o+n+chunkSize/2 > s.size && s.size < l.segSize {
			// Zeros ahead of the frames, before reserving: a process
			// growing the segment holds up nobody's reservation. Less
			// than half a chunk ahead, a background grow adds the next
			// one; only a frame with no zeros left for it waits for one.
			if fi, err := s.f.Stat(); err == nil {
				s.size = max(s.size, fi.Size())
			}
			if o+n > s.size {
				l.growWaits.Add(1)
				if err := l.grow(s.id, s.size); err != nil {
					return 0, 0, err
				}
				continue
			}
			if o+n+chunkSize/2 > s.size && s.size < l.segSize {
				l.growAhead(s)
			}
		}
		// Reserve [o, o+n): the slot first (package doc: readers read the
		// tail, then the slots).
		l.setSlot(t)
		if !g.w.CompareAndSwap(wTail, uint64(t), uint64(t)+uint64(n)) {
			l.setSlot(0)
			continue
		}
		failpoint.Hit("wal.reserved")
		_, err := s.f.Seek(o, io.SeekStart)
		if err == nil {
			_, err = s.f.Write(frame)
		}
		l.setSlot(0)
		if err != nil {
			// Whatever part was written is not a whole frame: skipped.
			return 0, 0, fmt.Errorf("wal: append: %w", err)
		}
		l.written = t + LSN(n)
		l.appends.Add(1)
		return t, l.written, nil
	}
}

// growAhead starts a grow of s in the background unless one is running
// (l.mu held), so that the fdatasync of the zeros is off every append's
// path: an ack pays one fdatasync, its frame's.
func (l *Log) growAhead(s *segment) {
	if !l.growing.CompareAndSwap(false, true) {
		return
	}
	s.refs++
	size := s.size
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		err := l.grow(s.id, size)
		l.mu.Lock()
		if err == nil {
			if fi, err := s.f.Stat(); err == nil {
				s.size = max(s.size, fi.Size())
			}
		}
		s.refs--
		if s.retired && s.refs == 0 {
			_ = s.f.Close()
		}
		l.mu.Unlock()
		l.growing.Store(false)
	}()
}

// setSlot stores v in this process's in-flight word (l.mu held).
func (l *Log) setSlot(v LSN) {
	l.group.store(wSlot0+l.slot, uint64(v))
	l.slotVal = v
}

// follow moves this process from segment s to segment id, where the tail is
// (l.mu held). Frames this process wrote to s are synced first, so a sync
// of the new segment covers all of its earlier frames.
func (l *Log) follow(s *segment, id uint32) error {
	if l.written.Segment() == s.id && l.written.Offset() > 0 {
		l.syncs.Add(1)
		if err := vfs.Datasync(s.f); err != nil {
			return l.poison(fmt.Errorf("sync segment %d: %w", s.id, err))
		}
		// The poison check after every sync of its own: what this sync made
		// durable is acknowledged by Sync without another look.
		if err := l.otherPoisoned(); err != nil {
			return err
		}
		l.smu.Lock()
		l.durable = max(l.durable, l.written)
		l.smu.Unlock()
	}
	ns, err := l.openSegment(id)
	if err != nil {
		return err
	}
	l.retire(s)
	l.cur = ns
	l.written = max(l.written, MakeLSN(id, 0))
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

// SyncThrough makes the frame [lsn, end) durable, whoever wrote it. A
// process uses it before applying a frame another process wrote and may not
// have synced (it died right after appending).
//
// It writes the frame's bytes again where they are (the same bytes, read
// back and checked) before its fdatasync. A sync alone could vouch for a
// frame that is not on the disk: after a writeback error Linux marks the
// pages clean but not written, and reports the error once to each
// descriptor opened before it - so if the process told of it died before
// writing POISONED, an fdatasync of a descriptor opened now succeeds without
// writing anything. Written again, the pages are dirty, and this sync
// writes them or reports that it could not (then the log is poisoned).
func (l *Log) SyncThrough(lsn, end LSN) error {
	if err := l.Err(); err != nil {
		return err
	}
	id, off := lsn.Segment(), int64(lsn.Offset())
	n := int64(end.Offset()) - off
	if end.Segment() != id || n < headerSize {
		return fmt.Errorf("wal: sync through %v..%v: not one frame", lsn, end)
	}
	f, err := l.fs.OpenFile(l.segPath(id), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("wal: sync segment %d: %w", id, err)
	}
	defer f.Close()
	frame := make([]byte, n)
	if _, err := f.ReadAt(frame, off); err != nil {
		return fmt.Errorf("wal: sync through %v: read the frame: %w", lsn, err)
	}
	if p, ok := decode(frame); !ok || int64(headerSize+len(p)) != n {
		return fmt.Errorf("wal: sync through %v..%v: no whole frame there", lsn, end)
	}
	_, err = f.Seek(off, io.SeekStart)
	if err == nil {
		_, err = f.Write(frame)
	}
	if err != nil {
		return fmt.Errorf("wal: sync through %v: write the frame again: %w", lsn, err)
	}
	l.syncs.Add(1)
	if err := vfs.Datasync(f); err != nil {
		return l.poison(fmt.Errorf("sync segment %d: %w", id, err))
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
	return l.otherPoisoned()
}

// otherPoisoned poisons this process's log, and returns ErrPoisoned, if
// another process marked the log poisoned.
func (l *Log) otherPoisoned() error {
	if l.marked() {
		return l.poison(fmt.Errorf("another process marked the log %s", poisonName))
	}
	return nil
}

// marked reports whether a process marked the log poisoned: the shared
// page's poison word (read from the file by a log that does not map it:
// OpenReadOnly), or the file POISONED.
func (l *Log) marked() bool {
	if g := l.group; g != nil {
		if g.live() && g.w.Load(wPoison) != 0 {
			return true
		}
	} else if data, err := l.fs.ReadFile(filepath.Join(l.dir, groupName)); err == nil && len(data) >= 8*groupWords &&
		binary.NativeEndian.Uint64(data[8*wMagic:]) == groupMagic && binary.NativeEndian.Uint64(data[8*wPoison:]) != 0 {
		return true
	}
	_, err := l.fs.Stat(filepath.Join(l.dir, poisonName))
	return err == nil
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
		// Two marks. The page's word needs no free space, and every live
		// process sees it at its next check (a read-only log reads it
		// from the file); it outlives their deaths (the page is a file)
		// until a replay clears it. The file POISONED survives the page's
		// removal. If the file cannot be written (a
		// failing or full disk: the very conditions of a failed sync), the
		// boot id goes instead, so that the next process to open the log
		// alone replays it even without the page.
		if g := l.group; g != nil && g.live() {
			g.store(wPoison, 1)
		}
		p := filepath.Join(l.dir, poisonName)
		werr := vfs.WriteFile(l.fs, p, []byte(cause.Error()+"\n"))
		if werr == nil {
			werr = l.fs.SyncDir(l.dir)
		}
		if werr != nil {
			l.log.Error("durofs: the poison mark is not written; removing the boot id so that the next process to open the log alone replays it", "dir", l.dir, "err", werr)
			if rerr := l.fs.Remove(filepath.Join(l.dir, bootName)); rerr != nil && !vfs.IsNotExist(rerr) {
				l.log.Error("durofs: remove the boot id", "dir", l.dir, "err", rerr)
			}
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
	if g := l.group; g != nil && g.live() {
		g.store(wPoison, 0)
	}
	l.smu.Lock()
	l.err = nil
	l.smu.Unlock()
	return nil
}

// Stamp returns a value larger than every value Stamp returned before, in
// this process or any other that has the log open (or had it open since the
// machine booted), and at least ms<<16: a clock in ms with 16 bits of
// sequence, shared by the processes of the directory through the page's
// stamp word (one compare-and-swap). It orders what they name by when they
// named it, even within one millisecond and across clock steps back (the
// queues' message names, fsqueue.Options.Order). After Close, or with no
// page, it is this process's alone. ms must be below 2^48.
func (l *Log) Stamp(ms uint64) uint64 {
	if g := l.group; g != nil {
		for g.live() {
			old := g.w.Load(wStamp)
			v := max(ms<<16, old+1)
			if g.w.CompareAndSwap(wStamp, old, v) {
				l.raiseStamp(v)
				return v
			}
		}
	}
	for {
		old := l.stamp.Load()
		v := max(ms<<16, old+1)
		if l.stamp.CompareAndSwap(old, v) {
			return v
		}
	}
}

// raiseStamp raises this process's own stamp, the fallback of Stamp, to v.
func (l *Log) raiseStamp(v uint64) {
	for {
		old := l.stamp.Load()
		if v <= old || l.stamp.CompareAndSwap(old, v) {
			return
		}
	}
}

// End returns an LSN that every frame appended later, by any process, is at
// or after: the tail.
func (l *Log) End() LSN {
	if l.group != nil && l.group.live() {
		return LSN(l.group.w.Load(wTail))
	}
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
// the point below which every reserved frame has been written
// (writtenThrough; in a read-only log, the end of the files). It returns the
// LSN just after the last valid frame it saw (from, if none): every frame
// below it is whole, and scanning again from there sees only frames
// written since. A checkpoint may move to it. fn must not keep payload.
func (l *Log) Scan(from LSN, fn func(lsn LSN, payload []byte) error) (LSN, error) {
	limit := LSN(1<<64 - 1)
	if l.group != nil && l.group.live() {
		limit = l.group.writtenThrough()
		if limit < LSN(l.group.w.Load(wTail)) {
			// A process that died between reservation and write holds
			// the checkpoint back until its slot is cleared.
			l.reapSlots()
			limit = l.group.writtenThrough()
		}
	}
	return l.scan(from, limit, fn)
}

// ScanAll is Scan up to the tail: it also reads frames that were reserved
// and may still be being written (a frame caught mid-write is skipped as
// torn). Use it to look up a record whose writer is known to be done with
// it (dead, or holding no lock the caller holds); its end is no place for a
// checkpoint.
func (l *Log) ScanAll(from LSN, fn func(lsn LSN, payload []byte) error) (LSN, error) {
	limit := LSN(1<<64 - 1)
	if l.group != nil && l.group.live() {
		limit = LSN(l.group.w.Load(wTail))
	}
	return l.scan(from, limit, fn)
}

func (l *Log) scan(from, limit LSN, fn func(lsn LSN, payload []byte) error) (LSN, error) {
	ids, err := l.segments()
	if err != nil {
		return from, err
	}
	end := from
	for _, id := range ids {
		if id < from.Segment() || id > limit.Segment() {
			continue
		}
		off := int64(0)
		if id == from.Segment() {
			off = int64(from.Offset())
		}
		to := int64(-1)
		if id == limit.Segment() {
			to = int64(limit.Offset())
		}
		data, err := l.readSegment(id, off, to)
		if err != nil {
			return end, err
		}
		last := -1
		err = walkFrames(data, off, l.segSize, func(pos int, p []byte) error {
			last = pos + headerSize + len(p)
			return fn(MakeLSN(id, uint32(off+int64(pos))), p)
		})
		if last >= 0 {
			end = MakeLSN(id, uint32(off+int64(last)))
		}
		if err != nil {
			return end, err
		}
		if end < MakeLSN(id, 0) {
			end = MakeLSN(id, 0)
		}
	}
	return end, nil
}

// walkFrames calls fn for every valid frame in data (read from offset off
// of a segment), skipping what is not a frame: zeros, torn fragments.
func walkFrames(data []byte, off, segSize int64, fn func(pos int, payload []byte) error) error {
	pos := 0
	for pos < len(data) && off+int64(pos) < segSize {
		p, ok := decode(data[pos:])
		if !ok {
			next := bytes.IndexByte(data[pos+1:], 0xFF)
			if next < 0 {
				return nil
			}
			pos += 1 + next
			continue
		}
		if err := fn(pos, p); err != nil {
			return err
		}
		pos += headerSize + len(p)
	}
	return nil
}

// reapSlots clears the in-flight words of processes that died between a
// reservation and its write: a slot is dead when its registration's lock
// is free (this process's own slot never is).
func (l *Log) reapSlots() {
	g := l.group
	for i := range MaxProcesses {
		v := g.w.Load(wSlot0 + i)
		if v == 0 || i == l.slot {
			continue
		}
		u, ok, err := l.fs.TryLock(filepath.Join(l.dir, procsDir, strconv.Itoa(i)+".lock"))
		if err != nil || !ok {
			continue
		}
		g.w.CompareAndSwap(wSlot0+i, v, 0)
		_ = u.Unlock()
	}
}

// readSegment reads segment id from offset off to offset to (-1: its end).
func (l *Log) readSegment(id uint32, off, to int64) ([]byte, error) {
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
	size := fi.Size()
	if to >= 0 {
		size = min(size, to)
	}
	if size <= off {
		return nil, nil
	}
	buf := make([]byte, size-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("wal: read segment %d: %w", id, err)
	}
	return buf[:n], nil
}
