package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/provider"
)

// cliResult is one run of the binary.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the durofs binary with args (and extra environment).
func runCLI(t *testing.T, bin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append(os.Environ(), "DUROFS_DIR="), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: exitCode(t, err, args)}
}

// exitCode is the exit status of a command that ran with error err; it
// fails the test if the command could not run.
func exitCode(t *testing.T, err error, args []string) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("durofs %v: %v", args, err)
	return -1
}

// mustRun runs the binary and requires exit code want.
func mustRun(t *testing.T, bin string, want int, args ...string) cliResult {
	t.Helper()
	r := runCLI(t, bin, nil, args...)
	if r.code != want {
		t.Fatalf("durofs %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, text)
		}
	}
}

func strp(s string) *string { return &s }

// fixture builds a directory with the provider:
//
//	done-1   completed in one turn
//	run-1    running: an activity and a session activity (both claimed), a
//	         pending timer, custom status, a queued external event
//	child-1  a completed sub-orchestration of run-1
//	can-1    continued as new once: executions 1 and 2
//	held-1   started and fetched but not acked: a held lease
//
// It returns the directory (the provider is closed).
func fixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fixture")
	p, err := provider.Open(dir, provider.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	now := uint64(time.Now().UnixMilli())
	ev := func(inst string, exec, id uint64, kind provider.EventKind) provider.Event {
		return provider.Event{EventID: id, InstanceID: inst, ExecutionID: exec, TimestampMs: now, DuroxideVersion: "0.1.26", Kind: kind}
	}
	md := func(name string, status, output *string, parent *string) provider.ExecutionMetadata {
		v := "1.0.0"
		return provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &v, Status: status, Output: output, ParentInstanceID: parent}
	}
	start := func(inst, name string, parent *string) {
		t.Helper()
		must(t, p.EnqueueForOrchestrator(ctx, provider.StartOrchestration{Instance: inst, Orchestration: name, Input: `"in"`, Version: strp("1.0.0"), ParentInstance: parent, ExecutionID: 1}, 0))
	}
	fetch := func(inst string, lock time.Duration) *provider.LockedOrchestrationItem {
		t.Helper()
		it, err := p.FetchOrchestrationItem(ctx, lock, 0, nil)
		if err != nil || it == nil || it.Item.Instance != inst {
			t.Fatalf("fetch %s: %+v, %v", inst, it, err)
		}
		return it
	}
	started := func(inst string, exec uint64, name string, parent *string) provider.Event {
		return ev(inst, exec, 1, provider.OrchestrationStarted{Name: name, Version: "1.0.0", Input: `"in"`, ParentInstance: parent})
	}

	// done-1
	start("done-1", "Greet", nil)
	it := fetch("done-1", time.Minute)
	must(t, p.AckOrchestrationItem(ctx, it.LockToken, 1,
		[]provider.Event{started("done-1", 1, "Greet", nil), ev("done-1", 1, 2, provider.OrchestrationCompleted{Output: `"hello"`})},
		nil, nil, md("Greet", strp("Completed"), strp(`"hello"`), nil), nil))

	// run-1
	start("run-1", "Main", nil)
	it = fetch("run-1", time.Minute)
	sess := "sess-1"
	must(t, p.AckOrchestrationItem(ctx, it.LockToken, 1,
		[]provider.Event{
			started("run-1", 1, "Main", nil),
			ev("run-1", 1, 2, provider.ActivityScheduled{Name: "Work", Input: `"a"`}),
			ev("run-1", 1, 3, provider.ActivityScheduled{Name: "Pinned", Input: `"b"`, SessionID: &sess}),
			ev("run-1", 1, 4, provider.TimerCreated{FireAtMs: now + 3_600_000}),
			ev("run-1", 1, 5, provider.SubOrchestrationScheduled{Name: "Child", Instance: "child-1", Input: `"c"`}),
			ev("run-1", 1, 6, provider.CustomStatusUpdated{Status: strp("halfway")}),
		},
		[]provider.WorkItem{
			provider.ActivityExecute{Instance: "run-1", ExecutionID: 1, ID: 2, Name: "Work", Input: `"a"`},
			provider.ActivityExecute{Instance: "run-1", ExecutionID: 1, ID: 3, Name: "Pinned", Input: `"b"`, SessionID: &sess},
		},
		[]provider.WorkItem{provider.TimerFired{Instance: "run-1", ExecutionID: 1, ID: 4, FireAtMs: now + 3_600_000}},
		md("Main", nil, nil, nil), nil))
	w1, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, provider.DefaultOnlyTags())
	if err != nil || w1 == nil {
		t.Fatalf("fetch work item: %v", err)
	}
	w2, err := p.FetchWorkItem(ctx, time.Hour, 0, &provider.SessionFetchConfig{OwnerID: "worker-a", LockTimeout: time.Hour}, provider.DefaultOnlyTags())
	if err != nil || w2 == nil {
		t.Fatalf("fetch session work item: %v", err)
	}

	// child-1
	start("child-1", "Child", strp("run-1"))
	it = fetch("child-1", time.Minute)
	must(t, p.AckOrchestrationItem(ctx, it.LockToken, 1,
		[]provider.Event{started("child-1", 1, "Child", strp("run-1")), ev("child-1", 1, 2, provider.OrchestrationCompleted{Output: `"kid"`})},
		nil, nil, md("Child", strp("Completed"), strp(`"kid"`), strp("run-1")), nil))

	// can-1: execution 1 continues as new, execution 2 completes.
	start("can-1", "Loop", nil)
	it = fetch("can-1", time.Minute)
	must(t, p.AckOrchestrationItem(ctx, it.LockToken, 1,
		[]provider.Event{started("can-1", 1, "Loop", nil), ev("can-1", 1, 2, provider.OrchestrationContinuedAsNew{Input: `"next"`})},
		nil, []provider.WorkItem{provider.ContinueAsNew{Instance: "can-1", Orchestration: "Loop", Input: `"next"`, Version: strp("1.0.0"), CarryForwardEvents: [][2]string{}}},
		md("Loop", strp("ContinuedAsNew"), strp(`"next"`), nil), nil))
	it = fetch("can-1", time.Minute)
	must(t, p.AckOrchestrationItem(ctx, it.LockToken, 2,
		[]provider.Event{started("can-1", 2, "Loop", nil), ev("can-1", 2, 2, provider.OrchestrationCompleted{Output: `"looped"`})},
		nil, nil, md("Loop", strp("Completed"), strp(`"looped"`), nil), nil))

	// held-1: fetched, never acked.
	start("held-1", "Slow", nil)
	fetch("held-1", time.Hour)

	// A queued external event for run-1.
	must(t, p.EnqueueForOrchestrator(ctx, provider.ExternalRaised{Instance: "run-1", Name: "go", Data: `"now"`}, 0))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestInspectionCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	dir := fixture(t)

	// ls, table and JSON, and --dir from the environment.
	r := runCLI(t, bin, []string{"DUROFS_DIR=" + dir}, "ls")
	if r.code != 0 {
		t.Fatalf("ls: %d %s", r.code, r.stderr)
	}
	// held-1 was started and fetched, but no turn of it was acked: Pending.
	mustContain(t, "ls", r.stdout, "INSTANCE", "done-1", "Greet", "run-1", "Running", "can-1", "child-1", "Completed", "held-1", "Pending", "5 instance(s)")
	r = mustRun(t, bin, 0, "ls", "--dir", dir, "--status", "Running")
	if !strings.Contains(r.stdout, "run-1") || strings.Contains(r.stdout, "done-1") {
		t.Errorf("ls --status Running:\n%s", r.stdout)
	}
	var list []provider.InstanceSummary
	r = mustRun(t, bin, 0, "ls", "--json", "--dir", dir)
	must(t, json.Unmarshal([]byte(r.stdout), &list))
	byID := map[string]provider.InstanceSummary{}
	for _, s := range list {
		byID[s.Instance] = s
	}
	if s := byID["can-1"]; s.CurrentExecution != 2 || s.Executions != 2 || s.Status != "Completed" || s.Name != "Loop" {
		t.Errorf("ls --json can-1: %+v", s)
	}
	if s := byID["child-1"]; s.Parent == nil || *s.Parent != "run-1" {
		t.Errorf("ls --json child-1: %+v", s)
	}

	// show
	r = mustRun(t, bin, 0, "show", "run-1", "--dir", dir)
	mustContain(t, "show run-1", r.stdout, "Main, version 1.0.0", "Running", `"halfway" (version 1)`, "children", "child-1",
		"pending commit  none", "TimerFired", "ExternalRaised", "ActivityExecute")
	r = mustRun(t, bin, 0, "show", "--dir", dir, "held-1")
	mustContain(t, "show held-1", r.stdout, "held by", "1 message(s) locked", "StartOrchestration")
	var det provider.InstanceDetail
	r = mustRun(t, bin, 0, "show", "can-1", "--json", "--dir", dir)
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if len(det.ExecutionDetails) != 2 || det.ExecutionDetails[0].Status != "ContinuedAsNew" || det.ExecutionDetails[1].Status != "Completed" ||
		det.ExecutionDetails[1].HistoryRecords != 2 || det.Lease == nil || det.Lease.State != provider.LeaseFree {
		t.Errorf("show --json can-1: %+v", det)
	}
	r = mustRun(t, bin, 0, "show", "child-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if det.Parent == nil || *det.Parent != "run-1" {
		t.Errorf("show child-1: parent %v", det.Parent)
	}
	r = mustRun(t, bin, 1, "show", "nobody", "--dir", dir)
	mustContain(t, "show nobody", r.stderr, "not found")

	// history
	r = mustRun(t, bin, 0, "history", "run-1", "--dir", dir)
	mustContain(t, "history run-1", r.stdout, "OrchestrationStarted", `name="Main"`, "ActivityScheduled", `session="sess-1"`, "TimerCreated", "CustomStatusUpdated", `status="halfway"`, "6 event(s)")
	r = mustRun(t, bin, 0, "history", "can-1", "--execution", "1", "--dir", dir)
	mustContain(t, "history can-1 --execution 1", r.stdout, "OrchestrationContinuedAsNew", `input="\"next\""`)
	r = mustRun(t, bin, 0, "history", "can-1", "--dir", dir, "--json")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("history --json: %d lines:\n%s", len(lines), r.stdout)
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["execution_id"] != float64(2) {
			t.Errorf("history --json line %q: %v", l, err)
		}
	}
	mustRun(t, bin, 1, "history", "can-1", "--execution", "9", "--dir", dir)

	// queues
	r = mustRun(t, bin, 0, "queues", "--dir", dir)
	mustContain(t, "queues", r.stdout, "orchestrator", "worker", "NEXT TIMER", "TimerFired 1")
	var qs provider.QueueStats
	r = mustRun(t, bin, 0, "queues", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &qs))
	if o := qs.Orchestrator; o.Messages != 3 || o.Timers != 1 || o.Delayed != 1 || o.Locked != 1 || o.Ready != 1 || o.NextTimerAtMs == 0 {
		t.Errorf("queues --json orchestrator: %+v", o)
	}
	if w := qs.Worker; w.Messages != 2 || w.Locked != 2 || w.Claims != 2 || w.Ready != 0 {
		t.Errorf("queues --json worker: %+v", w)
	}

	// leases
	r = mustRun(t, bin, 0, "leases", "--dir", dir)
	mustContain(t, "leases", r.stdout, "instance", "held-1", "work-item", "run-1", "session", "sess-1", "worker-a", "4 held")
	if strings.Contains(r.stdout, "done-1") {
		t.Errorf("leases lists a free lease without --all:\n%s", r.stdout)
	}
	r = mustRun(t, bin, 0, "leases", "--dir", dir, "--all")
	mustContain(t, "leases --all", r.stdout, "done-1", "free")
	var leases []provider.LeaseInfo
	r = mustRun(t, bin, 0, "leases", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &leases))
	kinds := map[string]int{}
	for _, l := range leases {
		if l.State != provider.LeaseHeld {
			t.Errorf("leases --json: %+v", l)
		}
		kinds[l.Kind]++
	}
	if kinds[provider.LeaseKindInstance] != 1 || kinds[provider.LeaseKindWorkItem] != 2 || kinds[provider.LeaseKindSession] != 1 {
		t.Errorf("leases --json kinds: %v", kinds)
	}

	// stats
	r = mustRun(t, bin, 0, "stats", "--dir", dir)
	mustContain(t, "stats", r.stdout, "instances", "4 (running 1, completed 3, failed 0)", "pending", "1 (started", "disk usage", "instances", "total")
	var st statsReport
	r = mustRun(t, bin, 0, "stats", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &st))
	if st.Metrics.TotalInstances != 4 || st.Metrics.PendingInstances != 1 || st.Metrics.TotalExecutions != 5 || st.Metrics.TotalEvents != 14 || st.QueueDepths.Orchestrator != 2 ||
		st.Queues.Orchestrator.Timers != 1 || st.DiskTotal.Bytes == 0 {
		t.Errorf("stats --json: %+v", st)
	}

	// fsck: the fixture is consistent.
	r = mustRun(t, bin, 0, "fsck", "--dir", dir)
	mustContain(t, "fsck", r.stdout, "result: clean", "5 instances")
	var rep fsckJSON
	r = mustRun(t, bin, 0, "fsck", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &rep))
	if !rep.Clean || rep.Checked.Instances != 5 || rep.Checked.HistoryRecords != 14 || rep.Checked.Claims != 2 || rep.Checked.Sessions != 1 {
		t.Errorf("fsck --json: %+v", rep)
	}
}

func TestAdminCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	dir := fixture(t)

	// prune: can-1 keeps only its current execution.
	r := mustRun(t, bin, 0, "prune", "can-1", "--dir", dir)
	mustContain(t, "prune can-1", r.stdout, "pruned 1 execution(s) (2 event(s)) in 1 instance(s)")
	var det provider.InstanceDetail
	r = mustRun(t, bin, 0, "show", "can-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if len(det.ExecutionDetails) != 1 || det.ExecutionDetails[0].ExecutionID != 2 || det.TotalEvents != 2 {
		t.Errorf("after prune: %+v", det)
	}
	var pr pruneResult
	r = mustRun(t, bin, 0, "prune", "--all", "--keep-last", "1", "--completed-before", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &pr))
	if pr.InstancesProcessed != 4 || pr.ExecutionsDeleted != 0 {
		t.Errorf("prune --all: %+v", pr)
	}

	// delete: a running root needs --force, and takes its child along.
	r = mustRun(t, bin, 1, "delete", "run-1", "--dir", dir)
	mustContain(t, "delete run-1", r.stderr, "running")
	mustRun(t, bin, 1, "delete", "child-1", "--dir", dir) // not a root
	var dr deleteResult
	r = mustRun(t, bin, 0, "delete", "run-1", "--force", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &dr))
	if dr.InstancesDeleted != 2 || dr.QueueMessagesDeleted != 4 || dr.EventsDeleted != 8 {
		t.Errorf("delete run-1 --force: %+v", dr)
	}
	r = mustRun(t, bin, 0, "delete", "done-1", "--dir", dir)
	mustContain(t, "delete done-1", r.stdout, "deleted done-1: 1 instance(s), 1 execution(s), 2 event(s)")
	mustRun(t, bin, 1, "delete", "done-1", "--dir", dir)
	r = mustRun(t, bin, 0, "ls", "--dir", dir)
	if strings.Contains(r.stdout, "run-1") || strings.Contains(r.stdout, "done-1") || !strings.Contains(r.stdout, "can-1") {
		t.Errorf("ls after delete:\n%s", r.stdout)
	}
	// Messages for an instance that never existed: delete removes them.
	p, err := provider.Open(dir, provider.Options{SweepInterval: -1})
	must(t, err)
	must(t, p.EnqueueForOrchestrator(context.Background(), provider.ExternalRaised{Instance: "ghost", Name: "x", Data: "1"}, 0))
	p.Close()
	r = mustRun(t, bin, 0, "delete", "ghost", "--dir", dir)
	mustContain(t, "delete ghost", r.stdout, "1 queued message(s)")
	mustRun(t, bin, 0, "fsck", "--dir", dir)

	// Messages for instances never started: listed by queues, drained by
	// drain (the given instances', or all).
	p, err = provider.Open(dir, provider.Options{SweepInterval: -1})
	must(t, err)
	for _, inst := range []string{"ghost-a", "ghost-a", "ghost-b"} {
		must(t, p.EnqueueForOrchestrator(context.Background(), provider.ExternalRaised{Instance: inst, Name: "x", Data: "1"}, 0))
	}
	p.Close()
	r = mustRun(t, bin, 0, "queues", "--dir", dir)
	mustContain(t, "queues", r.stdout, "messages for instances never started: 3, for 2 instance(s)", "ghost-a", "ghost-b", "durofs drain")
	var qr queuesReport
	r = mustRun(t, bin, 0, "queues", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &qr))
	if len(qr.NeverStarted) != 3 || qr.Orchestrator.Messages == 0 {
		t.Errorf("queues --json: %+v", qr)
	}
	mustRun(t, bin, 2, "drain", "--older-than", "-1s", "--dir", dir)
	r = mustRun(t, bin, 0, "drain", "--older-than", "1h", "--dir", dir)
	mustContain(t, "drain --older-than 1h", r.stdout, "drained 0 message(s)")
	r = mustRun(t, bin, 0, "drain", "ghost-a", "--dir", dir)
	mustContain(t, "drain ghost-a", r.stdout, "drained 2 message(s) of 1 instance(s)")
	var dj drainResult
	r = mustRun(t, bin, 0, "drain", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &dj))
	if dj.Drained != 1 || dj.Instances != 1 || len(dj.Messages) != 1 || dj.Messages[0].Instance != "ghost-b" {
		t.Errorf("drain --json: %+v", dj)
	}
	r = mustRun(t, bin, 0, "queues", "--dir", dir)
	if strings.Contains(r.stdout, "never started") {
		t.Errorf("queues after the drain:\n%s", r.stdout)
	}
	mustRun(t, bin, 0, "fsck", "--dir", dir)
}

func TestOperatorUsageErrors(t *testing.T) {
	notDurofs := t.TempDir()
	t.Setenv(dirEnv, "")
	cases := []struct {
		args []string
		want int
	}{
		{[]string{"ls"}, exitUsage},
		{[]string{"ls", "--dir", notDurofs, "extra"}, exitUsage},
		{[]string{"ls", "--dir", notDurofs}, exitFailure},
		{[]string{"ls", "-h"}, exitOK},
		{[]string{"show", "--dir", notDurofs}, exitUsage},
		{[]string{"show", "a", "b", "--dir", notDurofs}, exitUsage},
		{[]string{"history", "--dir", notDurofs}, exitUsage},
		{[]string{"history", "x", "--execution", "x", "--dir", notDurofs}, exitUsage},
		{[]string{"queues", "--bogus"}, exitUsage},
		{[]string{"leases", "--dir", notDurofs}, exitFailure},
		{[]string{"stats", "--dir", notDurofs}, exitFailure},
		{[]string{"fsck"}, exitUsage},
		{[]string{"fsck", "--dir", notDurofs}, exitFailure},
		{[]string{"fsck", "--dir", notDurofs, "--repair"}, exitFailure},
		{[]string{"delete", "--dir", notDurofs}, exitUsage},
		{[]string{"delete", "x", "--dir", notDurofs}, exitFailure},
		{[]string{"prune", "--dir", notDurofs}, exitUsage},
		{[]string{"prune", "x", "--all", "--dir", notDurofs}, exitUsage},
		{[]string{"prune", "x", "--completed-before", "yesterday", "--dir", notDurofs}, exitUsage},
		{[]string{"prune", "x", "--dir", notDurofs}, exitFailure},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != c.want {
			t.Errorf("durofs %v: exit %d, want %d\nstderr: %s", c.args, got, c.want, stderr.String())
		}
	}
	if entries, _ := os.ReadDir(notDurofs); len(entries) != 0 {
		t.Errorf("a command wrote into a foreign directory: %v", entries)
	}
	var stdout bytes.Buffer
	run([]string{"help"}, &stdout, &bytes.Buffer{})
	for _, c := range []string{"ls", "show", "history", "queues", "leases", "stats", "fsck", "delete", "prune"} {
		if !strings.Contains(stdout.String(), "\t"+c+" ") {
			t.Errorf("usage does not list %s", c)
		}
	}
}

// copyTree copies a directory tree.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
	must(t, err)
}

// age sets a file's times to d ago.
func age(t *testing.T, path string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	must(t, os.Chtimes(path, old, old))
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(data), 0o600))
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString(data)
	must(t, errors.Join(err, f.Close()))
}

// editJSON rewrites a JSON object file through fn.
func editJSON(t *testing.T, path string, fn func(m map[string]any)) {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(data, &m))
	fn(m)
	data, err = json.Marshal(m)
	must(t, err)
	writeFile(t, path, string(data))
}

// findingsByKind indexes a report's findings.
func findingsByKind(rep fsckJSON) map[string][]provider.FsckFinding {
	out := map[string][]provider.FsckFinding{}
	for _, f := range rep.Findings {
		out[f.Kind] = append(out[f.Kind], f)
	}
	return out
}

func fsckReport(t *testing.T, bin string, want int, args ...string) fsckJSON {
	t.Helper()
	r := mustRun(t, bin, want, append([]string{"fsck", "--json"}, args...)...)
	var rep fsckJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("fsck --json: %v\n%s", err, r.stdout)
	}
	return rep
}

func TestFsckFindsAndRepairsDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	dir := filepath.Join(t.TempDir(), "damaged")
	copyTree(t, fixture(t), dir)
	inst := func(parts ...string) string { return filepath.Join(append([]string{dir, "instances"}, parts...)...) }
	orchQ := filepath.Join(dir, "queues", "orchestrator")

	// 1. A torn tail: half a record after done-1's last line.
	appendFile(t, inst("done-1", "executions", "1", "history.jsonl"), `0badc0de 3 9 {"event_id":3,"ty`)
	// 2. A CRC-flipped record: one payload byte of can-1's execution 2.
	hp := inst("can-1", "executions", "2", "history.jsonl")
	data, err := os.ReadFile(hp)
	must(t, err)
	i := bytes.Index(data, []byte(`"Loop"`))
	data[i+1] = 'X'
	writeFile(t, hp, string(data))
	// 3. A valid record that is not an event, in can-1's execution 1.
	line, err := history.EncodeRecord(history.Record{ID: 3, Epoch: 1, Payload: []byte("NOT_JSON{")})
	must(t, err)
	appendFile(t, inst("can-1", "executions", "1", "history.jsonl"), string(line))
	// 4. Old temporary files.
	tmp1 := filepath.Join(orchQ, ".tmp-"+msgName("01J00000000000000000000009", 1, "done-1")+".json-0f0e")
	tmp2 := inst("done-1", ".tmp-instance.json-1234")
	for _, p := range []string{tmp1, tmp2} {
		writeFile(t, p, "partial")
		age(t, p, 2*time.Hour)
	}
	// 5. An orphan staged message of done-1 (no commit names it).
	stagedName := msgName("01J00000000000000000000001", 1, "done-1")
	staged := filepath.Join(orchQ, ".staged-"+stagedName+".json")
	writeFile(t, staged, `{"name":"`+stagedName+`","visible_at_ms":1,"enqueued_at_ms":1,"attrs":{"instance":"done-1","ikey":"done-1","kind":"ExternalRaised","src":"done-1"},"payload":{"ExternalRaised":{"instance":"done-1","name":"x","data":"1"}}}`)
	age(t, staged, 2*time.Hour)
	// 6. A pending mark in child-1's lease naming a commit that is not in
	// the write-ahead log: its writer died between marking and appending.
	editJSON(t, inst("child-1", "lease.json"), func(m map[string]any) {
		m["data"] = map[string]any{"pending": map[string]any{"id": "0b6f9a3e-2a5c-4d7e-9d3c-1f2e3a4b5c6d", "hint": 0}}
	})
	// 7. Unparseable files: done-1's lease and instance.json, child-1's
	// state.json, a queue message, a claim.
	writeFile(t, inst("done-1", "lease.json"), `{"token":`)
	writeFile(t, inst("done-1", "instance.json"), `{"instance":"done-1",`)
	writeFile(t, inst("child-1", "executions", "1", "state.json"), `garbage`)
	badMsg := filepath.Join(orchQ, msgName("01J00000000000000000000002", 1, "done-1")+".json")
	writeFile(t, badMsg, `{"name":"01J000`)
	claims, err := filepath.Glob(filepath.Join(dir, "queues", "worker", "claims", "*.json"))
	if err != nil || len(claims) != 2 {
		t.Fatalf("claims: %v %v", claims, err)
	}
	writeFile(t, claims[0], `{"token":5}`)
	// 8. Counter drift in run-1's instance.json and state.json (counts
	// below what the history holds: a count above it is history loss).
	editJSON(t, inst("run-1", "instance.json"), func(m map[string]any) { m["total_events"] = 3; m["status"] = "Completed" })
	editJSON(t, inst("run-1", "executions", "1", "state.json"), func(m map[string]any) { m["event_count"] = 4 })
	// 9. A fresh message for an instance that does not exist (info only).
	ghostName := msgName("01J00000000000000000000003", 1, "ghost")
	writeFile(t, filepath.Join(orchQ, ghostName+".json"),
		`{"name":"`+ghostName+`","visible_at_ms":1,"enqueued_at_ms":`+jsonNum(time.Now().UnixMilli())+`,"attrs":{"instance":"ghost","ikey":"ghost","kind":"ExternalRaised"},"payload":{"ExternalRaised":{"instance":"ghost","name":"x","data":"1"}}}`)

	// Read-only inspection works on the damaged directory (a mark with no
	// record is no pending commit).
	r := mustRun(t, bin, 0, "show", "child-1", "--dir", dir)
	mustContain(t, "show child-1", r.stdout, "child-1")

	// The check finds every kind, changes nothing, and exits 1.
	before := snapshot(t, dir)
	rep := fsckReport(t, bin, 1, "--dir", dir)
	if after := snapshot(t, dir); !maps2Equal(before, after) {
		t.Errorf("fsck without --repair changed the directory")
	}
	got := findingsByKind(rep)
	want := map[string][]string{
		provider.FsckTornTail:        {"instances/done-1/executions/1/history.jsonl"},
		provider.FsckCorruptRecord:   {"instances/can-1/executions/2/history.jsonl"},
		provider.FsckBadEvent:        {"instances/can-1/executions/1/history.jsonl"},
		provider.FsckTempFile:        {rel(t, dir, tmp1), rel(t, dir, tmp2)},
		provider.FsckStagedOrphan:    {rel(t, dir, staged)},
		provider.FsckPendingCommit:   {"instances/child-1/lease.json"},
		provider.FsckUnparseable:     {"instances/done-1/lease.json", "instances/done-1/instance.json", "instances/child-1/executions/1/state.json", rel(t, dir, badMsg), rel(t, dir, claims[0])},
		provider.FsckCounterDrift:    {"instances/run-1/instance.json", "instances/run-1/executions/1/state.json"},
		provider.FsckUnknownInstance: {"queues/orchestrator/" + ghostName + ".json"},
	}
	for kind, paths := range want {
		var have []string
		for _, f := range got[kind] {
			have = append(have, filepath.ToSlash(f.Path))
		}
		for _, p := range paths {
			if !slices.Contains(have, filepath.ToSlash(p)) {
				t.Errorf("fsck: no %s finding for %s (have %v)", kind, p, have)
			}
		}
	}
	for kind := range got {
		if _, ok := want[kind]; !ok {
			t.Errorf("fsck: unexpected %s findings: %+v", kind, got[kind])
		}
	}
	if f := got[provider.FsckUnknownInstance]; len(f) == 1 && f[0].Severity != provider.SeverityInfo {
		t.Errorf("a fresh unknown-instance message is %s, want info", f[0].Severity)
	}
	if rep.Clean || rep.Remaining == 0 {
		t.Errorf("fsck reports clean: %+v", rep)
	}
	r = mustRun(t, bin, 1, "fsck", "--dir", dir)
	mustContain(t, "fsck table", r.stdout, "torn_tail", "corrupt_record", "NOT clean")
	t.Logf("fsck:\n%s", r.stdout)

	// Repair: everything but the damaged committed records is fixed.
	rep = fsckReport(t, bin, 1, "--dir", dir, "--repair")
	var buf bytes.Buffer
	printFsck(&buf, rep.FsckReport, rep.Remaining)
	t.Logf("fsck --repair:\n%s", buf.String())
	for _, f := range rep.Findings {
		unrepairable := f.Kind == provider.FsckCorruptRecord || f.Kind == provider.FsckBadEvent || f.Severity == provider.SeverityInfo
		if f.Repaired == unrepairable {
			t.Errorf("fsck --repair: %s %s repaired=%v: %s (%s)", f.Kind, f.Path, f.Repaired, f.Detail, f.Action)
		}
	}
	rep = fsckReport(t, bin, 1, "--dir", dir)
	var kindsLeft []string
	for _, f := range rep.Findings {
		if f.Severity != provider.SeverityInfo {
			kindsLeft = append(kindsLeft, f.Kind)
		}
	}
	slices.Sort(kindsLeft)
	if !slices.Equal(kindsLeft, []string{provider.FsckBadEvent, provider.FsckCorruptRecord}) {
		t.Errorf("after repair, fsck finds %v, want only the damaged committed records:\n%+v", kindsLeft, rep.Findings)
	}

	// What the repairs did.
	for _, p := range []string{tmp1, tmp2, staged, badMsg, claims[0]} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists after repair (%v)", p, err)
		}
	}
	q, err := os.ReadDir(filepath.Join(dir, "quarantine"))
	must(t, err)
	reasons := 0
	for _, e := range q {
		if strings.HasSuffix(e.Name(), ".reason") {
			reasons++
			data, err := os.ReadFile(filepath.Join(dir, "quarantine", e.Name()))
			must(t, err)
			mustContain(t, e.Name(), string(data), "path: ", "reason: ")
		}
	}
	if reasons != 5 || len(q) != 10 {
		t.Errorf("quarantine holds %d files, %d reasons; want 5 of each", len(q)-reasons, reasons)
	}
	var det provider.InstanceDetail
	r = mustRun(t, bin, 0, "show", "done-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if det.Name != "Greet" || det.Version != "1.0.0" || det.Status != "Completed" || det.TotalEvents != 2 || det.CurrentExecution != 1 ||
		det.ExecutionDetails[0].TornBytes != 0 {
		t.Errorf("done-1 after repair: %+v", det)
	}
	r = mustRun(t, bin, 0, "show", "child-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if lease, err := os.ReadFile(inst("child-1", "lease.json")); err != nil || bytes.Contains(lease, []byte("pending")) {
		t.Errorf("the dangling mark is still in child-1's lease after repair: %s %v", lease, err)
	}
	if e := det.ExecutionDetails[0]; e.Status != "Completed" || e.Output == nil || *e.Output != `"kid"` || e.EventCount != 2 || det.PendingCommit != nil {
		t.Errorf("child-1 after repair: %+v", det)
	}
	r = mustRun(t, bin, 0, "show", "run-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if det.TotalEvents != 6 || det.Status != "Running" || det.ExecutionDetails[0].EventCount != 6 {
		t.Errorf("run-1 after repair: %+v", det)
	}

	// The operator deletes the instance with the damaged history: clean.
	mustRun(t, bin, 0, "delete", "can-1", "--dir", dir)
	rep = fsckReport(t, bin, 0, "--dir", dir)
	if !rep.Clean {
		t.Errorf("after deleting can-1: %+v", rep.Findings)
	}
	mustRun(t, bin, 0, "fsck", "--dir", dir)
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }

func rel(t *testing.T, base, path string) string {
	t.Helper()
	r, err := filepath.Rel(base, path)
	must(t, err)
	return r
}

// snapshot maps every file under dir to its content and mtime.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[path] = "dir"
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[path] = fi.ModTime().String() + "\x00" + string(data)
		return nil
	})
	must(t, err)
	return out
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestFsckDemoDirectoryIsClean(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs worker processes")
	}
	bin := buildDurofs(t)
	dir := filepath.Join(t.TempDir(), "demo")
	r := mustRun(t, bin, 0, "demo", "--instances", "10", "--workers", "2", "--dir", dir, "--seed", "7")
	mustContain(t, "demo", r.stdout, "invariant check:      passed")
	r = mustRun(t, bin, 0, "fsck", "--dir", dir)
	mustContain(t, "fsck demo", r.stdout, "result: clean")
	rep := fsckReport(t, bin, 0, "--dir", dir)
	if !rep.Clean || rep.Checked.Instances < 10 {
		t.Errorf("fsck --json on the demo directory: %+v", rep)
	}
	for _, f := range rep.Findings {
		if f.Severity != provider.SeverityInfo {
			t.Errorf("demo directory finding: %+v", f)
		}
	}
	// And the inspection commands agree with each other on it.
	sc := bufio.NewScanner(strings.NewReader(mustRun(t, bin, 0, "ls", "--dir", dir).stdout))
	n := 0
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Completed") || strings.Contains(sc.Text(), "Failed") {
			n++
		}
	}
	if n < 10 {
		t.Errorf("ls on the demo directory lists %d finished instances", n)
	}
}

// TestFsckBesideLiveWorkers runs fsck, checking and repairing, in a loop
// while a runtime works on the directory: fsck must find nothing but
// information, and the workload must still verify.
func TestFsckBesideLiveWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a workload")
	}
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := provider.Open(dir, provider.Options{Logger: quiet, SweepInterval: 100 * time.Millisecond})
	must(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	specs := workload.Mix(11, 30)
	for _, s := range specs {
		must(t, workload.Start(ctx, p, s))
	}
	rctx, stopRuntime := context.WithCancel(ctx)
	rt := workload.NewRuntime(p, workload.RuntimeOptions{Dispatchers: 2, Workers: 2, LockTimeout: 5 * time.Second, Logger: quiet})
	var wg sync.WaitGroup
	wg.Go(func() { _ = rt.Run(rctx) })

	stopFsck := make(chan struct{})
	var passes int
	wg.Go(func() {
		for {
			select {
			case <-stopFsck:
				return
			default:
			}
			rep, err := provider.Fsck(ctx, dir, provider.FsckOptions{Repair: passes%2 == 1, Logger: quiet})
			if err != nil {
				t.Errorf("fsck pass %d: %v", passes, err)
				return
			}
			for _, f := range rep.Findings {
				if f.Severity != provider.SeverityInfo {
					t.Errorf("fsck pass %d beside live workers: %+v", passes, f)
				}
			}
			passes++
		}
	})
	adm, _ := p.Admin()
	awaitErr := workload.Await(ctx, p, adm, specs, nil)
	close(stopFsck)
	stopRuntime()
	wg.Wait()
	if awaitErr != nil {
		t.Fatalf("await: %v", awaitErr)
	}
	t.Logf("%d fsck passes beside the workload", passes)
	vr, err := workload.Verify(ctx, p, adm, specs)
	must(t, err)
	if !vr.OK() {
		t.Errorf("workload verification after fsck passes: %v", vr.Violations)
	}
	rep, err := provider.Fsck(ctx, dir, provider.FsckOptions{Logger: quiet})
	must(t, err)
	if !rep.Clean() {
		t.Errorf("final fsck: %+v", rep.Remaining())
	}
}

// msgName is the name of a queue message with ULID id, visible at vis, for
// the instance whose key is key (fsqueue, name.go).
func msgName(id string, vis int64, key string) string {
	return fsqueue.Entry{ID: ulid.MustParseStrict(id), VisibleAtMs: vis, Route: fsqueue.RouteOf(key)}.Name()
}

// TestDeleteWithoutForceRefusesAFirstTurnInFlight: "durofs delete" says "A
// running instance is refused unless --force". An instance whose first turn
// a live worker is executing (its start fetched, its lease held, no turn
// acked yet, so no instance record) is running: delete without --force
// refuses it (exit 1), and the worker's ack of the turn succeeds. (The CLI
// falls back to DeleteInstancesAtomic for an id without a record, which
// deleted it: the start message the client's start_orchestration was
// acknowledged for was gone, and the ack failed with Invalid lock token.)
func TestDeleteWithoutForceRefusesAFirstTurnInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	dir := t.TempDir()
	ctx := context.Background()
	p, err := provider.Open(dir, provider.Options{SweepInterval: -1, Logger: quietLogger()}) // a live worker
	must(t, err)
	defer p.Close()
	v := "1.0.0"
	must(t, p.EnqueueForOrchestrator(ctx, provider.StartOrchestration{Instance: "first", Orchestration: "O", Input: "{}", Version: &v, ExecutionID: 1}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %v %v", it, err)
	}

	r := runCLI(t, bin, nil, "delete", "first", "--dir", dir)
	if r.code != exitFailure || !strings.Contains(r.stderr, "still running") {
		t.Errorf("durofs delete (no --force) of an instance whose first turn is running: exit %d, want %d (refused, \"still running\")\nstdout: %s\nstderr: %s",
			r.code, exitFailure, r.stdout, r.stderr)
	}
	name, ver := "O", "1.0.0"
	ev := provider.Event{EventID: 1, InstanceID: "first", ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
		Kind: provider.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}}
	if err := p.AckOrchestrationItem(ctx, it.LockToken, 1, []provider.Event{ev}, nil, nil,
		provider.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &ver}, nil); err != nil {
		t.Errorf("the running first turn's ack after durofs delete without --force: %v", err)
	}
}

// TestFsckSaysRepairAppliesAKilledWritersCommit: a "durofs delete"
// SIGKILLed right after its commit point (failpoint delete.after_commit)
// leaves its deletion committed in the log and unapplied. Once older than
// --min-age (a minute by default; 1ms here instead of waiting), "durofs
// fsck" reports it as stuck_commit; "durofs fsck --repair" applies it and
// the directory is clean. So the check's summary must not say "--repair
// cannot fix these findings" (the CLI's list of repairable kinds lacked
// stuck_commit), nor the finding "its apply fails": nothing tried it.
func TestFsckSaysRepairAppliesAKilledWritersCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	ct := filepath.Join(t.TempDir(), "durofs-crashtest")
	if out, err := exec.Command("go", "build", "-tags", "crashtest", "-o", ct, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags crashtest: %v\n%s", err, out)
	}
	dir := fixture(t)
	r := runCLI(t, ct, []string{"DUROFS_FAILPOINT=delete.after_commit"}, "delete", "done-1", "--dir", dir)
	if r.code != 137 && r.code != -1 {
		t.Fatalf("durofs delete with failpoint delete.after_commit: exit %d, want SIGKILL\n%s%s", r.code, r.stdout, r.stderr)
	}
	check := runCLI(t, bin, nil, "fsck", "--min-age", "1ms", "--dir", dir)
	repair := runCLI(t, bin, nil, "fsck", "--repair", "--min-age", "1ms", "--dir", dir)
	if repair.code != exitOK {
		t.Fatalf("fsck --repair: exit %d\n%s%s", repair.code, repair.stdout, repair.stderr)
	}
	if strings.Contains(check.stdout, "): its apply fails") || !strings.Contains(check.stdout, "stuck_commit") {
		t.Errorf("durofs fsck: want a stuck_commit not said to fail its apply (nothing tried it):\n%s", check.stdout)
	}
	if strings.Contains(check.stdout, "--repair cannot fix") {
		t.Errorf("durofs fsck says --repair cannot fix the findings, but durofs fsck --repair then leaves the directory clean.\nfsck:\n%s\nfsck --repair:\n%s",
			check.stdout, repair.stdout)
	}
}
