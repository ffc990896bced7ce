//go:build unix

package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/vfs"
)

// outside is a directory beside the durofs directory that planted links
// point into; tests check that durofs never reads from it into a result,
// writes to it or creates anything in it.
type outside struct {
	dir  string
	snap map[string]string
}

func newOutside(t *testing.T) *outside {
	t.Helper()
	return &outside{dir: t.TempDir()}
}

// file writes a file outside and returns its path.
func (o *outside) file(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(o.dir, name)
	mustNoErr(t, os.MkdirAll(filepath.Dir(path), 0o700))
	mustNoErr(t, os.WriteFile(path, data, 0o600))
	return path
}

// snapshot records every path and content under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	mustNoErr(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			m[rel] = "<dir>"
			return nil
		}
		b, err := os.ReadFile(path)
		m[rel] = string(b)
		return err
	}))
	return m
}

func (o *outside) seal(t *testing.T) { o.snap = snapshot(t, o.dir) }

// untouched fails if anything outside changed since seal.
func (o *outside) untouched(t *testing.T) {
	t.Helper()
	now := snapshot(t, o.dir)
	for k, v := range now {
		if w, ok := o.snap[k]; !ok || w != v {
			t.Errorf("outside %s changed or appeared (%q): written through a symbolic link", k, v)
		}
	}
	for k := range o.snap {
		if _, ok := now[k]; !ok {
			t.Errorf("outside %s vanished", k)
		}
	}
}

// plantLink replaces path (a file, a directory or nothing) with a symbolic
// link to target.
func plantLink(t *testing.T, path, target string) {
	t.Helper()
	mustNoErr(t, os.RemoveAll(path))
	mustNoErr(t, os.MkdirAll(filepath.Dir(path), 0o700))
	mustNoErr(t, os.Symlink(target, path))
}

func isLinkAt(t *testing.T, path string) bool {
	t.Helper()
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// earlyName is a message name (visible at once, of no instance) that sorts
// before every name made now.
func earlyName() string {
	return fsqueue.Entry{ID: ulid.MustNew(1, bytes.NewReader(make([]byte, 16)))}.Name()
}

// TestOpenRefusesLinkedLayout: a symbolic link in place of FORMAT or of a
// top-level folder makes Open fail with an error wrapping vfs.ErrSymlink
// that names the path; nothing is written through it.
func TestOpenRefusesLinkedLayout(t *testing.T) {
	for _, rel := range []string{
		"FORMAT", "instances", "children", "wal", "wal/procs", "wal/0000000000000001.wal", "wal/checkpoint", "quarantine", "tmp", "queues",
		"queues/orchestrator", "queues/worker", "queues/worker/claims",
		"queues/orchestrator/fsqueue.json",
	} {
		t.Run(rel, func(t *testing.T) {
			dir := t.TempDir()
			p, err := Open(dir, Options{SweepInterval: -1})
			mustNoErr(t, err)
			mustNoErr(t, p.Close())
			out := newOutside(t)
			target := out.dir
			if filepath.Base(rel) == "FORMAT" || strings.HasSuffix(rel, ".json") {
				target = out.file(t, "file", []byte(`{"format":"durofs","version":3}`))
			}
			if strings.HasPrefix(rel, "wal/") && rel != "wal/procs" {
				target = out.file(t, "file", []byte(`{"lsn":1}`))
			}
			out.seal(t)
			plantLink(t, filepath.Join(dir, rel), target)
			_, err = Open(dir, Options{SweepInterval: -1})
			if !errors.Is(err, vfs.ErrSymlink) || !strings.Contains(err.Error(), filepath.Base(rel)) {
				t.Fatalf("Open with %s a symbolic link: %v, want an error wrapping vfs.ErrSymlink naming it", rel, err)
			}
			out.untouched(t)
		})
	}
}

// TestLinkedQueueMessagesAreSkipped: a link in place of a queue message
// (pointing at a valid-looking message outside, named to be first in line)
// is never delivered and does not block the queue.
func TestLinkedQueueMessagesAreSkipped(t *testing.T) {
	ctx := context.Background()
	t.Run("orchestrator", func(t *testing.T) {
		dir := t.TempDir()
		p := openT(t, dir, Options{SweepInterval: -1})
		fake, err := p.orchMessage(startItem("intruder"), 0, 0, "")
		mustNoErr(t, err)
		fake.Name = earlyName()
		data, _ := jsonMarshal(fake)
		out := newOutside(t)
		plantLink(t, filepath.Join(dir, "queues", "orchestrator", fake.Name+".json"), out.file(t, "msg.json", data))
		out.seal(t)
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("real"), 0))
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil || it.Item.Instance != "real" {
			t.Fatalf("fetch = %+v, %v; want the real instance's message", it, err)
		}
		mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, time.Hour, false))
		if it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
			t.Fatalf("second fetch = %+v, %v; want nothing (the link is never delivered)", it, err)
		}
		if _, err := os.Lstat(p.instDir(instanceKey("intruder"))); !os.IsNotExist(err) {
			t.Fatalf("an instance was created from the linked message: %v", err)
		}
		out.untouched(t)
	})
	t.Run("worker", func(t *testing.T) {
		dir := t.TempDir()
		p := openT(t, dir, Options{SweepInterval: -1})
		fake, err := p.workerMessage(ActivityExecute{Instance: "intruder", ExecutionID: 1, ID: 1, Name: "steal"}, 0, "")
		mustNoErr(t, err)
		fake.Name = earlyName()
		data, _ := jsonMarshal(fake)
		out := newOutside(t)
		plantLink(t, filepath.Join(dir, "queues", "worker", fake.Name+".json"), out.file(t, "msg.json", data))
		out.seal(t)
		mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "real", ExecutionID: 1, ID: 1, Name: "act"}))
		it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, TagFilter{})
		if err != nil || it == nil || it.Item.(ActivityExecute).Instance != "real" {
			t.Fatalf("fetch = %+v, %v; want the real item", it, err)
		}
		if it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, TagFilter{}); err != nil || it != nil {
			t.Fatalf("second fetch = %+v, %v; want nothing", it, err)
		}
		out.untouched(t)
	})
}

// TestLinkedClaimIsReplaced: a link in place of a work item's claim (to a
// claim outside that "holds" the item for a day) is treated as no claim:
// the item is delivered, the link is replaced by a real claim file, and its
// target is unchanged.
func TestLinkedClaimIsReplaced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1})
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "real", ExecutionID: 1, ID: 1, Name: "act"}))
	entries, err := p.workQ.List()
	mustNoErr(t, err)
	name := entries[0].Name()
	out := newOutside(t)
	claim := fmt.Sprintf(`{"token":"%s.0b9d6b1e-7d5e-4b43-9d55-3e0f7b0d6a41","owner":"x","locked_until_ms":%d,"attempt":7}`,
		name, time.Now().Add(24*time.Hour).UnixMilli())
	claimPath := filepath.Join(dir, "queues", "worker", "claims", name+".json")
	plantLink(t, claimPath, out.file(t, "claim.json", []byte(claim)))
	out.seal(t)
	it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, TagFilter{})
	if err != nil || it == nil || it.AttemptCount != 1 {
		t.Fatalf("fetch = %+v, %v; want the item, attempt 1 (the linked claim is not read)", it, err)
	}
	if isLinkAt(t, claimPath) {
		t.Fatal("the claim is still a link after the fetch replaced it")
	}
	mustNoErr(t, p.AckWorkItem(ctx, it.LockToken, ActivityCompleted{Instance: "real", ExecutionID: 1, ID: 1, Result: "r"}))
	out.untouched(t)
}

// TestLinkedWorkItemSkipsOnlyItself: a link in place of a work item's
// message file makes that item undeliverable (it cannot be read, nor locked:
// the message file is its own lock) but never blocks the other items; the
// link's target is never opened for writing.
func TestLinkedWorkItemSkipsOnlyItself(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1})
	for i := uint64(1); i <= 5; i++ {
		mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "real", ExecutionID: 1, ID: i, Name: "act"}))
	}
	entries, err := p.workQ.List()
	mustNoErr(t, err)
	blocked := entries[0].Name()
	data, err := os.ReadFile(filepath.Join(dir, "queues", "worker", blocked+".json"))
	mustNoErr(t, err)
	out := newOutside(t)
	plantLink(t, filepath.Join(dir, "queues", "worker", blocked+".json"), out.file(t, "item", data))
	out.seal(t)
	got := 0
	for {
		it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, TagFilter{})
		if err != nil {
			t.Fatalf("fetch with a linked work item: %v", err)
		}
		if it == nil {
			break
		}
		got++
		mustNoErr(t, p.AckWorkItem(ctx, it.LockToken, nil))
	}
	if got != len(entries)-1 {
		t.Fatalf("delivered %d items, want the %d unlinked ones", got, len(entries)-1)
	}
	if !isLinkAt(t, filepath.Join(dir, "queues", "worker", blocked+".json")) {
		t.Fatal("the linked item was consumed")
	}
	out.untouched(t)
}

// instancesWithTurns creates instances and then queues one more message
// for each.
func instancesWithTurns(t *testing.T, p *FSProvider, insts ...string) {
	t.Helper()
	for _, inst := range insts {
		createInstance(t, p, inst)
	}
	for _, inst := range insts {
		mustNoErr(t, p.EnqueueForOrchestrator(context.Background(), ExternalRaised{Instance: inst, Name: "e", Data: "1"}, 0))
	}
}

// TestLinkedInstanceFilesAreNotFollowed plants links in place of an
// instance's folder and of each of its files. For each, fetch either skips
// the instance (folder, lock file, instance.json) without failing or
// blocking other instances, or treats the file as damaged (lease: free and
// replaced; history: history_error, and an ack cannot append). Nothing is
// read from or written to the link's target.
func TestLinkedInstanceFilesAreNotFollowed(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// rel is the path of the link below the instance folder ("" for the
		// folder itself).
		rel string
		// target is the link's target's content (nil: a copy of the real
		// file or folder).
		target []byte
		// want is what a fetch does with the instance: "skip", "fetch" or
		// "history_error".
		want string
	}{
		{"instance folder", "", nil, "skip"},
		{"lock file", "lock", []byte{}, "skip"},
		{"instance.json", "instance.json", nil, "skip"},
		{"lease", "lease.json", []byte(`{"token":"0b9d6b1e-7d5e-4b43-9d55-3e0f7b0d6a41","owner":"x","fence":99,"acquired_at_ms":1,"expires_at_ms":9000000000000}`), "fetch"},
		{"history", "executions/1/history.jsonl", nil, "history_error"},
		{"execution folder", "executions/1", nil, "history_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1})
			instancesWithTurns(t, p, "victim", "other")
			key := instanceKey("victim")
			path := filepath.Join(p.instDir(key), c.rel)
			out := newOutside(t)
			var target string
			if c.target != nil {
				target = out.file(t, "target", c.target)
			} else {
				// A faithful copy, so following the link would "work".
				target = filepath.Join(out.dir, "copy")
				mustNoErr(t, os.CopyFS(target+".tmp", os.DirFS(filepath.Dir(path))))
				src := filepath.Join(target+".tmp", filepath.Base(path))
				mustNoErr(t, os.Rename(src, target))
				mustNoErr(t, os.RemoveAll(target+".tmp"))
			}
			plantLink(t, path, target)
			out.seal(t)

			seen := map[string]*LockedOrchestrationItem{}
			for range 2 {
				it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
				if err != nil {
					t.Fatalf("fetch with a linked %s: %v (one damaged instance must not fail the fetch)", c.name, err)
				}
				if it == nil {
					break
				}
				seen[it.Item.Instance] = it
			}
			if seen["other"] == nil {
				t.Fatalf("the other instance was not fetched (got %v)", slices.Collect(func(yield func(string) bool) {
					for k := range seen {
						yield(k)
					}
				}))
			}
			v := seen["victim"]
			switch c.want {
			case "skip":
				if v != nil {
					t.Fatalf("the victim was fetched through a linked %s: %+v", c.name, v.Item)
				}
			case "fetch":
				if v == nil || v.Item.HistoryError != nil || len(v.Item.History) != 1 {
					t.Fatalf("victim = %+v, want it fetched with its real history", v)
				}
				if isLinkAt(t, path) {
					t.Errorf("the linked %s is still a link after the fetch replaced it", c.name)
				}
			case "history_error":
				if v == nil || v.Item.HistoryError == nil || len(v.Item.History) != 0 {
					t.Fatalf("victim = %+v, want history_error and no events from the link", v)
				}
				if !strings.Contains(*v.Item.HistoryError, "symbolic link") {
					t.Errorf("history_error %q does not say why", *v.Item.HistoryError)
				}
				ev := started("victim")
				ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
				err := p.AckOrchestrationItem(ctx, v.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
				if err == nil || IsRetryable(err) {
					t.Errorf("ack appending to a linked history: %v, want a permanent error", err)
				}
			}
			if _, err := p.Read(ctx, "victim"); c.want != "fetch" && err == nil {
				// Reading the history must fail rather than return what
				// the link points at (a copy of the real history).
				if c.rel == "" || strings.HasPrefix(c.rel, "executions") {
					t.Errorf("Read through a linked %s succeeded", c.name)
				}
			}
			out.untouched(t)
		})
	}
}

// session is free, and claiming it replaces the link.
func TestLinkedSessionFileIsReplaced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1})
	sid := "s1"
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "real", ExecutionID: 1, ID: 1, Name: "act", SessionID: &sid}))
	_, sp := p.sessionPaths(sid)
	out := newOutside(t)
	row := fmt.Sprintf(`{"token":"%s","owner":"thief","fence":5,"acquired_at_ms":1,"expires_at_ms":%d}`,
		sessionRowToken, time.Now().Add(24*time.Hour).UnixMilli())
	plantLink(t, sp, out.file(t, "session.json", []byte(row)))
	out.seal(t)
	it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, &SessionFetchConfig{OwnerID: "me", LockTimeout: time.Minute}, TagFilter{})
	if err != nil || it == nil {
		t.Fatalf("fetch of a session item with a linked session file = %+v, %v; want the item", it, err)
	}
	if isLinkAt(t, sp) {
		t.Fatal("the session file is still a link after the claim")
	}
	out.untouched(t)
}

// TestFsckReportsAndQuarantinesLinks: fsck reports a link planted at each
// place (without failing on the other checks that meet it), and --repair
// moves each link, never its target, to quarantine/; the directory is then
// clean and usable.
func TestFsckReportsAndQuarantinesLinks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1})
	instancesWithTurns(t, p, "a", "b", "c", "d")
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 1, Name: "act"}))
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "a", ExecutionID: 1, ID: 2, Name: "act"}))
	work, err := p.workQ.List()
	mustNoErr(t, err)
	mustNoErr(t, p.Close())

	out := newOutside(t)
	target := out.file(t, "target", []byte(`{"token":"x"}`))
	outDir := filepath.Join(out.dir, "d")
	mustNoErr(t, os.MkdirAll(outDir, 0o700))
	links := []string{
		filepath.Join("queues", "orchestrator", earlyName()+".json"),
		filepath.Join("queues", "worker", "claims", work[0].Name()+".json"),
		filepath.Join("queues", "worker", work[1].Name()+".json"),
		filepath.Join("instances", instanceKey("a")),
		filepath.Join("instances", instanceKey("b"), "lease.json"),
		filepath.Join("instances", instanceKey("c"), "executions", "1", "history.jsonl"),
		filepath.Join("instances", instanceKey("d"), "instance.json"),
		filepath.Join("wal", "checkpoint"),
		filepath.Join("sessions", "s.json"),
	}
	for _, l := range links {
		tg := target
		if strings.HasPrefix(l, "instances") && !strings.HasSuffix(l, ".json") && !strings.HasSuffix(l, ".jsonl") {
			tg = outDir
		}
		plantLink(t, filepath.Join(dir, l), tg)
	}
	out.seal(t)

	linkFindings := func(rep FsckReport) map[string]FsckFinding {
		m := map[string]FsckFinding{}
		for _, f := range rep.Findings {
			if f.Kind == FsckSymlink {
				m[f.Path] = f
			}
		}
		return m
	}
	rep, err := Fsck(ctx, dir, FsckOptions{})
	if err != nil {
		t.Fatalf("fsck with planted links: %v", err)
	}
	got := linkFindings(rep)
	for _, l := range links {
		if f, ok := got[l]; !ok || f.Severity != SeverityError || f.Repaired {
			t.Errorf("fsck did not report the link %s (findings %+v)", l, rep.Findings)
		}
	}
	if len(got) != len(links) || rep.Clean() {
		t.Errorf("fsck reported %d links, clean %v; want %d, unclean", len(got), rep.Clean(), len(links))
	}
	out.untouched(t)

	rep, err = Fsck(ctx, dir, FsckOptions{Repair: true})
	if err != nil {
		t.Fatalf("fsck --repair: %v", err)
	}
	for path, f := range linkFindings(rep) {
		if !f.Repaired {
			t.Errorf("link %s not repaired: %s", path, f.Action)
		}
	}
	for _, l := range links {
		if isLinkAt(t, filepath.Join(dir, l)) {
			t.Errorf("%s is still a link after repair", l)
		}
	}
	out.untouched(t)
	rep, err = Fsck(ctx, dir, FsckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(linkFindings(rep)); n != 0 {
		t.Errorf("fsck after repair still reports %d links", n)
	}
	p2 := openT(t, dir, Options{SweepInterval: -1})
	if it, err := p2.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it == nil {
		t.Fatalf("fetch after repair = %+v, %v", it, err)
	}
}
