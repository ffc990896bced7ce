//go:build unix

package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestReclaimChurn (issue 17, item 2): three processes create and delete
// instances - the same few ids over and over, so that fetches, acks and
// deletions of one id's successive instances race across processes - while
// other work goes on: a stream of instances that are not deleted, each
// running an activity before it completes. Every process fetches and acks
// whatever turn comes; each creates and deletes the instances of its own
// ids, each instance once completed (half of them with a
// sub-orchestration, deleted with it, so tree queries and the orphan check
// run too). Afterwards every instance that was started was acked exactly
// once (nothing lost, nothing delivered twice), instances/ holds exactly
// the instances that were not deleted, the children index is empty, and
// fsck finds nothing.
//
// The number of instances created and deleted (roots and children) is 600
// by default, about 100,000 with DUROFS_RECLAIM_CHURN=100000 (the issue's
// size: 9 minutes on a loaded 2-vCPU VM in ProcessCrashSafe mode,
// -run TestReclaimChurn/process_crash_safe). Both durability modes.
func TestReclaimChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process tests skipped in -short mode")
	}
	total := 600
	if s := os.Getenv("DUROFS_RECLAIM_CHURN"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 6 {
			t.Fatalf("DUROFS_RECLAIM_CHURN=%q: want a number >= 6", s)
		}
		total = n
	}
	multiprocessModes(t, func(t *testing.T, env []string, opts Options) { reclaimChurn(t, total, env, opts) })
}

func reclaimChurn(t *testing.T, total int, env []string, opts Options) {
	const procs = 3
	// Roots: an odd incarnation has a child, so 3 instances per 2 roots.
	roots := (total*2/3 + procs - 1) / procs
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, opts)
	var hs []*helper
	for range procs {
		// Polls of other processes' work every 25 ms, sweeps every second:
		// idle polling is most of what three busy processes spend.
		hs = append(hs, startHelper(t, dir, append(env, "DUROFS_HELPER_POLL_MS=25", "DUROFS_HELPER_SWEEP_MS=1000")...))
	}
	for _, h := range hs {
		h.must(t, helperCmd{Op: "serve"})
	}
	// The other work: an instance every 50 ms, never deleted.
	stopBG := make(chan struct{})
	var bgWG sync.WaitGroup
	var others []string
	bgWG.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopBG:
				return
			case <-time.After(50 * time.Millisecond):
			}
			id := fmt.Sprintf("bg-%d", i)
			if err := p.EnqueueForOrchestrator(ctx, startItem(id), 0); err != nil {
				t.Errorf("start %s: %v", id, err)
				return
			}
			others = append(others, id)
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	churned := make([]helperReply, procs)
	for i, h := range hs {
		wg.Go(func() {
			r, ok := h.do(helperCmd{Op: "churn", Instance: fmt.Sprintf("c%d-", i), Count: roots})
			if !ok || !r.OK {
				t.Errorf("churn of helper %d: %v %s", i, ok, r.Err)
			}
			churned[i] = r
		})
	}
	wg.Wait()
	close(stopBG)
	bgWG.Wait()
	elapsed := time.Since(start)
	// Let the other work finish.
	for deadline, idle := time.Now().Add(2*time.Minute), 0; idle < 3; {
		d, err := p.GetQueueDepths(ctx)
		mustNoErr(t, err)
		if d.OrchestratorQueue+d.WorkerQueue == 0 {
			idle++
		} else {
			idle = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other work did not finish: %+v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
	acked := map[string]int{}
	turns := 0
	for i, h := range hs {
		r := h.must(t, helperCmd{Op: "unserve"})
		for _, it := range r.Items {
			acked[it]++
		}
		turns += r.N
		t.Logf("helper %d: created and deleted %d instances, acked %d turns", i, len(churned[i].Items), r.N)
	}
	if t.Failed() {
		return
	}

	// Nothing lost, nothing delivered twice.
	created := 0
	for _, r := range churned {
		for _, it := range r.Items {
			created++
			if n := acked[it]; n != 1 {
				t.Errorf("start %s acked %d times, want once", it, n)
			}
			delete(acked, it)
		}
	}
	for _, id := range others {
		if n := acked[id+"|{}"]; n != 1 {
			t.Errorf("start of %s acked %d times, want once", id, n)
		}
		delete(acked, id+"|{}")
	}
	for it := range acked {
		t.Errorf("start %s acked but never created", it)
	}

	// instances/ holds exactly the instances not deleted, all completed;
	// the index is empty.
	entries, err := os.ReadDir(filepath.Join(dir, "instances"))
	mustNoErr(t, err)
	var got, want []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	for _, id := range others {
		want = append(want, instanceKey(id))
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		var extra []string
		for _, k := range got {
			if _, found := slices.BinarySearch(want, k); !found {
				extra = append(extra, k)
			}
		}
		t.Errorf("instances/ holds %d directories, want the %d instances not deleted; of deleted ones: %v", len(got), len(want), extra[:min(len(extra), 20)])
	}
	if done, err := p.ListInstancesByStatus(ctx, "Completed"); err != nil || len(done) != len(others) {
		t.Errorf("%d instances completed (%v), want the %d not deleted", len(done), err, len(others))
	}
	if kids, err := os.ReadDir(filepath.Join(dir, "children")); err != nil || len(kids) > 0 {
		t.Errorf("children/ after every tree was deleted: %d entries, %v", len(kids), err)
	}
	for _, h := range hs {
		_ = h.in.Close()
		_ = h.cmd.Wait()
	}
	mustNoErr(t, p.Close())
	rep := fsckT(t, dir, false)
	if rem := rep.Remaining(); len(rem) > 0 {
		t.Errorf("fsck after the churn: %d findings, the first: %+v", len(rem), rem[:min(len(rem), 3)])
	}
	t.Logf("reclaim churn: %d processes created and deleted %d instances (%d roots with %d children) in %v while %d other instances ran (%d turns in all); instances/ holds %d directories, those of the others",
		procs, created, procs*roots, created-procs*roots, elapsed.Round(time.Millisecond), len(others), turns, len(got))
}

// churnServer is a helper process's background service for TestReclaimChurn:
// it fetches and acks every orchestration turn and work item there is.
type churnServer struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked []string // "<instance>|<input>" of every start acked
	turns int
	err   error
}

var churnSrv *churnServer

// churnServe starts the background service ("serve").
func churnServe(p *FSProvider) helperReply {
	s := &churnServer{stop: make(chan struct{})}
	churnSrv = s
	s.wg.Go(func() { s.turnLoop(p) })
	s.wg.Go(func() { s.workLoop(p) })
	return helperReply{OK: true}
}

// churnUnserve stops it and reports what it acked ("unserve").
func churnUnserve() helperReply {
	s := churnSrv
	close(s.stop)
	s.wg.Wait()
	if s.err != nil {
		return replyErr(s.err)
	}
	return helperReply{OK: true, Items: s.acked, N: s.turns}
}

func (s *churnServer) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *churnServer) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// turnLoop acks each turn: a start completes its instance at once (a
// child names its parent; a root's odd incarnation starts a child "/c"
// first), except the other work's ("bg-"), which schedules an activity and
// completes when it is done.
func (s *churnServer) turnLoop(p *FSProvider) {
	ctx := context.Background()
	for !s.stopped() {
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 100*time.Millisecond, nil)
		if err != nil {
			if IsRetryable(err) {
				continue
			}
			s.fail(err)
			return
		}
		if it == nil {
			continue
		}
		inst, ex := it.Item.Instance, it.Item.ExecutionID
		next := uint64(len(it.Item.History)) + 1
		var delta []Event
		var work, orch []WorkItem
		md := md("TestOrch", "1.0.0")
		var starts []string
		for _, m := range it.Item.Messages {
			switch m := m.(type) {
			case StartOrchestration:
				delta = append(delta, Event{EventID: next, InstanceID: inst, ExecutionID: ex, DuroxideVersion: "0.1.26",
					Kind: OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: m.Input}})
				next++
				starts = append(starts, inst+"|"+m.Input)
				if strings.HasPrefix(inst, "bg-") {
					// The other work: an activity first.
					work = append(work, ActivityExecute{Instance: inst, ExecutionID: ex, ID: next, Name: "A", Input: "{}"})
					next++
					continue
				}
				if parent, ok := strings.CutSuffix(inst, "/c"); ok {
					md.ParentInstanceID = &parent
				} else if n, _ := strconv.Atoi(m.Input); n%2 == 1 {
					v := "1.0.0"
					orch = append(orch, StartOrchestration{Instance: inst + "/c", Orchestration: "TestOrch", Input: m.Input, Version: &v,
						ParentInstance: &inst, ParentID: &next, ExecutionID: 1})
				}
				st, out := "Completed", m.Input
				md.Status, md.Output = &st, &out
				delta = append(delta, Event{EventID: next, InstanceID: inst, ExecutionID: ex, DuroxideVersion: "0.1.26",
					Kind: OrchestrationCompleted{Output: out}})
				next++
			case ActivityCompleted:
				// The other work's activity is done: so is the instance.
				delta = append(delta, Event{EventID: next, InstanceID: inst, ExecutionID: ex, DuroxideVersion: "0.1.26",
					Kind: ActivityCompletedEvent{Result: m.Result}})
				next++
				st, out := "Completed", m.Result
				md.Status, md.Output = &st, &out
				delta = append(delta, Event{EventID: next, InstanceID: inst, ExecutionID: ex, DuroxideVersion: "0.1.26",
					Kind: OrchestrationCompleted{Output: out}})
				next++
			default:
				s.fail(fmt.Errorf("unexpected %s for %s", m.Kind(), inst))
				return
			}
		}
		if err := p.AckOrchestrationItem(ctx, it.LockToken, ex, delta, work, orch, md, nil); err != nil {
			s.fail(fmt.Errorf("ack %s: %w", inst, err))
			return
		}
		s.mu.Lock()
		s.acked = append(s.acked, starts...)
		s.turns++
		s.mu.Unlock()
	}
}

// workLoop completes activities.
func (s *churnServer) workLoop(p *FSProvider) {
	ctx := context.Background()
	for !s.stopped() {
		it, err := p.FetchWorkItem(ctx, 30*time.Second, 100*time.Millisecond, nil, DefaultOnlyTags())
		if err != nil {
			if IsRetryable(err) {
				continue
			}
			s.fail(err)
			return
		}
		if it == nil {
			continue
		}
		ae := it.Item.(ActivityExecute)
		err = p.AckWorkItem(ctx, it.LockToken, ActivityCompleted{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID, Result: "ok"})
		if err != nil && !errors.Is(err, ErrInvalidLockToken) {
			s.fail(err)
			return
		}
	}
}

// churnIDs is how many ids each helper cycles its instances through: few,
// so that each id is created and deleted again and again.
const churnIDs = 16

// churn creates roots instances over the ids prefix0..prefix15, one
// incarnation of an id after the other: it enqueues its start (input n, the
// incarnation), waits until it (and its child, if any) completed, deletes
// it (DeleteInstance, not forced), and starts the next. It reports every
// start it enqueued, "<instance>|<n>" ("churn").
func churn(p *FSProvider, prefix string, roots int) helperReply {
	ctx := context.Background()
	type slot struct {
		id      string
		n       int
		started bool
	}
	slots := make([]*slot, churnIDs)
	for i := range slots {
		slots[i] = &slot{id: prefix + strconv.Itoa(i)}
	}
	var created []string
	begun, deadline := 0, time.Now().Add(time.Hour)
	for {
		progress, busy := false, false
		for _, s := range slots {
			if !s.started {
				if begun == roots {
					continue
				}
				v := "1.0.0"
				in := strconv.Itoa(s.n)
				if err := p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: s.id, Orchestration: "TestOrch", Input: in, Version: &v, ExecutionID: 1}, 0); err != nil {
					return replyErr(err)
				}
				created = append(created, s.id+"|"+in)
				if s.n%2 == 1 {
					created = append(created, s.id+"/c|"+in)
				}
				// Busy: the loop must come back for it (wait, delete) even if
				// this start was the last one and every other slot is idle.
				s.started, begun, progress, busy = true, begun+1, true, true
				continue
			}
			busy = true
			done, err := churnDone(ctx, p, s.id, strconv.Itoa(s.n), s.n%2 == 1)
			if err != nil {
				return replyErr(err)
			}
			if !done {
				continue
			}
			res, err := p.DeleteInstance(ctx, s.id, false)
			if errors.Is(err, ErrInstanceRunning) || (err != nil && IsRetryable(err)) {
				continue
			}
			want := uint64(1 + s.n%2)
			if err != nil || res.InstancesDeleted != want {
				return replyErr(fmt.Errorf("delete %s (incarnation %d): %+v %v, want %d instances deleted", s.id, s.n, res, err, want))
			}
			s.n++
			s.started, progress = false, true
		}
		if !busy && begun == roots {
			return helperReply{OK: true, Items: created}
		}
		if time.Now().After(deadline) {
			return replyErr(fmt.Errorf("churn %s: no end after an hour (%d of %d begun)", prefix, begun, roots))
		}
		if !progress {
			time.Sleep(5 * time.Millisecond) // the others' turns need the CPU more than this loop
		}
	}
}

// churnDone reports whether instance id completed its incarnation in (and
// its child too, if it has one).
func churnDone(ctx context.Context, p *FSProvider, id, in string, child bool) (bool, error) {
	ids := []string{id}
	if child {
		ids = append(ids, id+"/c")
	}
	for _, x := range ids {
		info, err := p.GetInstanceInfo(ctx, x)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if info.Status != "Completed" {
			return false, nil
		}
		if info.Output == nil || *info.Output != in {
			return false, fmt.Errorf("instance %s completed with output %v, want %s: an older instance of the id", x, info.Output, in)
		}
	}
	if child {
		kids, err := p.ListChildren(ctx, id)
		if err != nil {
			return false, err
		}
		if !slices.Equal(kids, []string{id + "/c"}) {
			return false, fmt.Errorf("children of %s = %v, want [%s/c]", id, kids, id)
		}
	}
	return true, nil
}

// TestInstanceLockReclaimedWhileWaiting: lock-then-verify in the provider.
// A renew (which locks only an existing instance) and an append (which may
// create one) wait for the flock of an instance that another process (here
// a raw flock, as another process's would be) deletes, reclaiming its lock
// file, and then creates anew, holding the new lock file. Both got the
// flock of the removed lock file; neither may proceed on it beside the new
// holder: the renew finds its instance gone (invalid token), the append
// waits for the lock file the path names now.
func TestInstanceLockReclaimedWhileWaiting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	createInstance(t, p, "x")
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "x", Name: "e", Data: "d"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	key := instanceKey("x")
	leaseBytes, err := os.ReadFile(p.leasePath(key))
	mustNoErr(t, err)
	old := rawFlock(t, p.lockPath(key))
	renewed, appended := make(chan error, 1), make(chan error, 1)
	go func() { renewed <- p.RenewOrchestrationItemLock(ctx, it.LockToken, time.Minute) }()
	go func() {
		ev := Event{EventID: 1, InstanceID: "x", ExecutionID: 1, DuroxideVersion: "0.1.26", Kind: ExternalEvent{Name: "a", Data: "d"}}
		appended <- p.AppendWithExecution(ctx, "x", 1, []Event{ev})
	}()
	time.Sleep(50 * time.Millisecond) // both opened the lock file and poll its flock (one in the in-process queue)

	// The other process reclaims x and creates it anew (with a lease that
	// the renew's token would match), holding the new lock file.
	mustNoErr(t, os.RemoveAll(filepath.Join(p.instDir(key), "executions")))
	for _, f := range []string{p.instFilePath(key), p.leasePath(key), p.lockPath(key)} {
		mustNoErr(t, os.Remove(f))
	}
	mustNoErr(t, os.Remove(p.instDir(key)))
	mustNoErr(t, os.Mkdir(p.instDir(key), 0o700))
	nw := rawFlock(t, p.lockPath(key))
	mustNoErr(t, os.WriteFile(p.leasePath(key), leaseBytes, 0o600))
	mustNoErr(t, syscall.Flock(int(old.Fd()), syscall.LOCK_UN))
	held := time.After(300 * time.Millisecond)
	for waiting := 2; waiting > 0; {
		select {
		case err := <-renewed:
			if !errors.Is(err, ErrInvalidLockToken) {
				t.Fatalf("the renew proceeded (%v) on the removed lock file while another process holds the instance", err)
			}
			renewed = nil
			waiting--
		case err := <-appended:
			t.Fatalf("the append proceeded (%v) on the removed lock file while another process holds the instance", err)
		case <-held:
			waiting = 0
		}
	}
	mustNoErr(t, syscall.Flock(int(nw.Fd()), syscall.LOCK_UN))
	if err := <-appended; err != nil {
		t.Fatalf("append once the new lock file was free: %v", err)
	}
}

// rawFlock opens name and takes an exclusive flock on it, as another
// process would (not through this process's lock table).
func rawFlock(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o600)
	mustNoErr(t, err)
	t.Cleanup(func() { f.Close() })
	mustNoErr(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	return f
}
