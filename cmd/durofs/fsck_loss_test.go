package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durofs/durofs/provider"
)

// TestFsckRepairKeepsCommittedHistory runs issue 18's reproductions through
// the binary: fsck --repair must not drop committed records, lower the
// counters and print "result: clean"; it reports history_loss naming the
// instance, exits 1, and moves what it takes away to quarantine/ with a
// manifest.
func TestFsckRepairKeepsCommittedHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	fix := fixture(t)
	cases := []struct {
		name, inst string
		damage     func(t *testing.T, hp string)
		// tail: the repair moves the bytes after the last complete line to
		// quarantine/ (else the quarantine holds no history bytes).
		tail bool
		// events is what state.json and instance.json count (and must
		// still count after the repair).
		events int
	}{
		{name: "truncate -s -40 on a completed instance's history", inst: "done-1", tail: true, events: 2, damage: func(t *testing.T, hp string) {
			fi, err := os.Stat(hp)
			must(t, err)
			must(t, os.Truncate(hp, fi.Size()-40))
		}},
		{name: "history.jsonl replaced by a symbolic link", inst: "child-1", events: 2, damage: func(t *testing.T, hp string) {
			other := filepath.Join(t.TempDir(), "elsewhere.jsonl")
			writeFile(t, other, "")
			must(t, os.Remove(hp))
			must(t, os.Symlink(other, hp))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			copyTree(t, fix, dir)
			idir := filepath.Join(dir, "instances", c.inst)
			hp := filepath.Join(idir, "executions", "1", "history.jsonl")
			orig, err := os.ReadFile(hp)
			must(t, err)
			c.damage(t, hp)

			r := mustRun(t, bin, 1, "fsck", "--dir", dir)
			mustContain(t, "fsck", r.stdout, "history_loss", `"`+c.inst+`"`, "NOT clean")
			r = mustRun(t, bin, 1, "fsck", "--repair", "--dir", dir)
			t.Logf("fsck --repair:\n%s", r.stdout)
			mustContain(t, "fsck --repair", r.stdout, "history_loss", `"`+c.inst+`"`, "[NOT repaired]", "NOT clean")
			if strings.Contains(r.stdout, "result: clean") {
				t.Errorf("fsck --repair calls a directory that lost committed history clean")
			}
			rep := fsckReport(t, bin, 1, "--dir", dir)
			if f := findingsByKind(rep)[provider.FsckHistoryLoss]; len(f) == 0 || rep.Clean {
				t.Errorf("after the repair, fsck finds no history loss: %+v", rep.Findings)
			}

			// The counters still record what was committed.
			var st struct {
				EventCount int `json:"event_count"`
			}
			var inf struct {
				TotalEvents int `json:"total_events"`
			}
			for _, x := range []struct {
				path string
				v    any
			}{{filepath.Join(idir, "executions", "1", "state.json"), &st}, {filepath.Join(idir, "instance.json"), &inf}} {
				data, err := os.ReadFile(x.path)
				must(t, err)
				must(t, json.Unmarshal(data, x.v))
			}
			if st.EventCount != c.events || inf.TotalEvents != c.events {
				t.Errorf("after the repair: event_count %d, total_events %d; want %d (committed)", st.EventCount, inf.TotalEvents, c.events)
			}

			// What the repair took away is in quarantine/, with a manifest.
			q, err := os.ReadDir(filepath.Join(dir, "quarantine"))
			must(t, err)
			prefix := strings.ReplaceAll(filepath.ToSlash(filepath.Join("instances", c.inst, "executions", "1", "history.jsonl")), "/", "__")
			var found bool
			for _, e := range q {
				if !strings.HasPrefix(e.Name(), prefix) || strings.HasSuffix(e.Name(), ".reason") {
					continue
				}
				found = true
				reason, err := os.ReadFile(filepath.Join(dir, "quarantine", e.Name()+".reason"))
				must(t, err)
				mustContain(t, "manifest", string(reason), "path: instances/"+c.inst+"/executions/1/history.jsonl", "reason: ", "quarantined_at: ")
				if !c.tail {
					continue
				}
				mustContain(t, "manifest", string(reason), "offset: ", "length: ")
				data, err := os.ReadFile(filepath.Join(dir, "quarantine", e.Name()))
				must(t, err)
				last := orig[bytes.LastIndexByte(orig[:len(orig)-1], '\n')+1:]
				if want := last[:len(last)-40]; !bytes.Equal(data, want) {
					t.Errorf("quarantined %q, want the lost record's remaining bytes %q", data, want)
				}
			}
			if !found {
				t.Errorf("quarantine/ holds nothing from the history: %v", q)
			}
		})
	}

	// The help says what quarantine/ is.
	r := runCLI(t, bin, nil, "fsck", "-h")
	mustContain(t, "fsck -h", r.stderr, "quarantine/", "history_loss", ".reason")
	r = runCLI(t, bin, nil, "help")
	mustContain(t, "help", r.stdout+r.stderr, "quarantine/")
}

// TestHistoryAndShowFlagAHistoryMissingCommittedEvents: a history that lost
// committed events (fsck: history_loss) is never served as the execution
// (docs/design.md §6, invariant 3). "durofs history" prints what it holds
// and then fails, saying so on stderr (as for a corrupt line), and "durofs
// show" names the problem for the execution. (Both once presented it as
// complete: exit 0, nothing on stderr, no PROBLEM.)
func TestHistoryAndShowFlagAHistoryMissingCommittedEvents(t *testing.T) {
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
	if r.code != exitFailure || !strings.Contains(r.stderr, "committed events are missing") {
		t.Errorf("durofs history of an execution missing a committed event: exit %d, stderr %q; want %d and the reason\nstdout:\n%s", r.code, r.stderr, exitFailure, r.stdout)
	}
	var det provider.InstanceDetail
	r = mustRun(t, bin, 0, "show", "done-1", "--dir", dir, "--json")
	must(t, json.Unmarshal([]byte(r.stdout), &det))
	if len(det.ExecutionDetails) != 1 || det.ExecutionDetails[0].Problem == "" {
		t.Errorf("durofs show: execution with event_count %d and %d history record(s) has no problem: %+v",
			det.ExecutionDetails[0].EventCount, det.ExecutionDetails[0].HistoryRecords, det.ExecutionDetails)
	}
}
