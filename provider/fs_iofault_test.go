package provider

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// I/O faults at each step of an ack's commit protocol (fs_wal.go), on a
// strict MemFS: stage, mark, append (the commit point is the group
// fdatasync after it), sync.
//
// A fault before the commit point must leave no trace: the ack fails with
// a retryable error wrapping the fault, nothing visible changes (history,
// queues, instance.json, the log's records, the lease or claim), no staged
// or temporary file is left, the lock is still held (a fetch gets nothing),
// and the same ack with the same token succeeds once the fault is gone -
// exactly once, also as a process that reopens the directory alone reads
// it back from the log (torn fragments of failed appends are skipped).
//
// A failed fdatasync of the log is final: the ack fails with an error
// wrapping ErrSyncFailed and so does every later ack, in this provider and
// in another one using the same directory; after every provider closed, the
// first to reopen the directory replays the log, which settles the record.

// faultFS passes every call to a strict MemFS and arms one of the MemFS's
// own faults (InjectError, InjectShortWrite, InjectWritebackError, with
// nth = 1) right before the first call of op ("open", "write", "sync",
// "rename" or "touch") on a path match accepts: the fault hits exactly that call, however
// many calls of op came before it. The tests run no background goroutines
// (no sweep, no checkpoint), so nothing else can take the armed fault.
type faultFS struct {
	*vfs.MemFS
	mu     sync.Mutex
	op     string
	match  func(path string) bool
	inject func(mem *vfs.MemFS)
	hit    string // the path the armed fault was injected for
	// dirOpen, set by an inject, fails the next SyncDir's open with it
	// (as NoFollow's SyncDir reports an open failure: Op "open").
	dirOpen error
}

func newFaultFS(t *testing.T) *faultFS {
	mem := vfs.NewStrictMem()
	mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
	return &faultFS{MemFS: mem}
}

// arm sets the fault for the next matching call.
func (f *faultFS) arm(op string, match func(string) bool, inject func(*vfs.MemFS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op, f.match, f.inject, f.hit = op, match, inject, ""
}

// disarm drops the fault if it did not fire and returns the path it hit.
func (f *faultFS) disarm() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inject = nil
	f.MemFS.ClearFaults()
	return f.hit
}

// before injects the armed fault if this call of op on path is its target.
func (f *faultFS) before(op, path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inject == nil || f.hit != "" || op != f.op || !f.match(path) {
		return
	}
	f.hit = path
	f.inject(f.MemFS)
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f.before("open", name)
	file, err := f.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return faultFile{File: file, fs: f}, nil
}

func (f *faultFS) SyncDir(name string) error {
	f.before("syncdir", name)
	f.mu.Lock()
	err := f.dirOpen
	f.dirOpen = nil
	f.mu.Unlock()
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.MemFS.SyncDir(name)
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	f.before("rename", newpath)
	return f.MemFS.Rename(oldpath, newpath)
}

func (f *faultFS) Touch(name string) error {
	f.before("touch", name)
	return f.MemFS.Touch(name)
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

// Unwrap lets vfs.MapWords map the log's shared page through the wrapper.
func (f faultFile) Unwrap() vfs.File { return f.File }

func (f faultFile) Write(p []byte) (int, error) {
	f.fs.before("write", f.Name())
	return f.File.Write(p)
}

// Sync is also what vfs.Datasync calls on a MemFS file.
func (f faultFile) Sync() error {
	f.fs.before("sync", f.Name())
	return f.File.Sync()
}

// Paths the faults aim at.
func isStaged(path string) bool { return strings.HasPrefix(filepath.Base(path), ".staged-") }
func isSegment(path string) bool {
	return filepath.Dir(path) == "/d/wal" && strings.HasSuffix(path, ".wal")
}

// ackFault is one injected failure before the commit point.
type ackFault struct {
	name   string
	op     string
	match  func(p *FSProvider) func(string) bool
	inject func(*vfs.MemFS)
	want   error // the cause the ack's error wraps
	// fill: fill the log's (small) segment first, so that the ack's append
	// rolls to a new segment, which it creates.
	fill bool
}

func failWith(op string, err error) func(*vfs.MemFS) {
	return func(m *vfs.MemFS) { m.InjectError(op, 1, err) }
}

func shortWrite(n int, err error) func(*vfs.MemFS) {
	return func(m *vfs.MemFS) { m.InjectShortWrite(1, n, err) }
}

func anyPath(match func(string) bool) func(*FSProvider) func(string) bool {
	return func(*FSProvider) func(string) bool { return match }
}

// logFaults are the faults of the log append, common to both acks.
var logFaults = []ackFault{
	{name: "log append fails (EIO)", op: "write", match: anyPath(isSegment), inject: failWith("write", syscall.EIO), want: syscall.EIO},
	// A torn frame is left in the log: its header and a few bytes.
	{name: "log append short write (ENOSPC mid-frame)", op: "write", match: anyPath(isSegment), inject: shortWrite(40, syscall.ENOSPC), want: syscall.ENOSPC},
	{name: "log segment open fails (EMFILE)", op: "open", match: anyPath(isSegment), inject: failWith("open", syscall.EMFILE), want: syscall.EMFILE, fill: true},
}

// segmentSize is the log segment size of these tests: small, so that a
// few commits fill one and the next append creates a new segment.
const segmentSize = 4096

func faultOptions(f *faultFS) Options {
	return Options{fs: f, SweepInterval: -1, CheckpointInterval: -1, SegmentSize: segmentSize, Logger: quietLog}
}

// fillSegment commits turns of other instances until the log's tail is so
// near the end of its (preallocated, small) segment that the next record - an
// ack's, larger than fillMargin - rolls to a new segment.
func fillSegment(t *testing.T, p *FSProvider, f *faultFS) {
	t.Helper()
	const fillMargin = 300
	for i := 0; ; i++ {
		if int(p.wal.End().Offset())+fillMargin > segmentSize {
			return
		}
		if i == 100 {
			t.Fatal("the log segment does not fill")
		}
		createInstance(t, p, fmt.Sprintf("filler-%d", i))
	}
}

// visibleState is what a failed ack must not change, as one string.
func visibleState(t *testing.T, p *FSProvider, f *faultFS, insts ...string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, inst := range insts {
		h, err := p.Read(ctx, inst)
		fmt.Fprintf(&b, "history %s: %d events %v\n", inst, len(h), err)
		data, err := f.ReadFile(p.instFilePath(instanceKey(inst)))
		fmt.Fprintf(&b, "instance.json %s: %s %v\n", inst, data, err)
		fmt.Fprintf(&b, "lease mark %s: %+v\n", inst, leaseMark(t, p, inst))
	}
	for _, q := range []string{"orchestrator", "worker"} {
		entries, err := p.queue(q).List()
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Fprintf(&b, "%s queue: %v %v\n", q, names, err)
		claims, err := p.queue(q).Claims()
		for _, n := range claims {
			c, _, cerr := p.queue(q).PeekClaim(n)
			fmt.Fprintf(&b, "%s claim %s: token %s state %q %v\n", q, n, c.Token, c.State, cerr)
		}
		if err != nil {
			fmt.Fprintf(&b, "%s claims: %v\n", q, err)
		}
	}
	recs, _, _, err := p.scanLog()
	fmt.Fprintf(&b, "log records: %d %v\n", len(recs), err)
	return b.String()
}

// noStagedOrTemp fails if a staged or temporary file is left.
func noStagedOrTemp(t *testing.T, p *FSProvider, f *faultFS) {
	t.Helper()
	for _, q := range []string{"orchestrator", "worker"} {
		if s, err := p.queue(q).Staged(); err != nil || len(s) != 0 {
			t.Errorf("staged files left in the %s queue: %v %v", q, s, err)
		}
	}
	noTemps(t, f.MemFS, "/d/tmp", p.orchQ.Dir(), p.workQ.Dir(), p.workQ.Dir()+"/claims", p.instDir(instanceKey("io")))
}

// wantFaultHit checks the ack's error: retryable, wrapping the injected
// cause, and naming the path the fault was aimed at (so it hit that call).
func wantFaultHit(t *testing.T, err error, want error, hit string) {
	t.Helper()
	if hit == "" {
		t.Fatal("the fault was never injected: the ack made no such call")
	}
	if err == nil {
		t.Fatalf("ack succeeded despite the fault on %s", hit)
	}
	if !IsRetryable(err) || !errors.Is(err, want) || !strings.Contains(err.Error(), filepath.Base(hit)) {
		t.Fatalf("ack error = %v; want a retryable error wrapping %v at %s", err, want, hit)
	}
}

// TestAckIOFaultChangesNothing: an orchestration ack (one history event, an
// activity and an orchestrator message to publish, the fetched message to
// consume) with a fault at each step before its commit point.
func TestAckIOFaultChangesNothing(t *testing.T) {
	lease := func(p *FSProvider) func(string) bool {
		l := p.leasePath(instanceKey("io"))
		return func(path string) bool { return path == l }
	}
	faults := append([]ackFault{
		{name: "staged file write fails (ENOSPC)", op: "write", match: anyPath(isStaged), inject: failWith("write", syscall.ENOSPC), want: syscall.ENOSPC},
		{name: "staged file short write (ENOSPC)", op: "write", match: anyPath(isStaged), inject: shortWrite(10, syscall.ENOSPC), want: syscall.ENOSPC},
		{name: "lease mark write fails (EIO)", op: "write", match: lease, inject: failWith("write", syscall.EIO), want: syscall.EIO},
		{name: "lease mark short write (ENOSPC)", op: "write", match: lease, inject: shortWrite(10, syscall.ENOSPC), want: syscall.ENOSPC},
	}, logFaults...)
	for _, c := range faults {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFaultFS(t)
			p := openT(t, "/d", faultOptions(f))
			createInstance(t, p, "io")
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "io", Name: "e", Data: "1"}, 0))
			it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			if c.fill {
				fillSegment(t, p, f)
			}
			ack := orchAck(ctx, it.LockToken)
			before := visibleState(t, p, f, "io")

			f.arm(c.op, c.match(p), c.inject)
			err = ack(p)
			hit := f.disarm()
			wantFaultHit(t, err, c.want, hit)
			if after := visibleState(t, p, f, "io"); after != before {
				t.Errorf("a failed ack changed what is visible:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			noStagedOrTemp(t, p, f)
			if again, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || again != nil {
				t.Fatalf("fetch after a failed ack = %+v, %v; want nothing (the lock stays)", again, err)
			}

			// The fault gone, the same token commits the turn exactly once.
			mustNoErr(t, ack(p))
			wantOrchAcked(t, p)
			// Also as read back from the log by a process that has the
			// directory alone (it replays every record since the checkpoint).
			mustNoErr(t, p.Close())
			wantOrchAcked(t, openT(t, "/d", faultOptions(f)))
		})
	}
}

// orchAck returns the ack of the fetched turn of "io".
func orchAck(ctx context.Context, token string) func(p *FSProvider) error {
	ev := started("io")
	ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
	work := []WorkItem{ActivityExecute{Instance: "io", ExecutionID: 1, ID: 2, Name: "a", Input: "x"}}
	out := []WorkItem{ExternalRaised{Instance: "other", Name: "x", Data: "y"}}
	return func(p *FSProvider) error {
		return p.AckOrchestrationItem(ctx, token, 1, []Event{ev}, work, out, ExecutionMetadata{}, nil)
	}
}

// wantOrchAcked checks that the turn of "io" is applied exactly once.
func wantOrchAcked(t *testing.T, p *FSProvider) {
	t.Helper()
	if h, err := p.Read(context.Background(), "io"); err != nil || len(h) != 2 {
		t.Errorf("history of io has %d events (%v), want 2", len(h), err)
	}
	if inf, err := p.readInstanceFile(instanceKey("io")); err != nil || inf == nil || inf.TotalEvents != 2 {
		t.Errorf("instance.json of io = %+v, %v; want 2 events", inf, err)
	}
	var insts []string
	orch, _ := allQueued(p.orchQ)
	for _, e := range orch {
		insts = append(insts, e.Attrs[attrInstance])
	}
	if fmt.Sprint(insts) != "[other]" {
		t.Errorf("orchestrator queue holds messages for %v, want only the outbound one (for other)", insts)
	}
	if work, _ := allQueued(p.workQ); len(work) != 1 || work[0].Attrs[attrInstance] != "io" {
		t.Errorf("worker queue = %+v, want the activity once", work)
	}
	if m := leaseMark(t, p, "io"); m != nil {
		t.Errorf("the lease of io still marks %+v", m)
	}
}

// TestWorkAckIOFaultChangesNothing: a work-item ack (a completion to
// publish, the item to consume) with a fault at each step before its commit
// point.
func TestWorkAckIOFaultChangesNothing(t *testing.T) {
	claim := func(p *FSProvider) func(string) bool {
		dir := p.workQ.Dir() + "/claims"
		return func(path string) bool { return filepath.Dir(path) == dir }
	}
	claimsDir := func(p *FSProvider) func(string) bool {
		dir := p.workQ.Dir() + "/claims"
		return func(path string) bool { return path == dir }
	}
	// The mark is written over the claim in place (fsqueue, "Claims
	// written in place"): a failed or short write, or a failed touch of
	// claims/ after it, puts the old claim back.
	faults := append([]ackFault{
		{name: "staged completion write fails (ENOSPC)", op: "write", match: anyPath(isStaged), inject: failWith("write", syscall.ENOSPC), want: syscall.ENOSPC},
		{name: "claim mark write fails (EIO)", op: "write", match: claim, inject: failWith("write", syscall.EIO), want: syscall.EIO},
		{name: "claim mark short write (ENOSPC after 10 bytes)", op: "write", match: claim, inject: shortWrite(10, syscall.ENOSPC), want: syscall.ENOSPC},
		{name: "claims/ touch after the mark fails (EIO)", op: "touch", match: claimsDir, inject: failWith("touch", syscall.EIO), want: syscall.EIO},
	}, logFaults...)
	for _, c := range faults {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFaultFS(t)
			p := openT(t, "/d", faultOptions(f))
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 7, Name: "a", Input: "x"}))
			w, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags())
			if err != nil || w == nil {
				t.Fatal(w, err)
			}
			if c.fill {
				fillSegment(t, p, f)
			}
			ack := workAck(ctx, w.LockToken, 7)
			before := visibleState(t, p, f)

			f.arm(c.op, c.match(p), c.inject)
			err = ack(p)
			hit := f.disarm()
			wantFaultHit(t, err, c.want, hit)
			if after := visibleState(t, p, f); after != before {
				t.Errorf("a failed work ack changed what is visible:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			noStagedOrTemp(t, p, f)
			if again, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags()); err != nil || again != nil {
				t.Fatalf("fetch after a failed work ack = %+v, %v; want nothing (the lock stays)", again, err)
			}

			mustNoErr(t, ack(p))
			wantWorkAcked(t, p, 7)
			mustNoErr(t, p.Close())
			wantWorkAcked(t, openT(t, "/d", faultOptions(f)), 7)
		})
	}
}

// workAck returns the ack of a fetched work item of "wi" with its completion.
func workAck(ctx context.Context, token string, id uint64) func(p *FSProvider) error {
	return func(p *FSProvider) error {
		return p.AckWorkItem(ctx, token, ActivityCompleted{Instance: "wi", ExecutionID: 1, ID: id, Result: "r"})
	}
}

// wantWorkAcked checks that the work acks of the given activities are
// applied exactly once each, and nothing else is queued or claimed.
func wantWorkAcked(t *testing.T, p *FSProvider, ids ...uint64) {
	t.Helper()
	var got []string
	orch, _ := allQueued(p.orchQ)
	for _, e := range orch {
		m, err := p.orchQ.Get(e.Name)
		mustNoErr(t, err)
		w, err := UnmarshalWorkItem(m.Payload)
		mustNoErr(t, err)
		got = append(got, fmt.Sprint(w.(ActivityCompleted).ID))
	}
	slices.Sort(got)
	var want []string
	for _, id := range ids {
		want = append(want, fmt.Sprint(id))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("completions queued for activities %v, want %v once each", got, want)
	}
	if work, _ := p.workQ.List(); len(work) != 0 {
		t.Errorf("worker queue after the acks: %+v, want empty", work)
	}
	if claims, _ := p.workQ.Claims(); len(claims) != 0 {
		t.Errorf("claims left after the acks: %v", claims)
	}
}

// TestAckSyncFailurePoisons: the log's fdatasync fails (a writeback error:
// the kernel may have dropped the dirty pages) at the commit point of an
// orchestration ack and of a work ack. The ack fails with ErrSyncFailed and
// so does every later ack, in this provider and in another one on the same
// directory (which learns it from the log's poison mark), and nobody can
// open the directory while they have it open. Once both closed, the next
// Open has the directory alone and replays the log: the records appended
// before and after the failure are applied exactly once (their bytes were
// in the log, which the replay rewrites and makes durable, power loss
// included), and the log accepts commits again.
func TestAckSyncFailurePoisons(t *testing.T) {
	ctx := context.Background()
	type turn struct {
		ack  func(p *FSProvider) error
		inst string // orchestration turns: the instance
		act  uint64 // work acks: the activity id
	}
	cases := []struct {
		name string
		// setup prepares two fetched turns: the one whose sync fails
		// (fetched by p) and another one (fetched by q).
		setup func(t *testing.T, p, q *FSProvider) (failing, other turn)
		// applied checks that every turn in turns was applied exactly once.
		applied func(t *testing.T, p *FSProvider, turns ...turn)
		// pending reports whether the turn is still pending (not applied).
		pending func(t *testing.T, p *FSProvider, tr turn) bool
	}{
		{
			name: "orchestration ack",
			setup: func(t *testing.T, p, q *FSProvider) (turn, turn) {
				var turns []turn
				for _, inst := range []string{"io", "io2"} {
					createInstance(t, p, inst)
					mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "e", Data: "1"}, 0))
					fetcher := map[string]*FSProvider{"io": p, "io2": q}[inst]
					it, err := fetcher.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
					if err != nil || it == nil || it.Item.Instance != inst {
						t.Fatal(it, err)
					}
					ev := started(inst)
					ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
					out := []WorkItem{ExternalRaised{Instance: "out-" + inst, Name: "x", Data: "y"}}
					token := it.LockToken
					turns = append(turns, turn{inst: inst, ack: func(p *FSProvider) error {
						return p.AckOrchestrationItem(ctx, token, 1, []Event{ev}, nil, out, ExecutionMetadata{}, nil)
					}})
				}
				return turns[0], turns[1]
			},
			applied: func(t *testing.T, p *FSProvider, turns ...turn) {
				var want []string
				for _, tr := range turns {
					if h, err := p.Read(ctx, tr.inst); err != nil || len(h) != 2 {
						t.Errorf("history of %s has %d events (%v), want 2", tr.inst, len(h), err)
					}
					if m := leaseMark(t, p, tr.inst); m != nil {
						t.Errorf("the lease of %s still marks %+v", tr.inst, m)
					}
					want = append(want, "out-"+tr.inst)
				}
				var got []string
				orch, _ := allQueued(p.orchQ)
				for _, e := range orch {
					got = append(got, e.Attrs[attrInstance])
				}
				slices.Sort(got)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("orchestrator queue holds messages for %v, want %v (the outbound ones, once each)", got, want)
				}
			},
			pending: func(t *testing.T, p *FSProvider, tr turn) bool {
				h, err := p.Read(ctx, tr.inst)
				mustNoErr(t, err)
				return len(h) == 1
			},
		},
		{
			name: "work ack",
			setup: func(t *testing.T, p, q *FSProvider) (turn, turn) {
				var turns []turn
				for _, id := range []uint64{7, 8} {
					mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: id, Name: "a", Input: "x"}))
					fetcher := map[uint64]*FSProvider{7: p, 8: q}[id]
					w, err := fetcher.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags())
					if err != nil || w == nil || w.Item.(ActivityExecute).ID != id {
						t.Fatal(w, err)
					}
					turns = append(turns, turn{act: id, ack: workAck(ctx, w.LockToken, id)})
				}
				return turns[0], turns[1]
			},
			applied: func(t *testing.T, p *FSProvider, turns ...turn) {
				var ids []uint64
				for _, tr := range turns {
					ids = append(ids, tr.act)
				}
				wantWorkAcked(t, p, ids...)
			},
			pending: func(t *testing.T, p *FSProvider, tr turn) bool {
				orch, _ := p.orchQ.List()
				return len(orch) == 0
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFS(t)
			opts := faultOptions(f)
			// Segments larger than the test's records: the failing sync is
			// the sync of the ack's own record, not of a new segment's
			// zeros (which would fail the ack before its record exists).
			opts.SegmentSize = 64 << 10
			p := openT(t, "/d", opts)
			q := openT(t, "/d", opts) // another process using the directory
			failing, other := c.setup(t, p, q)

			f.arm("sync", isSegment, func(m *vfs.MemFS) { m.InjectWritebackError(1) })
			err := failing.ack(p)
			hit := f.disarm()
			if hit == "" {
				t.Fatal("the ack never synced the log")
			}
			if !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) || !IsRetryable(err) {
				t.Fatalf("ack whose log sync failed = %v; want a retryable error wrapping ErrSyncFailed and EIO", err)
			}
			if _, err := f.Stat("/d/wal/POISONED"); err != nil {
				t.Errorf("no poison mark: %v", err)
			}
			if !c.pending(t, p, failing) {
				t.Error("the ack whose sync failed was applied")
			}
			// Every later ack fails: the other provider's own first (its
			// log handle knows of no failure: it appends, syncs, then finds
			// the poison mark), then the same ack again, here and there.
			for _, a := range []struct {
				what string
				p    *FSProvider
				tr   turn
			}{{"another ack in another provider", q, other}, {"the same ack again", p, failing}, {"the same ack in another provider", q, failing}} {
				if err := a.tr.ack(a.p); !errors.Is(err, ErrSyncFailed) {
					t.Errorf("%s after the sync failure = %v; want ErrSyncFailed", a.what, err)
				}
			}
			if !c.pending(t, q, failing) || !c.pending(t, q, other) {
				t.Error("an ack was applied after the sync failure")
			}
			// Nobody joins a poisoned directory.
			if r, err := Open("/d", opts); !errors.Is(err, ErrSyncFailed) {
				if r != nil {
					r.Close()
				}
				t.Fatalf("Open of a poisoned directory in use = %v, want ErrSyncFailed", err)
			}

			// Every provider closes; the next one has the directory alone
			// and replays the log. Both acks had appended their records
			// (the other one before its sync, after which it saw the
			// poison mark), so both turns are applied, once: a failed ack
			// whose record is in the log may have happened, as after a
			// timeout.
			mustNoErr(t, p.Close())
			mustNoErr(t, q.Close())
			r := openT(t, "/d", opts)
			if got := r.RecoveryStats().RecordsReplayed; got == 0 {
				t.Error("the reopen replayed no record")
			}
			if _, err := f.Stat("/d/wal/POISONED"); !vfs.IsNotExist(err) {
				t.Errorf("poison mark after the replay: %v", err)
			}
			c.applied(t, r, failing, other)
			noPendingState(t, r)
			// The replay made it durable: a power loss right now keeps it.
			crashed := faultOptions(&faultFS{MemFS: f.CrashClone()})
			crashed.SegmentSize = opts.SegmentSize
			c.applied(t, openT(t, "/d", crashed), failing, other)
			// And the log accepts commits again.
			mustNoErr(t, r.EnqueueForWorker(ctx, ActivityExecute{Instance: "wi", ExecutionID: 1, ID: 9, Name: "a", Input: "x"}))
			w, err := r.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags())
			if err != nil || w == nil {
				t.Fatal(w, err)
			}
			mustNoErr(t, r.AckWorkItem(ctx, w.LockToken, nil))
		})
	}
}

// TestCheckpointOpenFailureIsNotPoison: a checkpoint that cannot open a file
// or directory it must fsync (EMFILE) fails and stays where it is, and
// poisons nothing: no fsync reported an error, so no page can have been
// marked clean unwritten. Acks go on, and the next checkpoint syncs the same
// records and moves past them. A failed fsync itself still poisons
// (TestPowerLossWritebackError and the cases below it).
func TestCheckpointOpenFailureIsNotPoison(t *testing.T) {
	ctx := context.Background()
	isHistory := func(path string) bool { return filepath.Base(path) == "history.jsonl" }
	isInstDir := func(path string) bool { return filepath.Base(filepath.Dir(path)) == "instances" }
	cases := []struct {
		name   string
		op     string
		match  func(string) bool
		inject func(f *faultFS) func(*vfs.MemFS)
	}{
		{"file open", "open", isHistory, func(*faultFS) func(*vfs.MemFS) { return failWith("open", syscall.EMFILE) }},
		{"directory open", "syncdir", isInstDir, func(f *faultFS) func(*vfs.MemFS) {
			return func(*vfs.MemFS) { f.dirOpen = syscall.EMFILE } // under f.mu (before)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFaultFS(t)
			p := openT(t, "/d", faultOptions(f))
			createInstance(t, p, "a")
			before, err := p.wal.Checkpoint()
			mustNoErr(t, err)
			f.arm(c.op, c.match, c.inject(f))
			err = p.checkpointOnce(ctx, true, true)
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("checkpoint = %v; want its open's EMFILE", err)
			}
			if err := p.wal.CheckShared(); err != nil {
				t.Fatalf("an open failure poisoned the directory: %v", err)
			}
			if cp, _ := p.wal.Checkpoint(); cp != before {
				t.Fatalf("the checkpoint moved from %v to %v past records it did not sync", before, cp)
			}
			f.disarm()
			createInstance(t, p, "b")
			mustNoErr(t, p.checkpointOnce(ctx, true, true))
			if cp, _ := p.wal.Checkpoint(); cp <= before {
				t.Fatalf("the next checkpoint did not move (%v)", cp)
			}
		})
	}
}
