package fsqueue_test

import (
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// faultFS injects one-shot faults into what the queue index reads: fail maps
// a path to the error of its next ReadFile (a message header) or
// ReadDirNames (the queue directory); overflow makes the next watch Drain
// lose its events and report an overflow; afterReadDir runs once, after the
// next ReadDirNames (a change made by another process during a listing). It
// lists directories in name order, so that a listing meets the messages in
// the order they were enqueued. With watch it offers the inner FS's
// directory watch (inotify), without it the queue polls the mtime.
type faultFS struct {
	vfs.FS
	watch bool

	mu           sync.Mutex
	fail         map[string]error
	overflow     bool
	afterReadDir func()
	watching     bool // a watch was handed out
}

func (f *faultFS) failNext(path string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]error{}
	}
	f.fail[path] = err
}

// overflowNext makes the next watch Drain lose its events and report an
// overflow.
func (f *faultFS) overflowNext() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.overflow = true
}

// onReadDir sets the hook run after the next ReadDirNames.
func (f *faultFS) onReadDir(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.afterReadDir = hook
}

// take returns and disarms path's fault.
func (f *faultFS) take(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.fail[path]
	delete(f.fail, path)
	return err
}

// armed reports whether a fault or hook has not fired yet.
func (f *faultFS) armed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fail) > 0 || f.overflow || f.afterReadDir != nil
}

func (f *faultFS) ReadFile(name string) ([]byte, error) {
	if err := f.take(name); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.FS.ReadFile(name)
}

func (f *faultFS) ReadDirNames(name string) ([]string, error) {
	if err := f.take(name); err != nil {
		return nil, &fs.PathError{Op: "readdirent", Path: name, Err: err}
	}
	names, err := f.FS.ReadDirNames(name)
	slices.Sort(names)
	f.mu.Lock()
	hook := f.afterReadDir
	f.afterReadDir = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return names, err
}

func (f *faultFS) WatchDir(dir string) (vfs.DirWatch, error) {
	if !f.watch {
		return nil, errors.New("faultFS: watch off")
	}
	w, ok := vfs.WatchDir(f.FS, dir)
	if !ok {
		return nil, errors.New("faultFS: inner FS cannot watch")
	}
	f.mu.Lock()
	f.watching = true
	f.mu.Unlock()
	return faultWatch{DirWatch: w, f: f}, nil
}

type faultWatch struct {
	vfs.DirWatch
	f *faultFS
}

func (w faultWatch) Drain() ([]vfs.DirEvent, bool, error) {
	events, overflow, err := w.DirWatch.Drain()
	w.f.mu.Lock()
	lose := w.f.overflow
	w.f.overflow = false
	w.f.mu.Unlock()
	if lose {
		return nil, true, err
	}
	return events, overflow, err
}

// indexErrHarness is the state of one TestIndexErrorRelists case: q lists
// through f; other stands for another process sharing the directory.
type indexErrHarness struct {
	t     *testing.T
	dir   string
	f     *faultFS
	q     *fsqueue.Queue
	other *fsqueue.Queue
	msgs  map[string]int64 // the messages on disk: name -> VisibleAtMs

	before, after []string // enqueued before and after the case's fault-free first listing
}

const (
	laterAt = int64(1) << 50 // VisibleAtMs of the delayed messages
	dueAt   = int64(1000)    // the ListVisible time of the checked calls
)

// enqueue adds n messages through other, every second one delayed, and
// returns their names in order.
func (h *indexErrHarness) enqueue(n int) []string {
	h.t.Helper()
	var names []string
	for range n {
		vis := int64(0)
		if len(h.msgs)%2 == 1 {
			vis = laterAt
		}
		name := enqueue(h.t, h.other, fsqueue.Message{VisibleAtMs: vis, Attrs: map[string]string{"k": "v"}, Payload: []byte("{}")})
		h.msgs[name] = vis
		names = append(names, name)
	}
	return names
}

func (h *indexErrHarness) delete(name string) {
	h.t.Helper()
	if err := h.other.Delete(name); err != nil {
		h.t.Fatal(err)
	}
	delete(h.msgs, name)
}

func (h *indexErrHarness) path(name string) string { return filepath.Join(h.dir, name+".json") }

// want returns the messages visible at nowMs, in name order.
func (h *indexErrHarness) want(nowMs int64) []string {
	var out []string
	for name, vis := range h.msgs {
		if vis <= nowMs {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestIndexErrorRelists: an error while the index is brought up to date (a
// header read failing with EMFILE, a directory listing failing with EIO)
// fails that call, and the next call relists, so its answer holds every
// message on disk: the index is never left valid but incomplete. Each case
// runs with the directory watch (incremental updates) and with mtime
// polling, through List, ListVisible and ListAttr; then all three views are
// checked.
func TestIndexErrorRelists(t *testing.T) {
	emfile, eio := syscall.EMFILE, syscall.EIO
	cases := []struct {
		name      string
		watchOnly bool                     // the fault is on a path only the watch takes
		before    int                      // messages enqueued before q's first listing (h.before)
		listFirst bool                     // q lists once, fault-free, before the fault
		after     int                      // messages enqueued then (h.after)
		arm       func(h *indexErrHarness) // injects the fault(s)
		then      func(h *indexErrHarness) // runs after the failed call, if set
	}{
		{
			name: "watch event, first of three fails", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) { h.f.failNext(h.path(h.after[0]), emfile) },
		},
		{
			name: "watch event, middle of three fails", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) { h.f.failNext(h.path(h.after[1]), emfile) },
		},
		{
			// The removal event comes after the failing one in the same
			// drained batch.
			name: "watch event fails, a deletion after it", watchOnly: true,
			before: 2, listFirst: true, after: 1,
			arm: func(h *indexErrHarness) {
				h.delete(h.before[0])
				h.f.failNext(h.path(h.after[0]), emfile)
			},
		},
		{
			name: "watch event fails, then that message is deleted", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm:  func(h *indexErrHarness) { h.f.failNext(h.path(h.after[1]), emfile) },
			then: func(h *indexErrHarness) { h.delete(h.after[1]) },
		},
		{
			name:   "first listing (parallel reads), one read fails",
			before: 40,
			arm:    func(h *indexErrHarness) { h.f.failNext(h.path(h.before[20]), emfile) },
		},
		{
			name:   "first listing fails, then that message is deleted",
			before: 40,
			arm:    func(h *indexErrHarness) { h.f.failNext(h.path(h.before[20]), emfile) },
			then:   func(h *indexErrHarness) { h.delete(h.before[20]) },
		},
		{
			name:   "first listing, a message enqueued during it fails",
			before: 20,
			arm: func(h *indexErrHarness) {
				h.f.onReadDir(func() { h.f.failNext(h.path(h.enqueue(1)[0]), emfile) })
			},
		},
		{
			name:   "first listing fails to read the directory",
			before: 20,
			arm:    func(h *indexErrHarness) { h.f.failNext(h.dir, eio) },
		},
		{
			name: "relist after a watch overflow, one read fails", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.f.overflowNext()
				h.f.failNext(h.path(h.after[1]), emfile)
			},
		},
		{
			name: "relist after a watch overflow fails to read the directory", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.f.overflowNext()
				h.f.failNext(h.dir, eio)
			},
		},
		{
			// The relist indexes after[0] and after[1], then fails on
			// after[2]; with after[2] gone the next relist finds nothing
			// new to read.
			name:   "relist fails on the last new message, then it is deleted",
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.q.Invalidate()
				h.f.failNext(h.path(h.after[2]), emfile)
			},
			then: func(h *indexErrHarness) { h.delete(h.after[2]) },
		},
	}
	listers := []struct {
		name  string
		list  func(q *fsqueue.Queue) ([]fsqueue.Entry, error)
		nowMs int64 // the visibility the answer is filtered by
	}{
		{"List", (*fsqueue.Queue).List, laterAt},
		{"ListVisible", func(q *fsqueue.Queue) ([]fsqueue.Entry, error) { return q.ListVisible(dueAt) }, dueAt},
		{"ListAttr", func(q *fsqueue.Queue) ([]fsqueue.Entry, error) { return q.ListAttr("v") }, laterAt},
	}
	for _, mode := range []string{"watch", "poll"} {
		if mode == "watch" {
			w, ok := vfs.WatchDir(vfs.OS{}, t.TempDir())
			if !ok {
				t.Log("no directory watch on this system: poll mode only")
				continue
			}
			w.Close()
		}
		for _, c := range cases {
			if c.watchOnly && mode != "watch" {
				continue
			}
			for _, l := range listers {
				t.Run(mode+"/"+c.name+"/"+l.name, func(t *testing.T) {
					dir := t.TempDir()
					h := &indexErrHarness{t: t, dir: dir, f: &faultFS{FS: vfs.OS{}, watch: mode == "watch"}, msgs: map[string]int64{}}
					h.other = openQueue(t, vfs.OS{}, dir, nil)
					var err error
					h.q, err = fsqueue.Open(h.f, dir, fsqueue.Options{IndexAttr: "k", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { h.q.Close() })
					check := func(what string) {
						t.Helper()
						got, err := l.list(h.q)
						if err != nil {
							t.Fatalf("%s: %s: %v", what, l.name, err)
						}
						if want := h.want(l.nowMs); !slices.Equal(entryNames(got), want) {
							t.Fatalf("%s: %s = %d messages %v\nwant %d %v", what, l.name, len(got), entryNames(got), len(want), want)
						}
					}

					h.before = h.enqueue(c.before)
					if c.listFirst {
						check("first listing")
					}
					h.after = h.enqueue(c.after)
					c.arm(h)
					// Call until the fault fires (a change made during a
					// listing may be read only by the next one); the call
					// it hits must fail with it.
					for i := 0; h.f.armed(); i++ {
						if i == 3 {
							t.Fatal("the injected fault never fired")
						}
						_, err := l.list(h.q)
						if !h.f.armed() && !errors.Is(err, emfile) && !errors.Is(err, eio) {
							t.Fatalf("call hit by the fault: err = %v, want the injected error", err)
						}
					}
					if c.then != nil {
						c.then(h)
					}
					check("after the fault")
					// Every view agrees: the sorted list, the attribute
					// index and both parts of the visibility index.
					for _, v := range []struct {
						name  string
						list  func() ([]fsqueue.Entry, error)
						nowMs int64
					}{
						{"List", h.q.List, laterAt},
						{"ListAttr", func() ([]fsqueue.Entry, error) { return h.q.ListAttr("v") }, laterAt},
						{"ListVisible(due)", func() ([]fsqueue.Entry, error) { return h.q.ListVisible(dueAt) }, dueAt},
						{"ListVisible(later)", func() ([]fsqueue.Entry, error) { return h.q.ListVisible(laterAt) }, laterAt},
					} {
						got, err := v.list()
						if err != nil {
							t.Fatalf("%s: %v", v.name, err)
						}
						if want := h.want(v.nowMs); !slices.Equal(entryNames(got), want) {
							t.Fatalf("%s = %v, want %v", v.name, entryNames(got), want)
						}
					}
					if mode == "watch" {
						h.f.mu.Lock()
						watching := h.f.watching
						h.f.mu.Unlock()
						if !watching {
							t.Fatal("the queue did not use the directory watch")
						}
					}
				})
			}
		}
	}
}
