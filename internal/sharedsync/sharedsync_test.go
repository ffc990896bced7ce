//go:build unix

package sharedsync

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// barrierLog is a fake barrier shared by several Coordinators (as if they
// were processes): a logical clock orders barrier starts and ends against
// Sync calls, so the test can check what each successful Sync was owed.
type barrierLog struct {
	clock atomic.Uint64
	mu    sync.Mutex
	runs  []run
	delay time.Duration
}

type run struct {
	ticket     uint64
	start, end uint64
	ok         bool
}

func (l *barrierLog) barrier(c **Coordinator, fail *atomic.Bool) func() error {
	return func() error {
		start := l.clock.Add(1)
		time.Sleep(l.delay)
		ok := fail == nil || !fail.Load()
		end := l.clock.Add(1)
		l.mu.Lock()
		l.runs = append(l.runs, run{ticket: (*c).ticket, start: start, end: end, ok: ok})
		l.mu.Unlock()
		if !ok {
			return errors.New("injected barrier failure")
		}
		return nil
	}
}

// served reports whether a successful barrier trusted by ticket started
// after call and ended before ret.
func (l *barrierLog) served(ticket, call, ret uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.runs {
		if r.ok && r.ticket <= ticket && r.start > call && r.end < ret {
			return true
		}
	}
	return false
}

func openN(t *testing.T, path string, n int, l *barrierLog) []*Coordinator {
	t.Helper()
	cs := make([]*Coordinator, n)
	for i := range cs {
		c, err := Open(path, 0o600, l.barrier(&cs[i], nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	return cs
}

// TestSyncIsServedByATrustedLaterBarrier hammers one shared file from
// several Coordinators (each with its own descriptor, flock and mapping,
// as separate processes have) and checks every successful Sync against the
// barrier log: some successful barrier, run by a process with an older or
// equal ticket, started after the call and ended before the return. How
// many Syncs another process's barrier answered depends on scheduling, so
// it is only logged; TestSyncSharesAnotherProcessBarrier makes it happen.
func TestSyncIsServedByATrustedLaterBarrier(t *testing.T) {
	for _, tc := range []struct {
		name    string
		coords  int
		callers int // goroutines per Coordinator
		calls   int
	}{
		{"2 processes", 2, 1, 200},
		{"4 processes x 2 callers", 4, 2, 100},
		{"8 processes", 8, 1, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &barrierLog{delay: 200 * time.Microsecond}
			cs := openN(t, filepath.Join(t.TempDir(), "sync.shm"), tc.coords, l)
			var wg sync.WaitGroup
			var bad atomic.Int64
			for _, c := range cs {
				for range tc.callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range tc.calls {
							call := l.clock.Add(1)
							if err := c.Sync(); err != nil {
								t.Error(err)
								return
							}
							ret := l.clock.Add(1)
							if !l.served(c.ticket, call, ret) {
								bad.Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			if n := bad.Load(); n > 0 {
				t.Fatalf("%d Syncs returned without a trusted barrier started after the call", n)
			}
			var ran, shared uint64
			for _, c := range cs {
				r, s := c.Stats()
				ran += r
				shared += s
			}
			calls := uint64(tc.coords * tc.callers * tc.calls)
			t.Logf("%d Syncs: %d barriers run, %d answered by another process's barrier", calls, ran, shared)
			if ran+shared != calls {
				t.Fatalf("ran %d + shared %d != calls %d", ran, shared, calls)
			}
		})
	}
}

// TestSyncSharesAnotherProcessBarrier: a Sync whose needed barrier another
// process starts and completes meanwhile returns without running its own
// (group commit across processes), and one whose needed barrier nobody
// runs runs it.
func TestSyncSharesAnotherProcessBarrier(t *testing.T) {
	for _, tc := range []struct {
		name       string
		otherSyncs bool // the other process syncs while ours waits
		wantRan    uint64
		wantShared uint64
	}{
		{"another process's barrier answers", true, 0, 1},
		{"nobody else syncs", false, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &barrierLog{}
			cs := openN(t, filepath.Join(t.TempDir(), "sync.shm"), 2, l)
			a, b := cs[0], cs[1]
			if tc.otherSyncs {
				b.testHookTarget = func() {
					if err := a.Sync(); err != nil {
						t.Error(err)
					}
				}
			}
			call := l.clock.Add(1)
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			if !l.served(b.ticket, call, l.clock.Add(1)) {
				t.Fatal("Sync returned without a trusted barrier started after the call")
			}
			if ran, shared := b.Stats(); ran != tc.wantRan || shared != tc.wantShared {
				t.Fatalf("Stats = ran %d, shared %d; want ran %d, shared %d", ran, shared, tc.wantRan, tc.wantShared)
			}
		})
	}
}

// TestTrustFollowsTickets: a barrier run by a newer process (higher
// ticket) does not serve an older one; one run by an older process serves
// a newer one.
func TestTrustFollowsTickets(t *testing.T) {
	l := &barrierLog{}
	cs := openN(t, filepath.Join(t.TempDir(), "sync.shm"), 2, l)
	old, young := cs[0], cs[1]
	if old.ticket >= young.ticket {
		t.Fatalf("tickets %d, %d: want increasing in open order", old.ticket, young.ticket)
	}
	for _, tc := range []struct {
		name      string
		leader    *Coordinator
		reader    *Coordinator
		wantTrust bool
	}{
		{"older leader serves newer", old, young, true},
		{"newer leader does not serve older", young, old, false},
		{"own barrier serves itself", old, old, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.leader.load(offStarted) + 1
			if err := tc.leader.Sync(); err != nil {
				t.Fatal(err)
			}
			if got := tc.reader.covered(target); got != tc.wantTrust {
				t.Fatalf("covered(%d) = %v, want %v", target, got, tc.wantTrust)
			}
		})
	}
}

// TestFailureStopsEveryProcess: a failed barrier fails the leader's Sync
// with its error and every other Coordinator's next Sync with ErrFailed;
// one opened afterwards is not affected.
func TestFailureStopsEveryProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync.shm")
	l := &barrierLog{}
	var fail atomic.Bool
	var a, b *Coordinator
	a, err := Open(path, 0o600, l.barrier(&a, &fail))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err = Open(path, 0o600, l.barrier(&b, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fail.Store(true)
	if err := a.Sync(); err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("leader's Sync = %v, want the barrier's own error", err)
	}
	if err := b.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("other process's Sync = %v, want ErrFailed", err)
	}
	fail.Store(false)
	var c *Coordinator
	c, err = Open(path, 0o600, l.barrier(&c, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Sync(); err != nil {
		t.Fatalf("Sync of a process opened after the failure = %v", err)
	}
}

// TestDeadLeaderAndDamage: a leader killed mid-barrier (started bumped,
// seqlock left odd) and damaged counters never make a Sync return without
// a barrier of its own; damage is repaired.
func TestDeadLeaderAndDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(c *Coordinator)
	}{
		{"killed after starting", func(c *Coordinator) { c.store(offStarted, c.load(offStarted)+1) }},
		{"killed while publishing", func(c *Coordinator) {
			c.store(offVersion, c.load(offVersion)|1)
			c.store(offDone, c.load(offStarted)+5)
		}},
		{"done beyond started", func(c *Coordinator) { c.store(offDone, c.load(offStarted)+100) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &barrierLog{}
			cs := openN(t, filepath.Join(t.TempDir(), "sync.shm"), 1, l)
			c := cs[0]
			if err := c.Sync(); err != nil {
				t.Fatal(err)
			}
			tc.damage(c)
			for i := range 3 {
				before, _ := c.Stats()
				call := l.clock.Add(1)
				if err := c.Sync(); err != nil {
					t.Fatal(err)
				}
				after, _ := c.Stats()
				if after != before+1 || !l.served(c.ticket, call, l.clock.Add(1)) {
					t.Fatalf("Sync %d after damage did not run a barrier of its own", i)
				}
			}
			if v := c.load(offVersion); v&1 != 0 {
				t.Fatalf("seqlock version %d still odd", v)
			}
		})
	}
}

// TestOpenRepairsOrRefuses: a file of the wrong size or without the magic
// number is reinitialised; a symbolic link is not followed.
func TestOpenRepairsOrRefuses(t *testing.T) {
	dir := t.TempDir()
	l := &barrierLog{}
	garbage := filepath.Join(dir, "garbage.shm")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("\xff", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	var c *Coordinator
	c, err := Open(garbage, 0o600, l.barrier(&c, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.load(offMagic) != magic || c.load(offStarted) != 0 || c.ticket != 1 {
		t.Fatalf("garbage not reinitialised: magic %x started %d ticket %d", c.load(offMagic), c.load(offStarted), c.ticket)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v, want ErrClosed", err)
	}

	link := filepath.Join(dir, "link.shm")
	if err := os.Symlink(garbage, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link, 0o600, func() error { return nil }); err == nil {
		t.Fatal("Open followed a symbolic link")
	}
}

// TestProcessesShareBarriers runs the real thing: three processes (re-execs
// of this test binary) call Sync with syncfs(2) as the barrier on one
// shared file; together they must have shared some barriers.
func TestProcessesShareBarriers(t *testing.T) {
	if os.Getenv("SHAREDSYNC_CHILD") != "" {
		childMain()
		return
	}
	if testing.Short() {
		t.Skip("multi-process test")
	}
	path := filepath.Join(t.TempDir(), "sync.shm")
	const procs, calls = 3, 150
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestProcessesShareBarriers$")
			cmd.Env = append(os.Environ(), "SHAREDSYNC_CHILD="+path, "SHAREDSYNC_CALLS="+strconv.Itoa(calls))
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	var ran, shared int
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i])
		}
		var r, s int
		line := string(outs[i])
		idx := strings.Index(line, "STATS ")
		if idx < 0 {
			t.Fatalf("child %d printed no stats:\n%s", i, line)
		}
		if _, err := fmt.Sscan(line[idx+len("STATS "):], &r, &s); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		ran += r
		shared += s
	}
	t.Logf("%d processes x %d Syncs: %d syncfs calls, %d Syncs answered by another process", procs, calls, ran, shared)
	if ran+shared != procs*calls {
		t.Fatalf("ran %d + shared %d != %d", ran, shared, procs*calls)
	}
	if shared == 0 {
		t.Fatal("no barrier was shared between processes")
	}
}

func childMain() {
	path := os.Getenv("SHAREDSYNC_CHILD")
	calls, _ := strconv.Atoi(os.Getenv("SHAREDSYNC_CALLS"))
	dir := filepath.Dir(path)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		panic(err)
	}
	c, err := Open(path, 0o600, func() error { return unix.Syncfs(fd) })
	if err != nil {
		panic(err)
	}
	for i := range calls {
		// Dirty something, as a commit would, then wait for durability.
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(os.Getpid())), []byte(strconv.Itoa(i)), 0o600); err != nil {
			panic(err)
		}
		if err := c.Sync(); err != nil {
			panic(err)
		}
	}
	r, s := c.Stats()
	os.Stdout.WriteString("STATS " + strconv.FormatUint(r, 10) + " " + strconv.FormatUint(s, 10) + "\n")
}
