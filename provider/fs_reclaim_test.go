package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// instanceDirs lists instances/ (sorted) and children/<parent key>/ of
// every parent with entries.
func instanceDirs(t *testing.T, dir string) (insts []string, children map[string][]string) {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "instances"))
	mustNoErr(t, err)
	for _, e := range es {
		insts = append(insts, e.Name())
	}
	children = map[string][]string{}
	ps, err := os.ReadDir(filepath.Join(dir, "children"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, pe := range ps {
		ks, err := os.ReadDir(filepath.Join(dir, "children", pe.Name()))
		mustNoErr(t, err)
		children[pe.Name()] = []string{}
		for _, k := range ks {
			children[pe.Name()] = append(children[pe.Name()], k.Name())
		}
	}
	sort.Strings(insts)
	return insts, children
}

// TestDeleteReclaims (issue 17, item 2): a deletion leaves nothing of the
// instances it deletes - no directory, lock or lease file, no entry in the
// children index - and a new instance of the same id starts from nothing:
// no token of the deleted one holds on it (ack, renew, abandon), and its
// fences start again.
func TestDeleteReclaims(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1})
	root := "root"
	benchComplete(t, p, root, nil)
	benchComplete(t, p, "root::c1", &root)
	benchComplete(t, p, "root::c2", &root)
	c1 := "root::c1"
	benchComplete(t, p, "root::c1::g", &c1)
	insts, kids := instanceDirs(t, dir)
	k := instanceKey
	if want := sorted([]string{"root", k("root::c1"), k("root::c1::g"), k("root::c2")}); !slices.Equal(insts, want) {
		t.Fatalf("instances/ = %v, want %v", insts, want)
	}
	if len(kids) != 2 || !slices.Equal(sorted(kids["root"]), sorted([]string{k("root::c1"), k("root::c2")})) ||
		!slices.Equal(kids[k("root::c1")], []string{k("root::c1::g")}) {
		t.Fatalf("children/ = %v, want root: [c1 c2], c1: [g]", kids)
	}
	if got, err := p.ListChildren(ctx, root); err != nil || !slices.Equal(got, []string{"root::c1", "root::c2"}) {
		t.Fatalf("ListChildren = %v %v", got, err)
	}
	tree, err := p.GetInstanceTree(ctx, root)
	if err != nil || !slices.Equal(tree.AllIDs, []string{"root", "root::c1", "root::c2", "root::c1::g"}) {
		t.Fatalf("GetInstanceTree = %+v %v", tree, err)
	}

	// A running instance, locked by a fetch, deleted by force.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("x"), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started("x")}, nil, nil, md("TestOrch", "1.0.0"), nil))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "x", Name: "e", Data: "d"}, 0))
	old, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || old == nil || old.Item.Instance != "x" {
		t.Fatal(old, err)
	}
	if _, err := p.DeleteInstance(ctx, "x", true); err != nil {
		t.Fatal(err)
	}
	res, err := p.DeleteInstance(ctx, root, false)
	if err != nil || res.InstancesDeleted != 4 {
		t.Fatalf("DeleteInstance(root) = %+v %v", res, err)
	}
	insts, kids = instanceDirs(t, dir)
	if len(insts) != 0 || len(kids) != 0 {
		t.Fatalf("after the deletions: instances/ = %v, children/ = %v; want both empty", insts, kids)
	}

	// Stale tokens and lookups create nothing.
	ev := Event{EventID: 3, InstanceID: "x", ExecutionID: 1, DuroxideVersion: "0.1.26", Kind: ExternalEvent{Name: "e", Data: "d"}}
	if err := p.AckOrchestrationItem(ctx, old.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil); !errors.Is(err, ErrInvalidLockToken) {
		t.Fatalf("ack with the deleted instance's token: %v", err)
	}
	if err := p.RenewOrchestrationItemLock(ctx, old.LockToken, time.Minute); !errors.Is(err, ErrInvalidLockToken) {
		t.Fatalf("renew with the deleted instance's token: %v", err)
	}
	if _, err := p.PruneExecutions(ctx, "x", PruneOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("prune of a deleted instance: %v", err)
	}
	if _, err := p.Read(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if res, err := p.DeleteInstance(ctx, "x", true); err == nil && res.InstancesDeleted != 0 {
		t.Fatalf("second delete = %+v", res)
	}
	if insts, _ := instanceDirs(t, dir); len(insts) != 0 {
		t.Fatalf("looking at a deleted instance created %v", insts)
	}

	// A new instance of the id: the old token holds nowhere on it.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("x"), 0))
	nw, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || nw == nil || nw.Item.Instance != "x" || len(nw.Item.History) != 0 {
		t.Fatalf("fetch of the new instance x: %+v %v", nw, err)
	}
	l, ok, err := p.leases.Inspect(ctx, p.lockPath("x"), p.leasePath("x"))
	if err != nil || !ok || l.Fence != 1 {
		t.Fatalf("new instance's lease = %+v %v %v, want fence 1", l, ok, err)
	}
	if err := p.AckOrchestrationItem(ctx, old.LockToken, 1, []Event{started("x")}, nil, nil, md("TestOrch", "1.0.0"), nil); !errors.Is(err, ErrInvalidLockToken) {
		t.Fatalf("ack of the new instance with the deleted one's token: %v", err)
	}
	if err := p.RenewOrchestrationItemLock(ctx, old.LockToken, time.Minute); !errors.Is(err, ErrInvalidLockToken) {
		t.Fatalf("renew of the new instance with the deleted one's token: %v", err)
	}
	if err := p.AbandonOrchestrationItem(ctx, old.LockToken, 0, false); !errors.Is(err, ErrInvalidLockToken) {
		t.Fatalf("abandon of the new instance with the deleted one's token: %v", err)
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, nw.LockToken, 1, []Event{started("x")}, nil, nil, md("TestOrch", "1.0.0"), nil))
	h, err := p.Read(ctx, "x")
	if err != nil || len(h) != 1 {
		t.Fatalf("history of the new x = %v %v", h, err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// TestFetchLeavesNoDirectory: a fetch that finds nothing to start - a
// completion racing ahead of its start, messages for an instance never
// started - takes away the directory its lock created.
func TestFetchLeavesNoDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1})
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ActivityCompleted{Instance: "ahead", ExecutionID: 1, ID: 2, Result: "r"}, 0))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, QueueMessage{Instance: "never", Name: "q", Data: "d"}, 0))
	for range 2 {
		if it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
			t.Fatalf("fetch = %+v %v, want nothing", it, err)
		}
	}
	if insts, _ := instanceDirs(t, dir); len(insts) != 0 {
		t.Fatalf("fetches that found nothing left instances/ = %v", insts)
	}
	// The start arrives: served as usual.
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("ahead"), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != "ahead" || len(it.Item.Messages) != 2 {
		t.Fatalf("fetch after the start = %+v %v", it, err)
	}
}

// TestReclaimCrashStates: what a crash at each step of a reclaim leaves is
// either the instance or nothing, and nothing of it is in anyone's way:
// after the deletion's commit (the mark in the lease: the next flock holder
// finishes it), after the lease file's removal (the lock file alone), after
// the lock file's (an empty directory). Each is finished or ignored by the
// provider, a new instance of the id starts as on an empty directory, and
// fsck --repair removes the leftover.
func TestReclaimCrashStates(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, p *FSProvider, key string)
		stray bool // fsck reports a leftover
	}{
		{"after_commit", func(t *testing.T, p *FSProvider, key string) {
			// The deletion's record, logged and marked, nothing applied.
			logCommit(t, p, &commitRecord{Key: key, Kind: kindDelete, CommittedMs: p.nowMs(), Members: []deleteMember{{Key: key, Instance: "x"}}})
		}, false},
		{"after_lease", func(t *testing.T, p *FSProvider, key string) {
			mustNoErr(t, os.Remove(p.instFilePath(key)))
			mustNoErr(t, os.RemoveAll(filepath.Join(p.instDir(key), "executions")))
			mustNoErr(t, os.Remove(p.leasePath(key)))
		}, true},
		{"after_lock", func(t *testing.T, p *FSProvider, key string) {
			mustNoErr(t, os.RemoveAll(p.instDir(key)))
			mustNoErr(t, os.Mkdir(p.instDir(key), 0o700))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			createInstance(t, p, "x")
			tc.leave(t, p, "x")
			mustNoErr(t, p.Close())

			if tc.stray {
				rep := fsckT(t, dir, false)
				if f := findingOf(rep, FsckStrayInstance, "instances/x"); f == nil {
					t.Fatalf("fsck finds no stray instance: %+v", rep.Findings)
				}
				c := t.TempDir() // repair a copy; the provider copes with the original
				mustNoErr(t, os.CopyFS(c, os.DirFS(dir)))
				rep = fsckT(t, c, true)
				if f := findingOf(rep, FsckStrayInstance, "instances/x"); f == nil || !f.Repaired || !rep.Clean() {
					t.Fatalf("fsck --repair: %+v", rep.Findings)
				}
				if insts, _ := instanceDirs(t, c); len(insts) != 0 {
					t.Fatalf("after fsck --repair instances/ = %v", insts)
				}
			}

			q := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, Logger: quietLog})
			mustNoErr(t, q.Recover(ctx)) // what a checkpoint or the next flock holder does
			if _, err := q.GetInstanceInfo(ctx, "x"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("instance after a crash in its deletion: %v", err)
			}
			if insts, _ := instanceDirs(t, dir); tc.name == "after_commit" && len(insts) != 0 {
				t.Fatalf("Open's recovery left instances/ = %v", insts)
			}
			// A new instance of the id.
			createInstance(t, q, "x")
			h, err := q.Read(ctx, "x")
			if err != nil || len(h) != 1 {
				t.Fatalf("history of the new x: %v %v", h, err)
			}
			l, _, err := q.leases.Inspect(ctx, q.lockPath("x"), q.leasePath("x"))
			if err != nil || l.Fence != 1 {
				t.Fatalf("new x's lease: %+v %v, want fence 1", l, err)
			}
			if res, err := q.DeleteInstance(ctx, "x", false); err != nil || res.InstancesDeleted != 1 {
				t.Fatalf("delete of the new x: %+v %v", res, err)
			}
			if insts, _ := instanceDirs(t, dir); len(insts) != 0 {
				t.Fatalf("after deleting the new x: instances/ = %v", insts)
			}
		})
	}
}

// TestDeleteCleansStrayDirectory: deleting an id whose directory a crash
// left holding nothing (or a build that kept deleted instances'
// directories: a lock file and a free lease) takes the directory away.
func TestDeleteCleansStrayDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1})
	key := instanceKey("old")
	mustNoErr(t, os.MkdirAll(p.instDir(key), 0o700))
	mustNoErr(t, os.WriteFile(p.lockPath(key), nil, 0o600))
	mustNoErr(t, os.WriteFile(p.leasePath(key), []byte(`{"token":"","owner":"","fence":7,"acquired_at_ms":0,"expires_at_ms":0}`), 0o600))
	if res, err := p.DeleteInstancesAtomic(ctx, []string{"old"}, false); err != nil || res.InstancesDeleted != 0 {
		t.Fatalf("DeleteInstancesAtomic = %+v %v", res, err)
	}
	if insts, _ := instanceDirs(t, dir); len(insts) != 0 {
		t.Fatalf("instances/ = %v, want empty", insts)
	}
}

// TestChildIndexFsck: fsck reports an instance whose record names a parent
// without an index entry, and an entry whose instance does not name that
// parent (or does not exist); --repair adds and removes them.
func TestChildIndexFsck(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, Logger: quietLog})
	root := "root"
	benchComplete(t, p, root, nil)
	benchComplete(t, p, "kid", &root)
	benchComplete(t, p, "other", nil)
	mustNoErr(t, p.Close())
	mustNoErr(t, os.Remove(filepath.Join(dir, "children", "root", "kid")))
	mustNoErr(t, os.WriteFile(filepath.Join(dir, "children", "root", "other"), nil, 0o600))
	mustNoErr(t, os.MkdirAll(filepath.Join(dir, "children", "ghost"), 0o700))
	mustNoErr(t, os.WriteFile(filepath.Join(dir, "children", "ghost", "nobody"), nil, 0o600))

	// Readers ignore entries whose instance does not name the parent.
	r := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, Logger: quietLog})
	if got, err := r.ListChildren(ctx, root); err != nil || len(got) != 0 {
		t.Fatalf("ListChildren with a missing and an extra entry = %v %v, want none", got, err)
	}
	if got, err := r.ListChildren(ctx, "ghost"); err != nil || len(got) != 0 {
		t.Fatalf("ListChildren(ghost) = %v %v, want none", got, err)
	}
	mustNoErr(t, r.Close())

	rep := fsckT(t, dir, false)
	for _, path := range []string{"children/root/kid", "children/root/other", "children/ghost/nobody"} {
		if f := findingOf(rep, FsckChildIndex, path); f == nil || f.Severity != SeverityError {
			t.Errorf("fsck: no child_index error for %s: %+v", path, rep.Findings)
		}
	}
	if insts, _ := instanceDirs(t, dir); slices.Contains(insts, "nobody") {
		t.Fatal("fsck created the directory of an instance an index entry names")
	}
	rep = fsckT(t, dir, true)
	if !rep.Clean() {
		t.Fatalf("fsck --repair left %+v", rep.Remaining())
	}
	_, kids := instanceDirs(t, dir)
	if len(kids) != 1 || !slices.Equal(kids["root"], []string{"kid"}) {
		t.Fatalf("children/ after repair = %v, want root: [kid]", kids)
	}
	if insts, _ := instanceDirs(t, dir); !slices.Equal(insts, []string{"kid", "other", "root"}) {
		t.Fatalf("instances/ after repair = %v", insts)
	}
	q := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1})
	if got, err := q.ListChildren(ctx, root); err != nil || !slices.Equal(got, []string{"kid"}) {
		t.Fatalf("ListChildren after repair = %v %v", got, err)
	}
}

// TestOrphanCheckThroughIndex: a child created after the caller walked the
// tree is found by the deletion's orphan check (through the index), and
// refused.
func TestOrphanCheckThroughIndex(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{Durability: ProcessCrashSafe, SweepInterval: -1})
	root := "root"
	benchComplete(t, p, root, nil)
	tree, err := p.GetInstanceTree(ctx, root)
	mustNoErr(t, err)
	benchComplete(t, p, "late", &root)
	if _, err := p.DeleteInstancesAtomic(ctx, tree.AllIDs, true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("deleting a tree walked before a child was created: %v, want ErrNotAllowed", err)
	}
	if _, err := p.GetInstanceInfo(ctx, root); err != nil {
		t.Fatalf("refused deletion deleted the root: %v", err)
	}
	if _, err := p.DeleteInstancesAtomic(ctx, []string{root, "late"}, false); err != nil {
		t.Fatal(err)
	}
}

// orderFS checks, at each write of one instance's instance.json and each
// removal of its children index entry, that an instance.json naming a
// parent never exists without the entry (fs_reclaim.go).
type orderFS struct {
	vfs.FS
	inst, entry string
	bad         atomic.Int32
	seen        atomic.Int32
}

func (o *orderFS) Rename(oldpath, newpath string) error {
	if newpath == o.inst {
		o.seen.Add(1)
		if _, err := o.FS.Lstat(o.entry); err != nil {
			o.bad.Add(1) // instance.json (naming the parent) before its entry
		}
	}
	return o.FS.Rename(oldpath, newpath)
}

func (o *orderFS) Remove(name string) error {
	if name == o.entry {
		o.seen.Add(1)
		if _, err := o.FS.Lstat(o.inst); err == nil {
			o.bad.Add(1) // the entry goes while instance.json still names the parent
		}
	}
	return o.FS.Remove(name)
}

// TestChildIndexOrder: the apply of a child's first ack writes its index
// entry before its instance.json, and the apply of its deletion removes
// the entry after instance.json: a record naming a parent is never without
// its entry, for readers that hold no lock (ListChildren, the orphan check
// of a deletion of the parent).
func TestChildIndexOrder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ofs := &orderFS{FS: vfs.NoFollow(dir, vfs.Perm{})}
	p := openT(t, dir, Options{fs: ofs, Durability: ProcessCrashSafe, SweepInterval: -1})
	ofs.inst, ofs.entry = p.instFilePath("kid"), filepath.Join(p.childrenDir("root"), "kid")
	root := "root"
	benchComplete(t, p, root, nil)
	benchComplete(t, p, "kid", &root)
	if _, err := p.DeleteInstance(ctx, root, false); err != nil {
		t.Fatal(err)
	}
	if ofs.seen.Load() < 2 {
		t.Fatalf("saw %d writes or removals, want the write of instance.json and the removal of the entry", ofs.seen.Load())
	}
	if n := ofs.bad.Load(); n > 0 {
		t.Fatalf("%d time(s) an instance.json naming a parent existed without its children index entry", n)
	}
}
