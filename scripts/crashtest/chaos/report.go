//go:build unix

package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// printReport prints the run's figures and, last, "violations: N".
func printReport(w io.Writer, cfg config, r *result) {
	row := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-31s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	rec := func(s provider.RecoveryStats) string {
		return fmt.Sprintf("%d logged commits redone, %d work acks finished, %d records replayed, %d temp files swept, %d staged orphans removed",
			s.CommitsRedone, s.WorkAcksFinished, s.RecordsReplayed, s.TempFilesSwept, s.StagedOrphansRemoved)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
	fmt.Fprintln(w, "summary")
	if cfg.stops == 0 {
		row("kills", "%d SIGKILLs, each restarted at once (%d hit a worker still opening/recovering)", r.kills, r.killedInOpen)
		row("kills inside a commit", "%d (restarts whose Open found pending work: commits redone + work acks finished > 0); %d kills landed with an orchestration ack in flight",
			r.killsInCommit, r.oracle.KillsWithAckInFlight)
	}
	row("recoveries in Open at restart", "%s", rec(r.restartRecovery))
	row("recoveries by all processes", "%s (Open + background sweeps of %d processes; a killed worker's counts up to its last report)",
		rec(r.allRecovery), r.incarnations)
	row("final recovery", "%s, in %v, without replay (this process held the log open; first aged %d temp and %d staged files left by killed writers past the sweep's minimum age); then a lone process replayed %d records",
		rec(r.finalRecovery), ms(r.finalOpen), r.garbageTemps, r.garbageStaged, r.replayed)
	row("recovery time", "p50 %s, p99 %s, max %s (restart → worker ready, %d restarts; of which provider.Open p50 %s, p99 %s)",
		ms(percentile(r.recoveryTimes, 50)), ms(percentile(r.recoveryTimes, 99)), ms(percentile(r.recoveryTimes, 100)),
		len(r.recoveryTimes), ms(percentile(r.openTimes, 50)), ms(percentile(r.openTimes, 99)))
	tput := 0.0
	if s := r.chaos.Seconds(); s > 0 {
		tput = float64(r.chaosTurns) / s
	}
	row("throughput under chaos", "%.1f turns/s (%d turns acked OK in %v)", tput, r.chaosTurns, r.chaos.Round(10*time.Millisecond))
	row("drain time", "%v", r.drain.Round(10*time.Millisecond))
	c := r.oracle
	row("acks", "%d ok, %d failed, %d rejected as stale, %d in flight at a kill, %d unreported", c.OK, c.Failed, c.Rejected, c.Killed, c.Unreported)
	row("duplicate activity executions", "%d of %d activity runs (at-least-once: reported, not a failure)", c.DuplicateActivityRuns, c.ActivityRuns)
	if rep := r.report; rep != nil {
		f := rep.Figures
		row("in-flight acks at kills", "%d committed in full, %d left no trace", f.KilledCommitted, f.KilledAbsent)
		row("instances", "%d started in %d batches, %d as expected (+%d sub-orchestrations); %d executions, %d events on disk",
			r.instances, r.batches, f.SpecsOK, f.Children, f.Executions, f.Events)
		if cfg.deletes > 0 {
			row("deletions", "%d instances deleted (%d forced while running, %d once finished), %d failed calls; %d found deleted by the check",
				r.deleted, r.deletedForced, r.deleted-r.deletedForced, r.deleteErrs, f.Deleted)
		}
	}
	row("worker runtime totals", "%d turns, %d activities executed, %d cancelled while running, %d acks failed, %d abandons (a killed worker's counts up to its last report)",
		r.runtime.Turns, r.runtime.ActivitiesExecuted, r.runtime.ActivitiesCancelled, r.runtime.AcksFailed, r.runtime.Abandons)
	if cfg.zombies > 0 {
		held, rejected, taken := 0, 0, 0
		for _, z := range r.zombies {
			if z.caught && z.paused {
				held++
				if z.outcome == oracle.OutcomeRejected {
					rejected++
					if z.takenOver {
						taken++
					}
				}
			}
		}
		row("zombie holders", "%d of %d rounds stopped a worker holding a lease, past the lease; %d of those %d held-back acks were rejected as stale (%d after another worker took the lease over, %d with the lease merely expired); in all %d stale orchestration acks and %d stale work-item acks were rejected",
			held, len(r.zombies), rejected, held, taken, rejected-taken, c.Rejected, r.staleWorkAcks)
	}
	if st := r.stall; st != nil {
		ds := durations(st.others)
		stopped := make([]time.Duration, len(st.stops))
		var total time.Duration
		for i, x := range st.stops {
			stopped[i], total = x.stopped, total+x.stopped
		}
		orch := 0
		for _, a := range st.others {
			if a.kind == "orch" {
				orch++
			}
		}
		row("stops", "%d SIGSTOPs of worker slot %d, stopped p50 %s, max %s, %v in all; %d longer than the lock timeout %v; %d landed while it was inside an ack call (of its %d acks)",
			len(st.stops), stallVictim, ms(percentile(stopped, 50)), ms(percentile(stopped, 100)), total.Round(10*time.Millisecond),
			st.stoppedLonger, cfg.lockTimeout, st.inVictimAck, st.victimAcks)
		if cfg.stopAtFailpoint > 0 {
			names := make([]string, 0, len(st.failpoints))
			for n := range st.failpoints {
				names = append(names, n)
			}
			slices.SortFunc(names, func(a, b string) int { return st.failpoints[b] - st.failpoints[a] })
			var top []string
			for i, n := range names {
				if i == 8 {
					top = append(top, fmt.Sprintf("… %d more", len(names)-i))
					break
				}
				top = append(top, fmt.Sprintf("%s %d", n, st.failpoints[n]))
			}
			row("stops at failpoints", "%d of the stops (the victim stopped itself at its next failpoint: %s)", st.atFailpoint, strings.Join(top, ", "))
		}
		row("others' ack latency", "p50 %s, p99 %s, max %s over %d acks of the other %d workers (%d orchestration, %d work item) made while stops went on",
			ms(percentile(ds, 50)), ms(percentile(ds, 99)), ms(percentile(ds, 100)), len(ds), cfg.workers-1, orch, len(ds)-orch)
		bs := durations(st.unstopped)
		row("baseline", "p50 %s, p99 %s, max %s over the %d of those acks during which worker %d was never stopped",
			ms(percentile(bs, 50)), ms(percentile(bs, 99)), ms(percentile(bs, 100)), len(bs), stallVictim)
		for i, a := range st.others {
			if i == 5 {
				break
			}
			row(fmt.Sprintf("slowest #%d", i+1), "%s %s ack of worker %d (%s of it waiting for the log's fdatasync), %s", ms(a.d), a.kind, a.worker, ms(a.sync), st.overlapping(a))
		}
		verdict := "PASS"
		if len(st.slow) > 0 {
			verdict = "FAIL"
		}
		for i, a := range st.slowDisk {
			if i == 5 {
				row("slow on the disk", "… %d more", len(st.slowDisk)-i)
				break
			}
			row("slow on the disk", "%s %s ack of worker %d, of which %s waiting for the log's fdatasync; %s", ms(a.d), a.kind, a.worker, ms(a.sync), st.overlapping(a))
		}
		row("stall test", "%s: %d of the others' acks took longer than lock timeout %v + margin %v = %v (not counted: %d stale orchestration acks, rejected because the instance's lease had passed to the stopped worker, whose flock on that instance they waited for; %d acks within it but for their wait for the log's fdatasync, on the disk)",
			verdict, len(st.slow), cfg.lockTimeout, cfg.stallMargin, st.threshold, len(st.slowStale), len(st.slowDisk))
	}
	if r.kept {
		row("working directory", "kept: %s (data/, logs/, oracle.jsonl, specs.jsonl; check it again with: go run ./scripts/crashtest/chaos check --dir %s)", r.workDir, r.workDir)
	}
	for _, f := range r.failures {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
	if r.report == nil || r.replayReport == nil {
		fmt.Fprintln(w, "violations: unknown (the check did not run)")
		return
	}
	fmt.Fprintln(w, "invariants after the final recovery without replay")
	r.report.WriteCounts(w, 30)
	fmt.Fprintln(w, "invariants after a lone process replayed the log")
	r.replayReport.WriteCounts(w, 30)
	fmt.Fprintf(w, "violations: %d\n", r.report.Total()+r.replayReport.Total())
}
