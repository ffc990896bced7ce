package wal

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// reserve does the first half of an Append - the slot, then the tail - and
// stops there, like a process stopped (or killed) between its reservation
// and its write. write does the second half.
func reserve(t *testing.T, l *Log, p []byte) (LSN, []byte) {
	t.Helper()
	frame := encode(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		tail := LSN(l.group.w.Load(wTail))
		if tail.Segment() != l.cur.id {
			t.Fatalf("tail %v is not in segment %d", tail, l.cur.id)
		}
		l.setSlot(tail)
		if l.group.w.CompareAndSwap(wTail, uint64(tail), uint64(tail)+uint64(len(frame))) {
			return tail, frame
		}
	}
}

func write(t *testing.T, l *Log, at LSN, frame []byte) LSN {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.cur.f.Seek(int64(at.Offset()), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cur.f.Write(frame); err != nil {
		t.Fatal(err)
	}
	l.setSlot(0)
	l.written = at + LSN(len(frame))
	return l.written
}

// The segment is zeroed ahead of the frames: appends and their syncs leave
// the file's size alone (the fdatasync has no size to write; only grows
// change it), no frame ever ends past the zeros, and it grows a chunk at a
// time - in the background, ahead of the tail - up to the segment size and
// never past it.
func TestSegmentsArePreallocated(t *testing.T) {
	fsys := newMem(t)
	const segSize = 2*chunkSize + 64<<10
	l := openT(t, fsys, segSize)
	seg := l.segPath(1)
	size := func() int64 {
		fi, err := fsys.Stat(seg)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if got := size(); got != chunkSize {
		t.Fatalf("new segment holds %d bytes, want one chunk of zeros (%d)", got, chunkSize)
	}
	grows, waits, n := l.Stats().Grows, l.Stats().GrowWaits, 0
	for i := 0; l.End().Segment() == 1; i++ {
		n++
		_, end, err := l.Append(payload(0, i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(context.Background(), end); err != nil {
			t.Fatal(err)
		}
		l.bg.Wait() // appends slower than grows: none waits for zeros
		// Only grows change the size: it is always a whole number of
		// chunks (or the segment size), whatever the frames' lengths.
		if z := size(); end.Segment() == 1 && (int64(end.Offset()) > z || z%chunkSize != 0 && z != segSize) {
			t.Fatalf("frame ends at %v; the segment holds %d bytes, not the zeros of whole grows", end, z)
		}
	}
	l.bg.Wait()
	// Segment 1 grew twice (256 KiB, then the last 64 KiB); the last append
	// prepared segment 2.
	if got := l.Stats().Grows - grows; got != 3 {
		t.Fatalf("%d grows, want 2 of segment 1 and 1 of segment 2", got)
	}
	if got := l.Stats().GrowWaits - waits; got != 1 {
		t.Fatalf("%d appends waited for zeros, want 1 (the roll to segment 2): segment 1 must grow in the background, ahead of its frames", got)
	}
	if fi, _ := fsys.Stat(seg); fi.Size() != segSize {
		t.Fatalf("full segment holds %d bytes, want the segment size %d", fi.Size(), segSize)
	}
	if _, ps := scanAll(t, l, 0); len(ps) != n {
		t.Fatalf("Scan found %d frames, want %d", len(ps), n)
	}
}

// A process between its reservation and its write (stopped, or about to be
// killed) leaves a range that nobody must take for written: a sync that
// starts meanwhile publishes a mark short of it, so the frame written later
// is not covered by it and gets a sync of its own; a checkpoint's scan stops
// before it, while a look-up (ScanAll) reads past it. Every acknowledged
// frame survives a power loss.
func TestReservationNotYetWritten(t *testing.T) {
	fsys := newMem(t)
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	at, frame := reserve(t, a, payload(0, 0))
	bLSN, bEnd, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), bEnd); err != nil {
		t.Fatal(err)
	}
	if !durableIn(fsys, b, bLSN, payload(1, 0)) {
		t.Fatal("b's acknowledged frame lost at a power loss")
	}
	if synced := LSN(b.group.w.Load(wSynced)); synced > at {
		t.Fatalf("b's sync published %v, past a's unwritten frame at %v", synced, at)
	}
	end, err := b.Scan(0, func(LSN, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if end > at {
		t.Fatalf("Scan ended at %v, past the unwritten frame at %v: a checkpoint could pass it", end, at)
	}
	if lsns, _ := scanAllFrames(t, b); !slices.Equal(lsns, []LSN{bLSN}) {
		t.Fatalf("ScanAll found %v, want b's frame %v", lsns, bLSN)
	}
	aEnd := write(t, a, at, frame)
	if err := a.Sync(context.Background(), aEnd); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Covered != 0 {
		t.Fatalf("a: %+v: its frame, written after b's sync began, was taken as covered by it", st)
	}
	if !durableIn(fsys, a, at, payload(0, 0)) {
		t.Fatal("a's acknowledged frame lost at a power loss")
	}
	if _, ps := scanAll(t, b, 0); !slices.Equal(ps, []string{string(payload(0, 0)), string(payload(1, 0))}) {
		t.Fatalf("after a's write Scan found %q", ps)
	}
}

func scanAllFrames(t *testing.T, l *Log) (lsns []LSN, ps []string) {
	t.Helper()
	if _, err := l.ScanAll(0, func(lsn LSN, p []byte) error {
		lsns = append(lsns, lsn)
		ps = append(ps, string(p))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return lsns, ps
}

// A process killed between its reservation and its write leaves zeros: the
// frames after them are found, and once its registration is free the next
// checkpoint's scan clears its slot and goes past the hole.
func TestReservationOfADeadProcess(t *testing.T) {
	fsys := newMem(t)
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	at, _ := reserve(t, a, payload(0, 0))
	bLSN, bEnd, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), bEnd); err != nil {
		t.Fatal(err)
	}
	if end, _ := b.Scan(0, func(LSN, []byte) error { return nil }); end > at {
		t.Fatalf("Scan ended at %v past a live process's reservation at %v", end, at)
	}
	_ = a.procLock.Unlock() // a dies: its registration's lock is free
	end, err := b.Scan(0, func(LSN, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if end != bEnd {
		t.Fatalf("Scan after a's death ended at %v, want %v (after b's frame %v)", end, bEnd, bLSN)
	}
	if v := b.group.w.Load(wSlot0 + a.slot); v != 0 {
		t.Fatalf("a's slot still holds %v", LSN(v))
	}
}

// A process that opens the log alone rebuilds the page: after a kill -9 of
// every process (the page kept, a slot left set) and after a power loss
// (the page lost), the tail goes after the last whole frame, frames follow
// it, and nothing acknowledged is overwritten.
func TestPageRebuiltWhenAlone(t *testing.T) {
	for _, crash := range []string{"kill", "power loss", "power loss, page written back"} {
		t.Run(crash, func(t *testing.T) {
			fsys := newMem(t)
			a := openT(t, fsys, 0)
			var acked []string
			for i := range 5 {
				if _, err := a.Commit(context.Background(), payload(0, i)); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, string(payload(0, i)))
			}
			reserve(t, a, payload(0, 99)) // never written
			var after vfs.FS = fsys
			switch crash {
			case "kill":
				_ = a.procLock.Unlock()
			case "power loss":
				after = fsys.CrashClone()
			default:
				after = fsys.CrashCloneWriteback()
			}
			b, err := Open(context.Background(), after, testDir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.Ready()
			if !b.Alone() {
				t.Fatal("b is not alone")
			}
			for i := range MaxProcesses {
				if v := b.group.w.Load(wSlot0 + i); v != 0 {
					t.Fatalf("slot %d holds %v after a rebuild", i, LSN(v))
				}
			}
			for i := range 3 {
				if _, err := b.Commit(context.Background(), payload(1, i)); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, string(payload(1, i)))
			}
			if _, ps := scanAll(t, b, 0); !slices.Equal(ps, acked) {
				t.Fatalf("after the rebuild the log holds\n%q\nwant\n%q", ps, acked)
			}
		})
	}
}

// Processes appending at once, across chunks of zeros and segment rolls,
// lose and duplicate nothing: every frame is found once, each process's in
// its order.
func TestConcurrentGrowAndRoll(t *testing.T) {
	fsys := newMem(t)
	logs := []*Log{openT(t, fsys, 64<<10), openT(t, fsys, 64<<10), openT(t, fsys, 64<<10)}
	const each = 400
	done := make(chan error, len(logs))
	for w, l := range logs {
		go func() {
			for i := range each {
				if _, err := l.Commit(context.Background(), payload(w, i)); err != nil {
					done <- fmt.Errorf("writer %d frame %d: %w", w, i, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range logs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	_, ps := scanAll(t, logs[0], 0)
	next := make([]int, len(logs))
	for _, p := range ps {
		var w, i int
		if _, err := fmt.Sscanf(p, `{"w":%d,"i":%d`, &w, &i); err != nil {
			t.Fatalf("frame %q: %v", p, err)
		}
		if i != next[w] {
			t.Fatalf("writer %d: frame %d found where %d was due", w, i, next[w])
		}
		next[w]++
	}
	for w, n := range next {
		if n != each {
			t.Fatalf("writer %d: %d frames found, want %d", w, n, each)
		}
	}
	if ids, _ := logs[0].segments(); len(ids) < 3 {
		t.Fatalf("segments %v: the test needs rolls", ids)
	}
}
