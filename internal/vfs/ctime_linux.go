package vfs

import (
	"io/fs"
	"syscall"
	"time"
)

// ChangeTime returns fi's inode change time (ctime: set by every write and
// every rename of the inode), or its ModTime where the file system does not
// say.
func ChangeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
