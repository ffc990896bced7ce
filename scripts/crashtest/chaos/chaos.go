//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/invariants"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
	"github.com/durofs/durofs/wal"
)

// result is everything a run measured.
type result struct {
	workDir string
	kept    bool // the working directory is not removed

	kills           int
	killsInCommit   int // restarts whose Open found pending work
	killedInOpen    int // kills of a worker that had not reported ready
	restartRecovery provider.RecoveryStats
	allRecovery     provider.RecoveryStats // every process's last report
	finalRecovery   provider.RecoveryStats
	finalOpen       time.Duration
	recoveryTimes   []time.Duration // restart → ready
	openTimes       []time.Duration // provider.Open at restart, as measured by the worker
	incarnations    int

	chaos      time.Duration
	chaosTurns int64
	drain      time.Duration
	runtime    workload.Stats // sum of the last report of every incarnation

	instances int
	batches   int

	// The driver's deletions: OK, of them forced while running, failed calls.
	deleted, deletedForced, deleteErrs int

	oracle oracle.Counts

	garbageTemps, garbageStaged int // left by killed writers, aged before the final recovery

	zombies       []zombieRound
	staleWorkAcks int64
	stall         *stallResult // stall mode only

	// report is the invariant check after the final recovery by a process
	// that does not have the directory alone (no replay: what the workers
	// and the pending marks left must suffice), replayReport the check
	// after a process that has it alone replayed the log.
	report, replayReport *invariants.Report
	replayed             int64
	failures             []string
}

// ok reports whether the run passed: both checks ran, found no violation,
// and nothing else failed.
func (r *result) ok() bool {
	return r.report != nil && r.report.OK() && r.replayReport != nil && r.replayReport.OK() && len(r.failures) == 0
}

// zombieRound is one zombie-holder pause.
type zombieRound struct {
	worker    int
	seq       uint64
	caught    bool // the worker was stopped while holding back an ack
	outcome   oracle.Outcome
	paused    bool // the worker measured the pause (the ack was held past the lease)
	err       string
	takenOver bool // rejected because another worker had taken the lease over
	stoppedF  time.Duration
}

// runChaos runs the whole suite and prints its report on stdout.
func runChaos(ctx context.Context, cfg config, stdout, stderr io.Writer) (res *result, err error) {
	cfg = cfg.withDerived()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res = &result{}

	work := cfg.dir
	tempWork := work == ""
	if tempWork {
		if work, err = os.MkdirTemp("", "durofs-chaos-"); err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
	}
	res.workDir = work
	data, logs := filepath.Join(work, "data"), filepath.Join(work, "logs")
	if entries, err := os.ReadDir(data); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty: use a fresh --dir", data)
	}
	for _, d := range []string{data, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
	}
	olog, err := os.Create(filepath.Join(work, "oracle.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("oracle log: %w", err)
	}
	defer olog.Close()

	exe := cfg.exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	b := oracle.NewBuilder(cfg.dispatchers)
	s, err := newSupervisor(cfg, exe, data, logs, olog, log, b)
	if err != nil {
		return nil, err
	}
	defer s.closeLogs()
	// Whatever happens - an error, a timeout, an interrupt, a panic - no
	// worker outlives the run.
	defer func() {
		if p := recover(); p != nil {
			s.killAll()
			panic(p)
		}
		s.killAll()
	}()

	durability := provider.Durable
	if cfg.nosync {
		durability = provider.ProcessCrashSafe
	}
	until := fmt.Sprintf("≥ %v", cfg.duration)
	if cfg.kills > 0 {
		until += fmt.Sprintf(" and ≥ %d kills", cfg.kills)
	}
	fmt.Fprintf(stdout, "chaos: %d workers × (%d dispatchers, %d activity workers), %s, seed %d, lock timeout %v\n",
		cfg.workers, cfg.dispatchers, cfg.activityWorkers, durability, cfg.seed, cfg.lockTimeout)
	if cfg.stops > 0 {
		fmt.Fprintf(stdout, "chaos: stall mode: SIGSTOP worker %d ≥ %d times (%.0f%% at its next failpoint), each for a random time up to %v, gaps U(%v, %v), for ≥ %v; the others' acks must take ≤ %v + %v",
			stallVictim, cfg.stops, 100*cfg.stopAtFailpoint, cfg.stopMax, cfg.stopGapMin, cfg.stopGapMax, cfg.duration, cfg.lockTimeout, cfg.stallMargin)
	} else {
		fmt.Fprintf(stdout, "chaos: SIGKILL a random worker every U(%v, %v) and restart it, for %s", cfg.killMin, cfg.killMax, until)
	}
	if cfg.zombies > 0 {
		fmt.Fprintf(stdout, "; %d zombie pauses of %v", cfg.zombies, cfg.zombiePause)
	}
	fmt.Fprintf(stdout, "\nchaos: working directory %s\n", work)

	// The driver's provider: no background sweep, so that recovery work is
	// done (and counted) by the workers.
	dp, err := provider.Open(data, provider.Options{Durability: durability, Logger: log, SweepInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", data, err)
	}
	dpClosed := false
	defer func() {
		if !dpClosed {
			_ = dp.Close()
		}
	}()
	specsLog, err := os.Create(filepath.Join(work, "specs.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("specs log: %w", err)
	}
	defer specsLog.Close()
	specsEnc := json.NewEncoder(specsLog)
	onStart := func(sp workload.Spec) {
		if err := specsEnc.Encode(sp); err != nil {
			s.fail("specs log: %v", err)
		}
	}
	d := newDriver(dp, s.raised, onStart, log, cfg.seed, cfg.batch, cfg.active)
	delLog, err := os.Create(filepath.Join(work, "deletions.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("deletions log: %w", err)
	}
	defer delLog.Close()
	delEnc := json.NewEncoder(delLog)
	d.deletes = cfg.deletes
	d.onDelete = func(instance string, forced bool, start, end time.Time, err error) {
		rec := deletionRecord{Instance: instance, Forced: forced, OK: err == nil, StartUs: start.UnixMicro(), EndUs: end.UnixMicro()}
		if err != nil {
			rec.Err = err.Error()
			res.deleteErrs++
		} else if forced {
			res.deletedForced++
		}
		if err := delEnc.Encode(rec); err != nil {
			s.fail("deletions log: %v", err)
		}
	}
	if err := d.startBatch(ctx); err != nil {
		return nil, err
	}
	for i := range cfg.workers {
		if _, err := s.start(i, false); err != nil {
			return nil, err
		}
	}
	dctx, dstop := context.WithCancel(ctx)
	ddone := make(chan struct{})
	go func() { d.run(dctx); close(ddone) }()
	defer func() { dstop(); <-ddone }()

	// Chaos.
	chaosStart := time.Now()
	ok0 := s.okLines.Load()
	zdone := make(chan struct{})
	zctx, zstop := context.WithCancel(ctx)
	defer zstop()
	go func() {
		defer close(zdone)
		res.zombies = s.zombies(zctx, cfg)
	}()
	var stops []stopRound
	if cfg.stops > 0 {
		stops = s.stall(ctx, cfg, chaosStart)
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.seed), 0x6b696c6c))
	lastLog := time.Now()
	chaosOver := func() bool {
		if cfg.stops > 0 {
			return true // stall mode: no kills
		}
		select {
		case <-zdone:
		default:
			return false
		}
		return time.Since(chaosStart) >= cfg.duration && res.kills >= cfg.kills
	}
	for !chaosOver() {
		if ctx.Err() != nil || len(s.failureList()) > 0 || d.failure() != nil {
			break
		}
		wait := cfg.killMin + time.Duration(rng.Int64N(int64(cfg.killMax-cfg.killMin)+1))
		victim := rng.IntN(cfg.workers)
		// Sleep until the kill is due, waking early if chaos ends meanwhile
		// (a long --kill-min must not outlast --duration).
		due := time.Now().Add(wait)
		for ctx.Err() == nil && time.Now().Before(due) && !chaosOver() {
			sleep(ctx, min(time.Until(due), 100*time.Millisecond))
		}
		if ctx.Err() != nil || time.Now().Before(due) {
			break
		}
		if s.zombieStopped.Load() {
			continue // the schedule's draws are still consumed: it stays the same
		}
		slot := s.pickVictim(victim)
		if slot < 0 {
			continue
		}
		w := s.current(slot)
		if r, _ := w.readyLine(); r == nil {
			res.killedInOpen++
		}
		s.kill(w)
		_, err := s.start(slot, true)
		s.slotMu[slot].Unlock()
		if err != nil {
			return nil, err
		}
		res.kills++
		if cfg.verbose {
			log.Info("chaos: killed and restarted", "slot", slot, "pid", w.cmd.Process.Pid, "kills", res.kills)
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			log.Info("chaos", "elapsed", time.Since(chaosStart).Round(time.Second), "kills", res.kills,
				"turns", s.okLines.Load()-ok0, "instances", len(d.started()), "running", d.running())
		}
	}
	zstop()
	<-zdone
	chaosEnd := time.Now()
	res.chaos = time.Since(chaosStart)
	res.chaosTurns = s.okLines.Load() - ok0
	d.starting.Store(false)
	if err := ctx.Err(); err != nil {
		s.fail("chaos phase interrupted: %v", err)
	}
	if err := d.failure(); err != nil {
		s.fail("driver: %v", err)
	}
	log.Info("chaos: stopped killing; draining", "kills", res.kills, "turns", res.chaosTurns, "instances", len(d.started()), "running", d.running())

	// Drain: every started instance terminal and no work pending.
	drainStart := time.Now()
	if len(s.failureList()) == 0 {
		deadline := time.Now().Add(cfg.drainTimeout)
		for {
			bl, err := invariants.PendingWork(data, time.Now())
			if err != nil {
				return nil, err
			}
			if d.running() == 0 && bl.Empty() {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				s.fail("drain timed out after %v: %d instances not terminal, %s pending", cfg.drainTimeout, d.running(), bl)
				break
			}
			sleep(ctx, 50*time.Millisecond)
		}
	}
	res.drain = time.Since(drainStart)
	dstop()
	<-ddone
	s.stopAll(30 * time.Second)
	dpClosed = true
	if err := dp.Close(); err != nil {
		s.fail("close the driver's provider: %v", err)
	}

	// Figures from the workers' reports.
	for _, w := range s.incarnations() {
		res.incarnations++
		w.mu.Lock()
		ready, readyAt, stats := w.ready, w.readyAt, w.stats
		w.mu.Unlock()
		if stats != nil && stats.Stats != nil && stats.Recovery != nil {
			res.runtime = res.runtime.Add(*stats.Stats)
			res.allRecovery = addRecovery(res.allRecovery, *stats.Recovery)
		} else if ready != nil && ready.Recovery != nil {
			res.allRecovery = addRecovery(res.allRecovery, *ready.Recovery)
		}
		if !w.restart || ready == nil || ready.Recovery == nil {
			continue
		}
		rs := *ready.Recovery
		res.restartRecovery = addRecovery(res.restartRecovery, rs)
		res.recoveryTimes = append(res.recoveryTimes, readyAt.Sub(w.started))
		res.openTimes = append(res.openTimes, time.Duration(ready.OpenMs*float64(time.Millisecond)))
		if rs.CommitsRedone+rs.WorkAcksFinished+rs.TornTailsRepaired > 0 {
			res.killsInCommit++
		}
	}
	res.instances = len(d.started())
	res.batches = d.batches
	res.oracle = b.Counts()
	res.staleWorkAcks = s.staleWorkAcks.Load()
	for _, a := range b.Anomalies() {
		s.fail("oracle: %s", a)
	}

	// Final recovery and check. What killed writers left (temporary files,
	// staged messages of commits that never happened) is only swept once
	// older than the sweep's minimum age; every process is gone now, so age
	// it instead of waiting.
	res.garbageTemps, res.garbageStaged, err = ageGarbage(data, 2*time.Hour)
	if err != nil {
		return nil, err
	}
	// First a recovery that does not replay: this process holds the log
	// open (as a live process would), so Open only finishes what the log
	// and the pending marks show; the check then sees what the workers'
	// live recovery achieved, nothing rewritten.
	holder, err := wal.Open(ctx, vfs.OS{}, filepath.Join(data, "wal"), wal.Options{NoSync: durability == provider.ProcessCrashSafe})
	if err != nil {
		return nil, fmt.Errorf("final recovery: hold the log: %w", err)
	}
	holder.Ready()
	start := time.Now()
	fp, err := provider.Open(data, provider.Options{Durability: durability, Logger: log, SweepInterval: -1, CheckpointInterval: -1})
	if err != nil {
		_ = holder.Close()
		return nil, fmt.Errorf("final recovery: %w", err)
	}
	res.finalOpen = time.Since(start)
	res.finalRecovery = fp.RecoveryStats()
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer ccancel()
	in := invariants.Input{Oracle: b.Oracle(), Specs: d.started(), Provider: fp, Shared: true}
	in.Deleted, in.MaybeDeleted = d.deletions()
	res.deleted = len(in.Deleted)
	res.report, err = invariants.Check(cctx, data, in)
	if cerr := fp.Close(); cerr != nil && err == nil {
		err = cerr
	}
	_ = holder.Close()
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	// Then a process that has the directory alone: it replays the log from
	// the checkpoint, rewriting every byte. The result must still pass.
	rp, err := provider.Open(data, provider.Options{Durability: durability, Logger: log, SweepInterval: -1, CheckpointInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	res.replayed = rp.RecoveryStats().RecordsReplayed
	in.Provider, in.Shared = rp, false
	res.replayReport, err = invariants.Check(cctx, data, in)
	if cerr := rp.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("check after replay: %w", err)
	}
	if cfg.stops > 0 {
		st := s.stallVerdict(cfg, stops, chaosEnd)
		res.stall = &st
		if len(st.stops) < cfg.stops {
			s.fail("stall: %d stops made, want %d", len(st.stops), cfg.stops)
		}
		for i, a := range st.slow {
			if i == 20 {
				s.fail("stall: … and %d more acks over %v", len(st.slow)-i, st.threshold)
				break
			}
			s.fail("stall: a %s ack of worker %d took %v (over lock timeout %v + margin %v), ended %v into the run; %s; %s",
				a.kind, a.worker, a.d.Round(time.Millisecond), cfg.lockTimeout, cfg.stallMargin, a.end.Sub(chaosStart).Round(time.Millisecond), st.overlapping(a), s.slowReport(a))
		}
	}
	if cfg.zombies > 0 {
		effective := 0
		for _, z := range res.zombies {
			if !z.caught || !z.paused {
				continue // no ack held back, or stopped too late to hold it past the lease
			}
			effective++
			if z.outcome != oracle.OutcomeRejected && z.outcome != oracle.OutcomeOK {
				s.fail("zombie round on worker %d: the held-back ack %d has outcome %s", z.worker, z.seq, z.outcome)
			}
			// An accepted held-back ack is an invariant 7 violation (the checker counts it).
		}
		if effective == 0 {
			s.fail("none of the %d zombie rounds held an ack back past its lease", len(res.zombies))
		}
	}
	res.failures = s.failureList()
	res.kept = !res.ok() || !tempWork || cfg.keep
	printReport(stdout, cfg, res)

	s.closeLogs()
	if !res.kept {
		if err := os.RemoveAll(work); err != nil {
			return res, fmt.Errorf("remove %s: %w", work, err)
		}
	}
	return res, nil
}

// zombies runs cfg.zombies zombie-holder rounds, evenly spaced over the
// chaos duration.
func (s *supervisor) zombies(ctx context.Context, cfg config) []zombieRound {
	if cfg.zombies == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.seed), 0x7a6f6d62))
	gap := max(cfg.duration/time.Duration(cfg.zombies+1), time.Second)
	var rounds []zombieRound
	for range cfg.zombies {
		sleep(ctx, gap)
		if ctx.Err() != nil {
			break
		}
		rounds = append(rounds, s.zombie(ctx, rng.IntN(cfg.workers), cfg))
	}
	return rounds
}

// zombie runs one zombie-holder round on slot: ask its worker to hold back
// its next ack, SIGSTOP it as soon as it reports that ack's intent (it
// holds the instance's lease then), keep it stopped past the lease while
// the others take over, SIGCONT it, and wait for the ack's outcome. The
// slot is not killed meanwhile.
func (s *supervisor) zombie(ctx context.Context, slot int, cfg config) zombieRound {
	w := s.protect(slot, true)
	defer s.protect(slot, false)
	r := zombieRound{worker: w.id}
	// SIGUSR1 would kill a worker that has not installed its handler yet:
	// wait for ready (reported after the handler is installed).
	for i := 0; ; i++ {
		if rl, _ := w.readyLine(); rl != nil {
			break
		}
		if i == 100 || ctx.Err() != nil {
			s.log.Warn("chaos: zombie round: the worker is not ready", "worker", w.id)
			return r
		}
		sleep(ctx, 50*time.Millisecond)
	}
	for len(s.armed) > 0 {
		<-s.armed
	}
	pid := w.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return r
	}
	timeout := time.After(10 * time.Second)
	for r.seq == 0 {
		select {
		case a := <-s.armed:
			if a.worker == w.id {
				r.seq = a.seq
			}
		case <-timeout:
			s.log.Warn("chaos: zombie round: the worker made no ack to hold back", "worker", w.id)
			return r
		case <-ctx.Done():
			return r
		}
	}
	stoppedAt := time.Now()
	s.zombieStopped.Store(true)
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	r.caught = true
	sleep(context.WithoutCancel(ctx), cfg.zombiePause)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	s.zombieStopped.Store(false)
	r.stoppedF = time.Since(stoppedAt)
	for i := 0; i < 400; i++ {
		if a, ok := s.b.Outcome(w.id, r.seq); ok {
			r.outcome, r.paused, r.err, r.takenOver = a.Outcome, a.Paused, a.Err, a.TakenOver
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.log.Info("chaos: zombie round", "worker", w.id, "stopped", r.stoppedF.Round(time.Millisecond), "outcome", r.outcome, "err", r.err)
	return r
}

// ageGarbage sets the modification time of every temporary and staged file
// under dir back by age, and counts them.
func ageGarbage(dir string, age time.Duration) (temps, staged int, err error) {
	old := time.Now().Add(-age)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		switch name := d.Name(); {
		case vfs.IsTemp(name):
			temps++
		case strings.HasPrefix(name, ".staged-"):
			staged++
		default:
			return nil
		}
		if err := os.Chtimes(path, old, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("age leftovers: %w", err)
	}
	return temps, staged, nil
}

// addRecovery sums recovery counters.
func addRecovery(a, b provider.RecoveryStats) provider.RecoveryStats {
	return provider.RecoveryStats{
		CommitsRedone: a.CommitsRedone + b.CommitsRedone, ApplyDeferred: a.ApplyDeferred + b.ApplyDeferred,
		WorkAcksFinished: a.WorkAcksFinished + b.WorkAcksFinished, Sweeps: a.Sweeps + b.Sweeps,
		TornTailsRepaired: a.TornTailsRepaired + b.TornTailsRepaired, TempFilesSwept: a.TempFilesSwept + b.TempFilesSwept,
		StagedOrphansRemoved: a.StagedOrphansRemoved + b.StagedOrphansRemoved, RecordsReplayed: a.RecordsReplayed + b.RecordsReplayed,
	}
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
