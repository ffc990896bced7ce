package provider

// Review (branch review-fsck): defects of fsck found by review. Each test
// fails on the code it was written against (the first is fixed and moved).

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewFsckCheckWhileReplayDueSaysUnrepairable: after a reboot, until
// the log is replayed, the files may hold anything where the unsynced
// applies wrote (the replay "rewrites every byte", docs/design.md). fsck
// without --repair reports such a history line as corrupt_record, "not
// repairable: ... restore it from a backup, or delete the instance", while
// fsck --repair (which replays first) restores it and reports nothing. An
// operator following the check's advice deletes an instance whose
// acknowledged history is intact in the log.
func TestReviewFsckCheckWhileReplayDueSaysUnrepairable(t *testing.T) {
	src := t.TempDir()
	p := openT(t, src, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	completeForFsck(t, p, "a") // acked: its record is in the log, not checkpointed
	// The directory as a power loss leaves it: a copy holds no flock (its
	// process is gone), the boot id is another boot's, and the applied (not
	// yet synced) history line is damaged.
	dir := filepath.Join(t.TempDir(), "d")
	if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	mustNoErr(t, os.WriteFile(filepath.Join(dir, "wal", "boot"), []byte("00000000-0000-0000-0000-000000000000"), 0o600))
	hp := filepath.Join(dir, "instances", "a", "executions", "1", "history.jsonl")
	data, err := os.ReadFile(hp)
	mustNoErr(t, err)
	i := bytes.Index(data, []byte("OrchestrationCompleted"))
	if i < 0 {
		t.Fatalf("history: %q", data)
	}
	data[i] = 'X'
	mustNoErr(t, os.WriteFile(hp, data, 0o600))

	check := fsckT(t, dir, false)
	repair := fsckT(t, dir, true)
	if !repair.Clean() {
		t.Fatalf("fsck --repair did not restore the directory from the log: %+v", repair.Remaining())
	}
	for _, f := range check.Findings {
		if strings.Contains(f.Action, "not repairable") {
			t.Errorf("fsck (check) while a replay is due: %s %s: %q -> %q; yet fsck --repair restored it from the log and found the directory clean",
				f.Kind, f.Path, f.Detail, f.Action)
		}
	}
}
