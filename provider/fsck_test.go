package provider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// completeForFsck runs one turn of inst that completes it.
func completeForFsck(t *testing.T, p *FSProvider, inst string) {
	t.Helper()
	ctx := context.Background()
	v := "1.0.0"
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != inst {
		t.Fatalf("fetch %s: %+v %v", inst, it, err)
	}
	st, out := "Completed", `"ok"`
	m := md("TestOrch", "1.0.0")
	m.Status, m.Output = &st, &out
	s := started(inst)
	done := Event{EventID: 2, InstanceID: inst, ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: OrchestrationCompleted{Output: out}}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{s, done}, nil, nil, m, nil))
}

func fsckT(t *testing.T, dir string, repair bool) FsckReport {
	t.Helper()
	rep, err := Fsck(context.Background(), dir, FsckOptions{Repair: repair, Logger: quietLog})
	if err != nil {
		t.Fatalf("Fsck(repair=%v): %v", repair, err)
	}
	return rep
}

func findingOf(rep FsckReport, kind, pathSuffix string) *FsckFinding {
	for i, f := range rep.Findings {
		if f.Kind == kind && strings.HasSuffix(filepath.ToSlash(f.Path), pathSuffix) {
			return &rep.Findings[i]
		}
	}
	return nil
}

// TestFsckKinds damages a directory in one way per case, checks that Fsck
// reports it (and only it, besides information) and, for repairable kinds,
// that a repair leaves a clean directory.
func TestFsckKinds(t *testing.T) {
	longID := strings.Repeat("Long-Instance-Id/", 20) // hashed key
	cases := []struct {
		name       string
		damage     func(t *testing.T, p *FSProvider, dir string)
		kind, path string
		severity   string
		repairable bool
		check      func(t *testing.T, p *FSProvider) // after the repair
	}{
		{
			name: "orphan claim",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				name := fetchedWorkItem(t, p)
				mustNoErr(t, os.Remove(filepath.Join(dir, "queues", "worker", name+".json")))
			},
			kind: FsckOrphanClaim, path: ".json", severity: SeverityWarning, repairable: true,
		},
		{
			// A claim marked acked whose mark names no record (damaged: no
			// commit id). Nothing can find its commit, so it never committed
			// as far as anyone can tell: the repair puts the claim back to
			// held, and its holder's ack still works.
			name: "acked claim without a commit id",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				name := fetchedWorkItem(t, p)
				path := filepath.Join(dir, "queues", "worker", "claims", name+".json")
				var c fsqueue.Claim
				data, _ := os.ReadFile(path)
				mustNoErr(t, json.Unmarshal(data, &c))
				c.State, c.Data = claimStateAcked, json.RawMessage(`{}`)
				data, _ = json.Marshal(c)
				mustNoErr(t, os.WriteFile(path, data, 0o600))
			},
			kind: FsckPendingCommit, path: ".json", severity: SeverityWarning, repairable: true,
			check: wantClaimPutBack,
		},
		{
			// The mark of a work ack whose writer died before appending its
			// record (a staged completion is left too): put back to held.
			name: "acked claim whose record is not in the log",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				name := fetchedWorkItem(t, p)
				done := ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 7, Result: "r"}
				mustNoErr(t, p.workQ.WithClaim(context.Background(), name, func(g *fsqueue.ClaimGuard) error {
					c, _, err := g.Read()
					if err != nil {
						return err
					}
					m, err := p.orchMessage(done, p.nowMs(), p.nowMs(), "w:"+name)
					if err != nil {
						return err
					}
					m = named(p.orchQ, m)
					mustNoErr(t, p.orchQ.Stage(m))
					d := workAckData{pendingMark: pendingMark{ID: "never-appended", Hint: p.wal.End()}, Completion: m.Name}
					c.State, c.Data = claimStateAcked, mustJSON(t, d)
					return g.Write(c)
				}))
			},
			kind: FsckPendingCommit, path: ".json", severity: SeverityWarning, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				if s, _ := p.orchQ.Staged(); len(s) != 0 {
					t.Errorf("the staged completion of the ack that never committed is left: %v", s)
				}
				wantClaimPutBack(t, p)
			},
		},
		{
			// A work ack committed (its record is in the log) but not
			// applied: the repair applies it.
			name: "acked claim whose record is in the log",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				name := fetchedWorkItem(t, p)
				mustNoErr(t, p.workQ.WithClaim(context.Background(), name, func(g *fsqueue.ClaimGuard) error {
					c, _, err := g.Read()
					if err != nil {
						return err
					}
					rec := &commitRecord{Kind: kindWorkAck, Item: name, ItemToken: c.Token, CommittedMs: p.nowMs(),
						Delete: []queueRef{{Queue: "worker", Name: name}}}
					return p.commitWorkAck(context.Background(), g, c, rec)
				}))
			},
			kind: FsckPendingCommit, path: ".json", severity: SeverityWarning, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				if e, _ := p.workQ.List(); len(e) != 0 {
					t.Errorf("the acked item is still queued: %v", e)
				}
				if names, _ := p.workQ.Claims(); len(names) != 0 {
					t.Errorf("claims left after the work ack was applied: %v", names)
				}
			},
		},
		{
			name: "acked claim of another message (a recycled inode after a power loss)",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				name := fetchedWorkItem(t, p)
				path := filepath.Join(dir, "queues", "worker", "claims", name+".json")
				c := fsqueue.Claim{Token: "01ARZ3NDEKTSV4RRFFQ69G5FAV.6f1c6b7e-6d51-4b4a-9d1c-6a2a9a3f6d11", State: claimStateAcked, Data: json.RawMessage(`{}`)}
				data, _ := json.Marshal(c)
				mustNoErr(t, os.WriteFile(path, data, 0o600))
			},
			kind: FsckUnparseable, path: ".json", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				if e, _ := p.workQ.List(); len(e) != 1 {
					t.Errorf("the item was acked by another message's claim: queue %v", e)
				}
			},
		},
		{
			name: "unparseable session row",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				mustNoErr(t, os.MkdirAll(filepath.Join(dir, "sessions"), 0o700))
				mustNoErr(t, os.WriteFile(filepath.Join(dir, "sessions", "s1.json"), []byte("[]"), 0o600))
			},
			kind: FsckUnparseable, path: "sessions/s1.json", severity: SeverityError, repairable: true,
		},
		{
			name: "committed deletion not applied",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				logCommit(t, p, &commitRecord{Kind: kindDelete, Key: "a", Members: []deleteMember{{Key: "a", Instance: "a"}}})
			},
			kind: FsckPendingCommit, path: "instances/a/lease.json", severity: SeverityWarning, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				if f, _ := p.readInstanceFile("a"); f != nil {
					t.Error("the committed deletion of a was not applied")
				}
			},
		},
		{
			name: "stale message for an unknown instance",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				old := time.Now().Add(-3 * time.Hour).UnixMilli()
				m, err := p.orchMessage(ExternalRaised{Instance: "ghost", Name: "e", Data: "1"}, old, old, "")
				mustNoErr(t, err)
				_, err = p.orchQ.Enqueue(m)
				mustNoErr(t, err)
			},
			kind: FsckUnknownInstance, path: ".json", severity: SeverityWarning, repairable: false,
		},
		{
			name: "missing instance.json",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				mustNoErr(t, os.Remove(p.instFilePath("a")))
			},
			kind: FsckCounterDrift, path: "instances/a/instance.json", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				info, err := p.GetInstanceInfo(context.Background(), "a")
				if err != nil || info.OrchestrationName != "TestOrch" || info.Status != "Completed" {
					t.Errorf("rebuilt instance: %+v, %v", info, err)
				}
			},
		},
		{
			name: "sub-orchestrations not counted (an instance.json written before the count was kept)",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				scheduleChildren(t, p, "r", 1, "Running")
				f, err := p.readInstanceFile("r")
				mustNoErr(t, err)
				f.SubOrchestrations = 0
				data, err := json.Marshal(f)
				mustNoErr(t, err)
				mustNoErr(t, os.WriteFile(p.instFilePath("r"), data, 0o600))
			},
			kind: FsckCounterDrift, path: "instances/r/instance.json", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				ctx := context.Background()
				_, err := p.DeleteInstance(ctx, "r", true)
				mustNoErr(t, err)
				if it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || it != nil {
					t.Errorf("after the repair the deletion left the child's start: fetch %+v, %v", it, err)
				}
			},
		},
		{
			name: "unparseable instance.json of a hashed key",
			damage: func(t *testing.T, p *FSProvider, dir string) {
				completeForFsck(t, p, longID)
				mustNoErr(t, os.WriteFile(p.instFilePath(instanceKey(longID)), []byte("{"), 0o600))
			},
			kind: FsckUnparseable, path: "/instance.json", severity: SeverityError, repairable: true,
			check: func(t *testing.T, p *FSProvider) {
				info, err := p.GetInstanceInfo(context.Background(), longID)
				if err != nil || info.InstanceID != longID || info.Status != "Completed" {
					t.Errorf("rebuilt instance: %+v, %v", info, err)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
			completeForFsck(t, p, "a")
			if rep := fsckT(t, dir, false); !rep.Clean() || len(rep.Findings) != 0 {
				t.Fatalf("fresh directory: %+v", rep.Findings)
			}
			c.damage(t, p, dir)
			rep := fsckT(t, dir, false)
			f := findingOf(rep, c.kind, c.path)
			if f == nil || f.Severity != c.severity || f.Repaired {
				t.Fatalf("no unrepaired %s %s finding for %s: %+v", c.severity, c.kind, c.path, rep.Findings)
			}
			for _, g := range rep.Findings {
				if g.Kind != c.kind && g.Severity != SeverityInfo {
					t.Errorf("unexpected finding: %+v", g)
				}
			}
			rep = fsckT(t, dir, true)
			if f := findingOf(rep, c.kind, c.path); f == nil || f.Repaired != c.repairable {
				t.Fatalf("repair: %+v", rep.Findings)
			}
			after := fsckT(t, dir, false)
			if c.repairable && !after.Clean() {
				t.Errorf("after repair: %+v", after.Remaining())
			}
			if !c.repairable && findingOf(after, c.kind, c.path) == nil {
				t.Errorf("an unrepairable finding vanished: %+v", after.Findings)
			}
			if c.check != nil {
				p2 := openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
				c.check(t, p2)
			}
		})
	}
}

// wantClaimPutBack checks that the one work item is still queued with a
// held claim (not acked), and that its holder's ack with its token works.
func wantClaimPutBack(t *testing.T, p *FSProvider) {
	t.Helper()
	e, _ := p.workQ.List()
	if len(e) != 1 {
		t.Fatalf("the item of a work ack that never committed is gone: queue %v", e)
	}
	c, ok, err := p.workQ.PeekClaim(e[0].Name())
	if err != nil || !ok || c.State != "" || c.Token == "" {
		t.Fatalf("claim after the repair = %+v (exists %v, %v), want held by its fetcher", c, ok, err)
	}
	mustNoErr(t, p.AckWorkItem(context.Background(), workTokenPrefix+c.Token, nil))
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	mustNoErr(t, err)
	return b
}

func TestFsckFormat(t *testing.T) {
	if _, err := Fsck(context.Background(), t.TempDir(), FsckOptions{Logger: quietLog}); !errors.Is(err, ErrNotDurofsDir) {
		t.Errorf("Fsck of an empty directory: %v", err)
	}
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
	_ = p.Close()
	for _, c := range []struct{ version, want string }{
		{"1", "finish the directory's work with durofs 0.1"},
		{"2", "queue messages named <ULID>.json"},
		{"9", "version 9 (this build reads version 8)"},
	} {
		mustNoErr(t, os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(`{"format":"durofs","version":`+c.version+`}`), 0o600))
		rep := fsckT(t, dir, true)
		if len(rep.Findings) != 1 || rep.Findings[0].Kind != FsckFormat || rep.Findings[0].Repaired || rep.Clean() ||
			!strings.Contains(rep.Findings[0].Detail, c.want) {
			t.Errorf("FORMAT version %s: %+v, want one unrepaired format finding saying %q", c.version, rep, c.want)
		}
	}
	mustNoErr(t, os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(`{"format":"durofs","version":8}`), 0o600))
	for _, c := range []struct{ cfg, want string }{
		{`{"shards":`, "cannot be parsed"},
		{`{"format":"fsqueue","version":2}`, "version 2 (this build reads version 3)"},
		{`{"format":"fsqueue","version":3,"index_attr":"other"}`, `routes messages by attribute "other"`},
	} {
		mustNoErr(t, os.WriteFile(filepath.Join(dir, "queues", "worker", "fsqueue.json"), []byte(c.cfg), 0o600))
		rep := fsckT(t, dir, false)
		if f := findingOf(rep, FsckFormat, "queues/worker/fsqueue.json"); f == nil || !strings.Contains(f.Detail, c.want) {
			t.Errorf("fsqueue.json %s: %+v, want a format finding saying %q", c.cfg, rep, c.want)
		}
	}
}

// TestFsckReadOnlyOpen checks that OpenReadOnly and a check without repair
// leave a pending commit in place.
func TestFsckReadOnlyOpen(t *testing.T) {
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
	completeForFsck(t, p, "a")
	logCommit(t, p, &commitRecord{Instance: "a", Key: "a", ExecutionID: 1, HistoryBase: 2})
	ro, err := OpenReadOnly(dir, Options{Logger: quietLog})
	mustNoErr(t, err)
	defer ro.Close()
	d, err := ro.InstanceDetail(context.Background(), "a")
	mustNoErr(t, err)
	if d.PendingCommit == nil || d.PendingCommit.Kind != "ack" || d.Status != "Completed" || len(d.ExecutionDetails) != 1 {
		t.Errorf("InstanceDetail: %+v", d)
	}
	if rep := fsckT(t, dir, false); findingOf(rep, FsckPendingCommit, "instances/a/lease.json") == nil {
		t.Errorf("pending commit not reported: %+v", rep.Findings)
	}
	if pcs, err := p.PendingCommits(context.Background()); err != nil || len(pcs) != 1 {
		t.Errorf("a read-only check finished the pending commit: %v %v", pcs, err)
	}
	if _, err := OpenReadOnly(t.TempDir(), Options{}); !errors.Is(err, ErrNotDurofsDir) {
		t.Errorf("OpenReadOnly of an empty directory: %v", err)
	}
}

// fetchedWorkItem enqueues one work item, fetches it (its claim is written)
// and returns its message name.
func fetchedWorkItem(t *testing.T, p *FSProvider) string {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 7, Name: "A"}))
	w, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, DefaultOnlyTags())
	if err != nil || w == nil {
		t.Fatalf("fetch work: %v", err)
	}
	name, _ := fsqueue.NameFromToken(strings.TrimPrefix(w.LockToken, workTokenPrefix))
	return name
}
