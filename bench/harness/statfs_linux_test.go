//go:build linux

package harness

import (
	"os"
	"path/filepath"
	"testing"
)

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
