package wal

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// The child side of TestMultiProcessAppend: append n frames, one Commit
// each, and print "<i> <lsn>" once each is durable.
func init() {
	dir, who := os.Getenv("WAL_TEST_CHILD_DIR"), os.Getenv("WAL_TEST_CHILD_WHO")
	if dir == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("WAL_TEST_CHILD_N"))
	w, _ := strconv.Atoi(who)
	seg, _ := strconv.ParseInt(os.Getenv("WAL_TEST_CHILD_SEG"), 10, 64)
	l, err := Open(context.Background(), vfs.OS{}, dir, Options{SegmentSize: seg})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	l.Ready()
	out := bufio.NewWriter(os.Stdout)
	for i := range n {
		lsn, err := l.Commit(context.Background(), payload(w, i))
		if err != nil {
			fmt.Fprintln(out, "error", err)
			out.Flush()
			os.Exit(2)
		}
		fmt.Fprintf(out, "%d %d\n", i, lsn)
		out.Flush()
	}
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
