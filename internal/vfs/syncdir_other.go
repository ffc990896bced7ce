//go:build windows || plan9 || js || wasip1

package vfs

// syncDir is a no-op where a directory cannot be opened and fsynced. On
// Windows, NTFS journals directory operations and MoveFileEx is called with
// MOVEFILE_WRITE_THROUGH (natefinch/atomic), which is the closest equivalent.
func syncDir(string) error { return nil }
