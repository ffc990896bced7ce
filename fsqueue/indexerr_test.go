package fsqueue_test

import (
	"errors"
	"io/fs"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// faultFS injects one-shot faults into what the queue index reads: fail maps
// a path to the error of the next listing of that directory, after
// failAfter[path] names (0: before the first); overflow makes the next
// watch Drain lose its events and report an overflow, drainErr makes it
// fail; afterList runs once, after the next listing (a change made by
// another process during a listing). It lists directories in name order,
// so that a listing meets the messages in the order they were enqueued.
// With watch it offers the inner FS's directory watch (inotify), without
// it the queue polls the mtime.
type faultFS struct {
	vfs.FS
	watch bool

	mu        sync.Mutex
	fail      map[string]error
	failAfter map[string]int
	overflow  bool
	drainErr  error
	afterList func()
	watching  bool // a watch was handed out
}

// failNext makes the next listing of path fail with err after n names.
func (f *faultFS) failNext(path string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail, f.failAfter = map[string]error{}, map[string]int{}
	}
	f.fail[path], f.failAfter[path] = err, n
}

// overflowNext makes the next watch Drain lose its events and report an
// overflow.
func (f *faultFS) overflowNext() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.overflow = true
}

// drainFailsNext makes the next watch Drain fail with err.
func (f *faultFS) drainFailsNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drainErr = err
}

// onList sets the hook run after the next listing.
func (f *faultFS) onList(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.afterList = hook
}

// take returns and disarms path's fault: the error and after how many
// entries it strikes.
func (f *faultFS) take(path string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err, n := f.fail[path], f.failAfter[path]
	delete(f.fail, path)
	return n, err
}

// armed reports whether a fault or hook has not fired yet.
func (f *faultFS) armed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fail) > 0 || f.overflow || f.drainErr != nil || f.afterList != nil
}

// ScanDir implements vfs.DirScanner: the listing the index streams.
func (f *faultFS) ScanDir(name string, fn func([]byte) error) error {
	after, err := f.take(name)
	if err != nil && after == 0 {
		return &fs.PathError{Op: "readdirent", Path: name, Err: err}
	}
	names, lerr := f.FS.ReadDirNames(name)
	if lerr != nil {
		return lerr
	}
	slices.Sort(names)
	for i, n := range names {
		if err != nil && i == after {
			return &fs.PathError{Op: "readdirent", Path: name, Err: err}
		}
		if err := fn([]byte(n)); err != nil {
			return err
		}
	}
	f.mu.Lock()
	hook := f.afterList
	f.afterList = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

func (f *faultFS) WatchDir(dir string, contents bool) (vfs.DirWatch, error) {
	if !f.watch {
		return nil, errors.New("faultFS: watch off")
	}
	watch := vfs.WatchDir
	if contents {
		watch = vfs.WatchDirContents
	}
	w, ok := watch(f.FS, dir)
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
	lose, derr := w.f.overflow, w.f.drainErr
	w.f.overflow, w.f.drainErr = false, nil
	w.f.mu.Unlock()
	if derr != nil {
		return nil, false, derr
	}
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
	laterAt = int64(1) << 45 // VisibleAtMs of the delayed messages
	dueAt   = int64(1000)    // the Visible time of the checked calls
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
// directory listing failing at once or half way with EIO or EMFILE, a
// directory watch failing) fails that call, and the next call relists, so
// its answer holds every message on disk: the index is never left valid
// but incomplete. Each case runs with the directory watch (incremental
// updates) and with mtime polling, through All, Visible and ListRoute; then
// all three views are checked.
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
		noErr     bool                     // the armed hook fails nothing
	}{
		{
			name:   "first listing fails to read the directory",
			before: 20,
			arm:    func(h *indexErrHarness) { h.f.failNext(h.dir, 0, eio) },
		},
		{
			name:   "first listing fails half way",
			before: 40,
			arm:    func(h *indexErrHarness) { h.f.failNext(h.dir, 20, emfile) },
		},
		{
			name:   "first listing fails half way, then a message it had listed is deleted",
			before: 40,
			arm:    func(h *indexErrHarness) { h.f.failNext(h.dir, 20, emfile) },
			then:   func(h *indexErrHarness) { h.delete(h.before[5]) },
		},
		{
			name:   "first listing, a message enqueued and one deleted during it",
			before: 20,
			arm: func(h *indexErrHarness) {
				h.f.onList(func() {
					h.enqueue(1)
					h.delete(h.before[3])
				})
			},
			noErr: true,
		},
		{
			name: "relist after a watch overflow fails to read the directory", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.f.overflowNext()
				h.f.failNext(h.dir, 0, eio)
			},
		},
		{
			name: "relist after a watch overflow fails half way", watchOnly: true,
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.f.overflowNext()
				h.f.failNext(h.dir, 2, emfile)
			},
		},
		{
			name: "the watch fails, then the relist fails half way", watchOnly: true,
			before: 3, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.f.drainFailsNext(eio)
				h.f.failNext(h.dir, 4, emfile)
			},
		},
		{
			// The relist meets before[0] and after[0], then fails; with
			// after[2] gone the next relist must not hold it.
			name:   "relist fails half way, then a message it did not reach is deleted",
			before: 1, listFirst: true, after: 3,
			arm: func(h *indexErrHarness) {
				h.q.Invalidate()
				h.f.failNext(h.dir, 2, emfile)
			},
			then: func(h *indexErrHarness) { h.delete(h.after[2]) },
		},
	}
	listers := []struct {
		name  string
		list  func(q *fsqueue.Queue) ([]fsqueue.Entry, error)
		nowMs int64 // the visibility the answer is filtered by
	}{
		{"All", (*fsqueue.Queue).List, laterAt},
		{"Visible", func(q *fsqueue.Queue) ([]fsqueue.Entry, error) { return listVisible(q, dueAt) }, dueAt},
		{"ListRoute", func(q *fsqueue.Queue) ([]fsqueue.Entry, error) { return q.ListRoute("v") }, laterAt},
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
					h.other = openQueueAttr(t, vfs.NoSync(vfs.OS{}), dir, nil, "k")
					h.q = openQueueAttr(t, h.f, dir, nil, "k")
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
						if !h.f.armed() && !c.noErr && !errors.Is(err, emfile) && !errors.Is(err, eio) {
							t.Fatalf("call hit by the fault: err = %v, want the injected error", err)
						}
					}
					if c.then != nil {
						c.then(h)
					}
					check("after the fault")
					// Every view agrees.
					for _, v := range []struct {
						name  string
						list  func() ([]fsqueue.Entry, error)
						nowMs int64
					}{
						{"List", h.q.List, laterAt},
						{"ListRoute", func() ([]fsqueue.Entry, error) { return h.q.ListRoute("v") }, laterAt},
						{"Visible(due)", func() ([]fsqueue.Entry, error) { return listVisible(h.q, dueAt) }, dueAt},
						{"Visible(later)", func() ([]fsqueue.Entry, error) { return listVisible(h.q, laterAt) }, laterAt},
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
