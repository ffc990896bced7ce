package main

// Review (branch review-fsck): defects of the CLI found by review. Each test
// fails on the code it was written against.

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
