//go:build !linux

package fsinfo

// Ext4Journal cannot tell outside Linux: ok is always false.
func Ext4Journal(string) (journal, ok bool) { return false, false }
