package harness

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// warnLogger drops durofs's warning about ext4 without a journal (the
// report names the file system once) and keeps every other warning; the
// prefix it matches is the provider's message.
func TestWarnLoggerDropsJournalWarning(t *testing.T) {
	var buf bytes.Buffer
	log := warnLogger(&buf).With("pid", 1)
	log.Warn(journalWarning+", where creating a file gets slower", "dir", "/d")
	log.Warn("durofs: checkpoint", "err", "boom")
	out := buf.String()
	if strings.Contains(out, "without a journal") {
		t.Errorf("the journal warning was logged:\n%s", out)
	}
	if !strings.Contains(out, "durofs: checkpoint") || !strings.Contains(out, "pid=1") {
		t.Errorf("another warning was dropped or lost its attributes:\n%s", out)
	}
	src, err := os.ReadFile("../../provider/fsinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(`"`+journalWarning)) {
		t.Errorf("provider/fsinfo.go no longer logs a message starting %q", journalWarning)
	}
}
