//go:build unix

package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Stall mode (--stops N): the requirement that no process can stall
// another. Worker slot 0 is SIGSTOPped at random moments, each time for a
// random duration up to --stop-max (2 × the lock timeout by default), then
// SIGCONTed, at least N times; the other workers keep fetching and acking,
// and every ack they make is timed (by the worker, around the provider
// call). A stopped process keeps every flock it holds, so an ack of another
// process that needs one of them waits until the stop ends: with stops up
// to twice the lock timeout, any such dependency shows up as an ack that
// took longer than the lock timeout. The run fails if an ack of the others
// took longer than --lock-timeout + --stall-margin, not counting its wait
// for the log's group fdatasync: each ack reports that wait
// (internal/calltime), and it is time on the disk, which a stopped process
// cannot hold up (it holds no kernel lock while stopped; one stopped while
// leading a group sync delays the others' wait by at most the log's lead
// bound). The margin is the rest of the ack's own work under load (the 1 ms
// polling of a contended flock, CPU contention on a small CI machine), not
// any wait for the stopped process. (A disk stall of 0.9 s inside one
// fdatasync, counted whole, once failed a CI run.)
//
// What the stopped process can hold when it stops: an instance flock (its
// fetch, ack, abandon or renew, or its probe of another holder's instance
// during a fetch, or a checkpoint's or sweep's redo), a worker queue shard
// flock (its claim, work ack, renew, abandon, or the deletion of a
// cancelled activity), wal/checkpoint.lock (taken with TryLock: others
// skip their checkpoint) and wal/open.lock (only inside Open; no worker is
// restarted in stall mode). Of these, the only one another process's ack
// may need is a worker item's claim lock, when its turn cancels that
// activity: the delete waits at most 200 ms for it (provider claimWaitMax),
// then leaves the committed turn to its redo - an ack once took as long as
// the stop before that bound. A work ack whose claim expired and passed to
// the stopped worker is rejected without taking the item's lock (provider
// claimTaken) - one once waited out the new holder's stop inside its own
// ack. The write-ahead log itself takes no lock
// across processes (a compare-and-swap reserves each frame's place, one
// pwrite fills it); a process stopped between the two (failpoint
// wal.reserved) only keeps others' group-commit marks short of its frame,
// so they sync their own; one stopped while it leads a group sync
// (failpoint wal.sync_lead) makes the others wait at most the log's lead
// bound (at most 50 ms), then they sync themselves.

// stallVictim is the slot whose worker is stopped.
const stallVictim = 0

// The failpoint package's stop variables (internal/failpoint, crashtest
// builds): the victim stops itself at its next failpoint after SIGUSR2.
const (
	envFailpointStop    = "DUROFS_FAILPOINT_STOP"
	envFailpointStopLog = "DUROFS_FAILPOINT_STOP_LOG"
)

// stopRound is one SIGSTOP of the victim.
type stopRound struct {
	at        time.Time
	stopped   time.Duration
	failpoint string // the failpoint it stopped itself at; "" for a stop at a random moment
}

// stall stops the victim again and again until --duration has passed and
// --stops stops were made.
func (s *supervisor) stall(ctx context.Context, cfg config, start time.Time) []stopRound {
	rng := rand.New(rand.NewPCG(uint64(cfg.seed), 0x73746f70))
	w := s.current(stallVictim)
	for i := 0; ; i++ {
		if rl, _ := w.readyLine(); rl != nil {
			break
		}
		if i == 200 || ctx.Err() != nil {
			s.fail("stall: worker %d did not report ready", w.id)
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	pid := w.cmd.Process.Pid
	var stops []stopRound
	var logOff int64
	lastLog := time.Now()
	for ctx.Err() == nil && len(s.failureList()) == 0 && (time.Since(start) < cfg.duration || len(stops) < cfg.stops) {
		sleep(ctx, cfg.stopGapMin+time.Duration(rng.Int64N(int64(cfg.stopGapMax-cfg.stopGapMin)+1)))
		if ctx.Err() != nil {
			break
		}
		// Stops at random moments are mostly short (many stops, landing in
		// and out of critical sections; 29% exceed half of --stop-max).
		// Stops at failpoints land inside a critical section, so they are
		// mostly long, to expose whoever waits for its lock (71% exceed
		// half of --stop-max).
		u := rng.Float64()
		atFailpoint := cfg.stopAtFailpoint > 0 && rng.Float64() < cfg.stopAtFailpoint
		d := time.Duration(float64(cfg.stopMax) * u * u)
		if atFailpoint {
			d = time.Duration(float64(cfg.stopMax) * math.Sqrt(u))
		}
		r := stopRound{at: time.Now()}
		stopped := false
		if late, _ := processStopped(pid); late && cfg.stopAtFailpoint > 0 {
			// A stop armed in an earlier round that the victim took only
			// after this process gave up waiting for it: a stop too.
			stopped = true
		} else if atFailpoint {
			if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
				s.fail("stall: SIGUSR2 worker %d: %v", w.id, err)
				break
			}
			for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
				if stopped, _ = processStopped(pid); stopped {
					break
				}
				time.Sleep(time.Millisecond)
			}
			r.at = time.Now()
		}
		if stopped {
			r.failpoint, logOff = lastStop(s.stopLog, logOff)
			if r.failpoint == "" {
				r.failpoint = "?"
			}
		} else if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			s.fail("stall: SIGSTOP worker %d: %v", w.id, err)
			break
		}
		sleep(context.WithoutCancel(ctx), d)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			s.fail("stall: SIGCONT worker %d: %v", w.id, err)
			break
		}
		r.stopped = time.Since(r.at)
		stops = append(stops, r)
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			s.log.Info("stall", "elapsed", time.Since(start).Round(time.Second), "stops", len(stops))
		}
	}
	return stops
}

// lastStop returns the failpoint of the last "stop <name>" line of the stop
// log after offset off, and the log's new end.
func lastStop(path string, off int64) (string, int64) {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) <= off {
		return "", off
	}
	name := ""
	for _, line := range strings.Split(string(data[off:]), "\n") {
		if n, ok := strings.CutPrefix(line, "stop "); ok {
			name = n
		}
	}
	return name, int64(len(data))
}

// stallResult is what stall mode measured.
type stallResult struct {
	stops         []stopRound
	threshold     time.Duration
	others        []ackLatency // the other workers' acks made while stops were being made
	inVictimAck   int          // stops that landed while the victim was inside an ack call
	victimAcks    int
	slow          []ackLatency // others' acks over the threshold
	slowStale     []ackLatency // others' stale acks (rejected: lock lost) over the threshold
	slowDisk      []ackLatency // others' acks over the threshold only by their wait for the log's fdatasync
	unstopped     []ackLatency // others' acks during which the victim was never stopped: the baseline
	stoppedLonger int          // stops longer than the lock timeout
	atFailpoint   int          // stops the victim made itself at a failpoint
	failpoints    map[string]int
}

// stallVerdict computes the stall figures; chaosEnd is when stopping ended.
func (s *supervisor) stallVerdict(cfg config, stops []stopRound, chaosEnd time.Time) stallResult {
	r := stallResult{stops: stops, threshold: cfg.lockTimeout + cfg.stallMargin, failpoints: map[string]int{}}
	victim := s.latencies(func(slot int) bool { return slot == stallVictim })
	for _, a := range s.latencies(func(slot int) bool { return slot != stallVictim }) {
		if a.end.After(chaosEnd) {
			continue // drain: no more stops
		}
		r.others = append(r.others, a)
		switch {
		case a.d > r.threshold && a.kind == "orch" && a.taken && slices.ContainsFunc(victim, func(v ackLatency) bool {
			return v.inst == a.inst && v.end.After(a.begin)
		}):
			// A stale ack: the instance's lease had passed to the stopped
			// worker (which acked the instance later), so the call waited
			// for the stopped worker's flock on that instance (its fetch
			// or ack of it). A stopped process stalls what it holds; the
			// call's one possible outcome, rejection, came late.
			// Reported, not a failure.
			r.slowStale = append(r.slowStale, a)
		case a.d > r.threshold && a.d-a.sync <= r.threshold:
			// Slow on the disk: without its wait for the log's group
			// fdatasync the ack is within the threshold. A stopped process
			// holds no fdatasync up (it holds no kernel lock while
			// stopped); one stopped while it leads a group sync delays the
			// others' wait by at most the log's lead bound (50 ms), far
			// below the threshold. Reported, not a failure.
			r.slowDisk = append(r.slowDisk, a)
		case a.d > r.threshold:
			r.slow = append(r.slow, a)
		}
		if r.overlap(a) < 0 {
			r.unstopped = append(r.unstopped, a)
		}
	}
	slices.SortFunc(r.others, func(a, b ackLatency) int { return int(b.d - a.d) })
	r.victimAcks = len(victim)
	for _, st := range stops {
		if st.stopped > cfg.lockTimeout {
			r.stoppedLonger++
		}
		if st.failpoint != "" {
			r.atFailpoint++
			r.failpoints[st.failpoint]++
		}
		if slices.ContainsFunc(victim, func(a ackLatency) bool { return !st.at.Before(a.begin) && st.at.Before(a.end) }) {
			r.inVictimAck++
		}
	}
	return r
}

// overlap returns the index of the first stop that overlapped ack a, or -1.
func (r stallResult) overlap(a ackLatency) int {
	for i, st := range r.stops {
		if st.at.Before(a.end) && st.at.Add(st.stopped).After(a.begin) {
			return i
		}
	}
	return -1
}

// overlapping describes the stops that overlapped an ack.
func (r stallResult) overlapping(a ackLatency) string {
	var parts []string
	for i, st := range r.stops {
		if !st.at.Before(a.end) || !st.at.Add(st.stopped).After(a.begin) {
			continue
		}
		where := "at a random moment"
		if st.failpoint != "" {
			where = "at failpoint " + st.failpoint
		}
		parts = append(parts, fmt.Sprintf("stop #%d (%v, %s) began %v after the ack", i+1, st.stopped.Round(time.Millisecond), where, st.at.Sub(a.begin).Round(time.Millisecond)))
	}
	if len(parts) == 0 {
		return "no stop overlapped it"
	}
	return strings.Join(parts, ", ")
}

// durations returns the latencies of acks.
func durations(acks []ackLatency) []time.Duration {
	out := make([]time.Duration, len(acks))
	for i, a := range acks {
		out[i] = a.d
	}
	return out
}

// slowReport returns what the worker said while ack a was slow (its
// --slow-dump summary: the calls waiting for a lock and who holds which
// lock file; the full dump is in its log).
func (s *supervisor) slowReport(a ackLatency) string {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	for _, r := range s.slowReports {
		// The report comes after the dump (a few hundred ms under load).
		if r.worker == a.worker && !r.at.Before(a.begin) && r.at.Before(a.end.Add(5*time.Second)) {
			return fmt.Sprintf("worker %d reported: %s (stacks in logs/worker-%d.log)", r.worker, r.what, r.slot)
		}
	}
	return "no slow-ack report from the worker"
}
