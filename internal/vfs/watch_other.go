//go:build !linux

package vfs

// watchDir is unsupported here; callers poll the directory's mtime.
func watchDir(string, bool) (DirWatch, error) { return nil, errNoWatch }
