package provider

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Open warns about a directory on ext4 without a journal, and only then,
// unless the background sweep is off (a one-shot tool).
func TestOpenWarnsOfExt4WithoutJournal(t *testing.T) {
	for _, tc := range []struct {
		name        string
		journal, ok bool
		sweep       time.Duration
		warn        bool
	}{
		{"ext4 without a journal", false, true, 0, true},
		{"ext4 with a journal", true, true, 0, false},
		{"not ext4, or unknown", false, false, 0, false},
		{"ext4 without a journal, one-shot (no sweep)", false, true, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := ext4Journal
			defer func() { ext4Journal = old }()
			var asked string
			ext4Journal = func(dir string) (bool, bool) { asked = dir; return tc.journal, tc.ok }
			var buf bytes.Buffer
			dir := t.TempDir()
			openT(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil)), SweepInterval: tc.sweep, CheckpointInterval: -1})
			if tc.warn && asked != dir {
				t.Fatalf("Open asked about %q, want %q", asked, dir)
			}
			if got := strings.Contains(buf.String(), "ext4 without a journal"); got != tc.warn {
				t.Fatalf("warned: %v, want %v; log:\n%s", got, tc.warn, buf.String())
			}
		})
	}
}
