package fsqueue

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// ownLen returns how many names q's listCache.own holds.
func ownLen(q *Queue) int {
	q.list.mu.Lock()
	defer q.list.mu.Unlock()
	return len(q.list.own)
}

// TestOwnSetBoundedWithoutReads (mutation that fails it: markOwn never
// trimming): a Queue whose watch is on remembers every name it adds
// (listCache.own) until a refresh applies the name's watch event. A
// process that fetched from a queue once and then only adds to it (its
// dispatcher stopped while its acks keep publishing to the queue, or its
// client keeps enqueuing) refreshes nothing; an add that finds ownMax
// names there applies the pending events first, so the set stays bounded
// while the index still learns of every message. With a Quiet answer
// outstanding, this Queue's own adds still call no Notify, and another
// Queue's add does.
func TestOwnSetBoundedWithoutReads(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	var calls atomic.Int64
	called := make(chan struct{}, 1)
	q, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk, Notify: func() {
		calls.Add(1)
		select {
		case called <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	other, err := Open(vfs.NoSync(vfs.OS{}), dir, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := q.List(); err != nil { // a fetch pass: index and watch
		t.Fatal(err)
	}
	skipWithoutWatch(t, q, "")
	// Delayed messages, so that the queue stays quiet below.
	later := clk.Now().Add(time.Hour).UnixMilli()
	enqueue := func(q *Queue) {
		t.Helper()
		if _, err := q.Enqueue(Message{VisibleAtMs: later, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	n, most := 0, 0
	for range 4*ownMax + 10 { // nothing reads the index meanwhile
		enqueue(q)
		n++
		most = max(most, ownLen(q))
	}
	t.Logf("listCache.own held at most %d names over %d adds with no read (ownMax %d)", most, n, ownMax)
	if most > ownMax {
		t.Fatalf("the own set held %d names over %d adds with no read of the index: more than ownMax (%d)", most, n, ownMax)
	}
	if l, err := q.List(); err != nil || len(l) != n {
		t.Fatalf("List = %d entries, %v; want %d", len(l), err, n)
	}
	// Armed: the watch's goroutine applies events too, concurrently.
	if _, quiet, err := q.ArmQuiet(clk.Now().UnixMilli()); err != nil || !quiet {
		t.Fatalf("ArmQuiet with only delayed messages = %v, %v", quiet, err)
	}
	for range 2*ownMax + 10 {
		enqueue(q)
		n++
		if k := ownLen(q); k > ownMax {
			t.Fatalf("the own set holds %d names while armed: more than ownMax (%d)", k, ownMax)
		}
	}
	if l, err := q.List(); err != nil || len(l) != n {
		t.Fatalf("List = %d entries, %v; want %d", len(l), err, n)
	}
	if c := calls.Load(); c != 0 {
		t.Fatalf("Notify called %d times for this Queue's own adds, want 0", c)
	}
	enqueue(other)
	select {
	case <-called:
	case <-time.After(time.Minute):
		t.Fatal("Notify not called for another Queue's add")
	}
}

// lossyFS hands out watches (of the OS's, waitable) whose next Drain can
// be made to lose its events (an overflow), and counts the listings of
// the directories.
type lossyFS struct {
	vfs.FS
	lose     atomic.Bool
	listings atomic.Int64
}

func (f *lossyFS) WatchDir(dir string, contents bool) (vfs.DirWatch, error) {
	watch := vfs.WatchDir
	if contents {
		watch = vfs.WatchDirContents
	}
	w, ok := watch(f.FS, dir)
	if !ok {
		return nil, errors.New("lossyFS: the inner FS cannot watch")
	}
	ww, ok := w.(vfs.WaitableWatch)
	if !ok {
		return w, nil
	}
	return lossyWatch{WaitableWatch: ww, f: f}, nil
}

func (f *lossyFS) ScanDir(dir string, fn func([]byte) error) error {
	f.listings.Add(1)
	return vfs.ScanDir(f.FS, dir, fn)
}

type lossyWatch struct {
	vfs.WaitableWatch
	f *lossyFS
}

func (w lossyWatch) Drain() ([]vfs.DirEvent, bool, error) {
	events, overflow, err := w.WaitableWatch.Drain()
	if w.f.lose.Swap(false) {
		return nil, true, err
	}
	return events, overflow, err
}

// TestOwnSetTrimAfterLostEvents: an add that finds the own set full and
// the watch's events lost drops the index (and the set) rather than
// listing the directory in the adder's call; the next read lists it and
// finds every message.
func TestOwnSetTrimAfterLostEvents(t *testing.T) {
	dir := t.TempDir()
	f := &lossyFS{FS: vfs.NoSync(vfs.OS{})}
	q, err := Open(f, dir, Options{Notify: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.List(); err != nil {
		t.Fatal(err)
	}
	skipWithoutWatch(t, q, "")
	n := 0
	for range ownMax {
		if _, err := q.Enqueue(Message{Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	f.lose.Store(true)
	listed := f.listings.Load()
	for range 10 {
		if _, err := q.Enqueue(Message{Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if got := f.listings.Load() - listed; got != 0 {
		t.Errorf("adds listed the directory %d times after the watch lost events, want 0 (the index is dropped)", got)
	}
	q.list.mu.Lock()
	idx, own := q.list.idx, len(q.list.own)
	q.list.mu.Unlock()
	if idx != nil || own != 0 {
		t.Errorf("after lost events: index kept %v, own holds %d names; want both dropped", idx != nil, own)
	}
	if l, err := q.List(); err != nil || len(l) != n {
		t.Fatalf("List = %d entries, %v; want %d", len(l), err, n)
	}
}

// skipWithoutWatch skips the test if q has no waitable directory watch
// (after a listing set it up): what the test checks needs one (why).
func skipWithoutWatch(t *testing.T, q *Queue, why string) {
	t.Helper()
	q.list.mu.Lock()
	notifying := q.list.notifying
	q.list.mu.Unlock()
	if !notifying {
		t.Skip("no waitable directory watch on this system" + why)
	}
}
