package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

// TestReclaim: Reclaim removes the lease and lock files under the flock;
// the Guard is dead afterwards; LockExisting reports the resource gone;
// Lock creates a new one from nothing, where no token of the old one holds
// and fences start again from minFence.
func TestReclaim(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old := f.acquire(t, "old", time.Minute)

	g := f.lock(t)
	if err := g.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if !g.Reclaimed() {
		t.Fatal("Reclaimed() = false after Reclaim")
	}
	for _, p := range []string{f.lockPath, f.leasePath} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after Reclaim: %v, want gone", p, err)
		}
	}
	if l, ok, err := g.Read(); ok || err != nil || !equalLease(l, lease.Lease{}) {
		t.Fatalf("Read after Reclaim = %+v %v %v, want nothing", l, ok, err)
	}
	if err := g.Write(lease.Lease{Fence: 7}); !errors.Is(err, lease.ErrGone) {
		t.Fatalf("Write after Reclaim: %v, want ErrGone", err)
	}
	if _, err := g.Acquire("x", time.Minute, 0); !errors.Is(err, lease.ErrGone) {
		t.Fatalf("Acquire after Reclaim: %v, want ErrGone", err)
	}
	if _, err := os.Lstat(f.leasePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a dead Guard wrote the lease file: %v", err)
	}
	if err := g.Reclaim(); err != nil {
		t.Fatalf("second Reclaim: %v", err)
	}
	if err := g.Unlock(); err != nil {
		t.Fatal(err)
	}

	// Looking creates nothing.
	for _, wait := range []bool{false, true} {
		_, _, err := f.s.LockExisting(ctx, f.lockPath, f.leasePath, wait)
		if !errors.Is(err, lease.ErrGone) || !vfs.IsNotExist(err) {
			t.Fatalf("LockExisting(wait %v) of a reclaimed resource: %v, want ErrGone and not-exist", wait, err)
		}
	}
	if _, err := os.Lstat(f.lockPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LockExisting created the lock file: %v", err)
	}

	// A new resource: the old token is refused, the fence starts anew.
	if err := f.s.Release(ctx, f.lockPath, f.leasePath, old.Token); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("Release with the reclaimed resource's token: %v, want ErrNotHolder", err)
	}
	if _, err := f.s.Renew(ctx, f.lockPath, f.leasePath, old.Token, time.Minute); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("Renew with the reclaimed resource's token: %v, want ErrNotHolder", err)
	}
	nl := f.acquire(t, "new", time.Minute)
	if nl.Fence != 1 || nl.Token == old.Token {
		t.Fatalf("new resource's lease %+v: want fence 1 and a new token", nl)
	}
	if err := f.s.Release(ctx, f.lockPath, f.leasePath, old.Token); !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("Release of the new lease with the old token: %v, want ErrNotHolder", err)
	}

	// LockExisting of an existing resource is an ordinary Guard.
	g, ok, err := f.s.LockExisting(ctx, f.lockPath, f.leasePath, false)
	if err != nil || !ok {
		t.Fatalf("LockExisting: %v %v", ok, err)
	}
	if l, _, err := g.Read(); err != nil || l.Token != nl.Token {
		t.Fatalf("Read = %+v %v", l, err)
	}
	if _, ok, err := f.s.LockExisting(ctx, f.lockPath, f.leasePath, false); ok || err != nil {
		t.Fatalf("LockExisting of a held resource: ok %v err %v, want false nil", ok, err)
	}
	g.Unlock()
}

// TestReclaimWaiters: goroutines wait for the flock of a resource whose
// holder reclaims it and removes its directory. Lock waiters get a new
// resource (directory and lock file created anew), one at a time;
// LockExisting waiters get ErrGone or, if a Lock waiter created the new
// resource first, a Guard on it.
func TestReclaimWaiters(t *testing.T) {
	for _, fsName := range []string{"os", "nofollow", "mem"} {
		t.Run(fsName, func(t *testing.T) {
			dir := t.TempDir()
			var fsys vfs.FS
			switch fsName {
			case "os":
				fsys = vfs.OS{}
			case "nofollow":
				fsys = vfs.NoFollow(dir, vfs.Perm{})
			case "mem":
				fsys, dir = vfs.NewStrictMem(), "/d"
			}
			s := lease.NewStore(fsys, clock.NewManual(t0))
			res := filepath.Join(dir, "inst")
			lockPath, leasePath := filepath.Join(res, "lock"), filepath.Join(res, "lease.json")
			ctx := context.Background()
			g, err := s.Lock(ctx, lockPath, leasePath)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Acquire("holder", time.Minute, 0); err != nil {
				t.Fatal(err)
			}
			var inside, most int
			var mu sync.Mutex
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Go(func() {
					var w *lease.Guard
					var err error
					if i%2 == 0 {
						w, err = s.Lock(ctx, lockPath, leasePath)
					} else {
						w, _, err = s.LockExisting(ctx, lockPath, leasePath, true)
						if errors.Is(err, lease.ErrGone) {
							return
						}
					}
					if err != nil {
						errs <- err
						return
					}
					defer w.Unlock()
					mu.Lock()
					inside++
					most = max(most, inside)
					mu.Unlock()
					if l, _, err := w.Read(); err != nil || l.Owner == "holder" {
						errs <- fmt.Errorf("waiter %d reads %+v (%v): the reclaimed lease", i, l, err)
					}
					time.Sleep(time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
				})
			}
			time.Sleep(20 * time.Millisecond)
			if err := g.Reclaim(); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Remove(res); err != nil {
				t.Fatal(err)
			}
			g.Unlock()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if most > 1 {
				t.Errorf("%d waiters held the lock at once", most)
			}
			if _, err := fsys.Lstat(lockPath); err != nil {
				t.Errorf("the Lock waiters created no new lock file: %v", err)
			}
		})
	}
}

// Environment of the reclaim race's helper processes.
const (
	reclaimHelperEnv = "DUROFS_LEASE_RECLAIM_HELPER" // the shared directory
	reclaimRoundsEnv = "DUROFS_LEASE_RECLAIM_ROUNDS"
	reclaimRounds    = 400
)

// TestReclaimRaceProcesses: helper processes lock one resource over and
// over, and a third of the time the holder reclaims it (lease and lock
// file) and removes its directory before unlocking; a quarter of the locks are
// LockExisting, which may find it gone. Inside each critical section a
// process increments a counter file outside the directory by read, pause,
// write: if two processes ever held the lock at once - a waiter proceeding
// on the lock file its holder removed - increments are lost or the file is
// read half written. The counter must end at the number of critical
// sections. The FS is the provider's (vfs.NoFollow), whose waiter keeps
// polling flock on the file it opened.
func TestReclaimRaceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts helper processes")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "counter"), []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*syncBuffer
	for range raceProcesses {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReclaimHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), reclaimHelperEnv+"="+dir, reclaimRoundsEnv+"="+strconv.Itoa(reclaimRounds))
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	sections, gone := 0, 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
		var n, g int
		if _, err := fmt.Sscanf(outs[i].String(), "sections %d gone %d", &n, &g); err != nil {
			t.Fatalf("helper %d said %q", i, outs[i])
		}
		sections, gone = sections+n, gone+g
	}
	b, err := os.ReadFile(filepath.Join(dir, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := strconv.Atoi(string(b)); err != nil || got != sections {
		t.Fatalf("counter %q after %d critical sections: two holders at once", b, sections)
	}
	t.Logf("reclaim race: %d processes, %d critical sections, %d LockExisting found it gone", raceProcesses, sections, gone)
}

// TestReclaimHelper is the child side of TestReclaimRaceProcesses; it does
// nothing unless started by it.
func TestReclaimHelper(t *testing.T) {
	dir := os.Getenv(reclaimHelperEnv)
	if dir == "" {
		return
	}
	rounds, _ := strconv.Atoi(os.Getenv(reclaimRoundsEnv))
	fsys := vfs.NoSync(vfs.NoFollow(dir, vfs.Perm{}))
	s := lease.NewStore(fsys, clock.System{})
	res := filepath.Join(dir, "res")
	lockPath, leasePath := filepath.Join(res, "lock"), filepath.Join(res, "lease.json")
	counter := filepath.Join(dir, "counter")
	ctx := context.Background()
	sections, gone := 0, 0
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for r := range rounds {
		var g *lease.Guard
		var err error
		if r%4 == 3 {
			g, _, err = s.LockExisting(ctx, lockPath, leasePath, true)
			if errors.Is(err, lease.ErrGone) {
				gone++
				continue
			}
		} else {
			g, err = s.Lock(ctx, lockPath, leasePath)
		}
		if err != nil {
			fail(err)
		}
		sections++
		b, err := os.ReadFile(counter)
		if err != nil {
			fail(err)
		}
		n, err := strconv.Atoi(string(b))
		if err != nil {
			fail(fmt.Errorf("counter %q: read while another holder wrote it", b))
		}
		if _, err := g.Acquire("p", time.Minute, 0); err != nil && !errors.Is(err, lease.ErrHeld) {
			fail(err)
		}
		time.Sleep(50 * time.Microsecond)
		if err := os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o600); err != nil {
			fail(err)
		}
		if r%3 == 0 {
			if err := g.Reclaim(); err != nil {
				fail(err)
			}
			// rmdir: a Lock that came after the reclaim may have put a
			// new lock file there already (then it is not empty).
			if err := fsys.Remove(res); err != nil && !vfs.IsNotExist(err) {
				if _, serr := fsys.Lstat(lockPath); serr != nil {
					fail(err)
				}
			}
		} else if err := g.Write(lease.Lease{}); err != nil {
			fail(err)
		}
		if err := g.Unlock(); err != nil {
			fail(err)
		}
	}
	fmt.Printf("sections %d gone %d\n", sections, gone)
	os.Exit(0)
}
