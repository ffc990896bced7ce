package wal

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// TestSyncThroughWritesTheFrameAgain: SyncThrough vouches for a frame
// another process wrote, with a descriptor it opens at the call. A
// writeback error already reported to a process that died before writing
// POISONED is never reported to a descriptor opened after that (errseq), so
// a sync alone would vouch for a frame whose pages that error dropped, and
// the caller would apply a record a power loss then loses. SyncThrough
// writes the frame's bytes again first, so its sync writes them.
func TestSyncThroughWritesTheFrameAgain(t *testing.T) {
	fsys := newErrseqFS(t)
	w := openT(t, fsys, 0) // appends, then dies before syncing
	dead, err := fsys.OpenFile(w.segPath(1), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lsn, end, err := w.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	fsys.InjectWritebackError(1)
	if err := vfs.Datasync(dead); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the dying process's sync: %v, want EIO", err)
	}
	// Killed here, before writing POISONED; w dies too.
	r := openT(t, fsys, 0)
	if err := r.SyncThrough(lsn, end); err != nil {
		t.Fatalf("SyncThrough: %v", err)
	}
	if !durableIn(fsys.MemFS, r, lsn, payload(0, 0)) {
		t.Fatal("SyncThrough vouched for a frame a writeback error had dropped: lost at a power loss")
	}
}

// TestSyncThroughRefusesWhatIsNoFrame: SyncThrough writes back only a whole
// frame it finds at [lsn, end).
func TestSyncThroughRefusesWhatIsNoFrame(t *testing.T) {
	fsys := vfs.NewStrictMem()
	l := openT(t, fsys, 0)
	lsn, end, err := l.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		lsn, end LSN
	}{
		{"a frame's first bytes", lsn, end - 1},
		{"a frame and a byte more", lsn, end + 1},
		{"past the frame's start", lsn + 1, end},
		{"zeros after it", end, end + headerSize},
		{"across segments", lsn, MakeLSN(end.Segment()+1, 0)},
	} {
		if err := l.SyncThrough(c.lsn, c.end); err == nil {
			t.Errorf("%s: SyncThrough(%v, %v) = nil, want an error", c.name, c.lsn, c.end)
		}
	}
	if err := l.SyncThrough(lsn, end); err != nil {
		t.Fatalf("the frame itself: %v", err)
	}
}
