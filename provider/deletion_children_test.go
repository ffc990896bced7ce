package provider

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestDeletionTakesUnstartedChildren: a sub-orchestration has no instance
// record, and so no entry in its parent's children index, until its own
// first ack. A deletion of the tree in between must still take it - its
// queued start, or its first turn in flight - or the child runs after its
// parent was deleted (unstartedChildren). Each case ends with the child's
// start neither queued nor fetchable, no directory of it, and no instance.
//
// With unstartedChildren returning no change, the cases marked taken fail:
// the child is fetched after the deletion.
func TestDeletionTakesUnstartedChildren(t *testing.T) {
	ctx := context.Background()
	type env struct {
		p, q *FSProvider // two providers on one directory
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env) (gone, kept []string)
	}{
		{"start queued, forced deletion of the running root", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 2, "Running")
			res, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			if res.InstancesDeleted != 1 || res.QueueMessagesDeleted != 2 {
				t.Errorf("result %+v: want 1 instance (the children have no record) and their 2 starts", res)
			}
			return append(kids, "r"), nil
		}},
		{"first turn in flight in another process", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			it := fetchT(t, e.q, kids[0])
			_, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			if err := e.q.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{childStarted(kids[0], "r")}, nil, nil, childMD("r"), nil); err == nil {
				t.Errorf("the child's first ack after its parent's deletion succeeded")
			}
			return append(kids, "r"), nil
		}},
		{"started child: through the index, as before", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			startChild(t, e.q, kids[0], "r", 0)
			_, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			return append(kids, "r"), nil
		}},
		{"grandchild not started under a started child", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			grand := startChild(t, e.q, kids[0], "r", 1)
			_, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			return append(append(kids, grand...), "r"), nil
		}},
		{"DeleteInstancesAtomic of the root alone", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			_, err := e.q.DeleteInstancesAtomic(ctx, []string{"r"}, true)
			mustNoErr(t, err)
			return append(kids, "r"), nil
		}},
		{"completed root whose last turn scheduled a child, not forced", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Completed")
			_, err := e.p.DeleteInstance(ctx, "r", false)
			mustNoErr(t, err)
			return append(kids, "r"), nil
		}},
		{"bulk deletion of completed roots", func(t *testing.T, e env) ([]string, []string) {
			a := scheduleChildren(t, e.p, "r", 1, "Completed")
			b := scheduleChildren(t, e.p, "s", 2, "Completed")
			res, err := e.p.DeleteInstanceBulk(ctx, InstanceFilter{})
			mustNoErr(t, err)
			if res.InstancesDeleted != 2 {
				t.Errorf("result %+v: want the 2 roots", res)
			}
			return append(append(a, b...), "r", "s"), nil
		}},
		{"child's first ack between the tree walk and the locks: walked again", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			testHookTreeWalked = func() {
				testHookTreeWalked = nil
				startChild(t, e.q, kids[0], "r", 0)
			}
			t.Cleanup(func() { testHookTreeWalked = nil })
			_, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			return append(kids, "r"), nil
		}},
		{"a started child whose instance.json does not decode: the rest is deleted", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			startChild(t, e.q, kids[0], "r", 0)
			mustNoErr(t, os.WriteFile(e.p.instFilePath(instanceKey(kids[0])), []byte("{"), 0o600))
			_, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			return []string{"r"}, nil
		}},
		{"the id is another root's now: kept", func(t *testing.T, e env) ([]string, []string) {
			kids := scheduleChildren(t, e.p, "r", 1, "Running")
			// Its first ack names no parent (as contract test 4's does):
			// an instance of its own, which the deletion leaves alone.
			it := fetchT(t, e.q, kids[0])
			mustNoErr(t, e.q.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(kids[0])}, nil, nil, md("TestOrch", "1.0.0"), nil))
			_, err := e.p.DeleteInstance(ctx, "r", true)
			mustNoErr(t, err)
			return []string{"r"}, kids
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
			e := env{p: openT(t, dir, opts), q: openT(t, dir, opts)}
			gone, kept := tc.run(t, e)
			for _, id := range gone {
				if _, err := e.p.GetInstanceInfo(ctx, id); err == nil {
					t.Errorf("%s exists after the deletion", id)
				}
				if ok, err := e.p.instDirExists(instanceKey(id)); err != nil || ok {
					t.Errorf("%s: directory left behind (%v)", id, err)
				}
			}
			for _, id := range kept {
				if _, err := e.p.GetInstanceInfo(ctx, id); err != nil {
					t.Errorf("%s, not the deleted tree's, was deleted: %v", id, err)
				}
			}
			for _, p := range []*FSProvider{e.p, e.q} {
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				mustNoErr(t, err)
				if it != nil {
					t.Fatalf("%s fetched after the deletion: %+v", it.Item.Instance, it.Item.Messages)
				}
			}
		})
	}
}

// scheduleChildren starts parent and acks its first turn with n
// sub-orchestrations scheduled and their starts queued, the execution left
// with status; it returns the children's ids.
func scheduleChildren(t *testing.T, p *FSProvider, parent string, n int, status string) []string {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(parent), 0))
	it := fetchT(t, p, parent)
	events, items, kids := subOrchestrations(parent, n)
	m := md("TestOrch", "1.0.0")
	m.Status = &status
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, append([]Event{started(parent)}, events...), nil, items, m, nil))
	return kids
}

// startChild runs child's first turn (its record names parent), which
// schedules n children of its own; it returns their ids.
func startChild(t *testing.T, p *FSProvider, child, parent string, n int) []string {
	t.Helper()
	it := fetchT(t, p, child)
	events, items, kids := subOrchestrations(child, n)
	mustNoErr(t, p.AckOrchestrationItem(context.Background(), it.LockToken, 1, append([]Event{childStarted(child, parent)}, events...), nil, items, childMD(parent), nil))
	return kids
}

// subOrchestrations returns the events (ids 2...) and start messages of n
// sub-orchestrations scheduled by instance, and the children's ids.
func subOrchestrations(instance string, n int) (events []Event, starts []WorkItem, kids []string) {
	for i := range n {
		id := uint64(i + 2)
		kid := fmt.Sprintf("%s::sub::%d", instance, id)
		events = append(events, Event{EventID: id, InstanceID: instance, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
			Kind: SubOrchestrationScheduled{Name: "TestOrch", Instance: kid, Input: "{}"}})
		v, par, pid := "1.0.0", instance, id
		starts = append(starts, StartOrchestration{Instance: kid, Orchestration: "TestOrch", Input: "{}", Version: &v, ParentInstance: &par, ParentID: &pid, ExecutionID: 1})
		kids = append(kids, kid)
	}
	return events, starts, kids
}

// childStarted is a child's OrchestrationStarted naming its parent.
func childStarted(child, parent string) Event {
	ev := started(child)
	pid := uint64(2)
	ev.Kind = OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}", ParentInstance: &parent, ParentID: &pid}
	return ev
}

// childMD is a child's first metadata: its record names parent.
func childMD(parent string) ExecutionMetadata {
	m := md("TestOrch", "1.0.0")
	m.ParentInstanceID = &parent
	return m
}

// fetchT fetches instance's orchestration item (others fetched on the way
// are abandoned, with a delay: they come back after it).
func fetchT(t *testing.T, p *FSProvider, instance string) *LockedOrchestrationItem {
	t.Helper()
	ctx := context.Background()
	for range 10 {
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch = %+v, %v; want %s", it, err, instance)
		}
		if it.Item.Instance == instance {
			return it
		}
		mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 50*time.Millisecond, true))
	}
	t.Fatalf("%s not fetched", instance)
	return nil
}

// TestDeletionOfUnstartedChildAcrossPowerLoss: the power fails at every
// sync point of a parent's ack that schedules a child, a forced deletion of
// the parent (the child not started) and a checkpoint, under both crash
// models. After the replay the deletion is all or nothing: the parent gone
// and the child's start gone with it, or the parent there and - if its ack
// is - the child's start queued. (The replay redoes the records in log
// order: the parent's ack publishes the start, the deletion deletes it.)
//
// With unstartedChildren returning no change every image after the
// deletion's commit point fails: the child is fetched with its parent gone.
func TestDeletionOfUnstartedChildAcrossPowerLoss(t *testing.T) {
	ctx := context.Background()
	workload := func(mem *vfs.MemFS) (acked int) {
		opts := Options{fs: mem, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
		p := openT(t, "/d", opts)
		scheduleChildren(t, p, "r", 1, "Running")
		acked = mem.SyncCount()
		_, err := p.DeleteInstance(ctx, "r", true)
		mustNoErr(t, err)
		mustNoErr(t, p.Checkpoint(ctx))
		mustNoErr(t, p.Close())
		return acked
	}
	fresh := func() *vfs.MemFS {
		mem := vfs.NewStrictMem()
		mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
		mem.MarkAllSynced()
		return mem
	}
	// Up to acked (the sync count when the parent's ack returned) the ack
	// may not be durable yet.
	ref := fresh()
	base := ref.SyncCount()
	acked := workload(ref) - base
	total := ref.SyncCount() - base
	var before, gone, kept int
	for k := 1; k <= total; k++ {
		for _, model := range []string{"lost", "writeback"} {
			mem := fresh()
			base := mem.SyncCount()
			var img *vfs.MemFS
			mem.OnSync(func(n int) {
				if n == base+k {
					if model == "lost" {
						img = mem.CrashClone()
					} else {
						img = mem.CrashCloneWriteback()
					}
				}
			})
			workload(mem)
			if img == nil {
				t.Fatalf("sync point %d not reached", k)
			}
			p, err := Open("/d", Options{fs: img, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			if err != nil {
				t.Fatalf("sync point %d (%s): open: %v", k, model, err)
			}
			info, infoErr := p.GetInstanceInfo(ctx, "r")
			var fetched []string
			for range 4 {
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				mustNoErr(t, err)
				if it == nil {
					break
				}
				fetched = append(fetched, it.Item.Instance)
			}
			switch {
			case infoErr != nil && !slices.Contains(fetched, "r::sub::2") && (slices.Contains(fetched, "r") || k <= acked):
				before++ // the parent's first ack is not durable
			case infoErr != nil && slices.Contains(fetched, "r::sub::2"):
				t.Errorf("sync point %d (%s): the parent is deleted, its child's start is not: fetched %v", k, model, fetched)
			case infoErr != nil:
				gone++
			case !slices.Contains(fetched, "r::sub::2"):
				t.Errorf("sync point %d (%s): the parent's ack is there (%s), its child's start is not: fetched %v", k, model, info.Status, fetched)
			default:
				kept++
			}
			mustNoErr(t, p.Close())
		}
	}
	if gone == 0 || kept == 0 {
		t.Errorf("%d images with the deletion, %d without: want both", gone, kept)
	}
	t.Logf("%d sync points × 2 crash models: %d images before the parent's ack, %d with the deletion, %d with the parent and its child's start", total, before, gone, kept)
}

// TestUnstartedChildWithAnotherParentLeavesTheSet: a child taken into a
// deletion as unstarted that has, by the time the deletion holds its flock,
// a record naming another parent (or none) is somebody else's instance of
// that id: the try changes nothing, drops it and goes again, and the
// deletion then leaves it alone.
func TestUnstartedChildWithAnotherParentLeavesTheSet(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	kids := scheduleChildren(t, p, "r", 1, "Running")
	it := fetchT(t, p, kids[0])
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(kids[0])}, nil, nil, md("TestOrch", "1.0.0"), nil))

	// As if the child had no record when a previous try took it in.
	unstarted := map[string]string{kids[0]: "r"}
	_, again, wait, err := p.deleteAtomic(ctx, []string{"r", kids[0]}, unstarted, true)
	mustNoErr(t, err)
	if !again || wait != nil || len(unstarted) != 0 {
		t.Fatalf("again %v, wait %v, unstarted %v: want another try without %s", again, wait != nil, unstarted, kids[0])
	}
	if _, err := p.GetInstanceInfo(ctx, kids[0]); err != nil {
		t.Fatalf("%s deleted by the try: %v", kids[0], err)
	}
	_, err = p.DeleteInstancesAtomic(ctx, []string{"r"}, true)
	mustNoErr(t, err)
	if _, err := p.GetInstanceInfo(ctx, kids[0]); err != nil {
		t.Fatalf("%s, another instance now, was deleted with r: %v", kids[0], err)
	}
}
