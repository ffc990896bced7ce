package gwbench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if IsWorker(os.Args[1:]) {
		os.Exit(WorkerMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestRunTiny runs every measurement of the matrix once at a tiny size
// (the figures mean nothing): both backends, both scenarios, in one process
// and with two worker processes.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tiny := TreeInput{FanOut: 1, LeafFanOut: 2, Depth: 1, Activities: 1, PayloadSizeBytes: 10}
	if got := treeSize(tiny); got != 4 {
		t.Fatalf("treeSize = %d, want root, 1 mid, 2 leaves", got)
	}
	if got := treeSize(DefaultTree); got != 15 {
		t.Fatalf("treeSize(DefaultTree) = %d, want 15", got)
	}
	for _, be := range []string{Durofs, SQLite} {
		for _, sc := range []string{Tree, ChainS} {
			for _, procs := range []int{1, 2} {
				cfg := Config{Backend: be, Scenario: sc, Processes: procs, Roots: 2, Tree: tiny, ChainLen: 2,
					Dir: filepath.Join(t.TempDir(), "store"), Timeout: 2 * time.Minute}
				if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
					t.Fatal(err)
				}
				res, err := Run(context.Background(), cfg, self)
				if err != nil {
					t.Fatalf("%s %s %d: %v", be, sc, procs, err)
				}
				want := 2
				if sc == Tree {
					want = 8
				}
				if res.Workflows != want || res.Elapsed <= 0 {
					t.Errorf("%s %s %d: %+v", be, sc, procs, res)
				}
				// The store recorded the last finish before the client saw it.
				if res.Finished <= 0 || res.Finished > res.Elapsed {
					t.Errorf("%s %s %d: finished after %v by the store, seen after %v", be, sc, procs, res.Finished, res.Elapsed)
				}
				// Every worker process's CPU time (none in one process).
				wantCPU := procs
				if procs == 1 {
					wantCPU = 0
				}
				if len(res.WorkerCPU) != wantCPU {
					t.Errorf("%s %s %d: worker CPU times %v, want %d", be, sc, procs, res.WorkerCPU, wantCPU)
				}
			}
		}
	}
}
