package fsqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// Errors returned by the queue. They are permanent: retrying the same call
// gives the same answer.
var (
	// ErrNotHolder means the token does not match the message's current
	// claim: the lease was never ours, was abandoned, or was taken over
	// after it expired.
	ErrNotHolder = errors.New("fsqueue: not the claim holder")
	// ErrExpired means the token still matches but the lease has expired.
	ErrExpired = errors.New("fsqueue: claim expired")
	// ErrNotFound means the message does not exist.
	ErrNotFound = errors.New("fsqueue: message not found")
	// ErrInvalidName means a message name is not of the form
	// <ULID>.<visible>.<route> (name.go) or does not match its message's
	// visibility time and route, or a token does not start with a name.
	ErrInvalidName = errors.New("fsqueue: invalid message name")
	// ErrCorrupt means a message file exists but does not decode (damaged,
	// or a staged file left partial by a crash: see [Queue.StageDeferred]),
	// or a claim file is not the message's claim (see [ClaimGuard.Read]).
	ErrCorrupt = errors.New("fsqueue: corrupt message or claim file")
	// ErrUnsupportedVersion: the queue directory's fsqueue.json records a
	// format this build does not read.
	ErrUnsupportedVersion = errors.New("fsqueue: unsupported queue format version")
	// ErrIndexAttr: the queue was created with another Options.IndexAttr
	// (recorded in fsqueue.json); its names carry routes of that attribute.
	ErrIndexAttr = errors.New("fsqueue: the queue routes by another attribute")
)

const (
	claimsDirName = "claims"
	configName    = "fsqueue.json"
	stagedPrefix  = ".staged-"
	msgSuffix     = ".json"

	// mtimeMargin is how long after a directory's mtime a listing must have
	// started for the listing to be trusted while the mtime stays the same
	// (see settled).
	mtimeMargin = 50 * time.Millisecond
	// coarseMargin is that margin for a timestamp that is a whole second,
	// which may come from a file system whose timestamps are that coarse
	// (ext4 with 128-byte inodes, ext3, HFS+, some NFS servers; FAT's are
	// two seconds): there a change a second after the last one may leave
	// the timestamp as it was.
	coarseMargin = 2*time.Second + mtimeMargin

	// enqueueNameRetries bounds the retries of Enqueue with a fresh name when
	// a generated name is already taken.
	enqueueNameRetries = 3
)

// Message is one queue message as stored in <name>.json.
type Message struct {
	// Name is the message's ULID; it orders messages (FIFO).
	Name string `json:"name"`
	// VisibleAtMs is when the message becomes visible (ms since the epoch);
	// 0 or a past time means at once.
	VisibleAtMs int64 `json:"visible_at_ms"`
	// EnqueuedAtMs is when the message was enqueued (ms since the epoch).
	EnqueuedAtMs int64 `json:"enqueued_at_ms"`
	// Attrs are small routing attributes the caller filters on (for
	// example "instance", "session", "tag").
	Attrs map[string]string `json:"attrs,omitempty"`
	// Payload is the message body, any JSON value.
	Payload json.RawMessage `json:"payload"`
}

// Header is a message without its payload: what [Queue.Header] returns.
type Header struct {
	// Name is the message's name.
	Name string
	// VisibleAtMs and EnqueuedAtMs are the message's (ms since the epoch).
	VisibleAtMs, EnqueuedAtMs int64
	// Attrs is shared with the queue's cache: callers must not mutate it.
	Attrs map[string]string
}

// Options configures [Open].
type Options struct {
	// Clock tells the time for visibility and leases; nil means the system
	// clock.
	Clock clock.Clock
	// Logger receives warnings about unreadable files; nil means
	// slog.Default().
	Logger *slog.Logger
	// IndexAttr, if set, names the attribute whose value routes a message:
	// every message name carries RouteOf(its value), so that ListRoute(value)
	// finds that value's messages without scanning the whole queue (the
	// provider routes by instance). It is recorded in fsqueue.json by
	// whoever creates the queue; opening it with another is refused.
	IndexAttr string
	// VolatileClaims makes the claims written by ClaimNext, Renew, Abandon
	// and ClaimGuard.Write unsynced, like leases: a power loss may lose a
	// claim (the message is delivered again, at least once) or leave it
	// unreadable (treated as no claim).
	VolatileClaims bool
	// Notify, if set, is called after [Queue.Quiet] reported the queue
	// quiet, once, when the index learns of a message that this Queue did
	// not add itself: another process's Enqueue or Publish (or a file put
	// in the directory by hand), seen through the directory watch - a
	// long-polling consumer's cue to look again. A goroutine waits on the
	// watch (inotify, Linux) while a Quiet answer is outstanding, so Notify
	// comes within a scheduling delay of the other process's rename; the
	// rest of the time the index is brought up to date only by the calls
	// that read it, as without Notify. It is called with the queue's index
	// lock held, so it must not call the Queue.
	Notify func()
	// Order, if set, is a clock shared by every process that names
	// messages for the queue: Order(ms) returns a value larger than every
	// value it returned before, in any of them, and at least ms<<16 (ms is
	// the queue's clock; the low 16 bits are a sequence within the ms). A
	// name's ULID then holds the value's ms as its time and its sequence as
	// its first two bytes of entropy, so names are strictly increasing
	// across those processes: a message named after another was named - an
	// event raised after the instance's start was committed, say - sorts
	// after it, even within one clock ms or across a clock step back.
	// Without it, names are strictly increasing only within a process
	// (NewName). The provider uses its write-ahead log's (wal.Log.Stamp).
	Order func(ms uint64) uint64
	// Recycler, if set, keeps the files of removed messages and claims for
	// new staged messages and claims (recycle.go); queues of one store
	// share one. Nil: files are created and unlinked.
	Recycler *Recycler
}

// Queue is a message queue in one directory. It is safe for concurrent use
// by goroutines, and several processes may open the same directory.
type Queue struct {
	fsys      vfs.FS
	dir       string
	claimsDir string
	clock     clock.Clock
	log       *slog.Logger
	opts      Options

	list     listCache
	msgs     msgCache
	claims   claimCache
	deferred deferrals
	removals removalGens

	linkWarn   sync.Mutex // guards linkWarnAt (see symlink.go)
	linkWarnAt time.Time
}

// listCache is the in-memory index of the queue: the entries its
// directory's names stand for (index.go).
//
// An index error invalidates the index; the next call relists. An error
// while bringing the index up to date (listing the directory, draining the
// directory watch) may leave it incomplete: a listing stopped half way, the
// rest of a drained batch of watch events lost. So refreshLocked drops the
// index on every error (invalidateLocked), and the next call lists the
// directory again and builds it anew. The index is never left valid but
// incomplete. Building it opens no message file: everything is in the names.
type listCache struct {
	mu       sync.Mutex
	valid    bool
	mtime    time.Time // mtime of dir observed by the last listing
	listedAt time.Time // real time taken before that listing's Stat
	idx      *index    // nil until the first listing and after an error
	// indexed: the directory was listed into an index once; the Queue
	// keeps it up to date from then on, as its reads do (Indexed).
	indexed bool
	// side holds the staged and temporary files of the directory (names
	// starting with ".staged-" or vfs.TempPrefix), kept with the index, so
	// that sweepers of a process whose index a watch keeps up to date find
	// them without listing the directory (see sideFiles).
	side map[string]struct{}
	// watch, when not nil, reports every process's changes to the
	// directory (inotify); without it the index falls back to the mtime rule.
	watch      vfs.DirWatch
	watchTried bool
	// rewatch: a failed watch was dropped (dropWatchLocked); the directory
	// is watched anew on every refresh until that works or the directory
	// is found to exist (a replacement may not have created it yet).
	rewatch bool
	// own holds the file names this Queue is adding (Enqueue, Publish,
	// Restore) while its watch is on and its index valid, so that the
	// watch's event for such a name does not call Options.Notify: the
	// adder tells its own consumers. A name leaves it when its event is
	// applied or the add fails, and the set is cleared when the index is
	// dropped or listed anew (the events it waited for are gone). It holds
	// at most ownMax names and the adds in progress: an add that finds it
	// full applies the pending events first (trimOwnLocked).
	own map[string]struct{}
	// notifying: a notifyLoop runs for the watch, so every other process's
	// addition can be reported. armed: a Quiet answer is outstanding, and
	// the next such addition calls Options.Notify (and disarms); arm wakes
	// the loop to wait on the watch, done stops it.
	notifying, armed bool
	arm, done        chan struct{}
}

type queueConfig struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	IndexAttr string `json:"index_attr,omitempty"`
}

// configVersion is the queue format's version. Version 1 locked claims
// through shard lock files (locks/NN.lock); version 2 locks each message
// file itself; version 3 names messages <ULID>.<visible>.<route> (name.go),
// where version 2 named them <ULID>. Processes of different versions would
// not exclude each other or would not see each other's messages, so a queue
// of another version is refused.
const configVersion = 3

// oldVersions says what the refused versions were.
var oldVersions = map[int]string{
	1: "claims locked through shard lock files",
	2: "messages named <ULID>.json, their visibility and route only in the file",
}

// Open opens (creating if needed) the queue in dir: it creates dir and
// claims/ and records the format in fsqueue.json.
func Open(fsys vfs.FS, dir string, opts Options) (*Queue, error) {
	q := &Queue{
		fsys:      fsys,
		dir:       dir,
		claimsDir: filepath.Join(dir, claimsDirName),
		clock:     opts.Clock,
		log:       opts.Logger,
		opts:      opts,
	}
	if q.clock == nil {
		q.clock = clock.System{}
	}
	if q.log == nil {
		q.log = slog.Default()
	}
	for _, d := range []string{dir, q.claimsDir} {
		if err := fsys.MkdirAll(d, vfs.DirPerm); err != nil {
			return nil, fmt.Errorf("fsqueue: open %s: %w", dir, err)
		}
	}
	// Make the directories themselves durable (cheap when nothing is dirty).
	for _, d := range []string{filepath.Dir(filepath.Clean(dir)), dir} {
		if err := fsys.SyncDir(d); err != nil {
			return nil, fmt.Errorf("fsqueue: open %s: sync dir: %w", dir, err)
		}
	}
	if err := q.loadConfig(); err != nil {
		return nil, err
	}
	return q, nil
}

// loadConfig reads fsqueue.json, creating it if it does not exist, and
// checks the format.
func (q *Queue) loadConfig() error {
	path := filepath.Join(q.dir, configName)
	for range 2 {
		data, err := q.fsys.ReadFile(path)
		if err == nil {
			var cfg queueConfig
			if err := json.Unmarshal(data, &cfg); err != nil {
				return fmt.Errorf("fsqueue: open %s: corrupt %s: %w", q.dir, configName, err)
			}
			if cfg.Format == "fsqueue" && cfg.Version < configVersion {
				return fmt.Errorf("fsqueue: open %s: %w: version %d (%s); this build reads version %d only: "+
					"finish the queue's work with the build that wrote it, then start a new queue",
					q.dir, ErrUnsupportedVersion, cfg.Version, oldVersions[cfg.Version], configVersion)
			}
			if cfg.Format != "fsqueue" || cfg.Version != configVersion {
				return fmt.Errorf("fsqueue: open %s: %w: format %q version %d (this build reads version %d)",
					q.dir, ErrUnsupportedVersion, cfg.Format, cfg.Version, configVersion)
			}
			if cfg.IndexAttr != q.opts.IndexAttr {
				return fmt.Errorf("fsqueue: open %s: %w: the queue routes by attribute %q, not %q",
					q.dir, ErrIndexAttr, cfg.IndexAttr, q.opts.IndexAttr)
			}
			return nil
		}
		if !vfs.IsNotExist(err) {
			return fmt.Errorf("fsqueue: open %s: %w", q.dir, err)
		}
		body, err := json.Marshal(queueConfig{Format: "fsqueue", Version: configVersion, IndexAttr: q.opts.IndexAttr})
		if err != nil {
			return fmt.Errorf("fsqueue: open %s: %w", q.dir, err)
		}
		err = vfs.CreateExclusive(q.fsys, path, body, false)
		if err == nil {
			return nil
		}
		if !vfs.IsExist(err) {
			return fmt.Errorf("fsqueue: open %s: %w", q.dir, err)
		}
		// Another process created it first: read theirs.
	}
	return fmt.Errorf("fsqueue: open %s: cannot read or create %s", q.dir, configName)
}

// Dir returns the queue directory.
func (q *Queue) Dir() string { return q.dir }

// ---------------------------------------------------------------------------
// Names

// nameFromFile returns the message name of a directory entry
// "<name>.json", or ok=false for anything else.
func nameFromFile(file string) (string, bool) {
	name, ok := strings.CutSuffix(file, msgSuffix)
	if !ok || !validName(name) {
		return "", false
	}
	return name, true
}

func checkName(name string) error {
	_, err := entryOf(name)
	return err
}

// entryOf parses a message name ([ErrInvalidName] if it is not one).
func entryOf(name string) (Entry, error) {
	e, ok := parseName(name)
	if !ok {
		return Entry{}, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return e, nil
}

// entryOfFile parses a directory entry "<name>.json" in place.
func entryOfFile(file []byte) (Entry, bool) {
	if len(file) != nameLen+len(msgSuffix) || string(file[nameLen:]) != msgSuffix {
		return Entry{}, false
	}
	return parseName(file[:nameLen])
}

func (q *Queue) msgPath(name string) string { return filepath.Join(q.dir, name+msgSuffix) }
func (q *Queue) stagedPath(name string) string {
	return filepath.Join(q.dir, stagedPrefix+name+msgSuffix)
}
func (q *Queue) claimPath(name string) string { return filepath.Join(q.claimsDir, name+msgSuffix) }

// ---------------------------------------------------------------------------
// Writing messages

// encode validates m and returns its file content. It fills EnqueuedAtMs,
// and Name if it is empty; a Name that is not the one for m's visibility
// time and route is refused.
func (q *Queue) encode(m *Message) ([]byte, error) {
	if m.Name == "" {
		if m.Name = q.NewName(m.VisibleAtMs, q.routeValue(m)); m.Name == "" {
			return nil, fmt.Errorf("fsqueue: encode message: %w: the clock is beyond the ULID time range", ErrInvalidName)
		}
	}
	e, err := entryOf(m.Name)
	if err != nil {
		return nil, err
	}
	if clampVisible(m.VisibleAtMs) != e.VisibleAtMs || RouteOf(q.routeValue(m)) != e.Route {
		return nil, fmt.Errorf("fsqueue: encode message: %w: %s is not the name of a message visible at %d with %s %q (use NewName)",
			ErrInvalidName, m.Name, m.VisibleAtMs, q.opts.IndexAttr, q.routeValue(m))
	}
	if m.EnqueuedAtMs == 0 {
		m.EnqueuedAtMs = clock.Ms(q.clock.Now())
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fsqueue: encode message %s: %w", m.Name, err)
	}
	return data, nil
}

// Enqueue durably publishes m as <name>.json if that name is free, and
// returns the name. If m.Name is empty a fresh name is assigned (and a new
// one tried if it is taken); otherwise it must be the name [Queue.NewName]
// made for m's VisibleAtMs and IndexAttr attribute ([ErrInvalidName]) and
// not in use (an error wrapping fs.ErrExist).
// A zero EnqueuedAtMs is set to now. When Enqueue returns nil the message is
// durable (if the FS syncs).
//
// When Enqueue returns an error the message is not in the queue: a failure
// before the message got its name leaves nothing, and if the directory fsync
// after it fails (its durability is then unknown; fsync errors are never
// retried) the message is removed again. A consumer that took the message in
// that instant may still process it, so a caller retrying a failed Enqueue
// delivers at least once.
func (q *Queue) Enqueue(m Message) (name string, err error) {
	auto := m.Name == ""
	for attempt := 0; ; attempt++ {
		if auto {
			m.Name = ""
		}
		data, err := q.encode(&m)
		if err != nil {
			return "", err
		}
		file := m.Name + msgSuffix
		q.markOwn(file)
		err = vfs.CreateExclusive(q.fsys, q.msgPath(m.Name), data, true)
		if err != nil {
			q.unmarkOwn(file)
		}
		if err == nil {
			if err := q.fsys.SyncDir(q.dir); err != nil {
				// Take the message back: the call fails, so it must not stay.
				if rerr := q.fsys.Remove(q.msgPath(m.Name)); rerr == nil || vfs.IsNotExist(rerr) {
					q.forget(m.Name)
				}
				return "", fmt.Errorf("fsqueue: enqueue %s: sync dir: %w", m.Name, err)
			}
			return m.Name, nil
		}
		if !auto || !vfs.IsExist(err) || attempt >= enqueueNameRetries {
			return "", fmt.Errorf("fsqueue: enqueue %s: %w", m.Name, err)
		}
	}
}

// Stage writes m as .staged-<name>.json (naming it if m.Name is empty): complete
// and fsynced under a temporary name, then renamed, so the staged name never
// refers to partial content. It does not fsync the directory: stage a batch,
// call [Queue.SyncDir] once, then record the commit, then [Queue.Publish].
// Staged files are invisible to List and ClaimNext. A zero EnqueuedAtMs is
// set to now.
func (q *Queue) Stage(m Message) error {
	data, err := q.encode(&m)
	if err != nil {
		return err
	}
	if err := vfs.WriteFileNoDirSync(q.fsys, q.stagedPath(m.Name), data); err != nil {
		return fmt.Errorf("fsqueue: stage %s: %w", m.Name, err)
	}
	return nil
}

// StageDeferred is Stage without any fsync: the caller keeps its own
// durable copy of the message (a write-ahead log record) until the staged
// file is published and made durable.
//
// The file is written under its staged name directly ([vfs.WriteNew], no
// temporary file and rename), so a kill -9 or a power loss can leave it
// partial (reading it gives [ErrCorrupt]): the caller rewrites it from its
// record, or removes it as an orphan if there is none ([Queue.Staged]).
func (q *Queue) StageDeferred(m Message) error {
	data, err := q.encode(&m)
	if err != nil {
		return err
	}
	if err := vfs.WriteNew(vfs.NoSync(q.fsys), q.stagedPath(m.Name), data); err != nil {
		return fmt.Errorf("fsqueue: stage %s: %w", m.Name, err)
	}
	return nil
}

// Publish renames .staged-<name>.json to <name>.json (one directory, so one
// [Queue.SyncDir] covers both entries; Publish does not sync). If the staged
// file does not exist it returns (false, nil): the message was already
// published (and may have been consumed since), so a redo never resurrects a
// consumed message.
func (q *Queue) Publish(name string) (published bool, err error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	file := name + msgSuffix
	q.markOwn(file)
	if err := q.fsys.Rename(q.stagedPath(name), q.msgPath(name)); err != nil {
		q.unmarkOwn(file)
		if vfs.IsNotExist(err) {
			return false, nil
		}
		return false, fmt.Errorf("fsqueue: publish %s: %w", name, err)
	}
	return true, nil
}

// Restore writes <name>.json with data - the exact content a staged copy
// had ([Queue.Encode]'s bytes for name) - and removes any staged copy,
// without any sync: the replay of a
// publish from a write-ahead log, after a power loss or a sync failure, when
// a staged file cannot be trusted to be on disk. It must not run while other
// processes use the queue (a replay that may recreate a message a later
// commit consumed relies on that commit being replayed after it).
func (q *Queue) Restore(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	file := name + msgSuffix
	q.markOwn(file)
	if err := vfs.WriteFileNoDirSync(vfs.NoSync(q.fsys), q.msgPath(name), data); err != nil {
		q.unmarkOwn(file)
		return fmt.Errorf("fsqueue: restore %s: %w", name, err)
	}
	if e, ok := parseName(name); ok {
		q.msgs.drop(e) // a damaged copy it replaced is no longer damaged
	}
	if err := q.fsys.Remove(q.stagedPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: restore %s: %w", name, err)
	}
	return nil
}

// Encode validates m and returns the bytes its file holds (filling
// EnqueuedAtMs, and Name if empty), for callers that log a message before
// staging it.
func (q *Queue) Encode(m *Message) ([]byte, error) { return q.encode(m) }

// StageData writes data, the encoding of message name from [Queue.Encode],
// as its staged file, unsynced (see [Queue.StageDeferred]).
func (q *Queue) StageData(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := q.opts.Recycler.create(q.fsys, q.stagedPath(name), data)
	if errors.Is(err, errNoPooled) {
		err = vfs.WriteNew(vfs.NoSync(q.fsys), q.stagedPath(name), data)
	}
	if err != nil {
		return fmt.Errorf("fsqueue: stage %s: %w", name, err)
	}
	return nil
}

// StagedFile is a staged message found by [Queue.Staged].
type StagedFile struct {
	Name    string
	ModTime time.Time
}

// Staged lists the staged (written but unpublished) messages, for sweepers
// that remove those whose commit never happened. Only the owner of the
// commit can tell; fsqueue never removes staged files on its own.
func (q *Queue) Staged() ([]StagedFile, error) {
	files, err := q.sideFiles()
	if err != nil {
		return nil, fmt.Errorf("fsqueue: list %s: %w", q.dir, err)
	}
	var out []StagedFile
	for _, f := range files {
		rest, ok := strings.CutPrefix(f, stagedPrefix)
		if !ok {
			continue
		}
		name, ok := nameFromFile(rest)
		if !ok {
			continue
		}
		fi, err := q.fsys.Lstat(filepath.Join(q.dir, f))
		if err != nil {
			continue // published or removed meanwhile
		}
		out = append(out, StagedFile{Name: name, ModTime: fi.ModTime()})
	}
	slices.SortFunc(out, func(a, b StagedFile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scanDirPrefixed returns the names in dir that start with prefix,
// streaming the listing.
func scanDirPrefixed(fsys vfs.FS, dir, prefix string) ([]string, error) {
	var out []string
	err := vfs.ScanDir(fsys, dir, func(name []byte) error {
		if hasPrefix(name, prefix) {
			out = append(out, string(name))
		}
		return nil
	})
	return out, err
}

// ReadStaged reads a staged message (not cached).
func (q *Queue) ReadStaged(name string) (Message, error) {
	if err := checkName(name); err != nil {
		return Message{}, err
	}
	data, err := q.fsys.ReadFile(q.stagedPath(name))
	if err != nil {
		if vfs.IsNotExist(err) {
			return Message{}, fmt.Errorf("fsqueue: read staged %s: %w: %w", name, ErrNotFound, err)
		}
		return Message{}, fmt.Errorf("fsqueue: read staged %s: %w", name, err)
	}
	if q.gone(q.stagedPath(name)) { // published (or removed) while read: see gone
		// Both sentinels, as when the name is gone before the read.
		return Message{}, fmt.Errorf("fsqueue: read staged %s: %w: published or removed while read: %w", name, ErrNotFound, fs.ErrNotExist)
	}
	m, err := q.Decode(name, data)
	if err != nil {
		return Message{}, fmt.Errorf("fsqueue: read staged %s: %w", name, err)
	}
	return m, nil
}

// Unstage removes a staged message; a missing file is not an error. It does
// not sync the directory.
func (q *Queue) Unstage(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := q.fsys.Remove(q.stagedPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: unstage %s: %w", name, err)
	}
	return nil
}

// SyncDir fsyncs the queue directory, making creates, renames (Publish) and
// unlinks (Delete) in it durable.
func (q *Queue) SyncDir() error {
	if err := q.fsys.SyncDir(q.dir); err != nil {
		return fmt.Errorf("fsqueue: sync %s: %w", q.dir, err)
	}
	return nil
}

// SyncClaimsDir fsyncs claims/, making claim removals by Delete durable.
func (q *Queue) SyncClaimsDir() error {
	if err := q.fsys.SyncDir(q.claimsDir); err != nil {
		return fmt.Errorf("fsqueue: sync %s: %w", q.claimsDir, err)
	}
	return nil
}

// Delete removes <name>.json and then claims/<name>.json; missing files are
// not an error. It does not sync: call [Queue.SyncDir] and
// [Queue.SyncClaimsDir] (once per batch). The message goes first so that a
// crash in between leaves at worst an orphan claim (removed by Sweep), never
// an unclaimed message that would be delivered again.
func (q *Queue) Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := q.opts.Recycler.remove(q.fsys, q.msgPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: delete %s: %w", name, err)
	}
	q.forget(name)
	// The message is gone, so its claim's name never comes back (recycle.go, rule 1).
	if err := q.opts.Recycler.remove(q.fsys, q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: delete claim %s: %w", name, err)
	}
	return nil
}

// DeleteMessage unlinks only the message file (ENOENT is success), without a
// directory fsync. With DeleteClaim it lets a caller sync the message
// directory between the two unlinks, so that after a power loss the claim
// (which may hold the caller's state) can never be gone while the message it
// covers comes back.
func (q *Queue) DeleteMessage(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := q.opts.Recycler.remove(q.fsys, q.msgPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: delete %s: %w", name, err)
	}
	q.forget(name)
	return nil
}

// DeleteClaim unlinks only the claim file (ENOENT is success), without a
// directory fsync (see DeleteMessage).
func (q *Queue) DeleteClaim(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	remove := q.fsys.Remove
	if _, err := q.fsys.Lstat(q.msgPath(name)); vfs.IsNotExist(err) {
		// The message is gone, so the claim's name never comes back
		// (recycle.go, rule 1): its file may be recycled.
		remove = func(path string) error { return q.opts.Recycler.remove(q.fsys, path) }
	}
	if err := remove(q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: delete claim %s: %w", name, err)
	}
	q.notedClaim(name, nil)
	return nil
}

// gone reports whether path does not exist, checked after reading a
// message or claim file: a name never comes back once removed (recycle.go,
// rule 1), so if it still exists, nothing was recycled into the file while
// it was read and the bytes are its own; if not, they may be another
// file's, and the file counts as removed.
func (q *Queue) gone(path string) bool {
	_, err := q.fsys.Lstat(path)
	return vfs.IsNotExist(err)
}

// forget drops name from the in-memory caches (it was deleted or vanished).
func (q *Queue) forget(name string) {
	e, ok := parseName(name)
	if !ok {
		return
	}
	q.msgs.drop(e)
	q.deferred.drop(e)
	q.list.mu.Lock()
	if q.list.idx != nil {
		q.list.idx.remove(e)
	}
	q.removals.bumpLocked(e.Route)
	q.list.mu.Unlock()
}

// ---------------------------------------------------------------------------
// Reading messages

// Get returns a message. Message files are immutable, so the result is
// cached after the first read (a bounded cache: see msgCache); a cached
// message may be returned after another process deleted it (use
// [ClaimGuard.MessageExists] to check existence). A missing message gives
// an error wrapping both [ErrNotFound] and fs.ErrNotExist; a file that does
// not decode, or whose body does not match its name (name field,
// visibility time, route), one wrapping [ErrCorrupt].
func (q *Queue) Get(name string) (Message, error) {
	m, err := q.read(name)
	if err != nil {
		return Message{}, err
	}
	return cloneMessage(m), nil
}

// Header is Get without the payload, and without copying the attributes:
// the returned Attrs map is shared with the cache and must not be mutated.
// Readers that decide from attributes (which instance, session or tag a
// message is for) use it.
func (q *Queue) Header(name string) (Header, error) {
	e, err := entryOf(name)
	if err != nil {
		return Header{}, err
	}
	return q.HeaderOf(e)
}

// HeaderOf is Header of the message e names: what a walk of the index
// (Visible, All, ListRoute) uses, without formatting the name when the
// message is cached.
func (q *Queue) HeaderOf(e Entry) (Header, error) {
	m, err := q.readEntry(e, "")
	if err != nil {
		return Header{}, err
	}
	return Header{Name: m.Name, VisibleAtMs: m.VisibleAtMs, EnqueuedAtMs: m.EnqueuedAtMs, Attrs: m.Attrs}, nil
}

// read returns the cached or freshly read message (shared: not to be
// modified).
func (q *Queue) read(name string) (Message, error) {
	e, err := entryOf(name)
	if err != nil {
		return Message{}, err
	}
	return q.readEntry(e, name)
}

// readEntry is read of the message e names (name: its name, or "" to
// format it if needed).
func (q *Queue) readEntry(e Entry, name string) (Message, error) {
	if m, err, ok := q.msgs.get(e); ok {
		if err != nil {
			return Message{}, fmt.Errorf("fsqueue: get %s: %w", m.Name, err)
		}
		return m, nil
	}
	if name == "" {
		name = e.Name()
	}
	data, err := q.fsys.ReadFile(q.msgPath(name))
	if err != nil {
		if vfs.IsNotExist(err) {
			return Message{}, fmt.Errorf("fsqueue: get %s: %w: %w", name, ErrNotFound, err)
		}
		if planted(err) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			q.msgs.put(e, Message{Name: name}, err)
		}
		return Message{}, fmt.Errorf("fsqueue: get %s: %w", name, err)
	}
	if q.gone(q.msgPath(name)) {
		// Consumed while read, and maybe recycled: the bytes may be another
		// file's (recycle.go, rule 1).
		// Both sentinels, as when the name is gone before the read
		// (callers that skip a gone message test either).
		return Message{}, fmt.Errorf("fsqueue: get %s: %w: removed while read: %w", name, ErrNotFound, fs.ErrNotExist)
	}
	m, err := q.decode(name, e, data)
	if err != nil {
		q.log.Warn("fsqueue: skipping a message file that cannot be used (run durofs fsck)", "dir", q.dir, "name", name, "err", err)
		q.msgs.put(e, Message{Name: name}, err)
		return Message{}, fmt.Errorf("fsqueue: get %s: %w", name, err)
	}
	q.msgs.put(e, m, nil)
	return m, nil
}

// Decode parses data as the file of message name and checks that its body
// matches the name (an error wrapping [ErrCorrupt] if not): for readers of
// message files that go around the queue (fsck).
func (q *Queue) Decode(name string, data []byte) (Message, error) {
	e, err := entryOf(name)
	if err != nil {
		return Message{}, err
	}
	return q.decode(name, e, data)
}

func (q *Queue) decode(name string, e Entry, data []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err := q.checkBody(name, e, &m); err != nil {
		return Message{}, fmt.Errorf("%w: the body does not match its name: %w", ErrCorrupt, err)
	}
	return m, nil
}

func cloneMessage(m Message) Message {
	m.Attrs = maps.Clone(m.Attrs)
	m.Payload = slices.Clone(m.Payload)
	return m
}

// ---------------------------------------------------------------------------
// The index

// Page sizes of the iterators: the first page is small (a fetch usually
// takes the first message it meets), the next ones larger.
const (
	firstPage = 16
	nextPage  = 256
)

// Visible returns an iterator over the messages whose name's visibility
// time is at most nowMs (ms since the epoch), in name (FIFO) order, without
// walking past the messages that are not visible yet. It brings the index
// up to date first and copies entries out a page at a time, so a long walk
// sees changes other calls applied meanwhile; no entry is yielded twice. A claim may still
// delay a message further (see [Claim]); Visible judges the name only. An
// error ends the iteration (yielded with a zero Entry).
func (q *Queue) Visible(nowMs int64) iter.Seq2[Entry, error] { return q.walk(nowMs, false) }

// walk is Visible, or [Queue.Due] if due.
func (q *Queue) walk(nowMs int64, due bool) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		var from Entry
		hasFrom := false
		buf := make([]Entry, 0, firstPage)
		for {
			page, last, more, err := q.page(nowMs, from, hasFrom, !hasFrom, due, buf[:0])
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if !more {
				return
			}
			from, hasFrom = last, true
			if cap(buf) < nextPage {
				buf = make([]Entry, 0, nextPage)
			}
		}
	}
}

// All returns an iterator over every message (visible or not, claimed or
// not) in name (FIFO) order; see [Queue.Visible].
func (q *Queue) All() iter.Seq2[Entry, error] { return q.Visible(math.MaxInt64) }

// page copies out a page of visible entries after from, bringing the index
// up to date first if refresh or if it was dropped; with due, entries
// deferred past nowMs are left out (see deferrals). last is the last entry
// it looked at and more whether there may be more after it.
func (q *Queue) page(nowMs int64, from Entry, hasFrom, refresh, due bool, out []Entry) (_ []Entry, last Entry, more bool, err error) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if refresh || c.idx == nil {
		if err := q.refreshLocked(); err != nil {
			return nil, Entry{}, false, err
		}
	}
	if !due || q.deferred.len() == 0 {
		out = c.idx.visible(nowMs, from, hasFrom, out)
		if len(out) == 0 {
			return out, Entry{}, false, nil
		}
		return out, out[len(out)-1], len(out) == cap(out), nil
	}
	d := &q.deferred
	d.mu.Lock()
	defer d.mu.Unlock()
	scratch := make([]Entry, 0, cap(out))
	for {
		scratch = c.idx.visible(nowMs, from, hasFrom, scratch[:0])
		for _, e := range scratch {
			if d.dueLocked(e, nowMs) {
				out = append(out, e)
			}
		}
		if len(scratch) < cap(scratch) {
			return out, Entry{}, false, nil
		}
		from, hasFrom = scratch[len(scratch)-1], true
		if len(out) == cap(out) {
			return out, from, true, nil
		}
		scratch = scratch[:0:min(cap(scratch), cap(out)-len(out))]
	}
}

// List returns every message's entry in name (FIFO) order: a copy of the
// index, 32 bytes a message. Walkers of large queues use [Queue.All].
func (q *Queue) List() ([]Entry, error) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := q.refreshLocked(); err != nil {
		return nil, err
	}
	return c.idx.visible(math.MaxInt64, Entry{}, false, make([]Entry, 0, c.idx.n)), nil
}

// ListRoute returns, in name order, the messages whose route is
// RouteOf(value): those whose Options.IndexAttr attribute is value, and
// any other whose value's route collides with it (a reader that must know
// checks the attribute in [Queue.Header]). It does not scan the whole
// queue: each block of the index has a filter of its routes.
func (q *Queue) ListRoute(value string) ([]Entry, error) {
	if q.opts.IndexAttr == "" {
		return nil, errors.New("fsqueue: ListRoute without Options.IndexAttr")
	}
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := q.refreshLocked(); err != nil {
		return nil, err
	}
	return c.idx.route(RouteOf(value), nil), nil
}

// Quiet reports whether a consumer that found nothing to take may sleep
// until a message is added or untilMs (ms since the epoch), the moment the
// earliest queued message becomes visible (math.MaxInt64 for an empty
// queue): quiet is true when no message is visible at nowMs - none is in
// flight under a claim, locked, or otherwise takeable without a change -
// and a watch reports every other process's additions. Without a watch
// (other systems, or inotify instances used up) it is never quiet:
// another process's message is seen only by looking. Quiet only tells;
// [Queue.ArmQuiet] also asks for Options.Notify.
func (q *Queue) Quiet(nowMs int64) (untilMs int64, quiet bool, err error) {
	return q.quiet(nowMs, false)
}

// ArmQuiet is [Queue.Quiet], and when quiet it also arms Options.Notify for
// the next message another process adds. An addition that the index has
// not applied yet when ArmQuiet answers calls Notify when it is applied,
// so a consumer that arms its wake-up before its pass and calls ArmQuiet
// after it misses nothing. A goroutine waits on the directory watch only
// while armed: a consumer that polls anyway should call Quiet.
func (q *Queue) ArmQuiet(nowMs int64) (untilMs int64, quiet bool, err error) {
	return q.quiet(nowMs, true)
}

func (q *Queue) quiet(nowMs int64, arm bool) (untilMs int64, quiet bool, err error) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.notifying || !c.valid {
		// The first call starts the watch (and notifyLoop).
		if err := q.refreshLocked(); err != nil {
			return 0, false, err
		}
		if !c.notifying || !c.valid {
			return 0, false, nil
		}
	}
	// No refresh needed: an event not yet applied will be, by notifyLoop,
	// which then calls Notify - after this call, so the caller wakes.
	at := c.idx.earliest()
	if at <= nowMs {
		// Visible by name: quiet only if all of that is deferred.
		until, quiet := q.quietUntilLocked(nowMs)
		if !quiet {
			return at, false, nil
		}
		at = until
	}
	if arm && !c.armed {
		c.armed = true
		select {
		case c.arm <- struct{}{}:
		default: // the loop has a wake-up pending already
		}
	}
	return at, true, nil
}

// notifyLocked calls Options.Notify if a Quiet answer is outstanding, and
// disarms. The caller holds q.list.mu.
func (q *Queue) notifyLocked() {
	if q.list.armed {
		q.list.armed = false
		q.opts.Notify()
	}
}

// Len returns the number of messages in the index.
func (q *Queue) Len() (int, error) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := q.refreshLocked(); err != nil {
		return 0, err
	}
	return c.idx.n, nil
}

// refreshLocked brings the index up to date. With a directory watch it
// applies the changes reported since the last call (cost proportional to
// the changes; one read(2) when nothing changed) and re-lists only after an
// overflow. Without one it re-lists when the directory's mtime says it may
// have changed. An error invalidates the index (see listCache). The caller
// holds q.list.mu.
func (q *Queue) refreshLocked() (err error) {
	c := &q.list
	defer func() {
		if err != nil {
			q.invalidateLocked()
		}
	}()
	if c.watch != nil && c.valid {
		events, overflow, err := c.watch.Drain()
		if err == nil && !overflow {
			q.applyEvents(events)
			return nil
		}
		if err != nil {
			// The watch may be dead for good (its directory removed or
			// replaced: vfs.ErrWatchGone): the path is watched anew below,
			// before it is listed.
			q.watchFailedLocked(err)
		}
		// Events were lost: whatever the listing finds may be new.
		defer q.notifyLocked()
	}
	if !c.watchTried || c.rewatch {
		c.watchTried = true
		// The watch starts before the first full listing, so no change
		// between the two is missed (applying an event twice is harmless).
		if w, ok := vfs.WatchDir(q.fsys, q.dir); ok {
			c.watch, c.rewatch = w, false
			c.valid = false
			if ww, ok := w.(vfs.WaitableWatch); ok && q.opts.Notify != nil {
				c.notifying = true
				c.arm, c.done = make(chan struct{}, 1), make(chan struct{})
				go q.notifyLoop(ww, c.arm, c.done)
			}
		}
	}
	if c.watch != nil {
		if err := q.relistLocked(time.Now(), time.Time{}); err != nil {
			return err
		}
		// Changes made during the listing are applied now (idempotently).
		events, overflow, err := c.watch.Drain()
		if err != nil {
			// The listing stands for this call; the next one watches the
			// path anew and lists it again.
			q.dropWatchLocked()
			q.notifyLocked()
		}
		if err != nil || overflow {
			c.valid = false
			return nil
		}
		q.applyEvents(events)
		return nil
	}
	t0 := time.Now() // real time: compared with file-system timestamps
	fi, err := q.fsys.Stat(q.dir)
	if err != nil {
		return fmt.Errorf("fsqueue: list %s: %w", q.dir, err)
	}
	c.rewatch = false // the directory is there, and cannot be watched: poll
	mtime := fi.ModTime()
	if c.valid && mtime.Equal(c.mtime) && settled(c.listedAt, c.mtime) {
		return nil
	}
	return q.relistLocked(t0, mtime)
}

// watchFailedLocked drops the directory watch after its Drain failed with
// err. The caller holds q.list.mu.
func (q *Queue) watchFailedLocked(err error) {
	q.log.Warn("fsqueue: directory watch failed; re-listing", "dir", q.dir, "err", err)
	q.dropWatchLocked()
	if errors.Is(err, vfs.ErrWatchGone) {
		// So is claims/'s watch then, though it says nothing.
		q.claims.moved.Store(true)
	}
}

// dropWatchLocked closes the directory watch after it failed (it may never
// report again: vfs.ErrWatchGone) and stops its notifyLoop; the next
// refresh watches the directory anew and lists it. The caller holds
// q.list.mu.
func (q *Queue) dropWatchLocked() {
	c := &q.list
	if c.watch != nil {
		if err := c.watch.Close(); err != nil {
			q.log.Warn("fsqueue: closing a failed directory watch", "dir", q.dir, "err", err)
		}
		c.watch = nil
	}
	if c.done != nil {
		close(c.done)
		c.done = nil
	}
	c.notifying, c.rewatch, c.valid = false, true, false
}

// settled reports whether what was read at real time at (a listing, a
// file's content) reflects every change that can leave a file-system
// timestamp at stamp: at is a margin past stamp, longer than the
// timestamps' granularity - 50 ms (ext4's is one kernel tick), or two
// seconds and the margin when stamp is a whole second (a file system with
// coarse timestamps; on a fine one that happens once in 10^9 stamps, and
// costs only a re-read).
func settled(at, stamp time.Time) bool {
	margin := mtimeMargin
	if stamp.Nanosecond() == 0 {
		margin = coarseMargin
	}
	return at.Sub(stamp) >= margin
}

// invalidateLocked drops the index, so that the next refresh lists the
// directory again and builds it anew.
func (q *Queue) invalidateLocked() {
	c := &q.list
	c.valid = false
	c.idx, c.side = nil, nil
	clear(c.own) // the listing that rebuilds the index forgets them too
	q.removals.epochLocked()
}

// relistLocked builds the index from a listing of the directory, streamed
// (never the whole listing in memory) and parsed in place: no message file
// is opened. The old index is dropped first, so the two never coexist.
func (q *Queue) relistLocked(t0, mtime time.Time) error {
	c := &q.list
	c.idx, c.valid, c.side = nil, false, nil
	// Removals since the last look may be unknown.
	q.removals.epochLocked()
	clear(c.own) // their events may be gone with the old index's
	var b builder
	side := map[string]struct{}{}
	err := vfs.ScanDir(q.fsys, q.dir, func(file []byte) error {
		if e, ok := entryOfFile(file); ok {
			b.add(e)
		} else if isSideFile(file) {
			side[string(file)] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fsqueue: list %s: %w", q.dir, err)
	}
	c.idx, c.side = b.finish(), side
	c.mtime, c.listedAt, c.valid, c.indexed = mtime, t0, true, true
	return nil
}

// isSideFile reports whether a directory entry is a staged or temporary
// file.
func isSideFile[S string | []byte](name S) bool {
	return hasPrefix(name, stagedPrefix) || hasPrefix(name, vfs.TempPrefix)
}

func hasPrefix[S string | []byte](s S, prefix string) bool {
	return len(s) >= len(prefix) && string(s[:len(prefix)]) == prefix
}

// Indexed reports whether this Queue keeps an index of its directory: it
// listed it once for a read (a fetch's ClaimNext or Visible, List, Len,
// ListRoute, Quiet...), and keeps it up to date from then on - from the
// directory watch, at a cost proportional to the changes, or by listing
// the directory again when its mtime changed where there is no watch. The
// index also names the directory's staged and temporary files, so that
// [Queue.Staged] and [Queue.Sweep] then cost no listing of their own: a
// sweeper that must not pay a listing of every queued message for each
// pass sweeps the directory only when Indexed, and otherwise calls
// [Queue.SweepClaims].
func (q *Queue) Indexed() bool {
	q.list.mu.Lock()
	defer q.list.mu.Unlock()
	return q.list.indexed
}

// sideFiles returns the names of the directory's staged and temporary
// files: from the index, brought up to date, when this Queue keeps one (a
// process that fetches: no listing with a watch, or one that its next
// read would make anyway without), else from a streamed listing of the
// directory, which does not build the index (a process that only
// enqueues, or only sweeps, keeps none).
func (q *Queue) sideFiles() ([]string, error) {
	c := &q.list
	c.mu.Lock()
	if c.indexed {
		err := q.refreshLocked()
		var names []string
		if err == nil {
			names = slices.Collect(maps.Keys(c.side))
		}
		c.mu.Unlock()
		return names, err
	}
	c.mu.Unlock()
	var names []string
	err := vfs.ScanDir(q.fsys, q.dir, func(name []byte) error {
		if isSideFile(name) {
			names = append(names, string(name))
		}
		return nil
	})
	return names, err
}

// applyEvents applies watched changes to the index, and calls
// Options.Notify if they add messages this Queue did not add.
func (q *Queue) applyEvents(events []vfs.DirEvent) {
	x := q.list.idx
	foreign := false
	defer func() {
		if foreign {
			q.notifyLocked()
		}
	}()
	for _, ev := range events {
		if ev.Changed {
			continue // not reported by a watch of names; no entry changes
		}
		if isSideFile(ev.Name) {
			if ev.Added {
				q.list.side[ev.Name] = struct{}{}
			} else {
				delete(q.list.side, ev.Name)
			}
			continue
		}
		name, ok := strings.CutSuffix(ev.Name, msgSuffix)
		if !ok {
			continue
		}
		e, ok := parseName(name)
		if !ok {
			continue
		}
		if ev.Added {
			_, mine := q.list.own[ev.Name]
			delete(q.list.own, ev.Name)
			if x.insert(e) && !mine {
				foreign = true
			}
			continue
		}
		x.remove(e)
		q.msgs.drop(e)
		q.deferred.drop(e)
		q.removals.bumpLocked(e.Route)
	}
}

// ownMax bounds listCache.own: a Queue that has added this many names
// whose watch events no refresh applied yet applies the pending events
// (trimOwnLocked) before it adds another.
const ownMax = 256

// markOwn records that this Queue is about to add file (see listCache.own);
// unmarkOwn takes it back when the add failed. Only a valid index needs
// the record: an invalid one is rebuilt by a listing, which forgets own.
func (q *Queue) markOwn(file string) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.notifying || !c.valid {
		return
	}
	if len(c.own) >= ownMax {
		q.trimOwnLocked()
		if !c.notifying || !c.valid {
			return
		}
	}
	if c.own == nil {
		c.own = map[string]struct{}{}
	}
	c.own[file] = struct{}{}
}

// trimOwnLocked applies the watch's pending events to the index, as the
// next refresh would: each event of a name this Queue added takes the name
// out of own. A Queue that keeps adding while nothing reads its index (a
// process that fetched from the queue once and now only publishes to it)
// would otherwise remember every name it ever added. Cost: the events
// pending, at least ownMax of them this Queue's own, so O(1) an add.
//
// If the events were lost (an overflow) or the watch failed, the index is
// dropped instead of listed again - a listing costs O(queued), and the
// next reader, if any, lists the directory as it would have - and so is
// own (invalidateLocked). The caller holds q.list.mu, with a valid index
// and a watch.
func (q *Queue) trimOwnLocked() {
	c := &q.list
	events, overflow, err := c.watch.Drain()
	if err == nil && !overflow {
		q.applyEvents(events)
		return
	}
	if err != nil {
		q.watchFailedLocked(err)
	}
	q.invalidateLocked()
	q.notifyLocked() // events were lost: an armed consumer must look
}

func (q *Queue) unmarkOwn(file string) {
	c := &q.list
	c.mu.Lock()
	delete(c.own, file)
	c.mu.Unlock()
}

// notifyLoop runs while the directory watch w is open: armed (a Quiet
// answer outstanding), it waits until the kernel queues events on the
// watch and brings the index up to date, which calls Options.Notify if
// another process added a message (applyEvents) and disarms; disarmed, it
// waits to be armed, so that a busy queue, whose consumers find messages
// and never ask, costs it nothing. An invalid index is left to the next
// consumer to re-list, but Notify is called: something changed that the
// index cannot tell.
func (q *Queue) notifyLoop(w vfs.WaitableWatch, arm, done <-chan struct{}) {
	c := &q.list
	defer func() {
		// The watch failed or was closed: nothing reports additions now.
		c.mu.Lock()
		if c.watch == w {
			c.notifying = false
		}
		c.mu.Unlock()
	}()
	for {
		select {
		case <-arm:
		case <-done:
			return
		}
		for {
			if w.Wait() != nil {
				return
			}
			c.mu.Lock()
			if c.watch != w {
				c.mu.Unlock()
				return
			}
			if c.valid {
				if err := q.refreshLocked(); err != nil {
					// Events may be left undrained (Wait would return at
					// once): tell the consumers, who re-list, and disarm.
					q.log.Warn("fsqueue: bringing the index up to date", "dir", q.dir, "err", err)
					q.notifyLocked()
				}
			} else {
				q.notifyLocked()
			}
			armed := c.armed
			c.mu.Unlock()
			if !armed {
				break
			}
		}
	}
}

// Close releases the directory watch. The Queue must not be used afterwards.
func (q *Queue) Close() error {
	q.list.mu.Lock()
	var err error
	if q.list.watch != nil {
		err = q.list.watch.Close()
		q.list.watch = nil
	}
	if q.list.done != nil {
		close(q.list.done)
		q.list.done = nil
	}
	q.list.notifying, q.list.armed, q.list.rewatch = false, false, false
	q.list.mu.Unlock()
	q.claims.mu.Lock()
	if q.claims.watch != nil {
		err = errors.Join(err, q.claims.watch.Close())
		q.claims.watch = nil
	}
	q.claims.rewatch = false
	q.claims.mu.Unlock()
	return err
}

// Invalidate forgets the cached listings, so the next listing (and
// ClaimNext) re-reads the directories.
func (q *Queue) Invalidate() {
	q.list.mu.Lock()
	q.invalidateLocked()
	q.list.mu.Unlock()
	q.claims.mu.Lock()
	q.claims.setValid = false
	q.claims.gen++
	q.claims.entries.reset()
	q.claims.mu.Unlock()
	q.deferred.reset()
}
