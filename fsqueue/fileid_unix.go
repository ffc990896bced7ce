//go:build unix

package fsqueue

import (
	"io/fs"
	"syscall"
)

// fileIno returns the inode number of fi, or 0 if unknown. Every claim write
// renames a new file into place, so the inode changes with each write.
// (The conversion is needed where Ino is not a uint64.)
func fileIno(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
