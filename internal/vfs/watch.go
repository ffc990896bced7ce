package vfs

// DirEvent is one change to a directory's entries seen by a DirWatch.
type DirEvent struct {
	// Name is the entry's name within the directory.
	Name string
	// Added is true for an entry created or moved in, false for one removed
	// or moved out.
	Added bool
}

// DirWatch reports changes to one directory's entries, made by any process.
type DirWatch interface {
	// Drain returns the events queued since the last call without blocking.
	// overflow is true when events were lost (the caller must re-list).
	Drain() (events []DirEvent, overflow bool, err error)
	// Close stops watching.
	Close() error
}

// Watcher is implemented by file systems that can watch a directory (the
// OS on Linux, through inotify). Callers fall back to polling when the FS
// does not implement it or WatchDir fails.
type Watcher interface {
	WatchDir(dir string) (DirWatch, error)
}

// WatchDir watches dir if fsys supports it; ok is false otherwise.
func WatchDir(fsys FS, dir string) (w DirWatch, ok bool) {
	wf, isW := fsys.(Watcher)
	if !isW {
		return nil, false
	}
	w, err := wf.WatchDir(dir)
	if err != nil || w == nil {
		return nil, false
	}
	return w, true
}

// WatchDir forwards to the wrapped FS.
func (n noSyncFS) WatchDir(dir string) (DirWatch, error) {
	if w, ok := WatchDir(n.FS, dir); ok {
		return w, nil
	}
	return nil, errNoWatch
}

// WatchDir forwards to the wrapped FS.
func (c *CountingFS) WatchDir(dir string) (DirWatch, error) {
	if w, ok := WatchDir(c.FS, dir); ok {
		return w, nil
	}
	return nil, errNoWatch
}

// WatchDir implements Watcher (Linux only; see watch_*.go).
func (OS) WatchDir(dir string) (DirWatch, error) { return watchDir(dir) }

type noWatchError struct{}

func (noWatchError) Error() string { return "vfs: directory watching not supported" }

var errNoWatch error = noWatchError{}
