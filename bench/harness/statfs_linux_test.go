//go:build linux

package harness

import (
	"os"
	"path/filepath"
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

// TestProbeCreate: the probe measures something and leaves nothing behind.
func TestProbeCreate(t *testing.T) {
	dir := t.TempDir()
	d, err := probeCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("probeCreate = %v, want > 0", d)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("probe left %v in %s", left, filepath.Base(dir))
	}
}
