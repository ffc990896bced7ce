package provider

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

// ageStaged sets the modification time of q's staged file name an hour
// back: old enough for every sweep's minimum age.
func ageStaged(t *testing.T, q *fsqueue.Queue, name string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	mustNoErr(t, os.Chtimes(filepath.Join(q.Dir(), ".staged-"+name+".json"), old, old))
}

// stagedExists reports whether q still has the staged file name.
func stagedExists(t *testing.T, q *fsqueue.Queue, name string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(q.Dir(), ".staged-"+name+".json"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestSweepDoesNotWaitForAStoppedWorkAck: a work ack stages its completion
// (source "w:<item>") under the item's claim lock and keeps that lock until
// its apply. A process stopped there (SIGSTOP, a frozen cgroup) for longer
// than the sweep's minimum age of staged files must not hold up the sweep
// of other processes - nor Recover, which Open runs with a 30 s budget and
// whose failure fails the Open. The sweep leaves the file (its writer may
// still commit it) and goes on; once the lock is free it removes it (no
// commit names it). Same for a go-workflows activity completion (source
// "gwa:<dir>/<item>").
//
// On main the sweep waited on the claim lock with the pass's context: the
// pass (and Open's recovery) failed with the context's deadline.
func TestSweepDoesNotWaitForAStoppedWorkAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the claim queue and item whose lock the stopped
		// writer holds, and the queue and name of its staged message.
		setup func(t *testing.T, p *FSProvider) (cq *fsqueue.Queue, item string, sq *fsqueue.Queue, staged string)
	}{
		{"work ack", func(t *testing.T, p *FSProvider) (*fsqueue.Queue, string, *fsqueue.Queue, string) {
			ctx := context.Background()
			mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act", Input: "x"}))
			it, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyTags())
			if err != nil || it == nil {
				t.Fatalf("fetch = %+v, %v", it, err)
			}
			ct, _ := parseWorkToken(it.LockToken)
			item, _ := fsqueue.NameFromToken(ct)
			// What AckWorkItem stages before its commit point.
			m, err := p.orchMessage(ActivityCompleted{Instance: "a", ExecutionID: 1, ID: 2, Result: "r"}, p.nowMs(), p.nowMs(), "w:"+item)
			mustNoErr(t, err)
			m = named(p.orchQ, m)
			mustNoErr(t, p.orchQ.Stage(m))
			return p.workQ, item, p.orchQ, m.Name
		}},
		{"go-workflows activity completion", func(t *testing.T, p *FSProvider) (*fsqueue.Queue, string, *fsqueue.Queue, string) {
			gwRunningParent(t, p)
			a1 := gwFetchActivity(t, p, "a1")
			dir, _, item, ok := parseGWActToken(a1.Token)
			if !ok {
				t.Fatalf("bad token %q", a1.Token)
			}
			aq, err := p.gwQueue(dir)
			mustNoErr(t, err)
			wq, err := p.gwQueue(gwWorkflowQueue("default"))
			mustNoErr(t, err)
			m := fsqueue.Message{VisibleAtMs: p.nowMs(), EnqueuedAtMs: p.nowMs(), Payload: json.RawMessage(`{}`),
				Attrs: map[string]string{attrInstance: "parent", attrKey: instanceKey("parent"), attrSource: "gwa:" + dir + "/" + item}}
			m = named(wq, m)
			mustNoErr(t, wq.Stage(m))
			return aq, item, wq, m.Name
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			cq, item, sq, staged := tc.setup(t, p)
			ageStaged(t, sq, staged)

			// The writer is "stopped" holding the item's claim lock.
			release := holdClaim(t, cq, item)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := notStalled(t, "recovery", release, func() error { return p.Recover(ctx) })
			if err != nil {
				t.Fatalf("Recover with a stopped work ack = %v; want nil (the staged file is left for a later pass)", err)
			}
			if !stagedExists(t, sq, staged) {
				t.Fatal("the staged completion of a work ack in flight was removed")
			}

			// The writer is gone without committing: the next pass removes it.
			mustNoErr(t, release())
			mustNoErr(t, p.Recover(context.Background()))
			if stagedExists(t, sq, staged) {
				t.Error("the orphan staged completion stays after its lock was freed")
			}
		})
	}
}
