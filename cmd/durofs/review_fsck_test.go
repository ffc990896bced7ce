package main

// Review (branch review-fsck): defects of the CLI found by review. Each test
// fails on the code it was written against.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durofs/durofs/provider"
)

// TestReviewHistoryOfALossyExecutionIsNotPresentedAsComplete: a history that
// lost committed events (fsck: history_loss, "never served", docs/design.md
// §6.3) is printed by "durofs history" as if it were the whole execution:
// exit 0, no word on stderr - while a torn tail gets a stderr note and a
// corrupt line exit 1. "durofs show" lists it without a PROBLEM either.
func TestReviewHistoryOfALossyExecutionIsNotPresentedAsComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	dir := fixture(t)
	hp := filepath.Join(dir, "instances", "done-1", "executions", "1", "history.jsonl")
	data, err := os.ReadFile(hp)
	must(t, err)
	first, _, ok := strings.Cut(string(data), "\n")
	if !ok {
		t.Fatalf("history: %q", data)
	}
	writeFile(t, hp, first+"\n") // event 2 (OrchestrationCompleted), committed, is gone
	rep := fsckReport(t, bin, 1, "--dir", dir)
	if len(findingsByKind(rep)[provider.FsckHistoryLoss]) == 0 {
		t.Fatalf("fsck does not report the loss: %+v", rep.Findings)
	}

	r := runCLI(t, bin, nil, "history", "done-1", "--dir", dir)
	if r.code == exitOK && r.stderr == "" {
		t.Errorf("durofs history of an execution missing a committed event: exit 0, nothing on stderr; stdout:\n%s", r.stdout)
	}
	var det provider.InstanceDetail
	r = mustRun(t, bin, 0, "show", "done-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if len(det.ExecutionDetails) != 1 || det.ExecutionDetails[0].Problem == "" {
		t.Errorf("durofs show: execution with event_count %d and %d history record(s) has no problem: %+v",
			det.ExecutionDetails[0].EventCount, det.ExecutionDetails[0].HistoryRecords, det.ExecutionDetails)
	}
}

// TestReviewFsckSaysRepairCannotFixAKilledWritersCommit: a "durofs delete"
// SIGKILLed right after its commit point (failpoint delete.after_commit)
// leaves its deletion committed in the log and unapplied. Once older than
// --min-age (a minute by default; 1ms here instead of waiting), "durofs
// fsck" reports it as stuck_commit, "its apply fails" (nothing ever tried
// it), and ends with "result: NOT clean (--repair cannot fix these
// findings ...)": the CLI's list of repairable kinds lacks stuck_commit.
// Yet "durofs fsck --repair" applies it and the directory is clean.
func TestReviewFsckSaysRepairCannotFixAKilledWritersCommit(t *testing.T) {
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
	if strings.Contains(check.stdout, "--repair cannot fix") {
		t.Errorf("durofs fsck says --repair cannot fix the findings, but durofs fsck --repair then leaves the directory clean.\nfsck:\n%s\nfsck --repair:\n%s",
			check.stdout, repair.stdout)
	}
}
