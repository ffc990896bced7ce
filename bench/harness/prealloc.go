package harness

import (
	"io/fs"
	"os"
	"strings"
	"sync/atomic"

	"github.com/durofs/durofs/internal/vfs"
)

// preallocFS separates the write-ahead log's preallocation from the calls'
// syncs: the log grows a segment by appending zeros through a descriptor
// opened with O_APPEND and syncing it, in the background ahead of the tail
// (wal.grow), while frames are written with pwrite. Such descriptors are
// opened on raw, outside the counting FS, and their syncs counted here, so a
// background grow that happens to run during a counted call is not
// attributed to it.
type preallocFS struct {
	*vfs.CountingFS
	raw   vfs.FS
	syncs atomic.Int64
}

// OpenFile implements vfs.FS.
func (p *preallocFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	if flag&os.O_APPEND == 0 || !strings.HasSuffix(name, ".wal") {
		return p.CountingFS.OpenFile(name, flag, perm)
	}
	f, err := p.raw.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return preallocFile{File: f, p: p}, nil
}

type preallocFile struct {
	vfs.File
	p *preallocFS
}

// Sync implements vfs.File.
func (f preallocFile) Sync() error {
	f.p.syncs.Add(1)
	return f.File.Sync()
}

// Datasync implements vfs.Datasyncer.
func (f preallocFile) Datasync() error {
	f.p.syncs.Add(1)
	return vfs.Datasync(f.File)
}
