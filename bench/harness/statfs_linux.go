//go:build linux

package harness

import (
	"fmt"
	"syscall"

	"github.com/durofs/durofs/internal/fsinfo"
)

// Linux file system magic numbers (statfs(2)).
var fsMagic = map[int64]string{
	0xEF53:     "ext4",
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0x01021994: "tmpfs",
	0x858458F6: "ramfs",
	0x794C7630: "overlayfs",
	0x2FC12FC1: "zfs",
	0x6969:     "nfs",
	0x65735546: "fuse",
	0xFF534D42: "cifs",
	0xF2F52010: "f2fs",
}

// fsType names the file system holding dir.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	if name, ok := fsMagic[int64(st.Type)]; ok {
		if name == "ext4" {
			if journal, ok := fsinfo.Ext4Journal(dir); ok && !journal {
				return "ext4, no journal"
			}
		}
		return name
	}
	return fmt.Sprintf("0x%x", st.Type)
}

// inMemoryFS reports whether a file system type keeps data only in memory,
// where fsync costs nothing and a benchmark of durability means nothing.
func inMemoryFS(typ string) bool { return typ == "tmpfs" || typ == "ramfs" }

// flushAll writes every dirty page of every file system to disk (sync(2)),
// so that the write-back of an unsynced set-up or of a removed run
// directory does not run during the next measurement.
func flushAll() { syscall.Sync() }
