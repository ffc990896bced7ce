//go:build linux

package fsinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ext4Magic is ext4's statfs(2) f_type.
const ext4Magic = 0xEF53

// Ext4Journal reports, for a directory on ext4, whether its file system has
// a journal; ok is false if dir is not on ext4 or that cannot be told.
//
// Without a journal, ext4's inode allocator passes over every free inode of
// the block group that was freed in the last minute, or six while its inode
// table block is dirty (fs/ext4/ialloc.c, recently_deleted), so creating a
// file in a group with many recent deletions costs a scan of them: 0.3-0.9
// ms on this project's test VM against 25 µs with a journal (BENCHMARKS.md).
// durofs reuses the files of consumed messages (fsqueue.Recycler) but still
// creates files per new instance and per burst of messages, so there its
// throughput can fall as deletions accumulate.
//
// A mounted ext4 device with a journal has a /proc/fs/jbd2/<device>-<inode>
// entry; the device is the mount's source in /proc/self/mountinfo whose
// device number is dir's.
func Ext4Journal(dir string) (journal, ok bool) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil || sfs.Type != ext4Magic {
		return false, false
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
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
