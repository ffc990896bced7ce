//go:build linux

package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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
			if journal, ok := ext4Journal(dir); ok && !journal {
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

// ext4Journal reports, for a directory on ext4, whether its file system has
// a journal (ok is false if that cannot be told). Without one, ext4's inode
// allocator passes over every free inode freed in the last minute or more
// (fs/ext4/ialloc.c, recently_deleted), so that creating a file in a block
// group with many recent deletions costs a scan of them (BENCHMARKS.md). A
// mounted ext4 device with a journal has a /proc/fs/jbd2/<device>-<inode>
// entry; the device is the mount's source in /proc/self/mountinfo whose
// device number is dir's.
func ext4Journal(dir string) (journal, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return false, false
	}
	devNum := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, false
	}
	dev := ext4Device(string(info), devNum)
	if dev == "" {
		return false, false
	}
	if _, err := os.Stat(filepath.Join("/proc/fs/ext4", dev)); err != nil {
		return false, false
	}
	jbd, err := os.ReadDir("/proc/fs/jbd2")
	if err != nil && !os.IsNotExist(err) {
		return false, false
	}
	names := make([]string, 0, len(jbd))
	for _, e := range jbd {
		names = append(names, e.Name())
	}
	return hasJournal(dev, names), true
}

// ext4Device returns the base name of the source device of the ext4 mount
// whose device number ("major:minor") is devNum in a /proc/self/mountinfo
// text, or "" if there is none.
func ext4Device(mountinfo, devNum string) string {
	for line := range strings.Lines(mountinfo) {
		// id parent major:minor root mountpoint options [tags] - fstype source superopts
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != devNum {
			continue
		}
		if i := slices.Index(f, "-"); i > 0 && i+2 < len(f) && f[i+1] == "ext4" {
			return filepath.Base(f[i+2])
		}
	}
	return ""
}

// hasJournal reports whether the entries of /proc/fs/jbd2 include one of
// dev's ("<dev>-<journal inode>").
func hasJournal(dev string, jbd2 []string) bool {
	return slices.ContainsFunc(jbd2, func(n string) bool { return strings.HasPrefix(n, dev+"-") })
}
