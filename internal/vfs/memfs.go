package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrCrashed is returned by every method of a [File] handle that was open when
// [MemFS.Crash] ran: a power loss ends the process that held it.
var ErrCrashed = errors.New("vfs: file handle invalidated by a simulated crash")

// memMaxSize bounds a MemFS file so that a stray Seek cannot allocate the
// address space.
const memMaxSize = 1 << 32

// memEpoch is time zero of the MemFS logical clock.
var memEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// memOps are the operation names [MemFS.InjectError] accepts.
var memOps = map[string]bool{
	"open": true, "read": true, "write": true, "sync": true, "syncdir": true,
	"truncate": true, "rename": true, "link": true, "remove": true,
	"mkdir": true, "readdir": true, "touch": true, "lock": true,
}

// MemFS is an in-memory, strict implementation of [FS] for power-loss
// simulation, modelled on Pebble's vfs.NewStrictMem and LevelDB's
// FaultInjectionTestEnv. Create one with [NewStrictMem].
//
// # Namespace
//
// MemFS is a tree of directories and files. Paths are cleaned; relative paths
// are resolved against the root (the working directory is "/"), and a volume
// name is ignored. Files are inodes: [MemFS.Link] adds a second directory
// entry for the same inode (writes through either name are seen through
// both), and [MemFS.Rename] moves a directory entry (files and directories).
// There are no symbolic links, so Lstat is Stat. Errors are *fs.PathError or
// *os.LinkError values that satisfy errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, fs.ErrExist) where the os package's would. ModTime comes from
// a logical clock that advances by one millisecond per mutation.
//
// # Durability model
//
// Every file inode has a synced copy of its data, and every directory has a
// synced set of entries (name → inode):
//
//   - File.Sync on a file sets the inode's synced data to its current data.
//     It says nothing about any directory entry naming the file.
//   - SyncDir(dir), or File.Sync on a handle opened on a directory, sets dir's
//     synced entries to its current entries. Only dir's own entries: neither
//     its parent's entry for dir nor the entries of its subdirectories.
//   - Nothing else is durable: Write, Truncate, O_TRUNC, O_CREATE, Rename,
//     Link, Remove, RemoveAll and MkdirAll change only the current state.
//
// [MemFS.Crash] simulates a power loss. Starting at the root (which always
// exists), every reachable directory's entries become its synced entries, and
// every reachable file's data becomes its synced data (a file never synced is
// empty). Hence a file or directory survives only if every directory on its
// path was synced after the entry was made; an entry removed or renamed away
// since its directory's last SyncDir comes back; a file appended to since
// its last Sync is truncated to its synced length. A directory that the synced
// entries name more than once (a rename synced in the target directory but
// not in the source) is kept only at its first name in sorted depth-first
// order. The root starts with no synced entries, so a directory made by
// MkdirAll("/data") is lost by a crash unless SyncDir("/") ran (or
// [MemFS.MarkAllSynced]). After Crash, every File handle opened before it
// fails with [ErrCrashed] and every lock is released; the MemFS itself is
// usable at once, as after a reboot. [MemFS.CrashClone] returns the same
// post-crash state as a new MemFS and leaves the original running.
//
// A failed operation (including an injected fault) changes nothing, and a
// failed Sync does not make anything durable.
//
// [MapWords] maps a MemFS file like a MAP_SHARED page: the words are the
// file's unsynced data, seen at once through every handle's mapping.
//
// # Sync points and fault injection
//
// [MemFS.SyncCount] counts successful syncs, and [MemFS.OnSync] registers a
// hook called after each one, so a test can crash at every sync point of a
// workload. [MemFS.InjectError] and [MemFS.InjectShortWrite] make a chosen
// future call fail.
//
// MemFS is safe for concurrent use; one mutex serializes every operation.
type MemFS struct {
	mu    sync.Mutex
	root  *memNode
	gen   uint64 // bumped by Crash; handles of an older generation are dead
	boots uint64 // the simulated machine's boot count (BootID)
	// rnd is the random stream of Rand, made at its first read; rndMu
	// guards it.
	rndMu  sync.Mutex
	rnd    *rand.Rand
	clock  int64
	syncs  int
	onSync func(n int)
	faults []*memFault
	locks  map[string]*memLock
}

var _ FS = (*MemFS)(nil)

// NewStrictMem returns an empty [MemFS] holding only the root directory "/".
func NewStrictMem() *MemFS {
	return &MemFS{root: newMemDir(0, memEpoch), locks: map[string]*memLock{}}
}

// memNode is an inode: a file or a directory.
type memNode struct {
	dir     bool
	mode    fs.FileMode // permission bits only
	modTime time.Time

	// Files. synced[:len(synced)] is never written in place: data shares
	// synced's array only while shared is true, and a write below
	// len(synced) copies data first (copy-on-write). synced has cap ==
	// len, and a shrinking Truncate caps data, so appends never reach bytes
	// another slice can see. This lets Sync, Crash and CrashClone share
	// arrays instead of copying whole files.
	data   []byte
	synced []byte
	shared bool
	// wbLost is set by a writeback error (InjectWritebackError): the data
	// written before it was marked clean without reaching the disk, so a
	// later Sync makes durable only what was written since (dirty).
	wbLost bool
	dirty  [][2]int64
	// wake is closed by Words.Wake (memfs_words.go); nil until a Wait.
	wake chan struct{}

	// Directories.
	children       map[string]*memNode
	syncedChildren map[string]*memNode
}

func newMemDir(perm fs.FileMode, t time.Time) *memNode {
	return &memNode{
		dir: true, mode: perm & fs.ModePerm, modTime: t,
		children: map[string]*memNode{}, syncedChildren: map[string]*memNode{},
	}
}

// syncData makes the file's current data its synced data.
func (n *memNode) syncData() {
	if n.wbLost {
		// Pages marked clean by the writeback error stay as the disk has
		// them; only ranges written since are flushed.
		merged := make([]byte, len(n.data))
		copy(merged, n.synced)
		for _, d := range n.dirty {
			lo, hi := min(d[0], int64(len(merged))), min(d[1], int64(len(merged)))
			copy(merged[lo:hi], n.data[lo:hi])
		}
		n.synced, n.shared, n.wbLost, n.dirty = merged, false, false, nil
		return
	}
	if len(n.data) == 0 {
		n.data, n.synced, n.shared = nil, nil, false
		return
	}
	n.synced = n.data[:len(n.data):len(n.data)]
	n.shared = true
}

// writeAt writes p at off, zero-filling any gap after the current end.
func (n *memNode) writeAt(off int64, p []byte) {
	if n.wbLost {
		n.dirty = append(n.dirty, [2]int64{off, off + int64(len(p))})
	}
	old := int64(len(n.data))
	if n.shared && min(off, old) < int64(len(n.synced)) {
		n.data = slices.Clone(n.data)
		n.shared = false
	}
	end := off + int64(len(p))
	if end > old {
		n.data = slices.Grow(n.data, int(end-old))[:end]
		if off > old {
			clear(n.data[old:off])
		}
	}
	copy(n.data[off:], p)
}

// truncate sets the file's size.
func (n *memNode) truncate(size int64) {
	switch l := int64(len(n.data)); {
	case size == 0:
		n.data, n.shared = nil, false
	case size < l:
		n.data = n.data[:size:size] // cap it: later appends must not reuse the array
	case size > l:
		n.writeAt(size, nil)
	}
}

func (n *memNode) info(name string) fs.FileInfo {
	fi := memFileInfo{name: name, mode: n.mode, modTime: n.modTime}
	if n.dir {
		fi.mode |= fs.ModeDir
	} else {
		fi.size = int64(len(n.data))
	}
	return fi
}

type memFileInfo struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime time.Time
}

func (fi memFileInfo) Name() string       { return fi.name }
func (fi memFileInfo) Size() int64        { return fi.size }
func (fi memFileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi memFileInfo) ModTime() time.Time { return fi.modTime }
func (fi memFileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi memFileInfo) Sys() any           { return nil }

// ---- paths ----

// memParts splits a path into its cleaned components below the root.
func memParts(name string) ([]string, error) {
	if name == "" {
		return nil, fs.ErrNotExist
	}
	p := filepath.Clean(name)
	p = filepath.ToSlash(p[len(filepath.VolumeName(p)):])
	var parts []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, s)
		}
	}
	return parts, nil
}

func memKey(parts []string) string { return "/" + strings.Join(parts, "/") }

// lookup returns the node at parts.
func (m *MemFS) lookup(parts []string) (*memNode, error) {
	n := m.root
	for _, p := range parts {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		c := n.children[p]
		if c == nil {
			return nil, fs.ErrNotExist
		}
		n = c
	}
	return n, nil
}

// lookupParent returns the existing directory that holds the entry parts
// names, and the entry's name. parts must not be empty.
func (m *MemFS) lookupParent(parts []string) (*memNode, string, error) {
	d, err := m.lookup(parts[:len(parts)-1])
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", syscall.ENOTDIR
	}
	return d, parts[len(parts)-1], nil
}

func (m *MemFS) tick() time.Time {
	m.clock++
	return memEpoch.Add(time.Duration(m.clock) * time.Millisecond)
}

func memPathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// ---- fault injection ----

type memFault struct {
	op        string
	left      int
	err       error
	short     int  // >= 0: a short write of this many bytes
	writeback bool // a sync that marks the file's dirty data clean
}

// InjectError makes the nth future call of operation op fail with err
// (nth = 1 is the next call) and change nothing. Calls are counted from this
// call on, including calls that would have failed anyway. Operations:
//
//	"open"     OpenFile
//	"read"     File.Read, File.ReadAt, ReadFile
//	"write"    File.Write
//	"sync"     File.Sync
//	"syncdir"  SyncDir
//	"truncate" File.Truncate
//	"rename"   Rename
//	"link"     Link
//	"remove"   Remove, RemoveAll
//	"mkdir"    MkdirAll
//	"readdir"  ReadDirNames
//	"touch"    Touch
//	"lock"     Lock, TryLock, LockExisting (what opening the file to lock gives:
//	           EMFILE, EIO)
//
// err is returned wrapped in an *fs.PathError (*os.LinkError for rename and
// link), so errors.Is(err, syscall.ENOSPC) works. Several injections may be
// pending; if two hit the same call, the earlier injected wins and both are
// used up. InjectError panics on an unknown op, nth < 1 or a nil err.
func (m *MemFS) InjectError(op string, nth int, err error) {
	if !memOps[op] || nth < 1 || err == nil {
		panic(fmt.Sprintf("vfs: MemFS.InjectError(%q, %d, %v): bad argument", op, nth, err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = append(m.faults, &memFault{op: op, left: nth, err: err, short: -1})
}

// InjectShortWrite makes the nth future File.Write (counted like
// [MemFS.InjectError]'s "write") write only the first n bytes of its buffer
// (all of it if shorter) and return that count with err (io.ErrShortWrite if
// err is nil), wrapped in an *fs.PathError. It models ENOSPC or EFBIG in the
// middle of a write. It panics if nth < 1 or n < 0.
func (m *MemFS) InjectShortWrite(nth int, n int, err error) {
	if nth < 1 || n < 0 {
		panic(fmt.Sprintf("vfs: MemFS.InjectShortWrite(%d, %d): bad argument", nth, n))
	}
	if err == nil {
		err = io.ErrShortWrite
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = append(m.faults, &memFault{op: "write", left: nth, err: err, short: n})
}

// InjectWritebackError makes the nth future File.Sync of a regular file
// (counted like [MemFS.InjectError]'s "sync") fail with EIO the way Linux
// reports a writeback error: the file's unsynced data is marked clean
// without reaching the disk. Reads still see the new data (the page cache
// keeps it), a later Sync succeeds but makes durable only what was written
// after the failure, and a crash brings back the old data of every byte
// not rewritten since - the PostgreSQL "fsyncgate" behaviour.
func (m *MemFS) InjectWritebackError(nth int) {
	if nth < 1 {
		panic(fmt.Sprintf("vfs: MemFS.InjectWritebackError(%d): bad argument", nth))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = append(m.faults, &memFault{op: "sync", left: nth, err: syscall.EIO, short: -1, writeback: true})
}

// ClearFaults drops every pending injected fault.
func (m *MemFS) ClearFaults() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = nil
}

// fault counts one call of op and returns the fault it triggers, if any.
func (m *MemFS) fault(op string) *memFault {
	if len(m.faults) == 0 {
		return nil
	}
	var hit *memFault
	kept := m.faults[:0]
	for _, f := range m.faults {
		if f.op == op {
			f.left--
			if f.left == 0 {
				if hit == nil {
					hit = f
				}
				continue
			}
		}
		kept = append(kept, f)
	}
	clear(m.faults[len(kept):])
	m.faults = kept
	return hit
}

// lockFault counts one lock call of name and returns the error an
// injected "lock" fault gives it, if any.
func (m *MemFS) lockFault(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("lock"); err != nil {
		return fmt.Errorf("vfs: lock %s: %w", name, memPathErr("open", name, err))
	}
	return nil
}

// faultErr is fault for operations without a short mode.
func (m *MemFS) faultErr(op string) error {
	if f := m.fault(op); f != nil {
		return f.err
	}
	return nil
}

// ---- sync points and crashes ----

// SyncCount returns the number of successful syncs so far: File.Sync and
// SyncDir calls that returned nil (injected failures do not count).
func (m *MemFS) SyncCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs
}

// OnSync registers fn to be called after each successful sync with the new
// [MemFS.SyncCount], or removes the hook if fn is nil. fn runs in the
// syncing goroutine without the MemFS lock held, before Sync or SyncDir
// returns, so it may call any MemFS method; concurrent syncs call it
// concurrently. To crash at sync point k while letting the workload finish,
// call [MemFS.CrashClone] when n == k.
func (m *MemFS) OnSync(fn func(n int)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onSync = fn
}

// synced counts a successful sync and runs the hook. m.mu must be held; it is
// released.
func (m *MemFS) synced() {
	m.syncs++
	n, fn := m.syncs, m.onSync
	m.mu.Unlock()
	if fn != nil {
		fn(n)
	}
}

// Crash simulates a power loss in place, as described on [MemFS]: the tree
// reverts to its synced state, every open File handle becomes invalid
// ([ErrCrashed]), and every lock is released. Pending faults, the sync count
// and the OnSync hook are kept.
func (m *MemFS) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resetToSynced()
	m.gen++
	m.boots++
	for _, l := range m.locks {
		close(l.done)
	}
	m.locks = map[string]*memLock{}
}

// ResetToSynced is [MemFS.Crash] (the name Pebble uses).
func (m *MemFS) ResetToSynced() { m.Crash() }

func (m *MemFS) resetToSynced() {
	seen := map[*memNode]bool{}
	var walk func(d *memNode)
	walk = func(d *memNode) {
		seen[d] = true
		kids := make(map[string]*memNode, len(d.syncedChildren))
		for _, name := range slices.Sorted(maps.Keys(d.syncedChildren)) {
			c := d.syncedChildren[name]
			switch {
			case c.dir && seen[c]:
				continue // a directory named twice (or a cycle): keep the first
			case c.dir:
				walk(c)
			case !seen[c]:
				seen[c] = true
				c.data, c.shared = c.synced, c.synced != nil
				c.wbLost, c.dirty = false, nil
			}
			kids[name] = c
		}
		d.children = kids
		d.syncedChildren = maps.Clone(kids)
	}
	walk(m.root)
}

// BootID identifies the simulated machine's boot: it changes with every
// [MemFS.Crash], and a [MemFS.CrashClone] is a later boot than its source.
// (The write-ahead log compares boot ids to tell a restart from a reboot.)
func (m *MemFS) BootID() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("memfs-boot-%d", m.boots), nil
}

// MayAlias returns the files that a power loss now could leave with names
// in two directories, each as the sorted list of its names: a file named
// by the current or the synced entries of one directory and by those of
// another, outside the directories below skip (""; none). A crash keeps
// each directory's synced entries, or - the kernel wrote it back - its
// current ones, so a rename from one directory to another whose source
// directory was not synced may leave both names: on a real file system
// an inode with two links, where writing through one name changes the
// other.
func (m *MemFS) MayAlias(skip string) [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	type entry struct{ dir, path string }
	names := map[*memNode][]entry{}
	var walk func(d *memNode, path string)
	walk = func(d *memNode, path string) {
		if skip != "" && (path == skip || strings.HasPrefix(path, skip+"/")) {
			return
		}
		seen := map[string]bool{}
		for _, kids := range []map[string]*memNode{d.children, d.syncedChildren} {
			for _, name := range slices.Sorted(maps.Keys(kids)) {
				c := kids[name]
				p := path + "/" + name
				if c.dir {
					if kids[name] == d.children[name] && !seen[p] {
						seen[p] = true
						walk(c, p)
					}
					continue
				}
				if !slices.Contains(names[c], entry{path, p}) {
					names[c] = append(names[c], entry{path, p})
				}
			}
		}
	}
	walk(m.root, "")
	var out [][]string
	for _, es := range names {
		var ps []string
		for _, e := range es {
			if e.dir != es[0].dir {
				for _, e := range es {
					ps = append(ps, e.path)
				}
				break
			}
		}
		if len(ps) > 0 {
			slices.Sort(ps)
			out = append(out, ps)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// Rand returns the simulated machine's random source: a deterministic
// stream seeded by the boot ([MemFS.BootID]) and shared by every caller, so
// that a test whose steps run in a fixed order repeats exactly when the
// code under test reads its randomness from here instead of crypto/rand.
func (m *MemFS) Rand() io.Reader { return memRand{m} }

type memRand struct{ m *MemFS }

func (r memRand) Read(p []byte) (int, error) {
	r.m.rndMu.Lock()
	defer r.m.rndMu.Unlock()
	if r.m.rnd == nil {
		m := r.m
		m.mu.Lock()
		boots := m.boots
		m.mu.Unlock()
		m.rnd = rand.New(rand.NewSource(int64(boots) + 1))
	}
	return r.m.rnd.Read(p)
}

// CrashClone returns a new MemFS holding the state a power loss now would
// leave (see [MemFS.Crash]), and leaves m unchanged. The clone has no open
// handles, locks, faults or hook, a sync count of zero, and a copy of m's
// clock; everything in it is synced. Use it from an [MemFS.OnSync] hook to
// take a crash image at a sync point while the workload runs on.
func (m *MemFS) CrashClone() *MemFS { return m.crashClone(false) }

// CrashCloneWriteback is [MemFS.CrashClone] where the kernel had written
// back every file's data but no directory entry since its last sync: every
// file reachable through synced entries holds its current data, synced or
// not. It is the other extreme of a power loss (CrashClone: no unsynced
// data reached the disk) and the one that shows unsynced in-place
// overwrites of files whose names are durable.
func (m *MemFS) CrashCloneWriteback() *MemFS { return m.crashClone(true) }

func (m *MemFS) crashClone(writeback bool) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	copies := map[*memNode]*memNode{}
	var walk func(d *memNode) *memNode
	walk = func(d *memNode) *memNode {
		nd := newMemDir(d.mode, d.modTime)
		copies[d] = nd
		for _, name := range slices.Sorted(maps.Keys(d.syncedChildren)) {
			c := d.syncedChildren[name]
			if cp, ok := copies[c]; ok {
				if !c.dir {
					nd.children[name] = cp
				}
				continue
			}
			if c.dir {
				nd.children[name] = walk(c)
				continue
			}
			// Sharing the synced array is safe: neither MemFS ever writes
			// synced bytes in place (see memNode).
			data := c.synced
			if writeback {
				data = slices.Clone(c.data) // c.data may still change in m
				if c.wbLost {
					// Written back: only what was written since the
					// writeback error; the pages it marked clean are lost.
					data = slices.Clone(c.synced)
					data = append(data, make([]byte, max(0, len(c.data)-len(data)))...)[:len(c.data)]
					for _, d := range c.dirty {
						lo, hi := min(d[0], int64(len(data))), min(d[1], int64(len(data)))
						copy(data[lo:hi], c.data[lo:hi])
					}
				}
			}
			cp := &memNode{mode: c.mode, modTime: c.modTime, data: data, synced: data, shared: data != nil}
			copies[c] = cp
			nd.children[name] = cp
		}
		nd.syncedChildren = maps.Clone(nd.children)
		return nd
	}
	return &MemFS{root: walk(m.root), clock: m.clock, boots: m.boots + 1, locks: map[string]*memLock{}}
}

// MarkAllSynced makes the whole current tree durable, as if every file and
// every directory had been synced, without counting sync points or calling
// the OnSync hook. Tests use it to make their setup survive a crash.
func (m *MemFS) MarkAllSynced() {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]bool{}
	var walk func(n *memNode)
	walk = func(n *memNode) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.syncData()
			return
		}
		n.syncedChildren = maps.Clone(n.children)
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(m.root)
}

// ---- FS ----

// OpenFile implements FS. It supports O_RDONLY, O_WRONLY, O_RDWR, O_CREATE,
// O_EXCL, O_TRUNC and O_APPEND; other flags are ignored. perm is kept as the
// file's permission bits but not enforced. A directory can be opened
// read-only; File.Sync on it syncs its entries like SyncDir.
func (m *MemFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("open"); err != nil {
		return nil, memPathErr("open", name, err)
	}
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	if acc != os.O_RDONLY && acc != os.O_WRONLY && acc != os.O_RDWR {
		return nil, memPathErr("open", name, syscall.EINVAL)
	}
	parts, err := memParts(name)
	if err != nil {
		return nil, memPathErr("open", name, err)
	}
	var n *memNode
	if len(parts) == 0 {
		n = m.root
	} else {
		d, base, err := m.lookupParent(parts)
		if err != nil {
			return nil, memPathErr("open", name, err)
		}
		n = d.children[base]
		if n == nil {
			if flag&os.O_CREATE == 0 {
				return nil, memPathErr("open", name, fs.ErrNotExist)
			}
			t := m.tick()
			n = &memNode{mode: perm & fs.ModePerm, modTime: t}
			d.children[base] = n
			d.modTime = t
			flag &^= os.O_EXCL // created here: the exclusive check passed
		}
	}
	if flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL {
		return nil, memPathErr("open", name, fs.ErrExist)
	}
	if n.dir {
		if acc != os.O_RDONLY || flag&(os.O_CREATE|os.O_TRUNC) != 0 {
			return nil, memPathErr("open", name, syscall.EISDIR)
		}
	} else if flag&os.O_TRUNC != 0 && acc != os.O_RDONLY && len(n.data) > 0 {
		n.truncate(0)
		n.modTime = m.tick()
	}
	return &memFile{
		m: m, n: n, name: name, gen: m.gen,
		read:   acc != os.O_WRONLY,
		write:  acc != os.O_RDONLY,
		append: flag&os.O_APPEND != 0,
	}, nil
}

// ReadFile implements FS.
func (m *MemFS) ReadFile(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("read"); err != nil {
		return nil, memPathErr("read", name, err)
	}
	parts, err := memParts(name)
	if err != nil {
		return nil, memPathErr("open", name, err)
	}
	n, err := m.lookup(parts)
	if err != nil {
		return nil, memPathErr("open", name, err)
	}
	if n.dir {
		return nil, memPathErr("read", name, syscall.EISDIR)
	}
	return slices.Clone(n.data), nil
}

// ReadDirNames implements FS. The names are sorted.
func (m *MemFS) ReadDirNames(name string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("readdir"); err != nil {
		return nil, memPathErr("readdirent", name, err)
	}
	parts, err := memParts(name)
	if err != nil {
		return nil, memPathErr("open", name, err)
	}
	n, err := m.lookup(parts)
	if err != nil {
		return nil, memPathErr("open", name, err)
	}
	if !n.dir {
		return nil, memPathErr("readdirent", name, syscall.ENOTDIR)
	}
	return slices.Sorted(maps.Keys(n.children)), nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (fs.FileInfo, error) { return m.stat("stat", name) }

// Lstat implements FS. MemFS has no symbolic links, so it is Stat.
func (m *MemFS) Lstat(name string) (fs.FileInfo, error) { return m.stat("lstat", name) }

func (m *MemFS) stat(op, name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, err := memParts(name)
	if err != nil {
		return nil, memPathErr(op, name, err)
	}
	n, err := m.lookup(parts)
	if err != nil {
		return nil, memPathErr(op, name, err)
	}
	return n.info(filepath.Base(name)), nil
}

// Rename implements FS. It atomically moves the entry oldpath to newpath,
// replacing a file at newpath. Like os.Rename, it fails with fs.ErrExist if
// newpath is an existing directory (unless it is oldpath itself), and with
// EINVAL if a directory would move into its own subtree. If both names are
// the same inode it does nothing.
func (m *MemFS) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err} }
	if err := m.faultErr("rename"); err != nil {
		return lerr(err)
	}
	op, err := memParts(oldpath)
	if err != nil {
		return lerr(err)
	}
	np, err := memParts(newpath)
	if err != nil {
		return lerr(err)
	}
	if len(op) == 0 || len(np) == 0 {
		return lerr(syscall.EBUSY)
	}
	od, obase, err := m.lookupParent(op)
	if err != nil {
		return lerr(err)
	}
	nd, nbase, err := m.lookupParent(np)
	if err != nil {
		return lerr(err)
	}
	n := od.children[obase]
	if n == nil {
		return lerr(fs.ErrNotExist)
	}
	if old := nd.children[nbase]; old != nil {
		if old == n {
			return nil
		}
		if old.dir {
			return lerr(fs.ErrExist)
		}
		if n.dir {
			return lerr(syscall.ENOTDIR)
		}
	}
	if n.dir && len(np) > len(op) && slices.Equal(np[:len(op)], op) {
		return lerr(syscall.EINVAL)
	}
	t := m.tick()
	delete(od.children, obase)
	nd.children[nbase] = n
	od.modTime, nd.modTime = t, t
	return nil
}

// Link implements FS: newpath becomes a second name of oldpath's inode. It
// fails with fs.ErrExist if newpath exists and with EPERM if oldpath is a
// directory.
func (m *MemFS) Link(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "link", Old: oldpath, New: newpath, Err: err} }
	if err := m.faultErr("link"); err != nil {
		return lerr(err)
	}
	op, err := memParts(oldpath)
	if err != nil {
		return lerr(err)
	}
	np, err := memParts(newpath)
	if err != nil {
		return lerr(err)
	}
	n, err := m.lookup(op)
	if err != nil {
		return lerr(err)
	}
	if n.dir {
		return lerr(syscall.EPERM)
	}
	if len(np) == 0 {
		return lerr(fs.ErrExist)
	}
	nd, nbase, err := m.lookupParent(np)
	if err != nil {
		return lerr(err)
	}
	if nd.children[nbase] != nil {
		return lerr(fs.ErrExist)
	}
	nd.children[nbase] = n
	nd.modTime = m.tick()
	return nil
}

// Remove implements FS: it removes a file entry or an empty directory.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("remove"); err != nil {
		return memPathErr("remove", name, err)
	}
	parts, err := memParts(name)
	if err != nil {
		return memPathErr("remove", name, err)
	}
	if len(parts) == 0 {
		return memPathErr("remove", name, syscall.EBUSY)
	}
	d, base, err := m.lookupParent(parts)
	if err != nil {
		return memPathErr("remove", name, err)
	}
	n := d.children[base]
	if n == nil {
		return memPathErr("remove", name, fs.ErrNotExist)
	}
	if n.dir && len(n.children) > 0 {
		return memPathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(d.children, base)
	d.modTime = m.tick()
	return nil
}

// RemoveAll implements FS. A missing name is not an error. Like os.RemoveAll
// it unlinks every entry of the tree; none of that is durable until the
// directories concerned are synced, so a crash may bring the tree back.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("remove"); err != nil {
		return memPathErr("removeall", name, err)
	}
	if name == "" {
		return nil
	}
	parts, _ := memParts(name)
	if len(parts) == 0 {
		return memPathErr("removeall", name, syscall.EBUSY)
	}
	d, base, err := m.lookupParent(parts)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return memPathErr("removeall", name, err)
	}
	n := d.children[base]
	if n == nil {
		return nil
	}
	t := m.tick()
	var clearDir func(n *memNode)
	clearDir = func(n *memNode) {
		for k, c := range n.children {
			if c.dir {
				clearDir(c)
			}
			delete(n.children, k)
		}
		n.modTime = t
	}
	if n.dir {
		clearDir(n)
	}
	delete(d.children, base)
	d.modTime = t
	return nil
}

// MkdirAll implements FS. It fails with ENOTDIR if a component is a file.
func (m *MemFS) MkdirAll(name string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("mkdir"); err != nil {
		return memPathErr("mkdir", name, err)
	}
	parts, err := memParts(name)
	if err != nil {
		return memPathErr("mkdir", name, err)
	}
	n := m.root
	for _, p := range parts {
		c := n.children[p]
		if c == nil {
			t := m.tick()
			c = newMemDir(perm, t)
			n.children[p] = c
			n.modTime = t
		} else if !c.dir {
			return memPathErr("mkdir", name, syscall.ENOTDIR)
		}
		n = c
	}
	return nil
}

// SyncDir implements FS: it makes name's current entries its synced entries
// (and only those; see [MemFS]). It fails with ENOTDIR on a file.
func (m *MemFS) SyncDir(name string) error {
	m.mu.Lock()
	if err := m.faultErr("syncdir"); err != nil {
		m.mu.Unlock()
		return memPathErr("sync", name, err)
	}
	parts, err := memParts(name)
	if err != nil {
		m.mu.Unlock()
		return memPathErr("open", name, err)
	}
	n, err := m.lookup(parts)
	if err != nil {
		m.mu.Unlock()
		return memPathErr("open", name, err)
	}
	if !n.dir {
		m.mu.Unlock()
		return memPathErr("sync", name, syscall.ENOTDIR)
	}
	n.syncedChildren = maps.Clone(n.children)
	m.synced() // unlocks
	return nil
}

// Touch implements FS: name's modification time becomes the next tick.
func (m *MemFS) Touch(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.faultErr("touch"); err != nil {
		return memPathErr("touch", name, err)
	}
	parts, err := memParts(name)
	if err != nil {
		return memPathErr("touch", name, err)
	}
	n, err := m.lookup(parts)
	if err != nil {
		return memPathErr("touch", name, err)
	}
	n.modTime = m.tick()
	return nil
}

// ---- locks ----

type memLock struct{ done chan struct{} } // closed on release

type memUnlocker struct {
	once sync.Once
	m    *MemFS
	key  string
	l    *memLock
}

// Unlock releases the lock; a second call, or a call after the lock was
// dropped by Crash, does nothing.
func (u *memUnlocker) Unlock() error {
	u.once.Do(func() {
		u.m.mu.Lock()
		defer u.m.mu.Unlock()
		if u.m.locks[u.key] == u.l {
			delete(u.m.locks, u.key)
			close(u.l.done)
		}
	})
	return nil
}

// lockFile creates the (empty, unsynced) lock file if it is missing, as
// flock does, and returns the lock's key.
func (m *MemFS) lockFile(name string) (string, error) {
	parts, err := memParts(name)
	if err != nil {
		return "", memPathErr("open", name, err)
	}
	if len(parts) == 0 {
		return "", memPathErr("open", name, syscall.EISDIR)
	}
	d, base, err := m.lookupParent(parts)
	if err != nil {
		return "", memPathErr("open", name, err)
	}
	switch n := d.children[base]; {
	case n == nil:
		t := m.tick()
		d.children[base] = &memNode{mode: FilePerm, modTime: t}
		d.modTime = t
	case n.dir:
		return "", memPathErr("open", name, syscall.EISDIR)
	}
	return memKey(parts), nil
}

// Lock implements FS with an in-memory exclusive lock per cleaned path,
// waiting until it is free or ctx is done. It creates a missing lock file
// like the OS implementation. Crash releases every lock.
func (m *MemFS) Lock(ctx context.Context, name string) (Unlocker, error) {
	if err := m.lockFault(name); err != nil {
		return nil, err
	}
	for {
		m.mu.Lock()
		key, err := m.lockFile(name)
		if err != nil {
			m.mu.Unlock()
			return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
		}
		l := m.locks[key]
		if l == nil {
			l = &memLock{done: make(chan struct{})}
			m.locks[key] = l
			m.mu.Unlock()
			return &memUnlocker{m: m, key: key, l: l}, nil
		}
		m.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("vfs: lock %s: %w", name, ctx.Err())
		}
	}
}

// TryLock implements FS: Lock without waiting.
func (m *MemFS) TryLock(name string) (Unlocker, bool, error) {
	if err := m.lockFault(name); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key, err := m.lockFile(name)
	if err != nil {
		return nil, false, fmt.Errorf("vfs: trylock %s: %w", name, err)
	}
	if m.locks[key] != nil {
		return nil, false, nil
	}
	l := &memLock{done: make(chan struct{})}
	m.locks[key] = l
	return &memUnlocker{m: m, key: key, l: l}, true, nil
}

// LockExisting implements FS: the lock of the file at name, which must exist
// (it is never created) and must still be the same file once locked.
func (m *MemFS) LockExisting(ctx context.Context, name string, wait bool) (Unlocker, bool, error) {
	if err := m.lockFault(name); err != nil {
		return nil, false, err
	}
	for {
		m.mu.Lock()
		parts, err := memParts(name)
		var n *memNode
		if err == nil {
			n, err = m.lookup(parts)
		}
		if err == nil && n.dir {
			err = syscall.EISDIR
		}
		if err != nil {
			m.mu.Unlock()
			return nil, false, fmt.Errorf("vfs: lock %s: %w", name, memPathErr("open", name, err))
		}
		key := memKey(parts)
		l := m.locks[key]
		if l == nil {
			l = &memLock{done: make(chan struct{})}
			m.locks[key] = l
			m.mu.Unlock()
			return &memUnlocker{m: m, key: key, l: l}, true, nil
		}
		m.mu.Unlock()
		if !wait {
			return nil, false, nil
		}
		// The file may be removed or replaced while waiting: the next round
		// looks it up again, so the lock is always taken on what name
		// names at that moment.
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("vfs: lock %s: %w", name, ctx.Err())
		}
	}
}

// ---- File ----

type memFile struct {
	m                   *MemFS
	n                   *memNode
	name                string
	gen                 uint64
	read, write, append bool
	pos                 int64
	closed              bool
}

// check reports why the handle cannot be used. f.m.mu must be held.
func (f *memFile) check(op string) error {
	if f.closed {
		return memPathErr(op, f.name, os.ErrClosed)
	}
	if f.gen != f.m.gen {
		return memPathErr(op, f.name, ErrCrashed)
	}
	return nil
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) Read(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	n, err := f.readAt(p, f.pos, "read")
	f.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if off < 0 {
		return 0, memPathErr("readat", f.name, errors.New("negative offset"))
	}
	return f.readAt(p, off, "read")
}

// readAt reads like ReadAt: n < len(p) comes with io.EOF.
func (f *memFile) readAt(p []byte, off int64, op string) (int, error) {
	if err := f.check(op); err != nil {
		return 0, err
	}
	if err := f.m.faultErr("read"); err != nil {
		return 0, memPathErr(op, f.name, err)
	}
	if f.n.dir {
		return 0, memPathErr(op, f.name, syscall.EISDIR)
	}
	if !f.read {
		return 0, memPathErr(op, f.name, syscall.EBADF)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("write"); err != nil {
		return 0, err
	}
	flt := f.m.fault("write")
	if flt != nil && flt.short < 0 {
		return 0, memPathErr("write", f.name, flt.err)
	}
	if f.n.dir || !f.write {
		return 0, memPathErr("write", f.name, syscall.EBADF)
	}
	var werr error
	if flt != nil {
		p = p[:min(flt.short, len(p))]
		werr = memPathErr("write", f.name, flt.err)
	}
	if len(p) == 0 {
		return 0, werr
	}
	if f.append {
		f.pos = int64(len(f.n.data))
	}
	if f.pos+int64(len(p)) > memMaxSize {
		return 0, memPathErr("write", f.name, syscall.EINVAL)
	}
	f.n.writeAt(f.pos, p)
	f.n.modTime = f.m.tick()
	f.pos += int64(len(p))
	return len(p), werr
}

func (f *memFile) Seek(offset int64, whence int) (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("seek"); err != nil {
		return 0, err
	}
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = f.pos + offset
	case io.SeekEnd:
		abs = int64(len(f.n.data)) + offset
	default:
		return 0, memPathErr("seek", f.name, syscall.EINVAL)
	}
	if abs < 0 {
		return 0, memPathErr("seek", f.name, syscall.EINVAL)
	}
	f.pos = abs
	return abs, nil
}

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	err := f.check("close")
	f.closed = true
	return err
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	if err := f.check("sync"); err != nil {
		f.m.mu.Unlock()
		return err
	}
	if flt := f.m.fault("sync"); flt != nil {
		if flt.writeback && !f.n.dir {
			f.n.wbLost, f.n.dirty = true, nil
		}
		f.m.mu.Unlock()
		return memPathErr("sync", f.name, flt.err)
	}
	if f.n.dir {
		f.n.syncedChildren = maps.Clone(f.n.children)
	} else {
		f.n.syncData()
	}
	f.m.synced() // unlocks
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("truncate"); err != nil {
		return err
	}
	if err := f.m.faultErr("truncate"); err != nil {
		return memPathErr("truncate", f.name, err)
	}
	if f.n.dir || !f.write || size < 0 || size > memMaxSize {
		return memPathErr("truncate", f.name, syscall.EINVAL)
	}
	f.n.truncate(size)
	f.n.modTime = f.m.tick()
	return nil
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return nil, err
	}
	return f.n.info(filepath.Base(f.name)), nil
}
