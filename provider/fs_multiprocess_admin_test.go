//go:build unix

package provider

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Multi-process tests for sessions, deletion and prune (contract issue:
// "session claiming, deletion racing an ack, and prune racing a fetch").
func TestMultiprocessAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process tests skipped in -short mode")
	}
	ctx := context.Background()

	t.Run("test_multiprocess_session_claim_single_owner", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			const n = 30
			sid := "shared-session"
			for i := 1; i <= n; i++ {
				mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "s", ExecutionID: 1, ID: uint64(i), Name: "A", Input: "{}", SessionID: &sid}))
			}
			hs := []*helper{startHelper(t, dir, env...), startHelper(t, dir, env...), startHelper(t, dir, env...)}
			var mu sync.Mutex
			byOwner := map[string][]string{}
			var wg sync.WaitGroup
			for i, h := range hs {
				wg.Add(1)
				go func(owner string, h *helper) {
					defer wg.Done()
					r, ok := h.do(helperCmd{Op: "sdrain", Owner: owner})
					if !ok || !r.OK {
						t.Errorf("sdrain %s: %v %+v", owner, ok, r)
						return
					}
					mu.Lock()
					byOwner[owner] = r.Items
					mu.Unlock()
				}(fmt.Sprintf("worker-%d", i), h)
			}
			wg.Wait()
			owners, total := 0, 0
			seen := map[string]bool{}
			for _, items := range byOwner {
				if len(items) > 0 {
					owners++
				}
				for _, it := range items {
					if seen[it] {
						t.Errorf("session item %s delivered twice", it)
					}
					seen[it] = true
					total++
				}
			}
			if owners != 1 || total != n {
				t.Fatalf("session items went to %d owners (%d items); want all %d to exactly one owner: %v", owners, total, n, byOwner)
			}
		})
	})

	t.Run("test_multiprocess_delete_racing_ack", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			adm, _ := p.Admin()
			h := startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			ackWon, deleteFirst := 0, 0
			for round := 0; round < 10; round++ {
				inst := fmt.Sprintf("race-%d", round)
				createInstance(t, p, inst)
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "e", Data: "d"}, 0))
				// A poll timeout: another process may hold the instance's flock
				// for a moment (e.g. a sweep), and a fetch skips busy instances.
				r := h.must(t, helperCmd{Op: "fetch", LockMs: 30_000, PollMs: 2000})
				if r.Instance != inst {
					entries, _ := p.orchQ.List()
					l, _, lerr := p.leases.Inspect(ctx, p.lockPath(instanceKey(inst)), p.leasePath(instanceKey(inst)))
					names, _ := p.fs.ReadDirNames(p.dir + "/queues/orchestrator")
					d, _ := h.do(helperCmd{Op: "debug", Instance: inst})
					t.Fatalf("helper fetched %q, want %q; at fetch: %s; helper view: %s; queue %+v; files %v; lease %+v %v", r.Instance, inst, r.Err, d.Err, entries, names, l, lerr)
				}
				var ackReply helperReply
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					ackReply, _ = h.do(helperCmd{Op: "ack", Token: r.Token, Instance: inst, EventID: 2})
				}()
				if round%2 == 1 {
					time.Sleep(time.Millisecond)
				}
				_, derr := adm.DeleteInstance(ctx, inst, true)
				wg.Wait()
				if derr != nil {
					t.Fatalf("round %d: delete: %v", round, derr)
				}
				if ackReply.OK {
					ackWon++
				} else {
					deleteFirst++
					if !ackReply.Perm {
						t.Errorf("round %d: ack after delete failed with a retryable error: %s", round, ackReply.Err)
					}
				}
				// Whatever the order, the instance is gone and nothing is pending.
				if _, err := adm.GetInstanceInfo(ctx, inst); err == nil {
					t.Errorf("round %d: instance exists after delete", round)
				}
				if hist, _ := p.Read(ctx, inst); len(hist) != 0 {
					t.Errorf("round %d: history survived delete: %d events", round, len(hist))
				}
				if pcs := pendingCommits(t, p); len(pcs) != 0 {
					t.Errorf("round %d: pending commits %+v", round, pcs)
				}
				if it, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil); err != nil || it != nil {
					t.Errorf("round %d: fetch after delete = %+v %v", round, it, err)
				}
			}
			t.Logf("delete racing ack: ack first %d, delete first %d", ackWon, deleteFirst)
		})
	})

	t.Run("test_multiprocess_prune_racing_fetch", func(t *testing.T) {
		multiprocessModes(t, func(t *testing.T, env []string, opts Options) {
			dir := t.TempDir()
			p := openT(t, dir, opts)
			adm, _ := p.Admin()
			createInstance(t, p, "pr")
			for e := uint64(2); e <= 4; e++ {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "pr", Name: "n", Data: "x"}, 0))
				it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
				if err != nil || it == nil {
					t.Fatal(it, err)
				}
				ev := started("pr")
				ev.ExecutionID = e
				st := "ContinuedAsNew"
				if e == 4 {
					st = "Running"
				}
				m := md("TestOrch", "1.0.0")
				m.Status = &st
				mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, e, []Event{ev}, nil, nil, m, nil))
			}
			const turns = 20
			h := startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			startHelper(t, dir, env...)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, ok := h.do(helperCmd{Op: "turns"})
				if !ok || !r.OK || r.N < 1 {
					t.Errorf("turns: %v %+v", ok, r)
				}
			}()
			for i := 0; i < turns; i++ {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "pr", Name: "n", Data: "x"}, 0))
				one := uint32(1)
				if _, err := adm.PruneExecutions(ctx, "pr", PruneOptions{KeepLast: &one}); err != nil {
					t.Errorf("prune: %v", err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			wg.Wait()
			ids, err := adm.ListExecutions(ctx, "pr")
			if err != nil || fmt.Sprint(ids) != "[4]" {
				t.Fatalf("executions = %v %v, want [4]", ids, err)
			}
			hist, err := p.ReadWithExecution(ctx, "pr", 4)
			if err != nil || len(hist) < 2 || len(hist) > 1+turns {
				t.Fatalf("history of the current execution = %d events, %v", len(hist), err)
			}
			for i, e := range hist {
				if e.EventID != uint64(i+1) {
					t.Fatalf("event ids not contiguous: position %d has id %d", i, e.EventID)
				}
			}
			m, _ := adm.GetSystemMetrics(ctx)
			if m.TotalExecutions != 1 || m.TotalEvents != uint64(len(hist)) {
				t.Errorf("metrics %+v disagree with the store (1 execution, %d events)", m, len(hist))
			}
		})
	})
}
