package harness

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// childEnv marks a re-execution of the test binary as a benchmark child.
const childEnv = "DUROBENCH_TEST_CHILD=1"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" && os.Getenv("DUROBENCH_TEST_CHILD") == "1" {
		os.Exit(ChildMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestQuickRun runs every section once at tiny sizes, so the harness does
// not rot: it fails if a section errors or a workload does not verify. It
// asserts no time.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes for a while")
	}
	var log bytes.Buffer
	cfg := Config{
		Dir:        t.TempDir(),
		AllowTmpfs: true,
		Quick:      true,
		Runs:       1,
		Procs:      []int{1, 4},
		Exe:        os.Args[0],
		ChildEnv:   []string{childEnv},
		Log:        &log,
		Command:    "go test",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\nlog:\n%s", err, log.String())
	}
	if res.Fsyncs == nil || res.Throughput == nil || res.Fetch == nil || res.Restart == nil {
		t.Fatalf("a section is missing: %+v", res)
	}
	if res.Fsyncs.OrchAcks.Calls == 0 || res.Fsyncs.WorkAcks.Calls == 0 || res.Fsyncs.SteadyTurn.Calls == 0 || res.Fsyncs.FirstTurn.Calls == 0 {
		t.Errorf("fsyncs: some ack kinds were not counted: %+v", res.Fsyncs)
	}
	if u := res.Fsyncs.Unattributed; u.FileSyncs+u.DirSyncs != 0 {
		t.Errorf("fsyncs: %d file and %d directory syncs outside the counted calls", u.FileSyncs, u.DirSyncs)
	}
	for _, c := range res.Throughput.Cells {
		if len(c.Runs) != 1 || c.Runs[0].Turns == 0 || c.Runs[0].Wall <= 0 || c.Runs[0].Create <= 0 {
			t.Errorf("throughput %s %s %d: runs %+v", c.Provider, c.Workload, c.Procs, c.Runs)
		}
	}
	if want := 2 * 2 * 2; len(res.Throughput.Cells) != want { // 2 workloads × 2 process counts × 2 providers
		t.Errorf("throughput: %d cells, want %d", len(res.Throughput.Cells), want)
	}
	if want := 2 * len(QuickSizes().FetchQueued) * 2; len(res.Fetch.Cells) != want {
		t.Errorf("fetch: %d cells, want %d", len(res.Fetch.Cells), want)
	}
	for _, c := range res.Restart.Cells {
		if len(c.Runs) != 1 || c.Runs[0].Total <= 0 {
			t.Errorf("restart %s %d: runs %+v", c.Provider, c.Instances, c.Runs)
		}
	}
	var md bytes.Buffer
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{"## Targets", "## Durable turn throughput", "## fsyncs per call", "## Fetch latency", "## Restart after kill -9"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "| n/a |") {
		t.Errorf("a target was not evaluated:\n%s", out)
	}
	t.Logf("report:\n%s", out)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: "x", Only: []string{"nope"}},
		{Dir: "x", Procs: []int{0}},
		{Dir: "x", Providers: []string{"postgres"}},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestMedianPercentile(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd = %v", got)
	}
	if got := median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("median even = %v", got)
	}
	ns := make([]int64, 100)
	for i := range ns {
		ns[i] = int64(100 - i)
	}
	if got := percentile(ns, 0.5); got != 50 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile(ns, 0.99); got != 99 {
		t.Errorf("p99 = %v", got)
	}
	if got := percentile(ns, 1); got != 100 {
		t.Errorf("max = %v", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("empty = %v", got)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := newTailBuffer(4)
	_, _ = tb.Write([]byte("abc"))
	_, _ = tb.Write([]byte("defg"))
	if got := string(tb.Bytes()); got != "defg" {
		t.Errorf("tail = %q", got)
	}
}

// TestRemoveRunDir: a finished run's directory stays until the harness's
// root is removed by default and with Keep, and goes at once with
// EagerCleanup.
func TestRemoveRunDir(t *testing.T) {
	for _, tt := range []struct {
		name     string
		cfg      Config
		wantKept bool
	}{
		{"default", Config{}, true},
		{"keep", Config{Keep: true}, true},
		{"eager cleanup", Config{EagerCleanup: true}, false},
		{"keep wins over eager cleanup", Config{Keep: true, EagerCleanup: true}, true},
		{"eager cleanup, settled", Config{EagerCleanup: true, Settle: time.Millisecond}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir() + "/run"
			if err := os.MkdirAll(dir+"/instances", 0o700); err != nil {
				t.Fatal(err)
			}
			if err := removeRunDir(tt.cfg, dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); (err == nil) != tt.wantKept {
				t.Fatalf("after removeRunDir: stat = %v, want kept %v", err, tt.wantKept)
			}
		})
	}
}
