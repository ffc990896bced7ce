package sqliteref_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/bench/sqliteref"
	"github.com/durofs/durofs/provider"
)

// TestConcurrentOpenOfNewFile opens one new database file from several
// Providers at once (each with its own connections, as separate processes
// would): schema creation and the switch to WAL must not fail, and every
// Provider must see the others' work.
func TestConcurrentOpenOfNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	const n = 8
	ps := make([]*sqliteref.Provider, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ps[i], errs[i] = sqliteref.Open(path, sqliteref.Options{Logger: quietLogger()}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { _ = ps[i].Close() })
	}
	ctx := context.Background()
	v := "1.0.0"
	for i, p := range ps {
		s := provider.StartOrchestration{Instance: fmt.Sprintf("open-%d", i), Orchestration: "O", Input: "{}", Version: &v, ExecutionID: 1}
		if err := p.EnqueueForOrchestrator(ctx, s, 0); err != nil {
			t.Fatalf("enqueue through provider %d: %v", i, err)
		}
	}
	adm, _ := ps[0].Admin()
	d, err := adm.GetQueueDepths(ctx)
	if err != nil || d.OrchestratorQueue != n {
		t.Fatalf("queue depths %+v, %v; want %d orchestrator messages", d, err, n)
	}
}

// TestCloseEndsLongPoll checks that Close wakes a waiting fetch, which then
// fails with ErrClosed, and that calls after Close fail the same way.
func TestCloseEndsLongPoll(t *testing.T) {
	p, err := sqliteref.Open(filepath.Join(t.TempDir(), "c.db"), sqliteref.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	begin := time.Now()
	go func() {
		_, err := p.FetchOrchestrationItem(context.Background(), time.Second, 10*time.Second, nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, provider.ErrClosed) || provider.IsRetryable(err) {
			t.Errorf("fetch after Close: %v, want a permanent ErrClosed", err)
		}
		if time.Since(begin) > 2*time.Second {
			t.Errorf("fetch returned %v after Close", time.Since(begin))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fetch still waiting 5s after Close")
	}
	if err := p.EnqueueForWorker(context.Background(), provider.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "a"}); !errors.Is(err, provider.ErrClosed) {
		t.Errorf("enqueue after Close: %v, want ErrClosed", err)
	}
}

// TestSameProcessEnqueueWakesLongPoll checks that a fetch waiting for work
// returns promptly when this process enqueues (not only at the next poll
// of the database).
func TestSameProcessEnqueueWakesLongPoll(t *testing.T) {
	p, err := sqliteref.Open(filepath.Join(t.TempDir(), "w.db"), sqliteref.Options{Logger: quietLogger(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	got := make(chan *provider.LockedWorkItem, 1)
	go func() {
		it, _ := p.FetchWorkItem(ctx, time.Minute, 10*time.Second, nil, provider.DefaultOnlyTags())
		got <- it
	}()
	time.Sleep(50 * time.Millisecond)
	begin := time.Now()
	if err := p.EnqueueForWorker(ctx, provider.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "a", Input: "{}"}); err != nil {
		t.Fatal(err)
	}
	select {
	case it := <-got:
		if it == nil {
			t.Fatal("fetch returned no item")
		}
		t.Logf("woken %v after the enqueue", time.Since(begin))
	case <-time.After(5 * time.Second):
		t.Fatal("fetch not woken by a same-process enqueue (PollInterval is an hour)")
	}
}

// TestCloseClosesTheDatabase: when Close returns, every connection is
// closed, even those that calls running concurrently were using, so the
// database's -wal and -shm files are gone and its directory can be removed.
func TestCloseClosesTheDatabase(t *testing.T) {
	for round := range 5 {
		dir := t.TempDir()
		p, err := sqliteref.Open(filepath.Join(dir, "c.db"), sqliteref.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		var calls atomic.Int64
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					inst := fmt.Sprintf("r%d-g%d-%d", round, g, i)
					if err := p.EnqueueForWorker(ctx, provider.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 1, Name: "a"}); err != nil {
						return // closed
					}
					if _, err := p.GetInstanceInfo(ctx, inst); err != nil && errors.Is(err, provider.ErrClosed) {
						return
					}
					calls.Add(1)
				}
			})
		}
		for calls.Load() < 8 { // Close while calls are running
			runtime.Gosched()
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		names, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if n.Name() != "c.db" {
				t.Fatalf("round %d: %s still there after Close", round, n.Name())
			}
		}
		wg.Wait()
	}
}
