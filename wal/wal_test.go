package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

const testDir = "/d/wal"

func openT(t *testing.T, fsys vfs.FS, seg int64) *Log {
	t.Helper()
	l, err := Open(context.Background(), fsys, testDir, Options{SegmentSize: seg})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	l.Ready()
	t.Cleanup(func() { l.Close() })
	return l
}

func payload(who, i int) []byte {
	return []byte(fmt.Sprintf(`{"w":%d,"i":%d,"pad":"%0200d"}`, who, i, i))
}

// scanAll returns every valid frame's payload in log order.
func scanAll(t *testing.T, l *Log, from LSN) (lsns []LSN, ps []string) {
	t.Helper()
	if _, err := l.Scan(from, func(lsn LSN, p []byte) error {
		lsns = append(lsns, lsn)
		ps = append(ps, string(p))
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return lsns, ps
}

func TestAppendScanRoundTrip(t *testing.T) {
	for _, seg := range []int64{4096, DefaultSegmentSize} {
		t.Run(strconv.FormatInt(seg, 10), func(t *testing.T) {
			l := openT(t, vfs.NewStrictMem(), seg)
			var want []string
			var wantLSN []LSN
			for i := range 100 {
				lsn, err := l.Commit(context.Background(), payload(0, i))
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, string(payload(0, i)))
				wantLSN = append(wantLSN, lsn)
			}
			lsns, got := scanAll(t, l, 0)
			if !slices.Equal(got, want) || !slices.Equal(lsns, wantLSN) {
				t.Fatalf("scan: %d frames, want %d (lsns %v vs %v)", len(got), len(want), lsns[:min(3, len(lsns))], wantLSN[:3])
			}
			if !slices.IsSorted(lsns) {
				t.Fatal("LSNs not ascending")
			}
			if seg == 4096 {
				ids, _ := l.segments()
				if len(ids) < 5 {
					t.Fatalf("expected several segments, got %v", ids)
				}
			}
		})
	}
}

func TestPayloadWithFF(t *testing.T) {
	l := openT(t, vfs.NewStrictMem(), 0)
	if _, _, err := l.Append([]byte{'a', 0xFF}); !errors.Is(err, ErrPayload) {
		t.Fatalf("got %v, want ErrPayload", err)
	}
}

// Several handles on one FS are several processes: their frames interleave
// in one order, none is lost or duplicated, and each handle's frames keep
// their order - across segment rolls too.
func TestConcurrentWritersOneOrder(t *testing.T) {
	fsys := vfs.NewStrictMem()
	const writers, each = 4, 150
	logs := make([]*Log, writers)
	for w := range logs {
		logs[w] = openT(t, fsys, 8192)
	}
	got := make([][]LSN, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				lsn, err := logs[w].Commit(context.Background(), payload(w, i))
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], lsn)
			}
		}()
	}
	wg.Wait()
	lsns, ps := scanAll(t, logs[0], 0)
	if len(ps) != writers*each {
		t.Fatalf("scanned %d frames, want %d", len(ps), writers*each)
	}
	at := map[LSN]string{}
	for i, l := range lsns {
		at[l] = ps[i]
	}
	for w := range writers {
		if !slices.IsSorted(got[w]) {
			t.Fatalf("writer %d: LSNs out of order", w)
		}
		for i, l := range got[w] {
			if at[l] != string(payload(w, i)) {
				t.Fatalf("writer %d frame %d: at %v found %q", w, i, l, at[l])
			}
		}
	}
}

// A frame torn by a kill -9 (a prefix, then other processes' frames after
// it) is skipped, and the frames after it are found.
func TestTornFrameInTheMiddle(t *testing.T) {
	fsys := vfs.NewStrictMem()
	l := openT(t, fsys, 0)
	if _, err := l.Commit(context.Background(), payload(0, 1)); err != nil {
		t.Fatal(err)
	}
	frame := encode(payload(9, 9))
	for _, cut := range []int{1, 5, headerSize, len(frame) - 1} {
		f, err := fsys.OpenFile(l.segPath(1), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(frame[:cut])
		f.Close()
		if _, err := l.Commit(context.Background(), payload(0, cut)); err != nil {
			t.Fatal(err)
		}
	}
	_, ps := scanAll(t, l, 0)
	want := []string{string(payload(0, 1))}
	for _, cut := range []int{1, 5, headerSize, len(frame) - 1} {
		want = append(want, string(payload(0, cut)))
	}
	if !slices.Equal(ps, want) {
		t.Fatalf("got %d frames %q\nwant %q", len(ps), ps, want)
	}
}

// A short write (ENOSPC mid-frame) fails the append; the fragment is
// skipped and the next append is found.
func TestShortWrite(t *testing.T) {
	fsys := vfs.NewStrictMem()
	l := openT(t, fsys, 0)
	fsys.InjectShortWrite(1, 20, syscall.ENOSPC)
	if _, err := l.Commit(context.Background(), payload(0, 0)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", err)
	}
	if _, err := l.Commit(context.Background(), payload(0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, ps := scanAll(t, l, 0); !slices.Equal(ps, []string{string(payload(0, 1))}) {
		t.Fatalf("got %q", ps)
	}
}

// Power loss: every frame whose Sync returned survives; the log opens and
// appends after the lost tail.
func TestPowerLossKeepsSyncedFrames(t *testing.T) {
	fsys := vfs.NewStrictMem()
	fsys.MkdirAll("/d", 0o700)
	fsys.MarkAllSynced()
	l, err := Open(context.Background(), fsys, testDir, Options{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	l.Ready()
	var want []string
	for i := range 40 {
		if _, err := l.Commit(context.Background(), payload(0, i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, string(payload(0, i)))
	}
	for i := range 5 {
		if _, _, err := l.Append(payload(1, i)); err != nil { // never synced
			t.Fatal(err)
		}
	}
	fsys.Crash()
	l2 := openT(t, fsys, 4096)
	if !l2.Alone() {
		t.Fatal("after a power loss the new process must be alone")
	}
	_, ps := scanAll(t, l2, 0)
	if len(ps) < len(want) || !slices.Equal(ps[:len(want)], want) {
		t.Fatalf("after power loss: %d frames, want the %d synced ones first", len(ps), len(want))
	}
	if _, err := l2.Commit(context.Background(), payload(2, 0)); err != nil {
		t.Fatal(err)
	}
	if _, ps := scanAll(t, l2, 0); ps[len(ps)-1] != string(payload(2, 0)) {
		t.Fatal("append after recovery not found last")
	}
}

// A failed sync poisons the log in this process and, through the mark, in
// every other; the mark survives a power loss and is cleared explicitly.
func TestSyncFailurePoisonsEveryProcess(t *testing.T) {
	fsys := vfs.NewStrictMem()
	fsys.MkdirAll("/d", 0o700)
	fsys.MarkAllSynced()
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	if _, err := b.Commit(context.Background(), payload(1, 0)); err != nil {
		t.Fatal(err)
	}
	fsys.InjectWritebackError(1)
	if _, err := a.Commit(context.Background(), payload(0, 0)); !errors.Is(err, ErrPoisoned) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("a: got %v, want ErrPoisoned wrapping EIO", err)
	}
	if _, _, err := a.Append(payload(0, 1)); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("a: append after poison: %v", err)
	}
	if _, err := b.Commit(context.Background(), payload(1, 1)); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("b: got %v, want ErrPoisoned from the shared mark", err)
	}
	a.Close()
	b.Close()
	fsys.Crash()
	c := openT(t, fsys, 0)
	if !errors.Is(c.Err(), ErrPoisoned) {
		t.Fatal("a new process must see the poison mark")
	}
	if err := c.ClearPoison(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(context.Background(), payload(2, 0)); err != nil {
		t.Fatalf("after ClearPoison: %v", err)
	}
}

func TestCheckpointRemovesOldSegments(t *testing.T) {
	fsys := vfs.NewStrictMem()
	l := openT(t, fsys, 4096)
	var lsns []LSN
	for i := range 60 {
		lsn, err := l.Commit(context.Background(), payload(0, i))
		if err != nil {
			t.Fatal(err)
		}
		lsns = append(lsns, lsn)
	}
	cp := lsns[40]
	if err := l.SetCheckpoint(cp); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCheckpoint(lsns[10]); err != nil { // never backwards
		t.Fatal(err)
	}
	if got, _ := l.Checkpoint(); got != cp {
		t.Fatalf("checkpoint %v, want %v", got, cp)
	}
	ids, _ := l.segments()
	if ids[0] != cp.Segment() {
		t.Fatalf("segments %v: those below %d should be gone", ids, cp.Segment())
	}
	_, ps := scanAll(t, l, cp)
	if len(ps) != 20 || ps[0] != string(payload(0, 40)) {
		t.Fatalf("scan from checkpoint: %d frames", len(ps))
	}
}

func TestAloneAndOpenLock(t *testing.T) {
	fsys := vfs.NewStrictMem()
	a, err := Open(context.Background(), fsys, testDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Alone() {
		t.Fatal("first process is alone")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50_000_000)
	defer cancel()
	if _, err := Open(ctx, fsys, testDir, Options{}); err == nil {
		t.Fatal("Open must wait for the first process's Ready")
	}
	a.Ready()
	b := openT(t, fsys, 0)
	if b.Alone() {
		t.Fatal("second process is not alone")
	}
	a.Close()
	b.Close()
	c := openT(t, fsys, 0)
	if !c.Alone() {
		t.Fatal("after both closed, a new process is alone")
	}
	names, _ := fsys.ReadDirNames(filepath.Join(testDir, procsDir))
	if len(names) != 1 {
		t.Fatalf("procs/ holds %v, want only the live process", names)
	}
}

// TestOpenCreatesNoFileWhenOneIsFree: a closed (or dead) process's
// registration file is taken over by the next Open, which then creates no
// file at all: Open works on a full disk.
func TestOpenCreatesNoFileWhenOneIsFree(t *testing.T) {
	mem := vfs.NewStrictMem()
	a := openT(t, mem, 0)
	if _, _, err := a.Append([]byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	pdir := filepath.Join(testDir, procsDir)
	before, _ := mem.ReadDirNames(pdir)
	c := vfs.Counting(mem)
	b := openT(t, c, 0)
	after, _ := mem.ReadDirNames(pdir)
	if n := c.Files().Creates; n != 0 || fmt.Sprint(before) != fmt.Sprint(after) || len(after) != 1 {
		t.Errorf("Open created %d file(s), procs/ %v -> %v; want none created, the closed process's file taken over", n, before, after)
	}
	if !b.Alone() {
		t.Error("a closed process's registration counts as alive")
	}
	// Taken over: the next process sees it held.
	b2 := openT(t, mem, 0)
	if b2.Alone() {
		t.Error("the process that took over a registration counts as gone")
	}
	// A registration that is not the last one goes with its process: a
	// process that opens and closes beside another leaves procs/ as it was.
	b2.Close()
	if names, _ := mem.ReadDirNames(pdir); fmt.Sprint(names) != fmt.Sprint(after) {
		t.Errorf("procs/ after a second process came and went: %v, want %v", names, after)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encode([]byte(`{"a":1}`))
	for name, b := range map[string][]byte{
		"empty":      nil,
		"short":      good[:headerSize-1],
		"truncated":  good[:len(good)-1],
		"bad magic":  append([]byte{0xFE}, good[1:]...),
		"bad header": func() []byte { c := bytes.Clone(good); c[5] ^= 1; return c }(),
		"bad body":   func() []byte { c := bytes.Clone(good); c[len(c)-1] ^= 1; return c }(),
	} {
		if _, ok := decode(b); ok {
			t.Errorf("%s: decoded", name)
		}
	}
	if p, ok := decode(append(good, 0xFF, 1, 2)); !ok || string(p) != `{"a":1}` {
		t.Fatal("valid frame with trailing bytes must decode")
	}
}

// SameBoot is true only when a process of the running boot recorded it
// (RecordBoot, after the replay a reboot calls for): an Open whose replay
// was cut short - it never called RecordBoot - leaves the next Open a
// changed boot, so it replays again.
func TestSameBoot(t *testing.T) {
	fsys := vfs.NewStrictMem()
	fsys.MkdirAll("/d", 0o700)
	fsys.MarkAllSynced()
	open := func(record bool) bool {
		t.Helper()
		l, err := Open(context.Background(), fsys, testDir, Options{BootID: fsys.BootID})
		if err != nil {
			t.Fatal(err)
		}
		l.Ready()
		defer l.Close()
		same := l.SameBoot()
		if record {
			if err := l.RecordBoot(); err != nil {
				t.Fatal(err)
			}
		}
		return same
	}
	for i, c := range []struct{ record, want bool }{
		{false, false}, // a replay killed before it finished...
		{false, false}, // ...is not taken for done
		{true, false},  // a complete replay records the boot
		{false, true},
		{false, true},
	} {
		if got := open(c.record); got != c.want {
			t.Fatalf("open %d: SameBoot = %v, want %v", i, got, c.want)
		}
	}
	fsys.MarkAllSynced() // even a durable boot file names the old boot
	fsys.Crash()
	if open(true) {
		t.Fatal("after a crash (a new boot) SameBoot must be false")
	}
	if l, err := Open(context.Background(), fsys, testDir, Options{}); err != nil || l.SameBoot() {
		t.Fatalf("unknown boot: SameBoot must be false (%v)", err)
	} else {
		l.Close()
	}
}

// RebootedSinceUse: a read-only open tells whether the machine booted since
// a process last opened the log (a replay is due), without writing the boot
// file; unknown boot ids never count as a reboot.
func TestRebootedSinceUse(t *testing.T) {
	fsys := vfs.NewStrictMem()
	fsys.MkdirAll("/d", 0o700)
	fsys.MarkAllSynced()
	ro := func(opts Options) bool {
		t.Helper()
		l, err := OpenReadOnly(fsys, testDir, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.RebootedSinceUse()
	}
	l, err := Open(context.Background(), fsys, testDir, Options{BootID: fsys.BootID})
	if err != nil {
		t.Fatal(err)
	}
	l.Ready()
	if err := l.RecordBoot(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	fsys.MarkAllSynced()
	cases := []struct {
		name  string
		setup func()
		opts  Options
		want  bool
	}{
		{name: "opened in this boot", opts: Options{BootID: fsys.BootID}, want: false},
		{name: "unknown boot id", setup: fsys.Crash, opts: Options{}, want: false},
		{name: "after a reboot", opts: Options{BootID: fsys.BootID}, want: true},
		{name: "still after a reboot (the read-only open wrote nothing)", opts: Options{BootID: fsys.BootID}, want: true},
		{name: "failing boot id", opts: Options{BootID: func() (string, error) { return "", errors.New("no boot id") }}, want: false},
	}
	for _, c := range cases {
		if c.setup != nil {
			c.setup()
		}
		if got := ro(c.opts); got != c.want {
			t.Errorf("%s: RebootedSinceUse = %v, want %v", c.name, got, c.want)
		}
	}
}

// A checkpoint's temporary file left by a dead writer is removed.
func TestRemoveCheckpointTemps(t *testing.T) {
	fsys := vfs.NewStrictMem()
	l := openT(t, fsys, 0)
	stale := filepath.Join(testDir, vfs.TempPrefix+checkpointName+"-dead")
	other := filepath.Join(testDir, vfs.TempPrefix+"other")
	for _, p := range []string{stale, other} {
		f, err := fsys.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := l.RemoveCheckpointTemps(); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(stale); !vfs.IsNotExist(err) {
		t.Fatalf("stale checkpoint temp still there: %v", err)
	}
	if _, err := fsys.Stat(other); err != nil {
		t.Fatalf("another temp was removed: %v", err)
	}
}
