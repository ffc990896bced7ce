package main

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/durofs/durofs/provider"
)

// fsckJSON is the JSON of durofs fsck.
type fsckJSON struct {
	provider.FsckReport
	Clean     bool `json:"clean"`
	Remaining int  `json:"remaining"`
}

// fsckCmd is "durofs fsck".
func fsckCmd(args []string, stdout, stderr io.Writer) int {
	c := newCLI("durofs fsck", "durofs fsck [--repair] [--dir D] [--json]", `
Checks a durofs directory: FORMAT; every history file's CRCs, torn tails and
events, and that it holds every event its state.json counts as committed;
temporary and staged files nobody will finish; pending commits (log records
not yet applied) and acked work items; expired leases; unparseable files
(instance.json, state.json, lease.json, queue messages, claims, sessions,
the write-ahead log); messages for unknown instances; the counters of
instance.json and state.json against the files; instance directories that
hold nothing of an instance (a crash while one was deleted or created); and
the parent -> children index (children/) against the instance records. It
runs safely beside live processes (every check takes the lock the
provider's writers take).

With --repair it registers as a process of the directory while it runs
(as every durofs process does) and fixes what is safe. If no other process
has the directory open, it first does what the first process to open it
does: it replays the write-ahead log if the machine rebooted (or a sync
failed) since a process last opened the directory, and removes the empty
staged files of killed writers (beside live processes these stay: a
stopped writer may still write and publish one). It applies pending and
stuck commits, finishes work acks, restores history records the log
still holds, removes old temporary files, orphan staged files and orphan
claims, truncates torn history tails beyond the committed events, moves
unparseable files to quarantine/ (instance.json and state.json are then
rebuilt from the histories), rewrites drifted counters (never lowering
a count of committed events), removes instance directories that hold
nothing, and adds or removes children index entries to match the records.

It never removes a committed record. A corrupt committed record is
reported, never changed. A history that lost committed events (cut,
emptied, removed or replaced, and not in the log any more) is a
history_loss error naming the instance, and stays one: the counters that
record what was committed are kept, and the bytes of a lost record found
after the last complete line are moved to quarantine/.

quarantine/ (inside the directory) keeps everything a repair takes away
that is not provably garbage: each file under a name made of its old path
and the time, beside a <name>.reason manifest (its old path, why, when, by
which process, and for bytes cut from a history their offset and length).
durofs never reads it again; inspect it, restore from it, or delete it.

Exit status: 0 if no error or warning remains, 1 otherwise (or on failure),
2 on a usage error.`, stdout, stderr)
	repair := c.fs.Bool("repair", false, "repair what is safe to repair")
	minAge := c.fs.Duration("min-age", time.Minute, "temporary and staged files younger than this are presumed live and not reported")
	staleAfter := c.fs.Duration("stale-after", time.Hour, "messages for an unknown instance older than this are a warning rather than info")
	verbose := c.fs.Bool("v", false, "log each repair to stderr")
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	if *minAge <= 0 || *staleAfter <= 0 {
		return c.usageErr("--min-age and --stale-after must be positive")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := c.context()
	defer cancel()
	rep, err := provider.Fsck(ctx, c.dir, provider.FsckOptions{Repair: *repair, Logger: log, MinAge: *minAge, StaleAfter: *staleAfter})
	if err != nil {
		return c.fail(err)
	}
	remaining := rep.Remaining()
	if c.json {
		if code := c.printJSON(fsckJSON{FsckReport: rep, Clean: rep.Clean(), Remaining: len(remaining)}); code != exitOK {
			return code
		}
	} else {
		printFsck(stdout, rep, len(remaining))
	}
	if !rep.Clean() {
		return exitFailure
	}
	return exitOK
}

// printFsck prints a report for humans: one block per finding, then a summary.
func printFsck(w io.Writer, rep provider.FsckReport, remaining int) {
	mode := "check"
	if rep.Repair {
		mode = "check and repair"
	}
	fmt.Fprintf(w, "durofs fsck %s (%s)\n", rep.Dir, mode)
	sev := map[string]int{}
	repaired := 0
	for _, f := range rep.Findings {
		sev[f.Severity]++
		status := ""
		switch {
		case f.Repaired:
			status = " [repaired]"
			repaired++
		case f.Severity != provider.SeverityInfo && rep.Repair:
			status = " [NOT repaired]"
		}
		fmt.Fprintf(w, "\n%-7s %s  %s%s\n", f.Severity, f.Kind, f.Path, status)
		fmt.Fprintf(w, "        %s\n", f.Detail)
		if f.Action != "" {
			fmt.Fprintf(w, "        -> %s\n", f.Action)
		}
	}
	ck := rep.Checked
	fmt.Fprintf(w, "\nchecked: %d instances, %d executions, %d history records, %d leases, %d log records, %d messages, %d staged, %d claims, %d sessions, %d temporary files",
		ck.Instances, ck.Executions, ck.HistoryRecords, ck.Leases, ck.Commits, ck.Messages, ck.Staged, ck.Claims, ck.Sessions, ck.TempFiles)
	if ck.Quarantined > 0 {
		fmt.Fprintf(w, "; quarantine/ holds %d file(s)", ck.Quarantined)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "findings: %d (%d errors, %d warnings, %d info), %d repaired, %d remaining\n",
		len(rep.Findings), sev[provider.SeverityError], sev[provider.SeverityWarning], sev[provider.SeverityInfo], repaired, remaining)
	switch {
	case remaining == 0:
		fmt.Fprintln(w, "result: clean")
	case rep.Repair:
		fmt.Fprintln(w, "result: NOT clean (the remaining findings need an operator)")
	case slices.ContainsFunc(rep.Remaining(), func(f provider.FsckFinding) bool { return repairable[f.Kind] }):
		fmt.Fprintln(w, "result: NOT clean (durofs fsck --repair fixes the findings it can repair; see each finding)")
	default:
		fmt.Fprintln(w, "result: NOT clean (--repair cannot fix these findings; see what each says)")
	}
}

// repairable are the kinds of findings fsck --repair may fix (the
// provider's FsckXxx documentation); only these earn a --repair hint.
var repairable = map[string]bool{
	provider.FsckUnparseable: true, provider.FsckTornTail: true, provider.FsckPendingCommit: true,
	provider.FsckStuckCommit: true, provider.FsckCounterDrift: true, provider.FsckTempFile: true, provider.FsckStagedOrphan: true,
	provider.FsckOrphanClaim: true, provider.FsckSymlink: true, provider.FsckStrayInstance: true,
	provider.FsckChildIndex: true,
}
