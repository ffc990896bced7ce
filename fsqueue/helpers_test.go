package fsqueue_test

import (
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// countFS counts the read-side calls that reach the file system.
type countFS struct {
	vfs.FS
	reads    atomic.Int64 // ReadFile + OpenFile for reading
	stats    atomic.Int64 // Stat
	readdirs atomic.Int64 // ReadDirNames
}

func (c *countFS) ReadFile(name string) ([]byte, error) {
	c.reads.Add(1)
	return c.FS.ReadFile(name)
}

func (c *countFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		c.reads.Add(1)
	}
	return c.FS.OpenFile(name, flag, perm)
}

func (c *countFS) Stat(name string) (fs.FileInfo, error) {
	c.stats.Add(1)
	return c.FS.Stat(name)
}

func (c *countFS) ReadDirNames(name string) ([]string, error) {
	c.readdirs.Add(1)
	return c.FS.ReadDirNames(name)
}

func (c *countFS) reset() {
	c.reads.Store(0)
	c.stats.Store(0)
	c.readdirs.Store(0)
}

// steppingClock advances by step on every Now call.
type steppingClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (s *steppingClock) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t = s.t.Add(s.step)
	return s.t
}

func openQueue(t testing.TB, fsys vfs.FS, dir string, clk clock.Clock) *fsqueue.Queue {
	t.Helper()
	q, err := fsqueue.Open(fsys, dir, fsqueue.Options{Clock: clk, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

// openQueueAttr opens a queue whose messages are routed by attribute attr.
func openQueueAttr(t testing.TB, fsys vfs.FS, dir string, clk clock.Clock, attr string) *fsqueue.Queue {
	t.Helper()
	q, err := fsqueue.Open(fsys, dir, fsqueue.Options{Clock: clk, IndexAttr: attr, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func enqueue(t testing.TB, q *fsqueue.Queue, m fsqueue.Message) string {
	t.Helper()
	name, err := q.Enqueue(m)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return name
}

func entryNames(es []fsqueue.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name()
	}
	return out
}

// collect gathers an index iterator's entries.
func collect(seq iter.Seq2[fsqueue.Entry, error]) ([]fsqueue.Entry, error) {
	var out []fsqueue.Entry
	for e, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// listVisible is collect(q.Visible(nowMs)).
func listVisible(q *fsqueue.Queue, nowMs int64) ([]fsqueue.Entry, error) {
	return collect(q.Visible(nowMs))
}

func fileExists(t testing.TB, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err == nil {
		return true
	}
	if !os.IsNotExist(err) {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return false
}

// ageDir sets a directory's mtime well into the past, so that a listing
// taken now is trusted by the 50 ms margin rule.
func ageDir(t testing.TB, dir string) {
	t.Helper()
	old := time.Now().Add(-time.Second)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
}
