package fsqueue

import (
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

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
	// ErrInvalidName means a message name is not a 26-character upper-case
	// ULID, or a token does not start with one.
	ErrInvalidName = errors.New("fsqueue: invalid message name")
	// ErrCorrupt means a message file exists but does not decode (damaged,
	// or a staged file left partial by a crash: see [Queue.StageDeferred]),
	// or a claim file is not the message's claim (see [ClaimGuard.Read]).
	ErrCorrupt = errors.New("fsqueue: corrupt message or claim file")
	// ErrUnsupportedVersion: the queue directory's fsqueue.json records a
	// format this build does not read.
	ErrUnsupportedVersion = errors.New("fsqueue: unsupported queue format version")
)

const (
	claimsDirName = "claims"
	configName    = "fsqueue.json"
	stagedPrefix  = ".staged-"
	msgSuffix     = ".json"

	// mtimeMargin is how long after a directory's mtime a listing must have
	// started for the listing to be trusted while the mtime stays the same.
	mtimeMargin = 50 * time.Millisecond

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

// Entry is a message header from the in-memory index built by [Queue.List].
type Entry struct {
	// Name is the message's ULID.
	Name string
	// VisibleAtMs is the message's visibility time (ms since the epoch).
	VisibleAtMs int64
	// EnqueuedAtMs is the message's enqueue time (ms since the epoch).
	EnqueuedAtMs int64
	// Attrs is shared with the queue's index: callers must not mutate it.
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
	// IndexAttr, if set, names an attribute whose values are indexed so
	// that ListAttr(value) returns that value's messages without scanning
	// the whole queue (the provider indexes messages by instance).
	IndexAttr string
	// VolatileClaims makes the claims written by ClaimNext, Renew, Abandon
	// and ClaimGuard.Write unsynced, like leases: a power loss may lose a
	// claim (the message is delivered again, at least once) or leave it
	// unreadable (treated as no claim).
	VolatileClaims bool
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

	list   listCache
	msgs   msgCache
	claims claimCache

	linkWarn   sync.Mutex // guards linkWarnAt (see symlink.go)
	linkWarnAt time.Time
}

// listCache is the in-memory index of message headers.
//
// An index error invalidates the index; the next call relists. An error
// while bringing the index up to date (listing the directory, reading a
// header during a listing or for a watch event) may leave it incomplete: a
// listing stopped half way (index holding entries sorted lacks), the rest
// of a drained batch of watch events lost. So refreshLocked clears valid
// and sorted on every error (invalidateLocked), and the next call re-reads
// the directory, brings index and byAttr in line with it and rebuilds
// sorted and the visibility index; only headers already read are kept
// (message files are immutable). The index is never left valid but
// incomplete.
type listCache struct {
	mu       sync.Mutex
	valid    bool
	mtime    time.Time // mtime of dir observed by the last listing
	listedAt time.Time // real time taken before that listing's Stat
	index    map[string]Entry
	bad      map[string]struct{} // unreadable message files, not retried until they vanish
	sorted   []Entry
	// shared is true once sorted was handed out by List: it is then
	// immutable and the next change copies it (copy-on-write).
	shared bool
	// byAttr indexes names by the value of Options.IndexAttr.
	byAttr map[string]map[string]struct{}
	// The visibility index (see visible.go), kept from the first
	// ListVisible on: visible holds the entries visible at horizon, sorted
	// by name (copy-on-write once handed out: visShared), later the others.
	visOn     bool
	horizon   int64
	visible   []Entry
	visShared bool
	later     laterHeap
	// watch, when not nil, reports every process's changes to the
	// directory (inotify); without it List falls back to the mtime rule.
	watch      vfs.DirWatch
	watchTried bool
}

// msgCache holds parsed messages read by Get (message files are immutable).
type msgCache struct {
	mu sync.Mutex
	m  map[string]Message
}

type queueConfig struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// configVersion is the queue format's version. Version 1 locked claims
// through shard lock files (locks/NN.lock); version 2 locks each message
// file itself. Processes of the two versions would not exclude each other,
// so a version-1 queue is refused.
const configVersion = 2

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
			if cfg.Format != "fsqueue" || cfg.Version != configVersion {
				return fmt.Errorf("fsqueue: open %s: %w: format %q version %d (this build reads version %d)",
					q.dir, ErrUnsupportedVersion, cfg.Format, cfg.Version, configVersion)
			}
			return nil
		}
		if !vfs.IsNotExist(err) {
			return fmt.Errorf("fsqueue: open %s: %w", q.dir, err)
		}
		body, err := json.Marshal(queueConfig{Format: "fsqueue", Version: configVersion})
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

// nameGen is the process-global ULID source: one LockedMonotonicReader over
// crypto/rand, and the last timestamp used, so that names are strictly
// increasing within the process even if a clock steps back.
var nameGen = struct {
	mu      sync.Mutex
	lastMs  uint64
	entropy *ulid.LockedMonotonicReader
}{entropy: &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(crand.Reader, 0)}}

// NewName returns a fresh message name: a ULID whose time is q's clock
// (or, if any clock of this process has stepped back, the latest time used
// so far), with crypto-random monotonic entropy shared by the whole process.
// Names are strictly increasing within a process; across processes they are
// ordered by millisecond only. It returns "" only if the clock is beyond the
// ULID time range (year 10889).
func (q *Queue) NewName() string { return newName(q.clock.Now()) }

func newName(now time.Time) string {
	var ms uint64
	if now.UnixMilli() > 0 {
		ms = ulid.Timestamp(now)
	}
	nameGen.mu.Lock()
	defer nameGen.mu.Unlock()
	ms = max(ms, nameGen.lastMs)
	for ms <= ulid.MaxTime() {
		id, err := ulid.New(ms, nameGen.entropy)
		if err == nil {
			nameGen.lastMs = ms
			return id.String()
		}
		if !errors.Is(err, ulid.ErrMonotonicOverflow) {
			return ""
		}
		ms++ // 2^80 names in one ms exhausted: move to the next ms
	}
	return ""
}

// validName reports whether s is a canonical (upper-case) ULID string.
func validName(s string) bool {
	if len(s) != ulid.EncodedSize {
		return false
	}
	id, err := ulid.ParseStrict(s)
	return err == nil && id.String() == s
}

// nameFromFile returns the message name of a directory entry
// "<ULID>.json", or ok=false for anything else.
func nameFromFile(file string) (string, bool) {
	name, ok := strings.CutSuffix(file, msgSuffix)
	if !ok || !validName(name) {
		return "", false
	}
	return name, true
}

func checkName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

func (q *Queue) msgPath(name string) string { return filepath.Join(q.dir, name+msgSuffix) }
func (q *Queue) stagedPath(name string) string {
	return filepath.Join(q.dir, stagedPrefix+name+msgSuffix)
}
func (q *Queue) claimPath(name string) string { return filepath.Join(q.claimsDir, name+msgSuffix) }

// ---------------------------------------------------------------------------
// Writing messages

// encode validates m and returns its file content. It fills EnqueuedAtMs.
func (q *Queue) encode(m *Message) ([]byte, error) {
	if err := checkName(m.Name); err != nil {
		return nil, err
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
// one tried if it is taken); otherwise it must be a valid ULID
// ([ErrInvalidName]) that is not in use (an error wrapping fs.ErrExist).
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
			m.Name = q.NewName()
		}
		data, err := q.encode(&m)
		if err != nil {
			return "", err
		}
		err = vfs.CreateExclusive(q.fsys, q.msgPath(m.Name), data, true)
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

// Stage writes m (whose Name must be set) as .staged-<name>.json: complete
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
	if err := q.fsys.Rename(q.stagedPath(name), q.msgPath(name)); err != nil {
		if vfs.IsNotExist(err) {
			return false, nil
		}
		return false, fmt.Errorf("fsqueue: publish %s: %w", name, err)
	}
	return true, nil
}

// Restore writes <name>.json with data - the exact content a staged copy
// had - and removes any staged copy, without any sync: the replay of a
// publish from a write-ahead log, after a power loss or a sync failure, when
// a staged file cannot be trusted to be on disk. It must not run while other
// processes use the queue (a replay that may recreate a message a later
// commit consumed relies on that commit being replayed after it).
func (q *Queue) Restore(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := vfs.WriteFileNoDirSync(vfs.NoSync(q.fsys), q.msgPath(name), data); err != nil {
		return fmt.Errorf("fsqueue: restore %s: %w", name, err)
	}
	if err := q.fsys.Remove(q.stagedPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: restore %s: %w", name, err)
	}
	return nil
}

// Encode validates m and returns the bytes its file holds (filling
// EnqueuedAtMs), for callers that log a message before staging it.
func (q *Queue) Encode(m *Message) ([]byte, error) { return q.encode(m) }

// StageData writes data, the encoding of message name from [Queue.Encode],
// as its staged file, unsynced (see [Queue.StageDeferred]).
func (q *Queue) StageData(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := vfs.WriteNew(vfs.NoSync(q.fsys), q.stagedPath(name), data); err != nil {
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
	files, err := q.fsys.ReadDirNames(q.dir)
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
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return Message{}, fmt.Errorf("fsqueue: read staged %s: %w: %w", name, ErrCorrupt, err)
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
	if err := q.fsys.Remove(q.msgPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: delete %s: %w", name, err)
	}
	q.forget(name)
	if err := q.fsys.Remove(q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
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
	if err := q.fsys.Remove(q.msgPath(name)); err != nil && !vfs.IsNotExist(err) {
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
	if err := q.fsys.Remove(q.claimPath(name)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("fsqueue: delete claim %s: %w", name, err)
	}
	return nil
}

// forget drops name from the in-memory caches (it was deleted or vanished).
func (q *Queue) forget(name string) {
	q.msgs.mu.Lock()
	delete(q.msgs.m, name)
	q.msgs.mu.Unlock()
	q.list.mu.Lock()
	q.removeEntry(name)
	q.list.mu.Unlock()
}

// ---------------------------------------------------------------------------
// Reading messages

// Get returns a message. Message files are immutable, so the result is
// cached after the first read; a cached message may be returned after
// another process deleted it (use [ClaimGuard.MessageExists] to check
// existence). A missing message gives an error wrapping both [ErrNotFound]
// and fs.ErrNotExist.
func (q *Queue) Get(name string) (Message, error) {
	if err := checkName(name); err != nil {
		return Message{}, err
	}
	q.msgs.mu.Lock()
	m, ok := q.msgs.m[name]
	q.msgs.mu.Unlock()
	if ok {
		return cloneMessage(m), nil
	}
	data, err := q.fsys.ReadFile(q.msgPath(name))
	if err != nil {
		if vfs.IsNotExist(err) {
			return Message{}, fmt.Errorf("fsqueue: get %s: %w: %w", name, ErrNotFound, err)
		}
		return Message{}, fmt.Errorf("fsqueue: get %s: %w", name, err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return Message{}, fmt.Errorf("fsqueue: get %s: %w: %w", name, ErrCorrupt, err)
	}
	if m.Name != name {
		return Message{}, fmt.Errorf("fsqueue: get %s: %w: name %q", name, ErrCorrupt, m.Name)
	}
	q.msgs.mu.Lock()
	if q.msgs.m == nil {
		q.msgs.m = map[string]Message{}
	}
	q.msgs.m[name] = m
	q.msgs.mu.Unlock()
	return cloneMessage(m), nil
}

func cloneMessage(m Message) Message {
	m.Attrs = maps.Clone(m.Attrs)
	m.Payload = slices.Clone(m.Payload)
	return m
}

// msgHeader is the part of a message file the index needs.
type msgHeader struct {
	Name         string            `json:"name"`
	VisibleAtMs  int64             `json:"visible_at_ms"`
	EnqueuedAtMs int64             `json:"enqueued_at_ms"`
	Attrs        map[string]string `json:"attrs"`
}

// List returns the headers of all messages (visible or not, claimed or not),
// sorted by Name, that is in FIFO order. It keeps an index in memory and
// re-reads the directory only when it may have changed (see the package
// documentation), reading only files it has not seen before. On Linux a
// directory watch (inotify) reports every process's changes, so List costs
// O(changes), not O(messages). The returned slice and its Attrs maps are a
// shared, immutable snapshot: callers must not modify them.
func (q *Queue) List() ([]Entry, error) {
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := q.refreshLocked(); err != nil {
		return nil, err
	}
	c.shared = true
	return c.sorted, nil
}

// ListAttr returns the messages whose Options.IndexAttr attribute equals
// value, sorted by Name, without scanning the whole queue. It requires
// Options.IndexAttr.
func (q *Queue) ListAttr(value string) ([]Entry, error) {
	if q.opts.IndexAttr == "" {
		return nil, errors.New("fsqueue: ListAttr without Options.IndexAttr")
	}
	c := &q.list
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := q.refreshLocked(); err != nil {
		return nil, err
	}
	names := c.byAttr[value]
	out := make([]Entry, 0, len(names))
	for n := range names {
		out = append(out, c.index[n])
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
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
	if c.index == nil {
		c.index = map[string]Entry{}
		c.bad = map[string]struct{}{}
		c.byAttr = map[string]map[string]struct{}{}
	}
	if !c.watchTried {
		c.watchTried = true
		// The watch starts before the first full listing, so no change
		// between the two is missed (applying an event twice is harmless).
		if w, ok := vfs.WatchDir(q.fsys, q.dir); ok {
			c.watch = w
			c.valid = false
		}
	}
	if c.watch != nil {
		if c.valid {
			events, overflow, err := c.watch.Drain()
			if err == nil && !overflow {
				return q.applyEvents(events)
			}
			if err != nil {
				q.log.Warn("fsqueue: directory watch failed; re-listing", "dir", q.dir, "err", err)
			}
		}
		if err := q.relistLocked(time.Now(), time.Time{}); err != nil {
			return err
		}
		// Changes made during the listing are applied now (idempotently).
		events, overflow, err := c.watch.Drain()
		if err != nil || overflow {
			c.valid = false
			return nil
		}
		return q.applyEvents(events)
	}
	t0 := time.Now() // real time: compared with file-system timestamps
	fi, err := q.fsys.Stat(q.dir)
	if err != nil {
		return fmt.Errorf("fsqueue: list %s: %w", q.dir, err)
	}
	mtime := fi.ModTime()
	if c.valid && mtime.Equal(c.mtime) && c.listedAt.Sub(c.mtime) >= mtimeMargin {
		return nil
	}
	return q.relistLocked(t0, mtime)
}

// invalidateLocked makes the next refresh a full relist that rebuilds
// sorted and the visibility index from index, after an error left them
// incomplete or out of step with index (a relist that stopped half way has
// indexed files that sorted lacks).
func (q *Queue) invalidateLocked() {
	c := &q.list
	c.valid = false
	c.sorted, c.shared = nil, false
}

// relistLocked re-reads the directory, reading only files not yet indexed.
func (q *Queue) relistLocked(t0, mtime time.Time) error {
	c := &q.list
	files, err := q.fsys.ReadDirNames(q.dir)
	if err != nil {
		return fmt.Errorf("fsqueue: list %s: %w", q.dir, err)
	}
	seen := make(map[string]struct{}, len(files))
	// sorted is nil at the first listing and after invalidateLocked.
	changed := c.sorted == nil
	var todo []string // message files not indexed yet
	for _, f := range files {
		name, ok := nameFromFile(f)
		if !ok {
			continue
		}
		seen[name] = struct{}{}
		if _, ok := c.index[name]; ok {
			continue
		}
		if _, ok := c.bad[name]; ok {
			continue
		}
		todo = append(todo, name)
	}
	headers := q.readHeaders(todo)
	for i, name := range todo {
		added, err := q.addLocked(name, headers[i].e, headers[i].err)
		if err != nil {
			return err
		}
		changed = changed || added
	}
	for name := range c.index {
		if _, ok := seen[name]; !ok {
			q.unindexLocked(name)
			changed = true
		}
	}
	for name := range c.bad {
		if _, ok := seen[name]; !ok {
			delete(c.bad, name)
		}
	}
	// Drop cached bodies of vanished messages (also those only ever Get).
	q.msgs.mu.Lock()
	for name := range q.msgs.m {
		if _, ok := seen[name]; !ok {
			delete(q.msgs.m, name)
		}
	}
	q.msgs.mu.Unlock()
	if changed {
		c.sorted = slices.SortedFunc(maps.Values(c.index), compareNames)
		c.shared = false
		if c.visOn {
			q.rebuildVisibleLocked()
		}
	}
	c.mtime, c.listedAt, c.valid = mtime, t0, true
	return nil
}

// indexLocked reads a message header into the index (not into sorted).
// added is false if the file vanished or is unreadable.
func (q *Queue) indexLocked(name string) (added bool, err error) {
	e, err := q.readHeader(name)
	return q.addLocked(name, e, err)
}

// header is the result of reading one message header.
type header struct {
	e   Entry
	err error
}

// readWorkers is how many message files a full listing reads at once: the
// first listing after Open reads every message (a cold cache waits on the
// disk; a warm one decodes JSON on every core).
const readWorkers = 8

// readHeaders reads the headers of names, in parallel when there are many.
// It touches no index state, so the caller may hold the list lock.
func (q *Queue) readHeaders(names []string) []header {
	out := make([]header, len(names))
	if len(names) < 2*readWorkers {
		for i, n := range names {
			out[i].e, out[i].err = q.readHeader(n)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range readWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) {
					return
				}
				out[i].e, out[i].err = q.readHeader(names[i])
			}
		}()
	}
	wg.Wait()
	return out
}

// addLocked puts the result of reading name's header into the index (not
// into sorted). added is false if the file vanished or is unreadable.
func (q *Queue) addLocked(name string, e Entry, err error) (added bool, _ error) {
	c := &q.list
	if err != nil {
		if vfs.IsNotExist(err) {
			return false, nil // deleted since the readdir or the event
		}
		if errors.Is(err, errCorrupt) || errors.Is(err, vfs.ErrSymlink) {
			q.log.Warn("fsqueue: skipping unreadable message file", "dir", q.dir, "name", name, "err", err)
			c.bad[name] = struct{}{}
			return false, nil
		}
		return false, fmt.Errorf("fsqueue: list %s: %w", q.dir, err)
	}
	c.index[name] = e
	if a := q.opts.IndexAttr; a != "" {
		v := e.Attrs[a]
		if c.byAttr[v] == nil {
			c.byAttr[v] = map[string]struct{}{}
		}
		c.byAttr[v][name] = struct{}{}
	}
	return true, nil
}

// unindexLocked drops name from the index and attribute index (not sorted).
func (q *Queue) unindexLocked(name string) {
	c := &q.list
	e, ok := c.index[name]
	if !ok {
		return
	}
	delete(c.index, name)
	if a := q.opts.IndexAttr; a != "" {
		v := e.Attrs[a]
		delete(c.byAttr[v], name)
		if len(c.byAttr[v]) == 0 {
			delete(c.byAttr, v)
		}
	}
}

// applyEvents applies watched changes incrementally to index and sorted.
func (q *Queue) applyEvents(events []vfs.DirEvent) error {
	c := &q.list
	for _, ev := range events {
		name, ok := nameFromFile(ev.Name)
		if !ok {
			continue
		}
		if !ev.Added {
			q.removeEntry(name)
			delete(c.bad, name)
			q.msgs.mu.Lock()
			delete(q.msgs.m, name)
			q.msgs.mu.Unlock()
			continue
		}
		if _, ok := c.index[name]; ok {
			continue
		}
		if _, ok := c.bad[name]; ok {
			continue
		}
		added, err := q.indexLocked(name)
		if err != nil {
			return err
		}
		if added {
			q.insertSorted(c.index[name])
		}
	}
	return nil
}

func (q *Queue) insertSorted(e Entry) {
	c := &q.list
	if !insertByName(&c.sorted, &c.shared, e) {
		return
	}
	if c.visOn {
		q.addVisibleLocked(e)
	}
}

// removeEntry drops name from the index and sorted. The caller holds q.list.mu.
func (q *Queue) removeEntry(name string) {
	c := &q.list
	e, ok := c.index[name]
	if !ok {
		return
	}
	q.unindexLocked(name)
	removeByName(&c.sorted, &c.shared, name)
	if c.visOn {
		q.removeVisibleLocked(e)
	}
}

// errCorrupt marks a file that exists but cannot be parsed.
var errCorrupt = errors.New("corrupt file")

func (q *Queue) readHeader(name string) (Entry, error) {
	data, err := q.fsys.ReadFile(q.msgPath(name))
	if err != nil {
		return Entry{}, err
	}
	var h msgHeader
	if err := json.Unmarshal(data, &h); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	if h.Name != name {
		return Entry{}, fmt.Errorf("%w: name field %q", errCorrupt, h.Name)
	}
	return Entry{Name: name, VisibleAtMs: h.VisibleAtMs, EnqueuedAtMs: h.EnqueuedAtMs, Attrs: h.Attrs}, nil
}

// Close releases the directory watch. The Queue must not be used afterwards.
func (q *Queue) Close() error {
	q.list.mu.Lock()
	defer q.list.mu.Unlock()
	if q.list.watch != nil {
		err := q.list.watch.Close()
		q.list.watch = nil
		return err
	}
	return nil
}

// Invalidate forgets the cached listings, so the next List (and ClaimNext)
// re-reads the directories. Already parsed message headers are kept: message
// files are immutable.
func (q *Queue) Invalidate() {
	q.list.mu.Lock()
	q.list.valid = false
	q.list.mu.Unlock()
	q.claims.mu.Lock()
	q.claims.setValid = false
	q.claims.entries = nil
	q.claims.mu.Unlock()
}
