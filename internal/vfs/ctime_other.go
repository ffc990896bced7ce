//go:build !linux

package vfs

import (
	"io/fs"
	"time"
)

// ChangeTime returns fi's ModTime (the inode change time is read on Linux
// only).
func ChangeTime(fi fs.FileInfo) time.Time { return fi.ModTime() }
