package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/provhook"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
	"github.com/durofs/durofs/wal"
)

// Durability selects what an acknowledged call survives. Every process that
// has a directory open at the same time must use the same mode (Open refuses
// one that differs, wal.ErrModeMismatch): a ProcessCrashSafe process's no-op
// log sync would otherwise cover a Durable process's commit in the log's
// group commit, and its checkpoint would pass records whose files nobody
// fsynced.
type Durability int

const (
	// Durable fsyncs files and their directories before a call returns:
	// committed data survives kill -9 and power loss. The default.
	Durable Durability = iota
	// ProcessCrashSafe never fsyncs: committed data survives kill -9 of any
	// process (the kernel's page cache outlives it) but not power loss or an
	// OS crash.
	ProcessCrashSafe
)

// String returns "durable" or "process-crash-safe".
func (d Durability) String() string {
	if d == ProcessCrashSafe {
		return "process-crash-safe"
	}
	return "durable"
}

// Options configure Open. The zero value is a durable provider on the real
// file system and clock.
type Options struct {
	// Durability is Durable (default) or ProcessCrashSafe.
	Durability Durability
	// Clock is the wall clock that lease expiry, visibility times and
	// timers are judged by (tests inject a manual one). Nil means the
	// system clock.
	Clock Clock
	// Logger receives recovery and sweep logs. Nil means slog.Default().
	Logger *slog.Logger
	// Owner names this process in lease files (default "pid@host/uuid").
	Owner string
	// SweepInterval is how often a background sweep finishes commits left by
	// dead processes and removes stale temporary files. Zero means 2 s;
	// negative disables the background sweep (Open still recovers once).
	SweepInterval time.Duration
	// AllowNetworkFS lets Open use a directory on a network file system
	// (NFS, SMB, FUSE). flock and O_APPEND lose their guarantees there, so
	// Open refuses such directories unless this is set.
	AllowNetworkFS bool
	// PollInterval is how often a long-polling fetch re-checks its queues
	// while they hold visible messages it could not take (in flight,
	// locked by another process): work that may become takeable without a
	// new message. Zero means 10 ms. A new message wakes fetches at once -
	// this process's own, and on Linux other processes' through the
	// queues' directory watches - and a fetch whose queues hold nothing
	// visible looks less and less often, up to four times a second (or
	// every PollInterval if longer), and when the first delayed message
	// comes due.
	PollInterval time.Duration
	// CheckpointInterval is how often a background checkpoint makes applied
	// commits durable and trims the write-ahead log (fs_wal.go). Zero means
	// 1 s; negative disables it (tests; the log then only grows).
	CheckpointInterval time.Duration
	// SegmentSize is the size of a write-ahead log segment (zero means
	// wal.DefaultSegmentSize). Every process of a directory must agree.
	SegmentSize int64
	// FileMode is the permission bits of every file durofs creates in the
	// directory (data, temporary and lock files alike). Zero means 0600.
	// It must give the owner read and write; the process umask applies.
	FileMode fs.FileMode
	// DirMode is the permission bits of every directory durofs creates,
	// the directory itself included if Open creates it. Zero means 0700.
	// It must give the owner read, write and search; the umask applies.
	DirMode fs.FileMode
	// Limits bound the sizes of messages, events, payloads, custom status
	// and tags (see Limits; the zero value is the defaults).
	Limits Limits

	// fs is the file system all I/O goes through; nil means the OS file
	// system confined to the directory (baseFS). Not public API: this
	// module's tests and tools set it (internal/provhook) to inject faults,
	// count fsyncs or simulate power loss.
	fs vfs.FS
	// anyMode opens the log with wal.Options.AnyMode: a repairing fsck
	// (registerForRepair), which appends nothing, joins processes of
	// either durability mode and sets none.
	anyMode bool
}

// Clock tells the time: Options.Clock. Its Now must be safe for concurrent
// use.
type Clock interface {
	// Now returns the current wall-clock time.
	Now() time.Time
}

func init() {
	provhook.Register(func(opts any, fsys vfs.FS) (any, bool) {
		o, ok := opts.(Options)
		if ok {
			o.fs = fsys
		}
		return o, ok
	})
}

// FSProvider is the filesystem Provider. Create it with Open; it is safe for
// concurrent use by goroutines and by other processes that Open the same
// directory.
type FSProvider struct {
	dir        string
	format     int    // the FORMAT version Open found (upgradeFormat)
	fs         vfs.FS // durability applied (NoSync in ProcessCrashSafe mode)
	leaseFS    vfs.FS // never syncs: leases are not durable state (see leases.go)
	clk        clock.Clock
	log        *slog.Logger
	owner      string
	durability Durability
	recycler   *fsqueue.Recycler // nil for read-only and fsck providers
	poll       time.Duration
	limits     Limits

	leases *lease.Store
	orchQ  *fsqueue.Queue
	workQ  *fsqueue.Queue

	notifyMu sync.Mutex
	notifyCh [2]chan struct{} // closed to wake fetches: [wakeOrch], [wakeWork]
	quietCh  [2]chan struct{} // closed to wake the fetches of quiet queues
	// quietSince maps a queue to when this process's fetches started to
	// find it quiet, pass after pass (idleWait); absent: not quiet at the
	// last look, or work was taken from it since.
	quietSince map[*fsqueue.Queue]int64

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	stats recoveryStats

	// tmpDir holds the temporary files of atomic replaces outside the queue
	// directories, so the sweeper cleans one directory, not every instance.
	tmpDir string

	// wal is the write-ahead log every commit is appended to (fs_wal.go).
	wal *wal.Log
	// emptyStaged are the empty staged files of dead writers that openLog
	// removed, having the directory alone (paths; a repairing Fsck reports
	// them).
	emptyStaged []string

	// durableDirs are directories whose entries mkdirDurable made durable.
	durableDirs sync.Map

	// unusableWarned maps an instance key to when fetch last warned that it
	// skips the instance (symlinks.go), to log once a minute, not per poll.
	unusableWarned sync.Map

	// gw holds the workflow queues (fs_gw.go).
	gw gwEngine

	// hist keeps recently read histories, decoded (histcache.go).
	hist histCache

	// stuck holds the commits this process could not apply (fs_stuck.go).
	stuck stuckSet

	// held is the instance locks this process's fetches hold (fs_held.go).
	held heldSet
	// peers is the instance locks its fetches found held elsewhere (fs_held.go).
	peers peerSet
	// rejected is the pins that capability filters of its fetch passes
	// rejected (fs_pins.go).
	rejected rejectedPins
}

var _ Provider = (*FSProvider)(nil)

// formatFile is the content of <dir>/FORMAT.
type formatFile struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// FormatVersion is the on-disk format major version this code reads and
// writes. Version 8 lists only a go-workflows instance's latest execution in
// its instance.json, which every workflow task commit writes and logs
// whole; the record of every other execution is in its state.json ("gw")
// and found by id through executions/by-id/ (fs_gw.go), so that a workflow
// that continues as new forever does not make each commit log its whole
// past. This build reads version 7's instance.json listing every execution
// as it is (the first commit that rewrites one moves the others out, in its
// record), and the first process that opens a version-7 (or older)
// directory alone upgrades it, while processes of an older build, which
// would not find the executions moved out, are refused while they have it
// open.
// Version 7 writes instance.json's executions as runs of
// consecutive ids ([[1,1500]], execids.go), so that the file every ack
// writes and logs does not grow with the executions an instance has run;
// this build reads version 6's plain lists, and the first process that
// opens a version-6 (or older) directory alone upgrades it (after the
// replay every upgrade runs), while processes of an older build, which
// could not read the runs, are refused while they have it open.
// Version 6 marks an instance whose deletion lists worker items with
// a file, instances/<key>/deleting, which a work ack looks for instead of
// parsing the instance's lease (fs_deleting.go); a version-5, -4 or -3
// directory is upgraded by the first process that opens it alone, which
// replays its log (the replay applies every committed deletion, so no
// pending one is left without its marker), and refused while processes of
// an older build have it open: their deletions would make no marker.
// Version 5 writes instance.json and state.json in place, sealed
// with a CRC that every reader checks (seal.go); a version-4 or -3 directory
// is read (its files are unsealed, and were only ever replaced atomically)
// and upgraded in place by the first process that opens it alone, and
// refused while processes of an older build have it open: they would read
// files written in place without checking a seal. Version 4 preallocates the write-ahead log's segments and reserves
// each record's place through the log's shared page (package wal); a
// version-3 directory is read and upgraded in place by the first process
// that opens it alone (its log is compatible), and refused while processes
// of an older build have it open: their appends at the end of a segment
// would land where this build reserves space. Version 3 names queue messages <ULID>.<visible>.<route> (fsqueue
// version 3), so a queue's index is built from its names alone; version 2
// (development builds of 0.2.0) named them <ULID>.json and is refused:
// finish its work with the build that wrote it (queues drained, every
// process closed), then start a new directory.
// Version 1 kept per-instance commit records in commits/ and is refused
// too: finish its work with durofs 0.1 (every process closed, commits/
// empty), then start a new directory.
const FormatVersion = 8

// queueVersion is the fsqueue format of the directory's queues
// (fsqueue.json), checked by fsck.
const queueVersion = 3

// Open opens (creating if needed) a durofs directory and recovers any commit
// a dead process left half-applied. Several processes may Open the same
// directory at once. A directory that is neither a durofs directory (it has
// a FORMAT file) nor empty is refused with an error wrapping
// ErrNotDurofsDir, and left as it is.
func Open(dir string, opts Options) (*FSProvider, error) {
	p, err := openLogged(dir, opts)
	if err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := p.Recover(rctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("durofs: open %s: recovery: %w", dir, err)
	}
	if n := p.stuckCount(); n > 0 {
		p.log.Error("durofs: open: committed changes cannot be applied; their instances are not served until they can be (see StuckCommits, durofs fsck)", "dir", dir, "count", n)
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = 2 * time.Second
	}
	if interval > 0 {
		p.every(interval, func() { p.sweepRound(interval) })
	}
	ckpt := opts.CheckpointInterval
	if ckpt == 0 {
		ckpt = time.Second
	}
	if ckpt > 0 {
		p.every(ckpt, func() { p.checkpointRound(ckpt) })
		if p.recycler != nil {
			p.every(min(ckpt, promoteInterval), p.promoteRound)
		}
	}
	return p, nil
}

// every runs round in a background goroutine every interval until Close.
func (p *FSProvider) every(interval time.Duration, round func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				round()
			}
		}
	}()
}

// openLogged is Open up to its recovery: the directory's layout and queues,
// and its write-ahead log opened as this process's registration (openLog:
// a process that has the directory alone has replayed it if due). It starts
// no background work. A repairing Fsck opens a directory this way too.
func openLogged(dir string, opts Options) (*FSProvider, error) {
	if err := opts.checkModes(); err != nil {
		return nil, fmt.Errorf("durofs: open %s: %w", dir, err)
	}
	p := newFSProvider(dir, opts, "")
	if opts.fs == nil && !opts.AllowNetworkFS {
		if err := p.fs.MkdirAll(dir, vfs.DirPerm); err != nil {
			return nil, fmt.Errorf("durofs: open %s: %w", dir, err)
		}
		if kind, err := networkFS(dir); err != nil {
			return nil, fmt.Errorf("durofs: open %s: statfs: %w", dir, err)
		} else if kind != "" {
			return nil, fmt.Errorf("durofs: open %s: %w: the directory is on a %s file system, where flock and O_APPEND do not give durofs's guarantees (set Options.AllowNetworkFS to override)", dir, ErrUnsupportedFS, kind)
		}
	}
	if err := p.initLayout(); err != nil {
		return nil, err
	}
	if opts.fs == nil && opts.SweepInterval >= 0 {
		// Only a long-running provider: one-shot tools (the durofs CLI)
		// turn the background sweep off, and a throughput warning on
		// every command would be noise.
		p.warnNoJournal()
	}
	// The pool of recycled queue files (fsqueue.Recycler): only processes
	// that open the directory for writing use one.
	// Open must not need free space: without a pool, files are created and
	// unlinked as before.
	if rec, err := fsqueue.NewRecycler(p.fs, filepath.Join(dir, recycledDir), fsqueue.RecyclerOptions{BootID: bootID(opts), Logger: p.log, Rand: randOf(opts)}); err != nil {
		p.log.Warn("durofs: open: queue files will not be recycled", "dir", dir, "err", err)
	} else {
		p.recycler = rec
	}
	if err := p.openQueues(); err != nil {
		return nil, err
	}
	// 30 s for each phase that may wait for other processes: the log's
	// open.lock (another process's Open and replay), then recovery's flocks.
	// A replay is not bounded (openLog): it is work, not a wait.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.openLog(ctx, opts); err != nil {
		_ = p.orchQ.Close()
		_ = p.workQ.Close()
		return nil, err
	}
	return p, nil
}

// openLog opens the write-ahead log. A process that has the directory alone
// replays it first (fs_wal.go) if the machine rebooted since the log was
// last used, a sync failed, or the directory's format is older (then it
// upgrades it, upgradeFormat); a poisoned log cannot be opened while other
// processes still have it open.
func (p *FSProvider) openLog(ctx context.Context, opts Options) error {
	l, err := wal.Open(ctx, p.fs, filepath.Join(p.dir, "wal"), wal.Options{SegmentSize: opts.SegmentSize, Logger: p.log, BootID: bootID(opts), NoSync: opts.Durability == ProcessCrashSafe, AnyMode: opts.anyMode})
	if err != nil {
		return fmt.Errorf("durofs: open %s: %w", p.dir, err)
	}
	p.wal = l
	defer l.Ready()
	upgrade := p.format != FormatVersion
	if upgrade && !l.Alone() {
		// They run an older build: refuse the directory while they have it.
		l.Close()
		return fmt.Errorf("durofs: open %s: %w: processes of an older durofs (on-disk format %d) have the directory open; close them, then open it with this build (which upgrades it to format %d)", p.dir, ErrUnsupportedFS, p.format, FormatVersion)
	}
	if !l.Alone() {
		if err := l.Err(); err != nil {
			l.Close()
			return fmt.Errorf("durofs: open %s: %w (close every process using the directory; the first to reopen it replays the log)", p.dir, err)
		}
		return nil
	}
	if !l.ReadOnly() {
		// Alone: no writer is alive, so an empty staged file is a dead
		// writer's (tornStaged leaves them to this). Before Ready: no
		// other process can start writing meanwhile.
		if p.emptyStaged, err = p.removeEmptyStaged(); err != nil {
			p.log.Warn("durofs: open: empty staged files of dead writers stay", "dir", p.dir, "err", err)
		}
	}
	if l.SameBoot() && l.Err() == nil && !upgrade {
		// Alone, but in the same boot as every process before and no sync
		// failed: the page cache holds what they applied, and Recover
		// finishes what the dead left marked pending.
		return nil
	}
	// The replay is not bounded by ctx, which bounds the wait for the log's
	// open.lock: a replay that outlasted it would fail having saved nothing
	// (the checkpoint moves only at its end), and so would every later Open.
	// Alone, no other durofs process holds a flock it needs.
	if err := p.replayAll(context.WithoutCancel(ctx)); err != nil {
		l.Close()
		return fmt.Errorf("durofs: open %s: replay the write-ahead log: %w", p.dir, err)
	}
	if upgrade {
		if err := p.upgradeFormat(); err != nil {
			l.Close()
			return err
		}
	}
	// Only now: a replay cut short by a kill leaves the old boot id, and
	// the next process to open the directory alone replays again. So does
	// a failure to record it (a full disk): a replay is safe to repeat, and
	// Open must not need free space.
	if err := l.RecordBoot(); err != nil {
		p.log.Warn("durofs: open: the boot id is not recorded; the next process to open the directory alone replays the log again", "dir", p.dir, "err", err)
	}
	return nil
}

// bootID is the function that reads the running boot's id: the kernel's,
// or a simulated machine's (tests).
func bootID(opts Options) func() (string, error) {
	if b, ok := opts.fs.(interface{ BootID() (string, error) }); ok {
		return b.BootID
	}
	return wal.LinuxBootID
}

// randOf returns the random source of a simulated machine (vfs.MemFS.Rand:
// deterministic, so that a test's run repeats exactly), or nil.
func randOf(opts Options) io.Reader {
	if r, ok := opts.fs.(interface{ Rand() io.Reader }); ok {
		return r.Rand()
	}
	return nil
}

// newFSProvider builds a provider value from opts with defaults applied; it
// does no I/O. ownerSuffix, if set, replaces the random part of the default
// owner name.
func newFSProvider(dir string, opts Options, ownerSuffix string) *FSProvider {
	base := baseFS(dir, opts)
	fsys := base
	if opts.Durability == ProcessCrashSafe {
		fsys = vfs.NoSync(base)
	}
	var clk clock.Clock = clock.System{}
	if opts.Clock != nil {
		clk = opts.Clock
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	owner := opts.Owner
	if owner == "" {
		if ownerSuffix == "" {
			ownerSuffix = uuid.NewString()[:8]
		}
		host, _ := os.Hostname()
		owner = strconv.Itoa(os.Getpid()) + "@" + host + "/" + ownerSuffix
	}
	poll := opts.PollInterval
	if poll <= 0 {
		poll = 10 * time.Millisecond
	}
	p := &FSProvider{
		dir: dir, fs: fsys, leaseFS: vfs.NoSync(base), clk: clk, log: log, owner: owner,
		durability: opts.Durability, poll: poll, limits: opts.Limits.withDefaults(), tmpDir: filepath.Join(dir, "tmp"),
		notifyCh: [2]chan struct{}{make(chan struct{}), make(chan struct{})},
		quietCh:  [2]chan struct{}{make(chan struct{}), make(chan struct{})}, stop: make(chan struct{}),
	}
	// Leases are volatile (never synced): written in place, they cost no
	// file creation per fetch and release (lease package, "Writing in place").
	p.leases = lease.NewStore(p.leaseFS, clk).WithTempDir(p.tmpDir).WithInPlaceWrites()
	return p
}

// queueOptions are the options of every queue whose consumers are the
// fetches of side w. Claims are leases: never synced (a power loss may
// leave one unreadable, which counts as no claim); a work ack's commit
// point is the log. A message another process adds wakes this process's
// fetches of side w that wait on quiet queues at once (notifyQuiet; the
// poll interval is the fallback where directories cannot be watched).
func (p *FSProvider) queueOptions(w wake) fsqueue.Options {
	return fsqueue.Options{Clock: p.clk, Logger: p.log, IndexAttr: attrKey, VolatileClaims: true,
		Notify: func() { p.notifyQuiet(w) }, Order: p.nameOrder, Recycler: p.recycler}
}

// nameOrder is the queues' shared naming clock (fsqueue.Options.Order): the
// log's stamps, so that every process's message names are strictly
// increasing in the order they were made. Nothing is named before openLog.
func (p *FSProvider) nameOrder(ms uint64) uint64 {
	if p.wal == nil {
		return ms << 16
	}
	return p.wal.Stamp(ms)
}

// openQueues opens the orchestrator and worker queues.
func (p *FSProvider) openQueues() error {
	var err error
	if p.orchQ, err = fsqueue.Open(p.fs, filepath.Join(p.dir, "queues", orchQueueName), p.queueOptions(wakeOrch)); err != nil {
		return fmt.Errorf("durofs: open %s: %w", p.dir, err)
	}
	if p.workQ, err = fsqueue.Open(p.fs, filepath.Join(p.dir, "queues", "worker"), p.queueOptions(wakeWork)); err != nil {
		_ = p.orchQ.Close()
		return fmt.Errorf("durofs: open %s: %w", p.dir, err)
	}
	return nil
}

// initLayout checks FORMAT and creates the top-level folders. An existing
// FORMAT is checked before anything is created, so a directory this build
// refuses (format version 1, say) is left exactly as it was.
func (p *FSProvider) initLayout() error {
	path := filepath.Join(p.dir, "FORMAT")
	data, err := p.fs.ReadFile(path)
	fresh := vfs.IsNotExist(err)
	if err != nil && !fresh {
		return fmt.Errorf("durofs: open %s: read FORMAT: %w", p.dir, err)
	}
	if !fresh {
		if err := checkFormat(data, path); err != nil {
			return fmt.Errorf("durofs: open %s: %w", p.dir, err)
		}
		var f formatFile
		_ = jsonUnmarshal(data, &f)
		p.format = f.Version
	} else if err := p.checkForeign(); err != nil {
		return err
	}
	for _, d := range []string{"instances", "children", "wal", "quarantine", "tmp", filepath.Join("queues", orchQueueName), filepath.Join("queues", "worker")} {
		if err := p.mkdirDurable(filepath.Join(p.dir, d)); err != nil {
			return fmt.Errorf("durofs: open %s: %w", p.dir, err)
		}
	}
	if !fresh {
		return nil
	}
	want, _ := jsonMarshal(formatFile{Format: "durofs", Version: FormatVersion})
	if err := vfs.CreateExclusive(p.fs, path, want, false); err != nil && !errors.Is(err, vfs.ErrExist) {
		return fmt.Errorf("durofs: open %s: write FORMAT: %w", p.dir, err)
	}
	if data, err = p.fs.ReadFile(path); err != nil {
		return fmt.Errorf("durofs: open %s: read FORMAT: %w", p.dir, err)
	}
	if err := checkFormat(data, path); err != nil { // another process created it meanwhile
		return fmt.Errorf("durofs: open %s: %w", p.dir, err)
	}
	return nil
}

// topLevel are the entries Open creates in a durofs directory. A directory
// without FORMAT that holds only these (and FORMAT's temporary file) is one
// whose creation is in progress in another process or was cut by a crash;
// lost+found is what mkfs leaves at the root of a new file system.
var topLevel = map[string]bool{
	"instances": true, "children": true, "wal": true, "quarantine": true, "tmp": true, "queues": true, "sessions": true, "unapplied": true, "lost+found": true,
	recycledDir: true,
}

// recycledDir holds the pool of recycled queue files (fsqueue.Recycler):
// recycled/<boot id>/<uuid>, contents meaningless.
const recycledDir = "recycled"

// checkForeign refuses a directory that has no FORMAT file but holds
// something Open would not have created (a stray file, another program's
// data): Open makes a durofs directory only of an empty one, so that a
// mistyped path never gets durofs's folders mixed into someone's files. The
// error wraps ErrNotDurofsDir; nothing is created.
func (p *FSProvider) checkForeign() error {
	names, err := p.fs.ReadDirNames(p.dir)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durofs: open %s: %w", p.dir, err)
	}
	var foreign []string
	for _, n := range names {
		if !topLevel[n] && !strings.HasPrefix(n, vfs.TempPrefix+"FORMAT-") {
			foreign = append(foreign, n)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	slices.Sort(foreign)
	more := ""
	if len(foreign) > 3 {
		more = fmt.Sprintf(" and %d more", len(foreign)-3)
		foreign = foreign[:3]
	}
	return fmt.Errorf("durofs: open %s: %w: it has no FORMAT file but holds %s%s; durofs makes a new directory only of an empty one (or a missing one)",
		p.dir, ErrNotDurofsDir, strings.Join(foreign, ", "), more)
}

// checkFormat checks the content of a FORMAT file: nil if this build reads
// it, else an error wrapping ErrUnsupportedFS that says why (and, for format
// version 1, what to do).
func checkFormat(data []byte, path string) error {
	var f formatFile
	if err := jsonUnmarshal(data, &f); err != nil || f.Format != "durofs" {
		return fmt.Errorf("%w: %s is not a durofs FORMAT file", ErrUnsupportedFS, path)
	}
	if f.Version == 1 {
		return fmt.Errorf("%w: on-disk format version 1 (per-instance commit records) is not read by this build, which commits through a write-ahead log (version %d); finish the directory's work with durofs 0.1, then start a new directory", ErrUnsupportedFS, FormatVersion)
	}
	if f.Version == 2 {
		return fmt.Errorf("%w: on-disk format version 2 (queue messages named <ULID>.json) is not read by this build, which names them <ULID>.<visible>.<route>.json (version %d); finish the directory's work with the build that wrote it (let its queues drain, close every process), then start a new directory", ErrUnsupportedFS, FormatVersion)
	}
	if f.Version != FormatVersion && (f.Version < 3 || f.Version > 7) {
		return fmt.Errorf("%w: on-disk format version %d (this build reads version %d)", ErrUnsupportedFS, f.Version, FormatVersion)
	}
	return nil
}

// upgradeFormat moves a version-3 to -7 directory to FormatVersion, in
// place, while this process has its log alone (no older process can be
// running), after openLog replayed the log: an older build's deletion made
// no marker (FormatVersion), and a replay applies every committed one. A
// replay cut short leaves the old FORMAT, so the next process to open the
// directory alone replays again.
func (p *FSProvider) upgradeFormat() error {
	data, _ := jsonMarshal(formatFile{Format: "durofs", Version: FormatVersion})
	if err := vfs.WriteFile(p.fs, filepath.Join(p.dir, "FORMAT"), data); err != nil {
		return fmt.Errorf("durofs: open %s: upgrade FORMAT to version %d: %w", p.dir, FormatVersion, err)
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		return fmt.Errorf("durofs: open %s: upgrade FORMAT to version %d: %w", p.dir, FormatVersion, err)
	}
	p.format = FormatVersion
	return nil
}

// mkdirDurable creates dir (and parents) if needed and makes sure its entry
// is durable: it fsyncs the parent of every directory on the path once per
// process. Existence alone proves nothing: a directory may have been created
// by a path that does not sync (the lease store creates instance
// directories through the non-durable lease FS) or by a process that died
// before syncing its parent.
func (p *FSProvider) mkdirDurable(dir string) error {
	dir = filepath.Clean(dir)
	if _, ok := p.durableDirs.Load(dir); ok {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := p.mkdirDurable(parent); err != nil {
			return err
		}
	}
	if err := p.fs.MkdirAll(dir, vfs.DirPerm); err != nil {
		return err
	}
	if parent != dir {
		if err := p.fs.SyncDir(parent); err != nil {
			return err
		}
	}
	p.durableDirs.Store(dir, struct{}{})
	return nil
}

// writeFile atomically replaces path, with its temporary file in tmp/.
func (p *FSProvider) writeFile(path string, data []byte) error {
	return vfs.WriteFileVia(p.fs, p.tmpDir, path, data)
}

// Close stops the background sweeper. It does not release leases: an
// in-flight item simply expires, as it would if the process died.
func (p *FSProvider) Close() error {
	p.stopOnce.Do(func() { close(p.stop) })
	p.wg.Wait()
	var werr error
	if p.wal != nil {
		if p.wal.Err() == nil && !p.readOnlyLog() && p.wal.Usable() {
			// A last checkpoint, so that the next Open has little to
			// replay (best effort: another process may hold the lock).
			ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
			if err := p.backgroundPass(ctx, false); err != nil {
				p.log.Warn("durofs: checkpoint at close", "err", err)
			}
			cancel()
		}
		werr = p.wal.Close()
	}
	return errors.Join(p.orchQ.Close(), p.workQ.Close(), p.gwClose(), werr)
}

// Name implements Provider.
func (p *FSProvider) Name() string { return "durofs" }

// Version implements Provider.
func (p *FSProvider) Version() string { return Version }

// Dir returns the provider's directory.
func (p *FSProvider) Dir() string { return p.dir }

// Durability returns the provider's durability mode.
func (p *FSProvider) Durability() Durability { return p.durability }

func (p *FSProvider) nowMs() int64 { return clock.Ms(p.clk.Now()) }

// wake says which of this process's long-polling fetches a change may
// give work: those of orchestration items and workflow tasks (wakeOrch),
// those of work items and activity tasks (wakeWork), or both.
type wake uint8

const (
	wakeOrch wake = 1 << iota
	wakeWork
	wakeAll = wakeOrch | wakeWork
)

// wakeFor is what publishing messages to queues qs wakes: the fetches of
// the side each queue belongs to.
func wakeFor(qs []queueRef) wake {
	var w wake
	for _, q := range qs {
		if q.Queue == "worker" || strings.HasPrefix(q.Queue, gwActivityPrefix) {
			w |= wakeWork
		} else {
			w |= wakeOrch
		}
	}
	return w
}

// notify wakes this process's long-polling fetches of the sides in w, for
// a change of this process (a fetch of the other side would find nothing
// new: waking it costs a pass over its queue and a runnable goroutine).
func (p *FSProvider) notify(w wake) {
	p.notifyMu.Lock()
	for i := range p.notifyCh {
		if w&(1<<i) != 0 {
			close(p.notifyCh[i])
			p.notifyCh[i] = make(chan struct{})
		}
	}
	p.notifyMu.Unlock()
}

// notifyQuiet wakes the fetches of side w that wait on quiet queues (see
// idleWait), for a message another process added (the queues' watches
// call it: queueOptions). A fetch whose queues hold visible messages it
// could not take does not listen: it looks again within the poll
// interval anyway, and waking every such fetch of every process for each
// message would only make them collide.
func (p *FSProvider) notifyQuiet(w wake) {
	p.notifyMu.Lock()
	for i := range p.quietCh {
		if w&(1<<i) != 0 {
			close(p.quietCh[i])
			p.quietCh[i] = make(chan struct{})
		}
	}
	p.notifyMu.Unlock()
}

// wakeup is what a fetch of one side waits on: the next notify (own) and
// the next notifyQuiet (other).
type wakeup struct{ own, other <-chan struct{} }

// wakeupFor returns the channels that the next notify and notifyQuiet of
// side w (wakeOrch or wakeWork) close. A fetch takes them before its pass,
// so that a change after the pass wakes it.
func (p *FSProvider) wakeupFor(w wake) wakeup {
	i := 0
	if w == wakeWork {
		i = 1
	}
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	return wakeup{p.notifyCh[i], p.quietCh[i]}
}

// testHookWaitForWork, when set (by tests only), runs when a long-polling
// fetch starts waiting for work, with how long it will wait at most.
var testHookWaitForWork func(wait time.Duration)

// waitForWork blocks until this process's notify of the fetch's side, or
// with quiet (see idleWait) other processes' messages (notifyQuiet), or
// until wait passes, the deadline passes, or ctx ends. It returns false
// when the caller should stop polling.
func (p *FSProvider) waitForWork(ctx context.Context, wk wakeup, deadline time.Time, wait time.Duration, quiet bool) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	left = min(left, wait)
	t := time.NewTimer(left)
	defer t.Stop()
	if testHookWaitForWork != nil {
		testHookWaitForWork(left)
	}
	other := wk.other
	if !quiet {
		other = nil // never ready
	}
	select {
	case <-wk.own:
	case <-other:
	case <-t.C:
	case <-ctx.Done():
		return false
	case <-p.stop:
		return false
	}
	return time.Now().Before(deadline)
}

// maxIdlePoll bounds how long a fetch whose queues are quiet waits between
// passes (idleWait), unless the poll interval is longer.
const maxIdlePoll = 250 * time.Millisecond

// quietBeforeBackoff is how long a queue must have been quiet, pass after
// pass with no work taken from it, before its fetches back off (idleWait):
// a busy queue that runs dry for a moment - every item of a fan-out
// claimed, a chain between two steps - is polled as before, and only one
// that stays idle is looked at less often.
const quietBeforeBackoff = time.Second

// idleWait is how long a fetch that found nothing in qs waits before its
// next pass (unless woken), prev being its previous wait (0 before the
// first), and whether the queues are quiet. While any message of qs is
// visible - in flight under a claim, its instance locked by another
// process, held back by a session: it may become takeable without any new
// message - or while a queue has no watch, the fetch polls every poll
// interval, as it always did, and other processes' new messages do not
// wake it. When every queue is quiet (fsqueue.Queue.Quiet: nothing
// visible, and other processes' additions are reported at once), nothing
// can become takeable but by a new message, which wakes the fetch
// (notifyQuiet), or by a delayed one coming due. Once they have been quiet
// for quietBeforeBackoff (by the provider's clock) the wait doubles with
// each empty pass, up to maxIdlePoll, and never past the moment the
// earliest delayed message becomes visible. An idle worker process looks
// a few times a second instead of a hundred times per fetch. A fetch
// listens to other processes' messages (quiet) only while it backs off, or
// when its poll interval is longer than maxIdlePoll: waking every fetch of
// every process for each message, under load, only makes them collide.
func (p *FSProvider) idleWait(prev time.Duration, qs ...*fsqueue.Queue) (time.Duration, bool) {
	now := p.nowMs()
	for _, q := range qs {
		_, quiet, err := q.Quiet(now)
		if err != nil || !quiet {
			p.busyAgain(qs...)
			return p.poll, false
		}
	}
	backoff := now-p.quietStart(now, qs) >= quietBeforeBackoff.Milliseconds()
	if !backoff && p.poll <= maxIdlePoll {
		return p.poll, false // not yet backing off, nor listening
	}
	// It will listen: arm the queues' watches, checking again (a message
	// added since the look above is seen here, or notified).
	until := int64(math.MaxInt64)
	for _, q := range qs {
		u, quiet, err := q.ArmQuiet(now)
		if err != nil || !quiet {
			return p.poll, false
		}
		until = min(until, u)
	}
	// Not yet backing off, the poll interval is longer than maxIdlePoll:
	// a choice to look rarely, so such a fetch listens at once, or another
	// process's message would wait that long.
	w := p.poll
	if backoff {
		w = min(max(2*prev, p.poll), max(maxIdlePoll, p.poll))
	}
	if until != math.MaxInt64 {
		w = min(w, time.Duration(until-now)*time.Millisecond)
	}
	return w, true
}

// quietStart records that qs were all quiet at now and returns since when
// they all have been (the latest of their starts).
func (p *FSProvider) quietStart(now int64, qs []*fsqueue.Queue) int64 {
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	if p.quietSince == nil {
		p.quietSince = map[*fsqueue.Queue]int64{}
	}
	since := int64(math.MinInt64)
	for _, q := range qs {
		t, ok := p.quietSince[q]
		if !ok {
			t = now
			p.quietSince[q] = t
		}
		since = max(since, t)
	}
	return since
}

// busyAgain records that qs were not quiet, or that a fetch took work
// from them: their fetches poll at the poll interval until they have been
// quiet for quietBeforeBackoff again.
func (p *FSProvider) busyAgain(qs ...*fsqueue.Queue) {
	p.notifyMu.Lock()
	for _, q := range qs {
		delete(p.quietSince, q)
	}
	p.notifyMu.Unlock()
}
