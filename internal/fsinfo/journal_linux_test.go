//go:build linux

package fsinfo

import (
	"os"
	"testing"
)

func TestExt4Device(t *testing.T) {
	const info = `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
28 27 0:26 / /proc rw,nosuid - proc proc rw
42 27 7:0 / /mnt/j rw,relatime shared:1 - ext4 /dev/loop0 rw
44 27 0:40 / /tmp rw - tmpfs tmpfs rw
`
	for _, tc := range []struct{ dev, want string }{
		{"254:0", "vda"},
		{"7:0", "loop0"}, // optional fields (shared:1) before the separator
		{"0:40", ""},     // not ext4
		{"9:9", ""},      // no such mount
	} {
		if got := ext4Device(info, tc.dev); got != tc.want {
			t.Errorf("ext4Device(%s) = %q, want %q", tc.dev, got, tc.want)
		}
	}
}

func TestHasJournal(t *testing.T) {
	for _, tc := range []struct {
		dev  string
		jbd2 []string
		want bool
	}{
		{"loop0", []string{"loop0-8"}, true},
		{"vda", []string{"loop0-8"}, false},
		{"loop1", []string{"loop10-8"}, false}, // a prefix of another device's name
		{"vda", nil, false},
	} {
		if got := hasJournal(tc.dev, tc.jbd2); got != tc.want {
			t.Errorf("hasJournal(%s, %v) = %v, want %v", tc.dev, tc.jbd2, got, tc.want)
		}
	}
}

// Ext4Journal does not claim to know for what is not on ext4 (/proc is
// procfs), and agrees with /proc/fs/jbd2 about a directory that is.
func TestExt4Journal(t *testing.T) {
	if _, ok := Ext4Journal("/proc"); ok {
		t.Error("Ext4Journal(/proc) is ok: /proc is not ext4")
	}
	if _, ok := Ext4Journal("/nonexistent-durofs-fsinfo"); ok {
		t.Error("Ext4Journal of a missing directory is ok")
	}
	dir := t.TempDir()
	journal, ok := Ext4Journal(dir)
	if !ok {
		t.Skipf("%s is not on ext4, or its device cannot be told", dir)
	}
	jbd, _ := os.ReadDir("/proc/fs/jbd2")
	t.Logf("%s: ext4, journal %v (/proc/fs/jbd2: %d entries)", dir, journal, len(jbd))
	if journal && len(jbd) == 0 {
		t.Error("a journal reported with no /proc/fs/jbd2 entry")
	}
}
