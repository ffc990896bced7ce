//go:build !unix

package fsqueue

import "io/fs"

// fileIno returns 0: inode numbers are not available on this platform, so
// claim-cache identity relies on size and mtime.
func fileIno(fs.FileInfo) uint64 { return 0 }
