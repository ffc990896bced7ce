package provider

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// TestOpenNotHeldUpByCheckpointLock: a process holding wal/checkpoint.lock
// (stopped in the middle of a checkpoint, say) holds no other process's
// Open up: Open waits for the lock at most checkpointTimeout, then leaves
// the log's pending records to the holder and to the fetches, and the fetch
// of an instance whose writer died after its commit point (once the dead
// writer's lease has run out) finishes that commit before serving the
// instance (fs_wal.go checkpointOnce). Before,
// Open waited for the lock until its 30 s deadline and failed.
func TestOpenNotHeldUpByCheckpointLock(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	ctx := context.Background()
	multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
		dir := t.TempDir()
		p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Durability: opts.Durability})
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("ck"), 0))
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "ck", Name: "e", Data: "1"}, 0))
		mustNoErr(t, p.Close())

		// A process dies right after the commit point of its ack: the
		// record is in the log, its apply never ran.
		h := startHelper(t, dir, append(env, "DUROFS_CRASH_AFTER_COMMIT=ack")...)
		r, ok := h.do(helperCmd{Op: "fetch", LockMs: 1500})
		if !ok || r.Token == "" {
			t.Fatalf("helper fetch = %+v, %v", r, ok)
		}
		if _, ok := h.do(helperCmd{Op: "ack", Token: r.Token, Instance: "ck", EventID: 1}); ok {
			t.Fatal("helper survived its crash point")
		}
		_ = h.cmd.Wait()

		// Another process holds the checkpoint lock and never lets go.
		fl := flock.New(filepath.Join(dir, "wal", "checkpoint.lock"))
		if err := fl.Lock(); err != nil {
			t.Fatal(err)
		}
		defer fl.Unlock()

		q, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("Open while another process holds wal/checkpoint.lock: %v", err)
		}
		defer q.Close()
		// The dead writer's lease runs out (1.5 s after its fetch, within
		// this fetch's 2 s wait for work); then the fetch takes the
		// instance and finishes the commit (which consumes its batch)
		// before looking for work.
		if it, err := q.FetchOrchestrationItem(ctx, 5*time.Second, 2*time.Second, nil); err != nil || it != nil {
			t.Fatalf("fetch = %+v, %v; want nothing (the committed ack consumed the batch)", it, err)
		}
		if hist, err := q.Read(ctx, "ck"); err != nil || len(hist) != 1 {
			t.Fatalf("history after the fetch = %d events (%v), want the dead writer's committed turn", len(hist), err)
		}
		// And other work is served.
		mustNoErr(t, q.EnqueueForOrchestrator(ctx, startItem("other"), 0))
		it, err := q.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil)
		if err != nil || it == nil || it.Item.Instance != "other" {
			t.Fatalf("fetch of new work = %+v, %v", it, err)
		}
	})
}
