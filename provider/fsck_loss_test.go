package provider

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/vfs"
)

// quarantined returns the files in dir/quarantine and the manifests
// (.reason files) among them, by name.
func quarantined(t *testing.T, dir string) (files map[string][]byte, reasons map[string]string) {
	t.Helper()
	files, reasons = map[string][]byte{}, map[string]string{}
	entries, err := os.ReadDir(filepath.Join(dir, "quarantine"))
	if os.IsNotExist(err) {
		return files, reasons
	}
	mustNoErr(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, "quarantine", e.Name()))
		if err != nil && e.Type()&os.ModeSymlink == 0 {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".reason") {
			reasons[strings.TrimSuffix(e.Name(), ".reason")] = string(data)
		} else {
			files[e.Name()] = data
		}
	}
	return files, reasons
}

// TestFsckHistoryLoss: fsck never deletes committed history and calls the
// result clean. A history shorter than its state.json's event_count (or an
// execution instance.json lists that is gone, or total_events above what
// the histories hold) is a history_loss error that a repair never fixes:
// the counters stay, and the bytes of a lost record left after the last
// complete line are moved to quarantine/ with a manifest. When the
// write-ahead log still holds the lost records, the repair restores them
// instead. A torn tail nobody committed is still trimmed.
func TestFsckHistoryLoss(t *testing.T) {
	const hist = "instances/a/executions/1/history.jsonl"
	cut := func(n int64) func(t *testing.T, dir, hp string) {
		return func(t *testing.T, dir, hp string) {
			fi, err := os.Stat(hp)
			mustNoErr(t, err)
			mustNoErr(t, os.Truncate(hp, fi.Size()-n))
		}
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir, hp string)
		// keepLog keeps the provider open during the checks, so that the
		// log still holds the instance's commit (no final checkpoint).
		keepLog bool
		// kind and path of the finding that must remain after a repair
		// ("" if the repair must leave the directory clean).
		lossPath string
		// quarantinedBytes is the length of the bytes a repair must move
		// to quarantine/ from the history (0: none).
		quarantinedBytes int64
		// records is what the history must hold after the repair.
		records int
	}{
		{name: "last 40 bytes cut (issue 18)", damage: cut(40), lossPath: hist, quarantinedBytes: -1, records: 1},
		{name: "last record cut at its line start", damage: func(t *testing.T, dir, hp string) {
			mustNoErr(t, os.Truncate(hp, lineStart(t, hp, 2)))
		}, lossPath: hist, records: 1},
		{name: "emptied", damage: func(t *testing.T, dir, hp string) { mustNoErr(t, os.Truncate(hp, 0)) }, lossPath: hist},
		{name: "removed", damage: func(t *testing.T, dir, hp string) { mustNoErr(t, os.Remove(hp)) }, lossPath: hist},
		{name: "replaced by a symbolic link (issue 18)", damage: func(t *testing.T, dir, hp string) {
			other := filepath.Join(t.TempDir(), "elsewhere.jsonl")
			mustNoErr(t, os.WriteFile(other, nil, 0o600))
			mustNoErr(t, os.Remove(hp))
			mustNoErr(t, os.Symlink(other, hp))
		}, lossPath: hist},
		{name: "execution directory removed", damage: func(t *testing.T, dir, hp string) {
			mustNoErr(t, os.RemoveAll(filepath.Dir(hp)))
		}, lossPath: "instances/a/instance.json", records: -1},
		{name: "last 40 bytes cut, the log still holds them", keepLog: true, damage: cut(40), records: 2},
		{name: "history removed, the log still holds it", keepLog: true, damage: func(t *testing.T, dir, hp string) {
			mustNoErr(t, os.Remove(hp))
		}, records: 2},
		{name: "cut, and the record left is not the logged one", keepLog: true, damage: func(t *testing.T, dir, hp string) {
			line, err := history.EncodeRecord(history.Record{ID: 1, Epoch: 1, Payload: []byte(`{"not":"the logged event"}`)})
			mustNoErr(t, err)
			mustNoErr(t, os.WriteFile(hp, line, 0o600))
		}, lossPath: hist, records: 1},
		{name: "torn tail nobody committed", damage: func(t *testing.T, dir, hp string) {
			f, err := os.OpenFile(hp, os.O_WRONLY|os.O_APPEND, 0)
			mustNoErr(t, err)
			_, err = f.WriteString(`0badc0de 3 1 {"event_id":3,"ty`)
			mustNoErr(t, err)
			mustNoErr(t, f.Close())
		}, records: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			completeForFsck(t, p, "a")
			if !c.keepLog {
				mustNoErr(t, p.Close()) // its last checkpoint empties the log
			}
			hp := filepath.Join(dir, hist)
			c.damage(t, dir, hp)
			size := func() int64 {
				fi, err := os.Lstat(hp)
				if err != nil {
					return -1
				}
				return fi.Size()
			}
			sizeBefore := size()

			rep := fsckT(t, dir, false)
			if c.lossPath != "" {
				f := findingOf(rep, FsckHistoryLoss, c.lossPath)
				if f == nil || f.Severity != SeverityError || rep.Clean() {
					t.Fatalf("check: no history_loss error for %s: %+v", c.lossPath, rep.Findings)
				}
				if !strings.Contains(f.Detail, `"a"`) {
					t.Errorf("the finding does not name the instance: %s", f.Detail)
				}
			}
			if f := findingOf(rep, FsckTornTail, hist); f != nil && c.lossPath != "" {
				t.Errorf("bytes of a committed record reported as a torn tail never committed: %+v", f)
			}

			rep = fsckT(t, dir, true)
			after := fsckT(t, dir, false)
			if c.lossPath == "" {
				if !rep.Clean() || !after.Clean() {
					t.Fatalf("repair: %+v\nthen: %+v", rep.Remaining(), after.Remaining())
				}
			} else {
				f := findingOf(rep, FsckHistoryLoss, c.lossPath)
				if f == nil || f.Repaired || rep.Clean() {
					t.Fatalf("repair: history_loss for %s repaired or gone, or the result is clean: %+v", c.lossPath, rep.Findings)
				}
				if findingOf(after, FsckHistoryLoss, c.lossPath) == nil || after.Clean() {
					t.Errorf("a check after the repair no longer reports the loss: %+v", after.Findings)
				}
				// The counters still say what was committed.
				ef, err := readExecFileAt(dir, 1)
				if c.records >= 0 && (err != nil || ef.EventCount != 2) {
					t.Errorf("state.json after the repair: %+v, %v; want event_count 2", ef, err)
				}
				if inf := readInstanceFileAt(t, dir); inf.TotalEvents != 2 || inf.Executions.Len() != 1 {
					t.Errorf("instance.json after the repair: total_events %d, executions %v; want 2, [1]", inf.TotalEvents, inf.Executions)
				}
			}
			files, reasons := quarantined(t, dir)
			var moved []byte
			for name, data := range files {
				if strings.HasPrefix(name, strings.ReplaceAll(hist, "/", "__")) {
					moved = data
					if !strings.Contains(reasons[name], "path: "+hist) || !strings.Contains(reasons[name], "reason: ") {
						t.Errorf("manifest of %s: %q", name, reasons[name])
					}
				}
			}
			switch {
			case c.quarantinedBytes == -1:
				if len(moved) == 0 || int64(len(moved)) != sizeBefore-lineStart(t, hp, 2) {
					t.Errorf("quarantine holds %q; want the %d byte(s) of the lost record after the last complete line", moved, sizeBefore-lineStart(t, hp, 2))
				}
			case moved != nil && !strings.Contains(c.name, "symbolic link"):
				t.Errorf("quarantine holds %q from the history; want nothing", moved)
			}
			if c.records >= 0 {
				s, err := history.Open(vfs.OS{}, hp).Read()
				if err != nil || len(s.Records) != c.records || s.TornBytes != 0 {
					t.Errorf("history after the repair: %d records, %d torn bytes, %v; want %d records", len(s.Records), s.TornBytes, err, c.records)
				}
			}
			if c.lossPath == "" && c.keepLog {
				// Restored: the provider serves it again.
				mustNoErr(t, p.EnqueueForOrchestrator(context.Background(), ExternalRaised{Instance: "a", Name: "x", Data: "1"}, 0))
				it, err := p.FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
				if err != nil || it == nil || it.Item.HistoryError != nil || len(it.Item.History) != 2 {
					t.Errorf("fetch after the restore: %+v, %v", it, err)
				}
			}
		})
	}
}

func readExecFileAt(dir string, exec uint64) (*executionFile, error) {
	var ef executionFile
	data, err := os.ReadFile(filepath.Join(dir, "instances", "a", "executions", "1", "state.json"))
	if err != nil {
		return nil, err
	}
	return &ef, jsonUnmarshal(data, &ef)
}

func readInstanceFileAt(t *testing.T, dir string) instanceFile {
	t.Helper()
	var inf instanceFile
	data, err := os.ReadFile(filepath.Join(dir, "instances", "a", "instance.json"))
	mustNoErr(t, err)
	mustNoErr(t, jsonUnmarshal(data, &inf))
	return inf
}

// TestFsckBeforeReplay: after a power loss, before any process reopened
// the directory, a history may be shorter than the state.json that counts
// it while the write-ahead log holds what is missing. That is no loss: the
// check reports the replay as due and the records as held by the log; the
// repair replays first (as a provider's Open does) and is then clean.
func TestFsckBeforeReplay(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewStrictMem()
	const dir = "/d"
	mustNoErr(t, mem.MkdirAll(dir, vfs.DirPerm))
	mem.MarkAllSynced()
	p, err := Open(dir, Options{fs: mem, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mustNoErr(t, err)
	v := "1.0.0"
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "a", Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %+v %v", it, err)
	}
	s := started("a")
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{s}, nil, nil, md("TestOrch", "1.0.0"), nil))
	mem.MarkAllSynced() // the first turn is durable (as a checkpoint makes it)
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "x", Data: "1"}, 0))
	it, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %+v %v", it, err)
	}
	evs := []Event{
		{EventID: 2, InstanceID: "a", ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "A", Input: "1"}},
		{EventID: 3, InstanceID: "a", ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "B", Input: "2"}},
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
	// The second turn's state.json reaches the disk, its history lines do
	// not (the writeback order of a power loss).
	key := instanceKey("a")
	mustNoErr(t, p.syncFile(p.execStatePath(key, 1)))
	mustNoErr(t, mem.SyncDir(p.execDir(key, 1)))
	mem.Crash()
	if n, _, _ := history.Open(mem, p.historyPath(key, 1)).Stat(); n != 1 {
		t.Fatalf("after the power loss the history holds %d records, want 1 (the test's premise)", n)
	}

	rep, err := fsck(ctx, dir, FsckOptions{Logger: quietLog}, Options{fs: mem})
	mustNoErr(t, err)
	for _, f := range rep.Findings {
		if f.Kind == FsckHistoryLoss || f.Kind == FsckCounterDrift || f.Kind == FsckTornTail {
			t.Errorf("before the replay: %+v", f)
		}
	}
	if findingOf(rep, FsckPendingCommit, "wal") == nil || findingOf(rep, FsckPendingCommit, "history.jsonl") == nil {
		t.Errorf("before the replay: want the replay and the records the log holds reported: %+v", rep.Findings)
	}
	rep, err = fsck(ctx, dir, FsckOptions{Logger: quietLog, Repair: true}, Options{fs: mem})
	mustNoErr(t, err)
	if f := findingOf(rep, FsckPendingCommit, "wal"); f == nil || !f.Repaired || !rep.Clean() {
		t.Errorf("repair: %+v", rep.Findings)
	}
	if n, _, err := history.Open(mem, p.historyPath(key, 1)).Stat(); n != 3 || err != nil {
		t.Errorf("after the repair the history holds %d records (%v), want 3", n, err)
	}
	rep, err = fsck(ctx, dir, FsckOptions{Logger: quietLog}, Options{fs: mem})
	if err != nil || !rep.Clean() || len(rep.Findings) != 0 {
		t.Errorf("check after the repair: %+v, %v", rep.Findings, err)
	}
}

// TestFsckWhileReplayDueCallsALoggedLineRepairable: after a reboot, until
// the log is replayed, the files may hold anything where the unsynced
// applies wrote (the replay rewrites every byte its records describe). A
// check (no --repair) must not call such a damaged history line, whose
// record the log still holds, "not repairable: ... restore it from a
// backup, or delete the instance": fsck --repair, which replays first,
// restores it and finds the directory clean. (An operator following that
// advice would delete an instance whose acknowledged history is intact in
// the log.)
func TestFsckWhileReplayDueCallsALoggedLineRepairable(t *testing.T) {
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
		if strings.Contains(f.Action, "not repairable") || f.Kind == FsckCorruptRecord {
			t.Errorf("fsck (check) while a replay is due: %s %s: %q -> %q; yet fsck --repair restored it from the log and found the directory clean",
				f.Kind, f.Path, f.Detail, f.Action)
		}
	}
	if f := findingOf(check, FsckPendingCommit, "history.jsonl"); f == nil || !strings.Contains(f.Action, "replays the log") {
		t.Errorf("fsck (check) while a replay is due: want the damaged line reported as rewritten by the replay: %+v", check.Findings)
	}
}
