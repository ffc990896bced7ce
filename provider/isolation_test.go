package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/wal"
)

// One commit that cannot be applied must not block the others (issue 19
// item 1): an instance whose files cannot be written (an immutable or
// read-only file: EPERM on every change) or return EIO after its ack
// committed in the write-ahead log.

// brokenFS is a strict MemFS on which the files a predicate picks fail with
// err: every change to them (opening for writing, renaming onto or away,
// removing) and, unless writesOnly, every read. fix makes them work again.
type brokenFS struct {
	*vfs.MemFS
	mu         sync.Mutex
	match      func(path string) bool
	err        error
	writesOnly bool
}

func newBrokenFS(t *testing.T) *brokenFS {
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	return &brokenFS{MemFS: mem}
}

// breakFiles makes the files match picks fail with err from now on.
func (b *brokenFS) breakFiles(match func(string) bool, err error, writesOnly bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.match, b.err, b.writesOnly = match, err, writesOnly
}

// fix makes every file work again.
func (b *brokenFS) fix() { b.breakFiles(nil, nil, false) }

func (b *brokenFS) fail(path string, write bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.match == nil || !b.match(path) || (!write && b.writesOnly) {
		return nil
	}
	return &fs.PathError{Op: "open", Path: path, Err: b.err}
}

func (b *brokenFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	write := flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0
	if err := b.fail(name, write); err != nil {
		return nil, err
	}
	return b.MemFS.OpenFile(name, flag, perm)
}

func (b *brokenFS) ReadFile(name string) ([]byte, error) {
	if err := b.fail(name, false); err != nil {
		return nil, err
	}
	return b.MemFS.ReadFile(name)
}

func (b *brokenFS) Rename(oldpath, newpath string) error {
	if err := errors.Join(b.fail(oldpath, true), b.fail(newpath, true)); err != nil {
		return err
	}
	return b.MemFS.Rename(oldpath, newpath)
}

func (b *brokenFS) Remove(name string) error {
	if err := b.fail(name, true); err != nil {
		return err
	}
	return b.MemFS.Remove(name)
}

func (b *brokenFS) RemoveAll(name string) error {
	if err := b.fail(name, true); err != nil {
		return err
	}
	return b.MemFS.RemoveAll(name)
}

// dataFiles picks an instance's history and state files and its
// instance.json (not its lease and lock file).
func dataFiles(p *FSProvider, inst string) func(string) bool {
	key := instanceKey(inst)
	execs := filepath.Join(p.instDir(key), "executions") + string(filepath.Separator)
	inf := p.instFilePath(key)
	return func(path string) bool { return path == inf || strings.HasPrefix(path, execs) }
}

// breakage is how an instance's files fail.
type breakage struct {
	name       string
	err        error
	writesOnly bool
	// files picks the files that fail (nil: dataFiles).
	files func(p *FSProvider, inst string) func(string) bool
}

// allFiles picks every file of an instance but its lock file (its lease
// too).
func allFiles(p *FSProvider, inst string) func(string) bool {
	key := instanceKey(inst)
	dir := p.instDir(key) + string(filepath.Separator)
	lock := p.lockPath(key)
	return func(path string) bool { return path != lock && strings.HasPrefix(path, dir) }
}

var breakages = []breakage{
	{name: "unwritable (EPERM)", err: syscall.EPERM, writesOnly: true},
	{name: "EIO", err: syscall.EIO},
}

// isolationOptions are the options of these tests: no background work, a
// manual clock, small log segments.
func isolationOptions(f vfs.FS, clk *clock.Manual) Options {
	return Options{fs: f, Clock: clk, SweepInterval: -1, CheckpointInterval: -1, SegmentSize: segmentSize, Logger: quietLog}
}

// stuckTurn commits a turn of "bad" (an event, an activity, a message for
// "good") whose apply fails: bad's data files break right after the commit
// point. It returns the record's commit id.
func stuckTurn(t *testing.T, p *FSProvider, f *brokenFS, b breakage) string {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "bad", Name: "e", Data: "1"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "bad" {
		t.Fatalf("fetch bad: %+v %v", it, err)
	}
	files := b.files
	if files == nil {
		files = dataFiles
	}
	testHookAfterCommitPoint = func(string) { f.breakFiles(files(p, "bad"), b.err, b.writesOnly) }
	defer func() { testHookAfterCommitPoint = nil }()
	ev := started("bad")
	ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
	work := []WorkItem{ActivityExecute{Instance: "bad", ExecutionID: 1, ID: 2, Name: "a", Input: "x"}}
	out := []WorkItem{ExternalRaised{Instance: "good", Name: "from-bad", Data: "y"}}
	// Committed: the ack succeeds although its apply fails.
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, work, out, ExecutionMetadata{}, nil))
	if got := p.RecoveryStats().ApplyDeferred; got != 1 {
		t.Fatalf("ApplyDeferred = %d, want 1 (the apply must have failed)", got)
	}
	recs, _, _, err := p.scanLog()
	mustNoErr(t, err)
	return recs[len(recs)-1].rec.CommitID
}

// setupStuck opens a directory with two completed instances, "bad" and
// "good", checkpoints (so that no later checkpoint syncs bad's files), and
// commits a stuck turn of bad.
func setupStuck(t *testing.T, b breakage) (*FSProvider, *brokenFS, *clock.Manual, string) {
	t.Helper()
	f := newBrokenFS(t)
	clk := clock.NewManual(time.Now())
	p := openT(t, "/d", isolationOptions(f, clk))
	createInstance(t, p, "bad")
	createInstance(t, p, "good")
	mustNoErr(t, p.Checkpoint(context.Background()))
	return p, f, clk, stuckTurn(t, p, f, b)
}

// wantStuck checks that p reports bad's commit as one that cannot be applied.
func wantStuck(t *testing.T, p *FSProvider, id string, parked bool) {
	t.Helper()
	sc, err := p.StuckCommits(context.Background())
	mustNoErr(t, err)
	if len(sc) != 1 || sc[0].Instance != "bad" || sc[0].CommitID != id || sc[0].Parked != parked {
		t.Fatalf("StuckCommits = %+v; want bad's commit %s (parked %v)", sc, id, parked)
	}
}

// wantBadApplied checks that bad's stuck turn is applied exactly once.
func wantBadApplied(t *testing.T, p *FSProvider) {
	t.Helper()
	if h, err := p.Read(context.Background(), "bad"); err != nil || len(h) != 2 {
		t.Errorf("history of bad has %d events (%v), want 2", len(h), err)
	}
	if inf, err := p.readInstanceFile(instanceKey("bad")); err != nil || inf == nil || inf.TotalEvents != 2 {
		t.Errorf("instance.json of bad = %+v, %v; want 2 events", inf, err)
	}
	if work, _ := allQueued(p.workQ); len(work) != 1 || work[0].Attrs[attrInstance] != "bad" {
		t.Errorf("worker queue = %+v, want bad's activity once", work)
	}
	if m := leaseMark(t, p, "bad"); m != nil {
		t.Errorf("the lease of bad still marks %+v", m)
	}
}

// TestStuckCommitFetchServesOthers: a fetch skips the instance whose commit
// cannot be applied (counted, and reported by StuckCommits) and serves the
// others; a new process opens the directory and reports it; once the cause
// is gone the instance is served again, its turn applied once.
func TestStuckCommitFetchServesOthers(t *testing.T) {
	for _, b := range breakages {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			p, f, clk, id := setupStuck(t, b)
			// bad's batch message is still queued (its turn's apply did
			// not get to delete it), and another one arrives: both are
			// older than good's.
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "bad", Name: "e2", Data: "2"}, 0))
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "good", Name: "g", Data: "3"}, 0))
			for i := range 2 {
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil || it.Item.Instance != "good" {
					t.Fatalf("fetch %d = %+v, %v; want good's turn", i, it, err)
				}
				mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))
			}
			// After the back-off the fetch tries bad again, fails, and
			// still serves good.
			clk.Advance(time.Minute)
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil || it.Item.Instance != "good" {
				t.Fatalf("fetch after the back-off = %+v, %v; want good's turn", it, err)
			}
			mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))
			rs := p.RecoveryStats()
			if rs.ApplyFailures < 2 || rs.StuckSkips < 3 {
				t.Errorf("RecoveryStats = %+v; want apply failures and skips counted", rs)
			}
			wantStuck(t, p, id, false)
			sc, _ := p.StuckCommits(ctx)
			if !strings.Contains(sc[0].Error, b.err.Error()) {
				t.Errorf("StuckCommits error = %q, want the cause %v", sc[0].Error, b.err)
			}

			// Another process opens the directory: it recovers what it
			// can, and reports bad.
			q, err := Open("/d", isolationOptions(f, clk))
			if err != nil {
				t.Fatalf("Open with a stuck commit: %v", err)
			}
			wantStuck(t, q, id, false)
			mustNoErr(t, q.Close())

			// The cause goes away: after the retry delay, the fetch
			// applies bad's turn and serves bad's next message.
			f.fix()
			clk.Advance(time.Minute)
			var insts []string
			for {
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				mustNoErr(t, err)
				if it == nil {
					break
				}
				insts = append(insts, it.Item.Instance)
				if it.Item.Instance == "bad" && (len(it.Item.History) != 2 || len(it.Item.Messages) != 1) {
					t.Errorf("bad's item after the fix: %d events, %d messages; want 2 and 1 (e2)", len(it.Item.History), len(it.Item.Messages))
				}
			}
			slices.Sort(insts)
			if fmt.Sprint(insts) != "[bad good]" {
				t.Errorf("fetches after the fix served %v, want bad and good", insts)
			}
			wantBadApplied(t, p)
			if sc, _ := p.StuckCommits(ctx); len(sc) != 0 {
				t.Errorf("StuckCommits after the fix = %+v, want none", sc)
			}
		})
	}
}

// recordLSN returns the log position of record id (which must be in the log).
func recordLSN(t *testing.T, p *FSProvider, id string) wal.LSN {
	t.Helper()
	recs, _, _, err := p.scanLog()
	mustNoErr(t, err)
	for _, lr := range recs {
		if lr.rec.CommitID == id {
			return lr.lsn
		}
	}
	t.Fatalf("record %s is not in the log", id)
	return 0
}

// rollLog commits turns of other instances until the log has moved to a
// segment after the one lsn is in.
func rollLog(t *testing.T, p *FSProvider, lsn wal.LSN) {
	t.Helper()
	for i := 0; p.wal.End().Segment() <= lsn.Segment(); i++ {
		if i == 100 {
			t.Fatal("the log does not roll")
		}
		createInstance(t, p, fmt.Sprintf("filler-%d", i))
	}
}

// orchMessagesFor returns the names (event names of ExternalRaised) of the
// orchestrator messages queued for inst.
func orchMessagesFor(t *testing.T, p *FSProvider, inst string) []string {
	t.Helper()
	entries, err := queuedFor(p.orchQ, instanceKey(inst))
	mustNoErr(t, err)
	var out []string
	for _, e := range entries {
		m, err := p.orchQ.Get(e.Name)
		mustNoErr(t, err)
		w, err := UnmarshalWorkItem(m.Payload)
		mustNoErr(t, err)
		if er, ok := w.(ExternalRaised); ok {
			out = append(out, er.Name)
		} else {
			out = append(out, w.Kind())
		}
	}
	slices.Sort(out)
	return out
}

// TestStuckCommitCheckpointParks: the checkpoint does not stop at a record
// that cannot be applied: it parks it (its outbound messages published and
// durable, the record in unapplied/) and goes past it, trimming the log. A
// power loss keeps the parked record: the replay marks bad's commit pending
// again (bad is not served) and resurrects none of its messages that were
// consumed meanwhile. Once the cause is gone, a checkpoint applies it, once,
// makes it durable and removes the parked copy.
func TestStuckCommitCheckpointParks(t *testing.T) {
	for _, b := range breakages {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			p, f, clk, id := setupStuck(t, b)
			lsn := recordLSN(t, p, id)
			rollLog(t, p, lsn)
			mustNoErr(t, p.Checkpoint(ctx))
			if ck, err := p.wal.Checkpoint(); err != nil || ck <= lsn {
				t.Fatalf("checkpoint = %v, %v; want past the stuck record at %v", ck, err, lsn)
			}
			seg := filepath.Join("/d/wal", fmt.Sprintf("%016x.wal", lsn.Segment()))
			if _, err := f.Stat(seg); !vfs.IsNotExist(err) {
				t.Errorf("the stuck record's segment %s is still there (%v): the log was not trimmed", seg, err)
			}
			wantStuck(t, p, id, true)
			if got := p.RecoveryStats().CommitsParked; got != 1 {
				t.Errorf("CommitsParked = %d, want 1", got)
			}
			if _, err := f.Stat(p.parkedPath(instanceKey("bad"), lsn, id)); err != nil {
				t.Errorf("no parked record: %v", err)
			}
			// Its outbound messages are published: good takes its message.
			if work, _ := p.workQ.List(); len(work) != 1 {
				t.Errorf("worker queue = %+v, want bad's activity", work)
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil || it.Item.Instance != "good" || len(it.Item.Messages) != 1 {
				t.Fatalf("fetch = %+v, %v; want good's turn with bad's message", it, err)
			}
			ackEvent(t, p, it.LockToken, "good", 2, "from-bad", "y")
			mustNoErr(t, p.Checkpoint(ctx))
			createInstance(t, p, "late") // a record in the log for the replay

			// A power loss: the reopened directory replays.
			crash := &brokenFS{MemFS: f.CrashClone()}
			crash.breakFiles(dataFiles(p, "bad"), b.err, b.writesOnly)
			r := openT(t, "/d", isolationOptions(crash, clk))
			if got := r.RecoveryStats().RecordsReplayed; got == 0 {
				t.Fatal("the reopen did not replay")
			}
			wantStuck(t, r, id, true)
			if m := leaseMark(t, r, "bad"); m == nil || m.ID != id {
				t.Errorf("bad's lease marks %+v after the replay, want %s", m, id)
			}
			if got := orchMessagesFor(t, r, "good"); len(got) != 0 {
				t.Errorf("messages for good after the power loss: %v; want none (bad's was consumed)", got)
			}
			if it, err := r.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
				t.Fatalf("fetch with bad stuck = %+v, %v; want nothing", it, err)
			}

			// The cause goes away: a checkpoint applies it and removes it.
			crash.fix()
			mustNoErr(t, r.Checkpoint(ctx))
			wantBadApplied(t, r)
			noPendingState(t, r, "bad", "good")
			if sc, err := r.StuckCommits(ctx); err != nil || len(sc) != 0 {
				t.Errorf("StuckCommits after the fix = %+v, %v", sc, err)
			}
			if ps, err := r.listParked(); err != nil || len(ps) != 0 {
				t.Errorf("parked records after the fix: %+v, %v", ps, err)
			}
			if got := orchMessagesFor(t, r, "bad"); len(got) != 0 {
				t.Errorf("messages for bad after its turn: %v, want none", got)
			}
			// Durable: another power loss keeps it.
			wantBadApplied(t, openT(t, "/d", isolationOptions(crash.CrashClone(), clk)))
		})
	}
}

// TestReplayQueuesBehindFailedRecord: a power loss leaves two turns of an
// instance in the log, unsynced in its files, and its files break before the
// replay. The replay cannot apply the first: the instance is marked, the
// second is queued behind it (not applied out of order, not lost), other
// instances are served, and once the cause is gone both turns are applied
// in order. With the log poisoned (a sync failure) the replay parks both,
// checkpoints and clears the poison mark.
func TestReplayQueuesBehindFailedRecord(t *testing.T) {
	for _, poisoned := range []bool{false, true} {
		for _, b := range breakages {
			t.Run(fmt.Sprintf("%s/poisoned=%v", b.name, poisoned), func(t *testing.T) {
				ctx := context.Background()
				f := newBrokenFS(t)
				clk := clock.NewManual(time.Now())
				p := openT(t, "/d", isolationOptions(f, clk))
				createInstance(t, p, "a")
				createInstance(t, p, "good")
				mustNoErr(t, p.Checkpoint(ctx))
				var ids []string
				for i := range 2 {
					mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: fmt.Sprint("e", i), Data: "1"}, 0))
					it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
					if err != nil || it == nil || it.Item.Instance != "a" {
						t.Fatal(it, err)
					}
					ev := started("a")
					ev.EventID, ev.Kind = uint64(2+i), ExternalEvent{Name: fmt.Sprint("e", i), Data: "1"}
					out := []WorkItem{ExternalRaised{Instance: "other", Name: fmt.Sprint("from-a-", i), Data: "y"}}
					mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, out, ExecutionMetadata{}, nil))
					m, err := p.PendingCommits(ctx)
					mustNoErr(t, err)
					if len(m) != 0 {
						t.Fatalf("pending after ack: %+v", m)
					}
					recs, _, _, err := p.scanLog()
					mustNoErr(t, err)
					ids = append(ids, recs[len(recs)-1].rec.CommitID)
				}
				crash := &brokenFS{MemFS: f.CrashClone()}
				if poisoned {
					mustNoErr(t, vfs.WriteFile(crash, "/d/wal/POISONED", []byte("test\n")))
				}
				crash.breakFiles(dataFiles(p, "a"), b.err, b.writesOnly)
				r := openT(t, "/d", isolationOptions(crash, clk))
				st := orchStateOf(t, r, "a")
				if st.Pending == nil || st.Pending.ID != ids[0] || len(st.Queued) != 1 || st.Queued[0].ID != ids[1] {
					t.Fatalf("a's marks after the replay: %+v queued %+v; want %v", st.Pending, st.Queued, ids)
				}
				if h, err := r.Read(ctx, "a"); b.writesOnly && (err != nil || len(h) > 1) {
					t.Errorf("a's history after the failed replay: %d events (%v), want at most the first", len(h), err)
				}
				if got := orchMessagesFor(t, r, "other"); fmt.Sprint(got) != "[from-a-0 from-a-1]" {
					t.Errorf("messages for other (never started) after the replay: %v; want both turns' (restored in log order)", got)
				}
				if !poisoned {
					if pcs := pendingCommits(t, r); len(pcs) != 2 {
						t.Errorf("PendingCommits after the replay = %+v; want both turns (one queued behind the other)", pcs)
					}
				}
				if poisoned {
					if r.wal.Err() != nil {
						t.Errorf("the log is still poisoned: %v", r.wal.Err())
					}
					if ps, err := r.listParked(); err != nil || len(ps) != 2 {
						t.Errorf("parked after a poisoned replay: %+v, %v; want both turns", ps, err)
					}
				}
				mustNoErr(t, r.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e9", Data: "1"}, 0))
				mustNoErr(t, r.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "good", Name: "g", Data: "1"}, 0))
				it, err := r.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil || it.Item.Instance != "good" {
					t.Fatalf("fetch with a blocked = %+v, %v; want good's turn", it, err)
				}
				mustNoErr(t, r.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))

				crash.fix()
				clk.Advance(time.Minute)
				for {
					it, err := r.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
					mustNoErr(t, err)
					if it == nil {
						break
					}
					if it.Item.Instance != "a" {
						continue
					}
					var names []string
					for _, e := range it.Item.History {
						if x, ok := e.Kind.(ExternalEvent); ok {
							names = append(names, x.Name)
						}
					}
					if fmt.Sprint(names) != "[e0 e1]" || len(it.Item.Messages) != 1 {
						t.Errorf("a after the fix: events %v, %d messages; want [e0 e1] and e9", names, len(it.Item.Messages))
					}
				}
				mustNoErr(t, r.Checkpoint(ctx))
				if st := orchStateOf(t, r, "a"); st.Pending != nil || len(st.Queued) != 0 {
					t.Errorf("a still marks %+v %+v", st.Pending, st.Queued)
				}
				if ps, err := r.listParked(); err != nil || len(ps) != 0 {
					t.Errorf("parked records after the fix: %+v, %v", ps, err)
				}
			})
		}
	}
}

// orchStateOf returns an instance's queue state.
func orchStateOf(t *testing.T, p *FSProvider, inst string) orchState {
	t.Helper()
	key := instanceKey(inst)
	cur, _, err := p.leases.Inspect(context.Background(), p.lockPath(key), p.leasePath(key))
	mustNoErr(t, err)
	return decodeOrchState(cur)
}

// TestStuckCommitFsck: fsck names an instance whose commit cannot be
// applied (an error, once the commit is older than MinAge, and at once
// when parked); a repair while the cause is there says what fails, and
// applies it once the cause is gone.
func TestStuckCommitFsck(t *testing.T) {
	for _, b := range breakages {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBrokenFS(t)
			// The provider's clock is an hour behind fsck's: the commit is
			// an hour old when fsck looks.
			clk := clock.NewManual(time.Now().Add(-time.Hour))
			p := openT(t, "/d", isolationOptions(f, clk))
			createInstance(t, p, "bad")
			createInstance(t, p, "good")
			mustNoErr(t, p.Checkpoint(ctx))
			stuckTurn(t, p, f, b)
			fsck := func(repair bool) *FsckFinding {
				t.Helper()
				run := newFsckRun(p, FsckOptions{Logger: quietLog, MinAge: time.Minute, StaleAfter: time.Hour}, repair)
				mustNoErr(t, run.scan(ctx))
				var found *FsckFinding
				for _, fd := range run.findings {
					if fd.Kind == FsckStuckCommit {
						if found != nil {
							t.Fatalf("two stuck-commit findings: %+v, %+v", found, fd)
						}
						found = fd
					}
				}
				return found
			}
			fd := fsck(false)
			if fd == nil || fd.Severity != SeverityError || fd.Path != "instances/bad/lease.json" || !strings.Contains(fd.Detail, `"bad"`) {
				t.Fatalf("fsck finding = %+v; want an error naming bad", fd)
			}
			mustNoErr(t, p.Checkpoint(ctx))
			if fd := fsck(false); fd == nil || !strings.Contains(fd.Detail, "unapplied/") {
				t.Fatalf("fsck finding after the checkpoint parked it = %+v; want it named, in unapplied/", fd)
			}
			if fd := fsck(true); fd == nil || fd.Repaired || !strings.Contains(fd.Action, b.err.Error()) {
				t.Fatalf("fsck --repair while the cause is there = %+v; want not repaired, saying %v", fd, b.err)
			}
			f.fix()
			if fd := fsck(true); fd == nil || !fd.Repaired {
				t.Fatalf("fsck --repair once fixed = %+v; want repaired", fd)
			}
			wantBadApplied(t, p)
			if fd := fsck(false); fd != nil {
				t.Errorf("fsck after the repair: %+v", fd)
			}
		})
	}
}

// TestParkPublishesOnce: parking publishes a stuck record's messages exactly
// once: one whose staged file was lost is written from the record, one that
// was published and consumed since (by a later record) is not written again.
func TestParkPublishesOnce(t *testing.T) {
	ctx := context.Background()
	t.Run("staged files lost", func(t *testing.T) {
		p, _, _, id := setupStuck(t, breakages[0])
		for _, q := range []string{"orchestrator", "worker"} {
			staged, err := p.queue(q).Staged()
			mustNoErr(t, err)
			if len(staged) != 1 {
				t.Fatalf("staged in %s: %+v, want the stuck turn's", q, staged)
			}
			mustNoErr(t, p.queue(q).Unstage(staged[0].Name))
		}
		mustNoErr(t, p.Checkpoint(ctx))
		wantStuck(t, p, id, true)
		if work, _ := p.workQ.List(); len(work) != 1 {
			t.Errorf("worker queue = %+v, want bad's activity, written from the record", work)
		}
		if got := orchMessagesFor(t, p, "good"); fmt.Sprint(got) != "[from-bad]" {
			t.Errorf("messages for good = %v, want bad's, written from the record", got)
		}
	})
	t.Run("published and consumed", func(t *testing.T) {
		p, _, _, id := setupStuck(t, breakages[0])
		staged, err := p.orchQ.Staged()
		mustNoErr(t, err)
		if len(staged) != 1 {
			t.Fatalf("staged: %+v", staged)
		}
		// A partial apply got as far as publishing it, and good consumed it.
		if ok, err := p.orchQ.Publish(staged[0].Name); err != nil || !ok {
			t.Fatal(ok, err)
		}
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil || it.Item.Instance != "good" {
			t.Fatalf("fetch = %+v, %v; want good's turn", it, err)
		}
		ackEvent(t, p, it.LockToken, "good", 2, "from-bad", "y")
		mustNoErr(t, p.Checkpoint(ctx))
		wantStuck(t, p, id, true)
		if got := orchMessagesFor(t, p, "good"); len(got) != 0 {
			t.Errorf("messages for good = %v; want none (consumed)", got)
		}
	})
}

// TestStuckWorkAckDoesNotBlockOpen: a work ack whose apply fails after its
// commit point (its item cannot be removed) does not make Open fail; the
// checkpoint stays before it (it is not parked) and reports it; once the
// cause is gone it is applied once.
func TestStuckWorkAckDoesNotBlockOpen(t *testing.T) {
	ctx := context.Background()
	f := newBrokenFS(t)
	clk := clock.NewManual(time.Now())
	opts := isolationOptions(f, clk)
	p := openT(t, "/d", opts)
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 7, Name: "a", Input: "x"}))
	w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatal(w, err)
	}
	ct, _ := parseWorkToken(w.LockToken)
	name, _ := fsqueue.NameFromToken(ct)
	item := filepath.Join(p.workQ.Dir(), name+".json")
	testHookAfterCommitPoint = func(string) {
		f.breakFiles(func(path string) bool { return path == item }, syscall.EPERM, true)
	}
	err = p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "wi", ExecutionID: 1, ID: 7, Result: "r"})
	testHookAfterCommitPoint = nil
	mustNoErr(t, err)
	wantBlockedUntilFixed(t, p, f, opts, "w:"+name)
	wantWorkAcked(t, p, 7)
}

// wantBlockedUntilFixed checks a commit that cannot be applied and is not
// parked (the log's last record, reported under key): another process
// opens the directory and reports it, the checkpoint stays before it, and
// once f is fixed a checkpoint applies it and passes it.
func wantBlockedUntilFixed(t *testing.T, p *FSProvider, f *brokenFS, opts Options, key string) {
	t.Helper()
	ctx := context.Background()
	recs, _, _, err := p.scanLog()
	mustNoErr(t, err)
	lsn := recs[len(recs)-1].lsn
	q, err := Open("/d", opts)
	if err != nil {
		t.Fatalf("Open with a commit that cannot be applied: %v", err)
	}
	if sc, err := q.StuckCommits(ctx); err != nil || len(sc) != 1 || sc[0].Key != key || sc[0].Parked {
		t.Errorf("StuckCommits = %+v, %v; want %s, not parked", sc, err, key)
	}
	mustNoErr(t, q.Close())
	mustNoErr(t, p.Checkpoint(ctx))
	if ck, _ := p.wal.Checkpoint(); ck > lsn {
		t.Fatalf("the checkpoint (%v) passed the unapplied record at %v", ck, lsn)
	}
	f.fix()
	mustNoErr(t, p.Checkpoint(ctx))
	if ck, _ := p.wal.Checkpoint(); ck <= lsn {
		t.Errorf("the checkpoint (%v) did not pass the record at %v once applied", ck, lsn)
	}
	if sc, _ := p.StuckCommits(ctx); len(sc) != 0 {
		t.Errorf("StuckCommits after the fix = %+v", sc)
	}
}

// TestBrokenInstanceLeaseDoesNotBlock: every file of an instance, its lease
// included, fails with EIO after its ack committed. Whether its commit was
// applied cannot be read, so the checkpoint stays before it (it is not
// parked) - but fetches serve the other instances, a new process opens the
// directory and reports it, and once the cause is gone it is applied.
func TestBrokenInstanceLeaseDoesNotBlock(t *testing.T) {
	ctx := context.Background()
	b := breakage{name: "EIO, lease too", err: syscall.EIO, files: allFiles}
	p, f, clk, id := setupStuck(t, b)
	lsn := recordLSN(t, p, id)
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "good", Name: "g", Data: "3"}, 0))
	for i := range 2 {
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil || it.Item.Instance != "good" {
			t.Fatalf("fetch %d = %+v, %v; want good's turn", i, it, err)
		}
		if i == 0 {
			mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))
			clk.Advance(time.Minute) // past the back-off: the next fetch tries bad again
			continue
		}
		ackEvent(t, p, it.LockToken, "good", 2, "g", "3")
	}
	q, err := Open("/d", isolationOptions(f, clk))
	if err != nil {
		t.Fatalf("Open with an unreadable lease: %v", err)
	}
	wantStuck(t, q, id, false)
	mustNoErr(t, q.Close())
	rollLog(t, p, lsn)
	mustNoErr(t, p.Checkpoint(ctx))
	if ck, _ := p.wal.Checkpoint(); ck > lsn {
		t.Fatalf("the checkpoint (%v) passed a record (at %v) not known to be applied", ck, lsn)
	}
	f.fix()
	mustNoErr(t, p.Checkpoint(ctx))
	if ck, _ := p.wal.Checkpoint(); ck <= lsn {
		t.Errorf("the checkpoint (%v) did not pass the record (at %v) once applied", ck, lsn)
	}
	wantBadApplied(t, p)
}

// TestParkedRecordSettledBeforeLaterCommits: once a parked record is
// applied, its instance commits again; the checkpoint that passes the new
// commit first removes the parked copy (durably), so that a power loss
// afterwards does not replay the parked record over the newer state.
func TestParkedRecordSettledBeforeLaterCommits(t *testing.T) {
	ctx := context.Background()
	p, f, clk, id := setupStuck(t, breakages[0])
	mustNoErr(t, p.Checkpoint(ctx))
	wantStuck(t, p, id, true)
	f.fix()
	clk.Advance(time.Minute)
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "bad", Name: "e3", Data: "3"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "bad" || len(it.Item.History) != 2 {
		t.Fatalf("fetch of bad after the fix = %+v, %v; want its turn on 2 events", it, err)
	}
	ackEvent(t, p, it.LockToken, "bad", 3, "e3", "3")
	mustNoErr(t, p.Checkpoint(ctx))
	if ps, err := p.listParked(); err != nil || len(ps) != 0 {
		t.Fatalf("parked records after the checkpoint: %+v, %v", ps, err)
	}
	r := openT(t, "/d", isolationOptions(f.CrashClone(), clk))
	if h, err := r.Read(ctx, "bad"); err != nil || len(h) != 3 {
		t.Errorf("history of bad after a power loss: %d events (%v), want 3", len(h), err)
	}
	if inf, err := r.readInstanceFile(instanceKey("bad")); err != nil || inf == nil || inf.TotalEvents != 3 {
		t.Errorf("instance.json of bad after a power loss = %+v, %v; want 3 events (not the parked turn's 2)", inf, err)
	}
}

// TestReplayQueueThroughDeletion: a replay queues behind an instance's
// failed record a deletion of the instance and the ack that created it
// again; once the cause is gone the three are applied in order (the
// deletion keeps the queue behind it), leaving the re-created instance.
func TestReplayQueueThroughDeletion(t *testing.T) {
	ctx := context.Background()
	f := newBrokenFS(t)
	clk := clock.NewManual(time.Now())
	p := openT(t, "/d", isolationOptions(f, clk))
	createInstance(t, p, "a")
	mustNoErr(t, p.Checkpoint(ctx))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e0", Data: "1"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	ackEvent(t, p, it.LockToken, "a", 2, "e0", "1")
	if _, err := p.DeleteInstancesAtomic(ctx, []string{"a"}, true); err != nil {
		t.Fatal(err)
	}
	createInstance(t, p, "a")

	crash := &brokenFS{MemFS: f.CrashClone()}
	crash.breakFiles(dataFiles(p, "a"), syscall.EPERM, true)
	r := openT(t, "/d", isolationOptions(crash, clk))
	if st := orchStateOf(t, r, "a"); st.Pending == nil || len(st.Queued) != 2 {
		t.Fatalf("a's marks after the replay: %+v queued %+v; want one pending, two queued", st.Pending, st.Queued)
	}
	crash.fix()
	clk.Advance(time.Minute)
	mustNoErr(t, r.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "e1", Data: "1"}, 0))
	it, err = r.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "a" || len(it.Item.History) != 1 || len(it.Item.Messages) != 1 {
		t.Fatalf("fetch of a after the fix = %+v, %v; want the re-created instance (1 event) and e1", it, err)
	}
	if inf, err := r.readInstanceFile(instanceKey("a")); err != nil || inf == nil || inf.TotalEvents != 1 || inf.Status != "Completed" {
		t.Errorf("instance.json of a = %+v, %v; want the re-created instance's", inf, err)
	}
}

// ackEvent acks a fetched turn of inst that appends one ExternalEvent.
func ackEvent(t *testing.T, p *FSProvider, token, inst string, id uint64, name, data string) {
	t.Helper()
	ev := started(inst)
	ev.EventID, ev.Kind = id, ExternalEvent{Name: name, Data: data}
	mustNoErr(t, p.AckOrchestrationItem(context.Background(), token, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil))
}

// TestStuckWorkflowActivityDoesNotBlockOpen: a go-workflows activity
// completion whose apply fails after its commit point (its task cannot be
// removed) does not make Open fail; the checkpoint stays before it and
// reports it; once the cause is gone it is applied.
func TestStuckWorkflowActivityDoesNotBlockOpen(t *testing.T) {
	ctx := context.Background()
	f := newBrokenFS(t)
	clk := clock.NewManual(time.Now())
	opts := isolationOptions(f, clk)
	p := openT(t, "/d", opts)
	ref := WorkflowRef{InstanceID: "wf", ExecutionID: "e1"}
	mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: "default", Name: "W"}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "wf")
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State:      WorkflowActive,
		Executed:   []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("act", "ActivityScheduled", 3)},
		Activities: []WorkflowActivity{{Queue: "acts", EventID: "act", Payload: json.RawMessage(`{"a":1}`)}},
	}))
	at, err := p.FetchWorkflowActivity(ctx, []string{"acts"}, "w", time.Minute, 0)
	if err != nil || at == nil {
		t.Fatal(at, err)
	}
	dir, _, name, _ := parseGWActToken(at.Token)
	item := filepath.Join("/d", "queues", dir, name+".json")
	testHookAfterCommitPoint = func(string) {
		f.breakFiles(func(path string) bool { return path == item }, syscall.EPERM, true)
	}
	err = p.CompleteWorkflowActivity(ctx, at.Token, gwEv("done", "ActivityCompleted", 0))
	testHookAfterCommitPoint = nil
	mustNoErr(t, err)
	wantBlockedUntilFixed(t, p, f, opts, "gwa:"+dir+"/"+name)
	pt := gwFetchOf(t, p, "wf")
	if len(pt.NewEvents) != 1 || pt.NewEvents[0].ID != "done" {
		t.Fatalf("workflow events after the fix: %+v", pt.NewEvents)
	}
}

// TestWorkAckOfAStuckDeletion: a forced deletion whose apply fails after
// its commit point (the fetched work item's file cannot be removed) leaves
// the item there and the instance stuck; the item's ack finds the deletion
// marker, finds the deletion committed (settleDeletion) and fails for good,
// as if the item were gone, instead of retryably until its lock expires.
// Mutation that fails it: settleDeletion returning the apply's error for a
// deletion that lists the item.
func TestWorkAckOfAStuckDeletion(t *testing.T) {
	ctx := context.Background()
	f, p, w := brokenWithFetchedWork(t)
	work, err := allQueued(p.workQ)
	if err != nil || len(work) != 1 {
		t.Fatalf("worker queue = %+v, %v", work, err)
	}
	itemFile := filepath.Join(p.workQ.Dir(), work[0].Name+".json")
	testHookAfterCommitPoint = func(kind string) {
		if kind == "delete" {
			f.breakFiles(func(path string) bool { return path == itemFile }, syscall.EPERM, true)
		}
	}
	t.Cleanup(func() { testHookAfterCommitPoint = nil })
	if _, err := p.DeleteInstance(ctx, "x", true); err != nil {
		t.Fatalf("delete: %v (committed, its apply deferred: no error)", err)
	}
	testHookAfterCommitPoint = nil
	if n, _ := p.workQ.Len(); n != 1 {
		t.Fatalf("the worker queue holds %d items; want the one whose removal failed", n)
	}
	err = p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "r"})
	if err == nil || IsRetryable(err) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("ack of an item whose instance's deletion is committed and stuck = %v; want the permanent not-found error", err)
	}
	f.fix()
	mustNoErr(t, p.Recover(ctx))
	newIncarnationGetsNoCompletion(t, p, "x")
}

// TestWorkAckPastAStaleMarkerAndAStuckTurn: a deletion marker left behind
// (its removal failed) on an instance whose latest turn cannot be applied:
// the work ack that finds the marker takes the instance's flock, finds the
// stuck commit is no deletion, and goes on. Mutation that fails it:
// settleDeletion returning every stuck commit's error (the ack fails,
// retryably, until the instance is mended).
func TestWorkAckPastAStaleMarkerAndAStuckTurn(t *testing.T) {
	ctx := context.Background()
	f, p, w := brokenWithFetchedWork(t)
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "x", Name: "e", Data: "1"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "x" {
		t.Fatalf("fetch x: %+v %v", it, err)
	}
	testHookAfterCommitPoint = func(string) { f.breakFiles(dataFiles(p, "x"), syscall.EPERM, true) }
	t.Cleanup(func() { testHookAfterCommitPoint = nil })
	ackEvent(t, p, it.LockToken, "x", 3, "e", "1")
	testHookAfterCommitPoint = nil
	if sc, err := p.StuckCommits(ctx); err != nil || len(sc) != 1 {
		t.Fatalf("StuckCommits = %+v, %v; want x's turn", sc, err)
	}
	mustNoErr(t, p.markDeleting(instanceKey("x")))
	mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "r"}))
	if marked, err := p.deletionMarked(instanceKey("x")); marked || err != nil {
		t.Fatalf("deletion marker after the ack: %v, %v; want it removed", marked, err)
	}
}

// brokenWithFetchedWork opens a provider on a brokenFS (nothing broken
// yet), starts instance x with one activity and fetches its work item.
func brokenWithFetchedWork(t *testing.T) (*brokenFS, *FSProvider, *LockedWorkItem) {
	t.Helper()
	f := newBrokenFS(t)
	p := openT(t, "/d", isolationOptions(f, clock.NewManual(time.Now())))
	runActivities(t, p, "x", 1)
	return f, p, fetchOneWork(t, p)
}
