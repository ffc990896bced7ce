package wal

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

func TestCovered(t *testing.T) {
	s := func(seg, off uint32) LSN { return MakeLSN(seg, off) }
	for _, tc := range []struct {
		name                  string
		synced, from, lo, end LSN
		want                  bool
	}{
		{"exactly covered", s(3, 500), s(3, 100), s(3, 100), s(3, 500), true},
		{"well inside", s(3, 900), s(3, 0), s(3, 100), s(3, 500), true},
		{"synced short of the end", s(3, 499), s(3, 0), s(3, 100), s(3, 500), false},
		{"frames before from", s(3, 900), s(3, 101), s(3, 100), s(3, 500), false},
		{"synced in an older segment", s(2, math.MaxUint32), s(2, 0), s(3, 100), s(3, 500), false},
		{"synced in a newer segment", s(4, 900), s(4, 0), s(3, 100), s(3, 500), false},
		{"from in an older segment", s(3, 900), s(2, 0), s(3, 100), s(3, 500), false},
		{"from in a newer segment", s(3, 900), s(4, 0), s(3, 100), s(3, 500), false},
		{"frames span segments", s(3, 900), s(3, 0), s(2, 100), s(3, 500), false},
		{"nothing published", 0, 0, s(1, 0), s(1, 200), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := covered(tc.synced, tc.from, tc.lo, tc.end); got != tc.want {
				t.Fatalf("covered(synced %v, from %v, [%v, %v)) = %v, want %v", tc.synced, tc.from, tc.lo, tc.end, got, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	const ms = int64(time.Millisecond)
	lo, end := MakeLSN(1, 100), MakeLSN(1, 300)
	for _, tc := range []struct {
		name             string
		synced, from     LSN
		lead, now, since int64
		want             step
		wantWait         time.Duration
	}{
		{"covered, whatever the lead", MakeLSN(1, 300), MakeLSN(1, 0), 1000 * ms, 1000 * ms, 1000 * ms, stepDone, 0},
		{"no lead", 0, 0, 0, 1000 * ms, 1000 * ms, stepLead, 0},
		{"fresh lead", 0, 0, 999 * ms, 1000 * ms, 1000 * ms, stepWait, 9 * time.Millisecond},
		{"fresh lead, waited a while", 0, 0, 999 * ms, 1000 * ms, 985 * ms, stepWait, 5 * time.Millisecond},
		{"fresh lead, waited too long", 0, 0, 999 * ms, 1000 * ms, 980 * ms, stepAlone, 0},
		{"expired lead (stopped or killed leader)", 0, 0, 990 * ms, 1000 * ms, 1000 * ms, stepLead, 0},
		{"lead slightly ahead of this clock", 0, 0, 1001 * ms, 1000 * ms, 1000 * ms, stepWait, 10 * time.Millisecond},
		{"lead far in the future (another boot, clock step)", 0, 0, 5000 * ms, 1000 * ms, 1000 * ms, stepLead, 0},
		{"lead far in the past (another boot, clock step)", 0, 0, 1 * ms, 1000 * ms, 1000 * ms, stepLead, 0},
		{"mark in another segment", MakeLSN(2, 999), MakeLSN(2, 0), 0, 1000 * ms, 1000 * ms, stepLead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, wait := decide(tc.synced, tc.from, lo, end, tc.lead, tc.now, tc.since, 10*ms)
			if got != tc.want || wait != tc.wantWait {
				t.Fatalf("decide = %v, %v; want %v, %v", got, wait, tc.want, tc.wantWait)
			}
		})
	}
}

// newMem returns a strict MemFS whose /d (the log's parent) is durable.
func newMem(t *testing.T) *vfs.MemFS {
	t.Helper()
	fsys := vfs.NewStrictMem()
	if err := fsys.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	fsys.MarkAllSynced()
	return fsys
}

// durableIn reports whether the frame holding p at lsn survives a power
// loss now (the strictest one: no unsynced byte reaches the disk).
func durableIn(fsys *vfs.MemFS, l *Log, lsn LSN, p []byte) bool {
	data, err := fsys.CrashClone().ReadFile(l.segPath(lsn.Segment()))
	if err != nil || int64(len(data)) < int64(lsn.Offset()) {
		return false
	}
	got, ok := decode(data[lsn.Offset():])
	return ok && bytes.Equal(got, p)
}

// A process whose frames another process's sync covered acknowledges them
// without an fdatasync of its own, and they survive a power loss.
func TestGroupSkipsCoveredSync(t *testing.T) {
	fsys := newMem(t)
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	if a.group == nil || b.group == nil {
		t.Fatal("MemFS logs must share a group-commit page")
	}
	_, aEnd, err := a.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	bLSN, bEnd, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background(), aEnd); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), bEnd); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Syncs != 0 || st.Covered != 1 {
		t.Fatalf("b: %+v, want 0 syncs and 1 covered", st)
	}
	if !durableIn(fsys, b, bLSN, payload(1, 0)) {
		t.Fatal("b's acknowledged frame is lost at a power loss")
	}
}

// hookFS calls before(path) when an fdatasync of a file starts and
// after(path) right after a successful one, before it returns to its
// caller: what other processes do while an fdatasync runs.
type hookFS struct {
	*vfs.MemFS
	before, after func(path string)
}

type hookFile struct {
	vfs.File
	fs *hookFS
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return hookFile{File: f, fs: h}, nil
}

func (f hookFile) Unwrap() vfs.File { return f.File }

func (f hookFile) Datasync() error {
	if f.fs.before != nil {
		f.fs.before(f.Name())
	}
	err := vfs.Datasync(f.File)
	if err == nil && f.fs.after != nil {
		f.fs.after(f.Name())
	}
	return err
}

// A frame written while another process's fdatasync runs is not covered by
// that sync (its mark is the size seen before the sync began): its writer
// syncs it, and it survives a power loss.
func TestFrameWrittenDuringSyncIsNotCovered(t *testing.T) {
	fsys := &hookFS{MemFS: newMem(t)}
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	_, aEnd, err := a.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	var bLSN, bEnd LSN
	var once sync.Once
	fsys.after = func(string) {
		once.Do(func() { bLSN, bEnd, err = b.Append(payload(1, 0)) })
	}
	if err := a.Sync(context.Background(), aEnd); err != nil {
		t.Fatal(err)
	}
	fsys.after = nil
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), bEnd); err != nil {
		t.Fatal(err)
	}
	if !durableIn(fsys.MemFS, b, bLSN, payload(1, 0)) {
		t.Fatal("b's frame, written during a's fdatasync, was acknowledged but is lost at a power loss")
	}
	if st := b.Stats(); st.Covered != 0 {
		t.Fatalf("b: %+v: a's sync must not cover b's frame", st)
	}
}

// A process whose frames the leading process's sync will cover waits for
// that sync to finish: the mark is published only after it, so a process
// that looks while it runs sees nothing it could acknowledge on.
func TestMarkIsPublishedOnlyAfterTheSync(t *testing.T) {
	fsys := &hookFS{MemFS: newMem(t)}
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	_, aEnd, err := a.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	bLSN, bEnd, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	var bErr error
	var fired atomic.Bool
	fsys.before = func(string) {
		// a leads and has noted the segment's size (b's frame included);
		// its fdatasync has not run yet. b syncs now (once: b's own sync
		// comes here too).
		if !fired.CompareAndSwap(false, true) {
			return
		}
		if bErr = b.Sync(context.Background(), bEnd); bErr == nil && !durableIn(fsys.MemFS, b, bLSN, payload(1, 0)) {
			bErr = errors.New("b acknowledged its frame before any sync made it durable")
		}
	}
	if err := a.Sync(context.Background(), aEnd); err != nil {
		t.Fatal(err)
	}
	if bErr != nil {
		t.Fatal(bErr)
	}
}

// set stores v in word i of g.
func set(g *group, i int, v uint64) {
	for !g.w.CompareAndSwap(i, g.w.Load(i), v) {
	}
}

// Marks that do not prove the frames durable - left by a process before a
// crash, from another segment, or short of the frames - never make a
// process skip its sync. (The last case is the control: a planted mark
// that covers the frames is taken, so the others are not ignored for
// another reason.)
func TestMarksThatDoNotCover(t *testing.T) {
	for _, tc := range []struct {
		name         string
		synced, from func(seg uint32, lo, end LSN) LSN
		wantCovered  bool
	}{
		{"older segment, any offset",
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg-1, math.MaxUint32) },
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg-1, 0) }, false},
		{"newer segment",
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg+1, math.MaxUint32) },
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg+1, 0) }, false},
		{"from an older segment",
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg, math.MaxUint32) },
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg-1, 0) }, false},
		{"from after the frames' start",
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg, math.MaxUint32) },
			func(_ uint32, lo, _ LSN) LSN { return lo + 1 }, false},
		{"synced short of the frames' end",
			func(_ uint32, _, end LSN) LSN { return end - 1 },
			func(seg uint32, _, _ LSN) LSN { return MakeLSN(seg, 0) }, false},
		{"control: a mark that covers",
			func(_ uint32, _, end LSN) LSN { return end },
			func(_ uint32, lo, _ LSN) LSN { return lo }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := newMem(t)
			a := openT(t, fsys, 4096)
			for i := 0; a.End().Segment() < 3; i++ { // into segment 3
				if _, err := a.Commit(context.Background(), payload(0, i)); err != nil {
					t.Fatal(err)
				}
			}
			b := openT(t, fsys, 4096)
			lsn, end, err := b.Append(payload(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			if lsn.Segment() != 3 {
				t.Fatalf("b appended to segment %d, want 3", lsn.Segment())
			}
			b.smu.Lock()
			lo := max(b.durable, MakeLSN(b.cur.id, b.cur.from))
			b.smu.Unlock()
			set(b.group, wSynced, uint64(tc.synced(3, lo, end)))
			set(b.group, wFrom, uint64(tc.from(3, lo, end)))
			if err := b.Sync(context.Background(), end); err != nil {
				t.Fatal(err)
			}
			if got := b.Stats().Covered == 1; got != tc.wantCovered {
				t.Fatalf("covered = %v, want %v (%+v)", got, tc.wantCovered, b.Stats())
			}
			if !tc.wantCovered && !durableIn(fsys, b, lsn, payload(1, 0)) {
				t.Fatal("acknowledged frame lost at a power loss")
			}
		})
	}
}

// errseqFS models Linux's reporting of writeback errors (errseq_t) on top
// of MemFS's writeback error (InjectWritebackError: the pages are marked
// clean without reaching the disk): a failed writeback is reported by the
// next fsync of every descriptor opened before it was first reported, and
// never to a descriptor opened after that.
type errseqFS struct {
	*vfs.MemFS
	mu   sync.Mutex
	errs map[string]int // writeback errors of each file so far
	seen map[string]bool
}

type errseqFile struct {
	vfs.File
	fs     *errseqFS
	sample int // errs when opened, or one less if the last was unseen
}

func newErrseqFS(t *testing.T) *errseqFS {
	return &errseqFS{MemFS: newMem(t), errs: map[string]int{}, seen: map[string]bool{}}
}

func (e *errseqFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := e.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.errs[name]
	if s > 0 && !e.seen[name] {
		s-- // an error nobody has reported yet is reported to new descriptors too
	}
	return &errseqFile{File: f, fs: e, sample: s}, nil
}

func (f *errseqFile) Unwrap() vfs.File { return f.File }

func (f *errseqFile) Sync() error { return f.Datasync() }
func (f *errseqFile) Datasync() error {
	e, name := f.fs, f.Name()
	e.mu.Lock()
	if f.sample != e.errs[name] {
		f.sample, e.seen[name] = e.errs[name], true
		e.mu.Unlock()
		return &os.PathError{Op: "fdatasync", Path: name, Err: syscall.EIO}
	}
	e.mu.Unlock()
	err := vfs.Datasync(f.File)
	if err != nil {
		e.mu.Lock()
		e.errs[name]++
		e.seen[name] = true
		f.sample = e.errs[name]
		e.mu.Unlock()
	}
	return err
}

// A writeback error reported to a process that died before it could mark
// the log POISONED is reported again only to descriptors opened before it.
// A process that opened the segment after that must not vouch for frames
// written before it opened it: their writer syncs them itself, sees the
// error, and acknowledges nothing.
func TestMarkDoesNotCoverFramesBeforeItsSyncerOpened(t *testing.T) {
	fsys := newErrseqFS(t)
	e := openT(t, fsys, 0)
	dead, err := fsys.OpenFile(e.segPath(1), os.O_RDWR, 0) // a process that will die
	if err != nil {
		t.Fatal(err)
	}
	lsn, end, err := e.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	fsys.InjectWritebackError(1)
	if err := vfs.Datasync(dead); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the dying process's sync: %v, want EIO", err)
	}
	// It is killed here, before writing POISONED.
	c := openT(t, fsys, 0)
	if _, err := c.Commit(context.Background(), payload(2, 0)); err != nil {
		t.Fatalf("c, whose descriptor was opened after the error was reported: %v", err)
	}
	err = e.Sync(context.Background(), end)
	if err == nil && !durableIn(fsys.MemFS, e, lsn, payload(0, 0)) {
		t.Fatal("e's frame, lost to the writeback error, was acknowledged on c's sync")
	}
	if !errors.Is(err, ErrPoisoned) {
		t.Fatalf("e: %v, want ErrPoisoned", err)
	}
}

// A process stopped or killed while it leads a sync (its claim on the lead
// stays in the page) delays the others by a bounded time: they take the lead
// over and sync themselves.
func TestStoppedLeaderIsTakenOver(t *testing.T) {
	fsys := newMem(t)
	b := openT(t, fsys, 0)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano())
	b.now = func() int64 { return clock.Add(int64(time.Millisecond)) } // every look takes 1 ms
	stale := uint64(clock.Load())
	set(b.group, wLead, stale) // the stopped leader's claim
	lsn, end, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), end); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Syncs != 1 {
		t.Fatalf("b: %+v, want its own sync", st)
	}
	if !durableIn(fsys, b, lsn, payload(1, 0)) {
		t.Fatal("acknowledged frame lost at a power loss")
	}
	if got := b.group.w.Load(wLead); got != 0 {
		t.Fatalf("lead = %d after b's sync, want 0 (b took it over and released it)", got)
	}
}

// Several processes commit at once across segment rolls (each round: all
// append, then all sync at once); every frame is durable the moment its
// Sync returns (a power loss then keeps it). Then a power loss that wrote
// the group-commit page back (its words survive, stale) and a second run on
// the new boot: the stale words never make a process skip a sync it needs.
func TestEveryAcknowledgedFrameSurvivesPowerLoss(t *testing.T) {
	fsys := newMem(t)
	const writers, rounds = 4, 40
	var covered atomic.Int64
	run := func(fsys *vfs.MemFS, who int) {
		logs := make([]*Log, writers)
		for w := range logs {
			logs[w] = openT(t, fsys, 4096)
		}
		for i := range rounds {
			lsns, ends := make([]LSN, writers), make([]LSN, writers)
			var wg sync.WaitGroup
			for w, l := range logs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					if lsns[w], ends[w], err = l.Append(payload(who+w, i)); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			for w, l := range logs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := l.Sync(context.Background(), ends[w]); err != nil {
						t.Error(err)
						return
					}
					if !durableIn(fsys, l, lsns[w], payload(who+w, i)) {
						t.Errorf("writer %d frame %d at %v acknowledged, lost at a power loss now", who+w, i, lsns[w])
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
		}
		for _, l := range logs {
			covered.Add(l.Stats().Covered)
			l.Close()
		}
	}
	run(fsys, 0)
	next := fsys.CrashCloneWriteback()
	if g, err := next.ReadFile(testDir + "/" + groupName); err != nil || len(g) < groupBytes || bytes.Count(g, []byte{0}) == len(g) {
		t.Fatalf("the power loss should leave the group-commit page's words (%d bytes, %v)", len(g), err)
	}
	run(next, writers)
	if covered.Load() == 0 {
		t.Fatal("no sync was ever shared: the test does not exercise the group-commit page")
	}
	t.Logf("%d of %d commits covered by another process's sync", covered.Load(), 2*writers*rounds)
}

// A process whose frames another process's sync covered still checks the
// poison mark before acknowledging them: a sync failure anywhere stops
// every acknowledgement.
func TestCoveredFramesStillCheckPoison(t *testing.T) {
	fsys := newMem(t)
	a, b, c := openT(t, fsys, 0), openT(t, fsys, 0), openT(t, fsys, 0)
	_, aEnd, err := a.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, bEnd, err := b.Append(payload(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background(), aEnd); err != nil {
		t.Fatal(err)
	}
	_ = c.Poison(errors.New("c's checkpoint fsync failed"))
	if err := b.Sync(context.Background(), bEnd); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("b: %v, want ErrPoisoned", err)
	}
	if st := b.Stats(); st.Covered != 1 {
		t.Fatalf("b: %+v: the test needs b's frame covered by a's sync", st)
	}
}

// The page holds the tail: a process that opens the log while others run
// and finds the page gone (removed under them) refuses to open rather than
// start a second tail; those that mapped it keep sharing it, and every
// acknowledged frame is durable.
func TestGroupPageRemovedWhileRunning(t *testing.T) {
	fsys := newMem(t)
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	if err := fsys.Remove(testDir + "/" + groupName); err != nil {
		t.Fatal(err)
	}
	if c, err := Open(context.Background(), fsys, testDir, Options{}); err == nil {
		c.Close()
		t.Fatal("Open beside running processes with the page gone succeeded")
	}
	for i := range 20 {
		lsns, ends := make([]LSN, 2), make([]LSN, 2)
		for w, l := range []*Log{a, b} {
			var err error
			if lsns[w], ends[w], err = l.Append(payload(w, i)); err != nil {
				t.Fatal(err)
			}
		}
		for w, l := range []*Log{b, a} {
			w = 1 - w
			if err := l.Sync(context.Background(), ends[w]); err != nil {
				t.Fatal(err)
			}
			if !durableIn(fsys, l, lsns[w], payload(w, i)) {
				t.Fatalf("writer %d frame %d acknowledged, lost at a power loss", w, i)
			}
		}
	}
	if a.Stats().Covered == 0 {
		t.Fatal("a and b still share their page: a's frames, synced after b's, should be covered")
	}
}

// TestStampSharedAcrossProcesses: Stamp is strictly increasing across the
// processes that have the log open (two Logs on one directory), whatever
// the ms they pass (equal, stepped back, ahead), at least ms<<16, and still
// increasing for a process that opens the log alone after both closed, with
// its clock stepped back (the page keeps the stamp word); after Close a
// process's stamps go on from its own.
func TestStampSharedAcrossProcesses(t *testing.T) {
	fsys := newMem(t)
	a, b := openT(t, fsys, 0), openT(t, fsys, 0)
	const ms = 1_700_000_000_000
	var last uint64
	next := func(who string, l *Log, at uint64) {
		t.Helper()
		v := l.Stamp(at)
		if v <= last || v < at<<16 {
			t.Fatalf("%s Stamp(%d) = %#x after %#x: want above it and at least %#x", who, at, v, last, at<<16)
		}
		last = v
	}
	for i := range 100 {
		at := uint64(ms)
		switch {
		case i%10 == 7:
			at -= 5000 // a clock stepped back
		case i%10 == 9:
			at += uint64(i) // ahead
		}
		next("A", a, at)
		next("B", b, at)
		next("B", b, at)
	}
	a.Close()
	b.Close()
	c := openT(t, fsys, 0)
	if !c.Alone() {
		t.Fatal("C is not alone: the test does not test what it says")
	}
	next("C, alone after a restart", c, ms-60_000)
	c.Close()
	next("C after Close", c, ms-60_000)
}

// TestAnyModeSetsNoMode: a log opened with AnyMode (a repairing fsck, which
// appends nothing) joins processes of either mode, and alone leaves the
// mode unset: the first process that joins it sets it, and from then on a
// process of the other mode is refused as before.
func TestAnyModeSetsNoMode(t *testing.T) {
	open := func(fsys vfs.FS, opts Options) (*Log, error) {
		l, err := Open(context.Background(), fsys, testDir, opts)
		if err == nil {
			l.Ready()
			t.Cleanup(func() { l.Close() })
		}
		return l, err
	}
	durable, noSync, anyMode := Options{}, Options{NoSync: true}, Options{AnyMode: true}
	for _, c := range []struct {
		name  string
		first Options // alone
		then  []Options
		want  []bool // each of then opens (true) or is refused with ErrModeMismatch
	}{
		{"alone any mode, then NoSync, then Durable", anyMode, []Options{noSync, durable, noSync}, []bool{true, false, true}},
		{"alone any mode, then Durable, then NoSync", anyMode, []Options{durable, noSync, anyMode}, []bool{true, false, true}},
		{"Durable alone, then any mode", durable, []Options{anyMode, noSync}, []bool{true, false}},
		{"NoSync alone, then any mode", noSync, []Options{anyMode, durable}, []bool{true, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := newMem(t)
			if _, err := open(fsys, c.first); err != nil {
				t.Fatal(err)
			}
			for i, o := range c.then {
				_, err := open(fsys, o)
				if c.want[i] && err != nil {
					t.Fatalf("open %d (%+v): %v; want it to join", i, o, err)
				}
				if !c.want[i] && !errors.Is(err, ErrModeMismatch) {
					t.Fatalf("open %d (%+v): %v; want ErrModeMismatch", i, o, err)
				}
			}
		})
	}
}
