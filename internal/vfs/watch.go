package vfs

import "errors"

// DirEvent is one change to a directory's entries seen by a DirWatch.
type DirEvent struct {
	// Name is the entry's name within the directory.
	Name string
	// Added is true for an entry created or moved in, false for one removed
	// or moved out.
	Added bool
	// Changed is true (and Added false) for an entry whose content was
	// written or truncated in place; only a watch of contents
	// ([WatchDirContents]) reports it.
	Changed bool
}

// DirWatch reports changes to one directory's entries, made by any process.
type DirWatch interface {
	// Drain returns the events queued since the last call without blocking.
	// overflow is true when events were lost (the caller must re-list). An
	// error means the watch can no longer be trusted to report every change
	// - one wrapping [ErrWatchGone] that it never will again, as the
	// directory was removed or moved away - so the caller must close it,
	// watch the path anew and re-list.
	Drain() (events []DirEvent, overflow bool, err error)
	// Close stops watching.
	Close() error
}

// WaitableWatch is a DirWatch that can block until it has events to drain
// (the inotify watch of [OS] on Linux: the wait blocks its thread in
// poll(2); an unwatched descriptor costs nothing).
type WaitableWatch interface {
	DirWatch
	// Wait blocks until events are queued - at once while some are not
	// drained (the next Drain may find them, or find that another caller
	// drained them first) - and fails once the watch is closed.
	Wait() error
}

// Watcher is implemented by file systems that can watch a directory (the
// OS on Linux, through inotify). Callers fall back to polling when the FS
// does not implement it or WatchDir fails.
type Watcher interface {
	// WatchDir watches dir's entries; with contents, also writes to them.
	WatchDir(dir string, contents bool) (DirWatch, error)
}

// WatchDir watches dir's entries (names added and removed) if fsys supports
// it; ok is false otherwise.
func WatchDir(fsys FS, dir string) (w DirWatch, ok bool) { return watch(fsys, dir, false) }

// WatchDirContents is WatchDir that also reports every write to an entry's
// content in place ([DirEvent].Changed), so that a cache of the files'
// contents can drop exactly what changed.
func WatchDirContents(fsys FS, dir string) (w DirWatch, ok bool) { return watch(fsys, dir, true) }

func watch(fsys FS, dir string, contents bool) (w DirWatch, ok bool) {
	wf, isW := fsys.(Watcher)
	if !isW {
		return nil, false
	}
	w, err := wf.WatchDir(dir, contents)
	if err != nil || w == nil {
		return nil, false
	}
	return w, true
}

// WatchDir forwards to the wrapped FS.
func (n noSyncFS) WatchDir(dir string, contents bool) (DirWatch, error) {
	if w, ok := watch(n.FS, dir, contents); ok {
		return w, nil
	}
	return nil, errNoWatch
}

// WatchDir forwards to the wrapped FS.
func (c *CountingFS) WatchDir(dir string, contents bool) (DirWatch, error) {
	if w, ok := watch(c.FS, dir, contents); ok {
		return w, nil
	}
	return nil, errNoWatch
}

// WatchDir implements Watcher (Linux only; see watch_*.go).
func (OS) WatchDir(dir string, contents bool) (DirWatch, error) { return watchDir(dir, contents) }

// ErrWatchGone is wrapped by the error of [DirWatch.Drain] once the watched
// directory was removed or moved away: the path may name another directory
// now (replaced by another process), whose changes the watch never reports.
var ErrWatchGone = errors.New("vfs: watched directory removed or moved away")

type noWatchError struct{}

func (noWatchError) Error() string { return "vfs: directory watching not supported" }

var errNoWatch error = noWatchError{}
