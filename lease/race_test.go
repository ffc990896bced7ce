package lease_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/racereport"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

const (
	raceRounds    = 500
	raceGoroutine = 8
	raceProcesses = 4
	raceTTL       = time.Hour
	helperEnv     = "DUROFS_LEASE_HELPER"
	helperLockEnv = "DUROFS_LEASE_LOCK"
	helperFileEnv = "DUROFS_LEASE_FILE"
	helperIDEnv   = "DUROFS_LEASE_OWNER"
	replyTimeout  = 30 * time.Second
)

// raceFS is the FS of the race tests. Mutual exclusion comes from the flock
// and the atomic rename, not from fsync, so they skip fsync (vfs.NoSync): that
// keeps them fast and their timing independent of disk load. The unit tests
// use the syncing vfs.OS.
var raceFS = vfs.NoSync(vfs.OS{})

// TestRaceGoroutines: in every round the lease is expired and all goroutines
// race to acquire it; exactly one wins.
func TestRaceGoroutines(t *testing.T) {
	f := newFixture(t)
	f.s = lease.NewStore(raceFS, f.clk)
	ctx := context.Background()
	type result struct {
		l   lease.Lease
		err error
	}
	results := make([]result, raceGoroutine)
	var fence uint64
	wins := make([]int, raceGoroutine)
	start := time.Now()
	for r := range raceRounds {
		// Expired exactly now (acquirable iff expires <= now).
		f.write(t, lease.Lease{Token: fmt.Sprintf("expired-%d", r), Owner: "test", Fence: fence,
			AcquiredAtMs: nowMs - raceTTL.Milliseconds(), ExpiresAtMs: nowMs})
		barrier := make(chan struct{})
		var wg sync.WaitGroup
		for i := range raceGoroutine {
			wg.Go(func() {
				<-barrier
				l, err := f.s.Acquire(ctx, f.lockPath, f.leasePath, "g"+strconv.Itoa(i), raceTTL)
				results[i] = result{l, err}
			})
		}
		close(barrier)
		wg.Wait()
		winner := -1
		for i, res := range results {
			switch {
			case res.err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: goroutines %d and %d both acquired", r, winner, i)
				}
				winner = i
			case !errors.Is(res.err, lease.ErrHeld):
				t.Fatalf("round %d: goroutine %d: %v", r, i, res.err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody acquired", r)
		}
		wins[winner]++
		w := results[winner].l
		if w.Fence != fence+1 {
			t.Fatalf("round %d: winner fence %d, want %d", r, w.Fence, fence+1)
		}
		fence = w.Fence
		if onDisk, _ := f.read(t); !equalLease(onDisk, w) {
			t.Fatalf("round %d: lease file %+v, winner %+v", r, onDisk, w)
		}
	}
	el := time.Since(start)
	t.Logf("goroutine race: %d rounds, %d goroutines, exactly one winner in every round (%v; wins per goroutine %v)",
		raceRounds, raceGoroutine, el, wins)
	if err := racereport.Printf("lease race (goroutines): %d rounds, %d goroutines, exactly one winner in every round (%v; wins per goroutine %v)",
		raceRounds, raceGoroutine, el.Round(time.Millisecond), wins); err != nil {
		t.Error(err)
	}
}

// TestHelperProcess is the child side of TestRaceProcesses. It does nothing
// unless started by it. Protocol: for each stdin line "go <r>" it does one
// Acquire and answers "won <r> <token> <fence>", "lost <r>" or "err <r> <msg>";
// it exits when stdin closes.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	os.Exit(runHelper(os.Stdin, os.Stdout, os.Getenv(helperLockEnv), os.Getenv(helperFileEnv), os.Getenv(helperIDEnv)))
}

func runHelper(in io.Reader, out io.Writer, lockPath, leasePath, owner string) int {
	s := lease.NewStore(raceFS, clock.System{})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var r int
		if _, err := fmt.Sscanf(sc.Text(), "go %d", &r); err != nil {
			fmt.Fprintf(os.Stderr, "helper: bad command %q\n", sc.Text())
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		l, err := s.Acquire(ctx, lockPath, leasePath, owner, raceTTL)
		cancel()
		switch {
		case err == nil:
			fmt.Fprintf(out, "won %d %s %d\n", r, l.Token, l.Fence)
		case errors.Is(err, lease.ErrHeld):
			fmt.Fprintf(out, "lost %d\n", r)
		default:
			fmt.Fprintf(out, "err %d %s\n", r, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	return 0
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
}

// TestRaceProcesses: helper processes share a directory; in every round the
// lease is expired and each process tries one Acquire; exactly one wins and
// the lease file holds its token.
func TestRaceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts helper processes")
	}
	f := newFixture(t)
	// The children use the system clock; so does the parent's expired lease.
	f.s = lease.NewStore(raceFS, clock.System{})
	children := make([]*child, raceProcesses)
	for i := range children {
		children[i] = startChild(t, f, i)
	}
	var fence uint64
	wins := make([]int, raceProcesses)
	start := time.Now()
	for r := range raceRounds {
		past := clock.Ms(time.Now()) - 1
		f.write(t, lease.Lease{Token: fmt.Sprintf("expired-%d", r), Owner: "parent", Fence: fence,
			AcquiredAtMs: past - raceTTL.Milliseconds(), ExpiresAtMs: past})
		for i, c := range children {
			if _, err := fmt.Fprintf(c.stdin, "go %d\n", r); err != nil {
				t.Fatalf("round %d: write to child %d: %v (stderr: %s)", r, i, err, c.stderr)
			}
		}
		winner, token := -1, ""
		var winFence uint64
		for i, c := range children {
			var line string
			select {
			case l, ok := <-c.lines:
				if !ok {
					t.Fatalf("round %d: child %d exited (stderr: %s)", r, i, c.stderr)
				}
				line = l
			case <-time.After(replyTimeout):
				t.Fatalf("round %d: child %d did not answer in %v", r, i, replyTimeout)
			}
			fields := strings.Fields(line)
			if len(fields) < 2 || fields[1] != strconv.Itoa(r) {
				t.Fatalf("round %d: child %d answered %q", r, i, line)
			}
			switch fields[0] {
			case "won":
				if winner >= 0 {
					t.Fatalf("round %d: children %d and %d both acquired", r, winner, i)
				}
				if len(fields) != 4 {
					t.Fatalf("round %d: child %d answered %q", r, i, line)
				}
				n, err := strconv.ParseUint(fields[3], 10, 64)
				if err != nil {
					t.Fatalf("round %d: child %d answered %q", r, i, line)
				}
				winner, token, winFence = i, fields[2], n
			case "lost":
			default:
				t.Fatalf("round %d: child %d: %s", r, i, line)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody acquired", r)
		}
		onDisk, ok := f.read(t)
		if !ok || onDisk.Token != token || onDisk.Fence != winFence || onDisk.Owner != "p"+strconv.Itoa(winner) {
			t.Fatalf("round %d: lease file %+v, winner child %d token %s fence %d", r, onDisk, winner, token, winFence)
		}
		if winFence != fence+1 {
			t.Fatalf("round %d: winner fence %d, want %d", r, winFence, fence+1)
		}
		fence = winFence
		wins[winner]++
	}
	el := time.Since(start)
	t.Logf("process race: %d rounds, %d processes, exactly one winner in every round (%v; wins per process %v)",
		raceRounds, raceProcesses, el, wins)
	if err := racereport.Printf("lease race (processes): %d rounds, %d processes, exactly one winner in every round (%v; wins per process %v)",
		raceRounds, raceProcesses, el.Round(time.Millisecond), wins); err != nil {
		t.Error(err)
	}
}

func startChild(t *testing.T, f *fixture, i int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperEnv+"=1",
		helperLockEnv+"="+f.lockPath,
		helperFileEnv+"="+f.leasePath,
		helperIDEnv+"=p"+strconv.Itoa(i),
	)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1), stderr: &syncBuffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		// Closing stdin ends the child's loop; kill it if it does not exit.
		stdin.Close()
		exited := make(chan error, 1)
		go func() {
			for range c.lines { // drain so the reader goroutine ends
			}
			exited <- cmd.Wait()
		}()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("child %d: %v (stderr: %s)", i, err, c.stderr)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("child %d did not exit after stdin closed; killed", i)
		}
	})
	return c
}
