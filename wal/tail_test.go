package wal

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// readCounter counts the bytes read from log segments through ReadAt.
type readCounter struct {
	vfs.FS
	n *int64
}

func (r readCounter) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := r.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segSuffix) {
		return f, err
	}
	return countedFile{f, r.n}, nil
}

type countedFile struct {
	vfs.File
	n *int64
}

func (f countedFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	*f.n += int64(n)
	return n, err
}

// TestOpenAloneReadsFromTheCheckpoint: a process that opens the log alone
// finds the tail by reading the newest segment from the checkpoint, not from
// the segment's start (a restart's cost and memory would grow with the
// segment), and appends right after the last frame.
func TestOpenAloneReadsFromTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	l, err := Open(ctx, mem, testDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Ready()
	var cp, tail LSN
	for i := range 400 {
		_, end, err := l.Append(payload(0, i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(ctx, end); err != nil {
			t.Fatal(err)
		}
		if i == 349 {
			cp = end
		}
		tail = end
	}
	if err := l.SetCheckpoint(cp); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := mem.Stat(l.segPath(cp.Segment()))
	if err != nil {
		t.Fatal(err)
	}

	var read int64
	l = openT(t, readCounter{mem, &read}, 0)
	if max := fi.Size() - int64(cp.Offset()); read > max {
		t.Errorf("Open read %d bytes of the segment, want at most %d (from the checkpoint at %v to the end of the %d-byte file)",
			read, max, cp, fi.Size())
	}
	lsn, err := l.Commit(ctx, payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if lsn != tail {
		t.Fatalf("first append after reopening at %v, want the old tail %v", lsn, tail)
	}
	if lsns, _ := scanAll(t, l, 0); len(lsns) != 401 {
		t.Fatalf("Scan found %d frames, want 401", len(lsns))
	}

	// The checkpoint at the tail: nothing after it, the tail is the
	// checkpoint itself.
	_, end, err := l.Append(payload(1, 1))
	if err == nil {
		err = l.Sync(ctx, end)
	}
	if err == nil {
		err = l.SetCheckpoint(end)
	}
	if err == nil {
		err = l.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	l = openT(t, mem, 0)
	if lsn, err := l.Commit(ctx, payload(1, 2)); err != nil || lsn != end {
		t.Fatalf("first append after reopening at the checkpoint = %v, %v; want %v", lsn, err, end)
	}
}
