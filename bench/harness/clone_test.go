package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// TestCloneInstances: copies of a completed instance read as completed
// instances of their own ids (history events included, every line's CRC
// valid), and fsck finds nothing wrong with the store.
func TestCloneInstances(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p, err := provider.Open(dir, provider.Options{Durability: provider.ProcessCrashSafe, SweepInterval: -1, Logger: warnLogger(testWriter{t})})
	if err != nil {
		t.Fatal(err)
	}
	s, err := workload.NewSpec("done-000000", workload.KindChain, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.EnqueueForOrchestrator(ctx, workload.StartItem(s), 0); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	rt := workload.NewRuntime(p, workload.RuntimeOptions{Dispatchers: 1, Workers: 1})
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	for deadline := time.Now().Add(time.Minute); rt.Stats().ExecutionsEnded < 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	if err := cloneInstances(dir, "done-000000", 3, func(i int) string { return fmt.Sprintf("done-%06d", i+1) }, 2); err != nil {
		t.Fatal(err)
	}
	q, err := provider.Open(dir, provider.Options{SweepInterval: -1, Logger: warnLogger(testWriter{t})})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	adm, _ := q.Admin()
	ids, err := adm.ListInstancesByStatus(ctx, workload.StatusCompleted)
	if err != nil || len(ids) != 4 {
		t.Fatalf("completed instances = %v, %v; want the template and 3 copies", ids, err)
	}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("done-%06d", i)
		h, err := q.Read(ctx, id)
		if err != nil || len(h) == 0 {
			t.Fatalf("%s: history %d events, %v", id, len(h), err)
		}
		for _, ev := range h {
			if ev.InstanceID != id {
				t.Fatalf("%s: an event of instance %q", id, ev.InstanceID)
			}
		}
	}
	rep, err := provider.Fsck(ctx, dir, provider.FsckOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("fsck: %+v, %v", rep.Remaining(), err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
