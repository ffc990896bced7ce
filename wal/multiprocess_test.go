package wal

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// The child side of the multi-process tests: append n frames from g
// goroutines (frame i from goroutine i mod g), one Commit each, print
// "<i> <lsn>" once each is durable, then "stats <appends> <syncs> <covered>"
// and "lat <ns>..." (each Commit's duration).
func init() {
	dir, who := os.Getenv("WAL_TEST_CHILD_DIR"), os.Getenv("WAL_TEST_CHILD_WHO")
	if dir == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("WAL_TEST_CHILD_N"))
	g, _ := strconv.Atoi(os.Getenv("WAL_TEST_CHILD_G"))
	w, _ := strconv.Atoi(who)
	seg, _ := strconv.ParseInt(os.Getenv("WAL_TEST_CHILD_SEG"), 10, 64)
	var fsys vfs.FS = vfs.OS{}
	if d, _ := time.ParseDuration(os.Getenv("WAL_TEST_CHILD_SYNCDELAY")); d > 0 {
		fsys = vfs.SlowDatasync(fsys, d)
	}
	l, err := Open(context.Background(), fsys, dir, Options{SegmentSize: seg})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	l.Ready()
	var mu sync.Mutex
	var lats []time.Duration
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for j := range max(g, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := j; i < n; i += max(g, 1) {
				t0 := time.Now()
				lsn, err := l.Commit(context.Background(), payload(w, i))
				d := time.Since(t0)
				mu.Lock()
				lats = append(lats, d)
				if err != nil {
					fmt.Fprintln(out, "error", err)
					out.Flush()
					os.Exit(2)
				}
				fmt.Fprintf(out, "%d %d\n", i, lsn)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	fmt.Fprintf(out, "stats %d %d %d\n", st.Appends, st.Syncs, st.Covered)
	fmt.Fprint(out, "lat")
	for _, d := range lats {
		fmt.Fprintf(out, " %d", d)
	}
	fmt.Fprintln(out)
	out.Flush()
	os.Exit(0)
}

// TestMultiProcessAppend: three OS processes append to one log at once
// (small segments, so they roll while racing), and one is SIGKILLed midway.
// Every frame a process was told is durable is in the log at the LSN it was
// given, each process's frames keep their order, and nothing else is there
// but those processes' frames.
func TestMultiProcessAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := filepath.Join(t.TempDir(), "wal")
	const procs, each = 3, 300
	acked := make([]map[int]LSN, procs)
	var wg sync.WaitGroup
	for w := range procs {
		acked[w] = map[int]LSN{}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "WAL_TEST_CHILD_DIR="+dir, "WAL_TEST_CHILD_WHO="+strconv.Itoa(w),
			"WAL_TEST_CHILD_N="+strconv.Itoa(each), "WAL_TEST_CHILD_SEG=16384")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if f[0] == "stats" || f[0] == "lat" {
					continue
				}
				if len(f) != 2 || f[0] == "error" {
					t.Errorf("child %d: %q", w, sc.Text())
					continue
				}
				i, _ := strconv.Atoi(f[0])
				lsn, _ := strconv.ParseUint(f[1], 10, 64)
				acked[w][i] = LSN(lsn)
				if w == 0 && i == each/3 {
					_ = cmd.Process.Signal(syscall.SIGKILL)
				}
			}
			_ = cmd.Wait()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("children did not finish")
	}
	l, err := Open(context.Background(), vfs.OS{}, dir, Options{SegmentSize: 16384})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Ready()
	at := map[LSN]string{}
	last := map[int]int{}
	if _, err := l.Scan(0, func(lsn LSN, p []byte) error {
		at[lsn] = string(p)
		var w, i int
		if _, err := fmt.Sscanf(string(p), `{"w":%d,"i":%d`, &w, &i); err != nil {
			return fmt.Errorf("frame at %v is no child's: %q", lsn, p)
		}
		if prev, ok := last[w]; ok && i <= prev {
			return fmt.Errorf("writer %d: frame %d after %d", w, i, prev)
		}
		last[w] = i
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for w := range procs {
		if w != 0 && len(acked[w]) != each {
			t.Errorf("writer %d: %d frames acknowledged, want %d", w, len(acked[w]), each)
		}
		for i, lsn := range acked[w] {
			if at[lsn] != string(payload(w, i)) {
				t.Fatalf("writer %d frame %d acknowledged at %v, log holds %q", w, i, lsn, at[lsn])
			}
		}
	}
	ids, _ := l.segments()
	t.Logf("wal multi-process: %d frames in %d segments; writer 0 killed after %d acknowledged", len(at), len(ids), len(acked[0]))
}

// childStats sums the children's "stats" lines and collects their commit
// latencies.
type childStats struct {
	appends, syncs, covered int64
	lats                    []time.Duration
}

// latency returns the q-quantile of the commit latencies.
func (c childStats) latency(q float64) time.Duration {
	if len(c.lats) == 0 {
		return 0
	}
	l := slices.Sorted(slices.Values(c.lats))
	return l[min(int(q*float64(len(l))), len(l)-1)]
}

// runChildren runs procs child processes on the log in dir, each committing
// each frames from g goroutines, and returns their summed counts and the
// wall time from the first start to the last exit. Each child's
// acknowledged frames are checked against the log afterwards.
func runChildren(tb testing.TB, dir string, procs, each, g int, env ...string) (childStats, time.Duration) {
	tb.Helper()
	var (
		mu    sync.Mutex
		sum   childStats
		acked = make([]map[int]LSN, procs)
		wg    sync.WaitGroup
		cmds  []*exec.Cmd
	)
	var pipes []io.Reader
	for w := range procs {
		acked[w] = map[int]LSN{}
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), "WAL_TEST_CHILD_DIR="+dir, "WAL_TEST_CHILD_WHO="+strconv.Itoa(w),
			"WAL_TEST_CHILD_N="+strconv.Itoa(each), "WAL_TEST_CHILD_G="+strconv.Itoa(g))
		cmd.Env = append(cmd.Env, env...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		cmds, pipes = append(cmds, cmd), append(pipes, stdout)
	}
	start := time.Now()
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
	}
	for w, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(pipes[w])
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				mu.Lock()
				switch {
				case len(f) > 0 && f[0] == "lat":
					for _, v := range f[1:] {
						n, _ := strconv.ParseInt(v, 10, 64)
						sum.lats = append(sum.lats, time.Duration(n))
					}
				case len(f) == 4 && f[0] == "stats":
					a, _ := strconv.ParseInt(f[1], 10, 64)
					s, _ := strconv.ParseInt(f[2], 10, 64)
					c, _ := strconv.ParseInt(f[3], 10, 64)
					sum.appends, sum.syncs, sum.covered = sum.appends+a, sum.syncs+s, sum.covered+c
				case len(f) == 2 && f[0] != "error":
					i, _ := strconv.Atoi(f[0])
					lsn, _ := strconv.ParseUint(f[1], 10, 64)
					acked[w][i] = LSN(lsn)
				default:
					tb.Errorf("child %d: %q", w, sc.Text())
				}
				mu.Unlock()
			}
			_ = cmd.Wait()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	l, err := OpenReadOnly(vfs.OS{}, dir, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	at := map[LSN]string{}
	if _, err := l.Scan(0, func(lsn LSN, p []byte) error {
		at[lsn] = string(p)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	for w := range procs {
		if len(acked[w]) != each {
			tb.Errorf("child %d: %d frames acknowledged, want %d", w, len(acked[w]), each)
		}
		for i, lsn := range acked[w] {
			if at[lsn] != string(payload(w, i)) {
				tb.Fatalf("child %d frame %d acknowledged at %v, log holds %q", w, i, lsn, at[lsn])
			}
		}
	}
	return sum, elapsed
}

// TestMultiProcessGroupCommit: four processes commit at once, one frame at
// a time each; their syncs are shared, so they run well under one
// fdatasync per frame (without the group-commit page, each process syncs
// every frame of its own: 1.0). Every fdatasync takes at least 1 ms longer,
// so that the test means the same on tmpfs, where a real one costs nothing
// and there is nothing to share.
func TestMultiProcessGroupCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	const procs, each = 4, 150
	st, elapsed := runChildren(t, filepath.Join(t.TempDir(), "wal"), procs, each, 1, "WAL_TEST_CHILD_SYNCDELAY=1ms")
	ratio := float64(st.syncs) / float64(st.appends)
	t.Logf("%d processes x %d commits: %d fdatasyncs for %d frames (%.2f per frame), %d covered by another's sync, %v",
		procs, each, st.syncs, st.appends, ratio, st.covered, elapsed)
	if st.appends != procs*each {
		t.Fatalf("%d frames appended, want %d", st.appends, procs*each)
	}
	if ratio > 0.8 {
		t.Fatalf("%.2f fdatasyncs per frame at %d processes: syncs are not shared", ratio, procs)
	}
}

// BenchmarkMultiProcessCommit: 1, 2 and 4 processes (1 or 2 committing
// goroutines each) commit b.N frames in all on a log in a fresh directory
// under $WAL_BENCH_DIR (default: the test's temporary directory; it must be
// on a disk for the figures to mean anything). Reported: frames per second
// and fdatasyncs per frame.
func BenchmarkMultiProcessCommit(b *testing.B) {
	for _, procs := range []int{1, 2, 4} {
		for _, g := range []int{1, 2} {
			b.Run(fmt.Sprintf("procs=%d/goroutines=%d", procs, g), func(b *testing.B) {
				var env []string
				base := os.Getenv("WAL_BENCH_DIR")
				if base == "" {
					base = b.TempDir()
				}
				dir, err := os.MkdirTemp(base, "walbench-")
				if err != nil {
					b.Fatal(err)
				}
				defer os.RemoveAll(dir)
				each := max(b.N/procs, 1)
				b.ResetTimer()
				st, elapsed := runChildren(b, filepath.Join(dir, "wal"), procs, each, g, env...)
				b.StopTimer()
				b.ReportMetric(float64(st.syncs)/float64(st.appends), "fdatasyncs/frame")
				b.ReportMetric(float64(st.appends)/elapsed.Seconds(), "frames/s")
				b.ReportMetric(float64(st.latency(0.5).Microseconds()), "p50-µs")
				b.ReportMetric(float64(st.latency(0.99).Microseconds()), "p99-µs")
				b.ReportMetric(float64(st.latency(1).Microseconds()), "max-µs")
			})
		}
	}
}
