package fsqueue_test

import (
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// secondFS is a MemFS whose timestamps, as Stat and Lstat report them,
// are real time with a granularity of one second (ext4 with 128-byte
// inodes, ext3, HFS+, some NFS servers; FAT's are two seconds): the MemFS
// stamps (one tick a millisecond after its epoch per change) are moved to
// base and truncated to the second, so every change of a test that runs in
// well under a second leaves a directory's mtime at base. base is a whole
// second 100 ms to 1.1 s before the test starts, as it is when the
// directory's last change and the listing fall in one second or two
// consecutive ones. It has no directory watch: a queue on it polls.
type secondFS struct {
	*vfs.MemFS
	base time.Time
}

func newSecondFS() secondFS {
	return secondFS{vfs.NewStrictMem(), time.Now().Add(-100 * time.Millisecond).Truncate(time.Second)}
}

type secondInfo struct {
	fs.FileInfo
	base time.Time
}

var memEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // vfs.MemFS's

func (i secondInfo) ModTime() time.Time {
	return i.base.Add(i.FileInfo.ModTime().Sub(memEpoch)).Truncate(time.Second)
}

func (f secondFS) Stat(name string) (fs.FileInfo, error) {
	fi, err := f.MemFS.Stat(name)
	if err != nil {
		return nil, err
	}
	return secondInfo{fi, f.base}, nil
}

func (f secondFS) Lstat(name string) (fs.FileInfo, error) {
	fi, err := f.MemFS.Lstat(name)
	if err != nil {
		return nil, err
	}
	return secondInfo{fi, f.base}, nil
}

// TestPolledIndexOnSecondTimestamps: without a directory watch the index is
// trusted while the directory's mtime stays what it was at the last listing
// and that listing started a margin after it. On a file system whose
// timestamps are whole seconds another process's enqueue in the same second
// as the directory's last change leaves the mtime as it was, so the margin
// must cover the granularity: with 50 ms the message is not listed (nor
// claimed) until some later change lands in another second.
func TestPolledIndexOnSecondTimestamps(t *testing.T) {
	fsys := newSecondFS()
	q := openQueue(t, fsys, "/q", nil)
	other := openQueue(t, fsys.MemFS, "/q", nil)
	var want []string
	for i := range 3 {
		got, err := q.List()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(entryNames(got), want) {
			t.Fatalf("List after %d enqueues = %v, want %v", i, entryNames(got), want)
		}
		want = append(want, enqueue(t, other, fsqueue.Message{Payload: []byte("{}")}))
	}
	if since := time.Since(fsys.base); since >= 2*time.Second {
		t.Fatalf("the test ran %v after its directory's mtime: the mtime is not that of a change in the same second", since)
	}
}
