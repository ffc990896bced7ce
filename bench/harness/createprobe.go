package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// createProbeFiles is how many files [probeCreate] creates: enough for a
// steady median, few enough that removing them adds next to nothing to the
// deletions a run leaves behind.
const createProbeFiles = 32

// probeCreate measures what creating a small file costs in dir right now:
// the median over createProbeFiles files of open(O_CREAT|O_EXCL) + a
// 300-byte write + close, in a fresh subdirectory that it removes again.
// durofs creates a file per message and claim, SQLite none, so this is the
// file system's price of durofs's design at the moment a run starts: on
// ext4 without a journal it grows from tens of µs to most of a millisecond
// when the block group's inodes were freed in the last minute or so
// (BENCHMARKS.md, "Session of 2026-11-28 (midday)").
func probeCreate(dir string) (time.Duration, error) {
	pd := filepath.Join(dir, ".create-probe")
	if err := os.MkdirAll(pd, 0o755); err != nil {
		return 0, fmt.Errorf("create probe: %w", err)
	}
	defer os.RemoveAll(pd)
	data := make([]byte, 300)
	took := make([]time.Duration, 0, createProbeFiles)
	for i := range createProbeFiles {
		t := time.Now()
		f, err := os.OpenFile(filepath.Join(pd, fmt.Sprintf("f%02d", i)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return 0, fmt.Errorf("create probe: %w", err)
		}
		_, werr := f.Write(data)
		cerr := f.Close()
		took = append(took, time.Since(t))
		if werr != nil || cerr != nil {
			return 0, fmt.Errorf("create probe: write %v, close %v", werr, cerr)
		}
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}
