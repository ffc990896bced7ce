//go:build unix

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// worker is one worker process (one incarnation of a slot).
type worker struct {
	id      int // incarnation, unique in the run
	slot    int
	restart bool // started to replace a killed worker
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed once exited and its output is read

	mu       sync.Mutex
	readyAt  time.Time
	ready    *oracle.Line
	stats    *oracle.Line
	killed   bool // SIGKILLed on purpose
	stopping bool // SIGTERMed on purpose
	exitErr  error
}

// readyLine returns the ready line and when it arrived (nil before).
func (w *worker) readyLine() (*oracle.Line, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready, w.readyAt
}

// armedIntent is an ack a worker held back on request (zombie mode).
type armedIntent struct {
	worker int
	seq    uint64
}

// supervisor starts, kills and restarts the worker processes and reads
// their reports into the oracle builder.
type supervisor struct {
	cfg     config
	exe     string
	data    string
	stopLog string // stall mode: where the victim reports the failpoints it stopped at
	log     *slog.Logger
	b       *oracle.Builder

	olog    *bufio.Writer // oracle.jsonl: every line read, prefixed with the incarnation
	ologMu  sync.Mutex
	slotLog []*os.File
	okLines atomic.Int64
	// staleWorkAcks counts work-item acks rejected for a lost lock.
	staleWorkAcks atomic.Int64

	slotMu    []sync.Mutex // held while a slot's worker is killed and replaced
	mu        sync.Mutex
	slots     []*worker
	all       []*worker
	protected []bool
	nextID    int
	failures  []string

	// latMu guards lats: the latency of every ack call reported, per slot.
	latMu       sync.Mutex
	lats        [][]ackLatency
	slowReports []slowReport

	armed chan armedIntent
	// zombieStopped is set while a zombie round has a worker stopped:
	// kills wait, so that the other workers can take its lease over.
	zombieStopped atomic.Bool
}

func newSupervisor(cfg config, exe, data, logs string, olog io.Writer, log *slog.Logger, b *oracle.Builder) (*supervisor, error) {
	s := &supervisor{
		cfg: cfg, exe: exe, data: data, log: log, b: b,
		olog:   bufio.NewWriterSize(olog, 1<<16),
		slotMu: make([]sync.Mutex, cfg.workers), slots: make([]*worker, cfg.workers),
		protected: make([]bool, cfg.workers), nextID: 1, armed: make(chan armedIntent, 64),
		lats: make([][]ackLatency, cfg.workers), stopLog: filepath.Join(logs, "stops.log"),
	}
	for i := range cfg.workers {
		f, err := os.OpenFile(filepath.Join(logs, fmt.Sprintf("worker-%d.log", i)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			s.closeLogs()
			return nil, fmt.Errorf("worker log: %w", err)
		}
		s.slotLog = append(s.slotLog, f)
	}
	return s, nil
}

// closeLogs flushes the oracle log and closes the worker logs.
func (s *supervisor) closeLogs() {
	s.ologMu.Lock()
	_ = s.olog.Flush()
	s.ologMu.Unlock()
	for _, f := range s.slotLog {
		_ = f.Close()
	}
}

// fail records a harness failure (the run fails even with no violation).
func (s *supervisor) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Error("chaos: " + msg)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
}

// failureList returns the failures recorded so far.
func (s *supervisor) failureList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// workerArgs are the worker subcommand's flags.
func (s *supervisor) workerArgs() []string {
	a := []string{"worker", "--dir", s.data,
		"--dispatchers", strconv.Itoa(s.cfg.dispatchers), "--activity-workers", strconv.Itoa(s.cfg.activityWorkers),
		"--lock-timeout", s.cfg.lockTimeout.String()}
	if s.cfg.nosync {
		a = append(a, "--nosync")
	}
	return a
}

// start starts a worker in slot. The caller holds slotMu[slot] (or no
// other goroutine touches the slot yet).
func (s *supervisor) start(slot int, restart bool) (*worker, error) {
	args := s.workerArgs()
	if s.cfg.stops > 0 && slot != stallVictim {
		// The others explain their slow acks (the stopped worker's own
		// acks are slow by design: no dumps there).
		args = append(args, "--slow-dump", (s.cfg.lockTimeout + s.cfg.stallMargin).String())
	}
	cmd := exec.Command(s.exe, args...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	if s.cfg.stops > 0 && s.cfg.stopAtFailpoint > 0 && slot == stallVictim {
		// Every failpoint: a stop lands at the next step of whatever the
		// victim is doing (stall.go).
		cmd.Env = append(cmd.Env, envFailpointStop+"=", envFailpointStopLog+"="+s.stopLog)
	}
	cmd.Stderr = s.slotLog[slot]
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", slot, err)
	}
	s.mu.Lock()
	w := &worker{id: s.nextID, slot: slot, restart: restart, cmd: cmd, done: make(chan struct{})}
	s.nextID++
	s.mu.Unlock()
	w.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %d: %w", slot, err)
	}
	go s.read(w, out)
	s.mu.Lock()
	s.slots[slot] = w
	s.all = append(s.all, w)
	s.mu.Unlock()
	return w, nil
}

// read consumes a worker's report lines until it exits, then reaps it and
// resolves its acks in flight.
func (s *supervisor) read(w *worker, out io.Reader) {
	br := bufio.NewReaderSize(out, 1<<16)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			s.handle(w, line[:len(line)-1])
		}
		// A last line without '\n' was cut by a SIGKILL: the worker had not
		// finished reporting, so it had not continued either; drop it.
		if err != nil {
			break
		}
	}
	err := w.cmd.Wait()
	w.mu.Lock()
	w.exitErr = err
	killed, stopping := w.killed, w.stopping
	w.mu.Unlock()
	s.b.WorkerGone(w.id, killed)
	s.logLine(w.id, oracle.Line{Type: oracle.TypeGone, Killed: killed})
	switch {
	case killed:
	case !stopping:
		s.fail("worker %d (slot %d, pid %d) exited on its own: %v", w.id, w.slot, w.cmd.Process.Pid, err)
	case err != nil:
		s.fail("worker %d (slot %d, pid %d) failed to stop cleanly: %v", w.id, w.slot, w.cmd.Process.Pid, err)
	}
	close(w.done)
}

// writeLog appends "<incarnation> <line>" to the oracle log.
func (s *supervisor) writeLog(id int, line []byte) {
	s.ologMu.Lock()
	defer s.ologMu.Unlock()
	s.olog.WriteString(strconv.Itoa(id))
	s.olog.WriteByte(' ')
	s.olog.Write(line)
	s.olog.WriteByte('\n')
}

// logLine appends one of the supervisor's own lines to the oracle log (see
// oracle.Replay).
func (s *supervisor) logLine(id int, l oracle.Line) {
	if b, err := l.Encode(); err == nil {
		s.writeLog(id, bytes.TrimSuffix(b, []byte("\n")))
	}
}

// raised records an attempt to raise instance's external event.
func (s *supervisor) raised(instance string) {
	s.b.Raised(instance)
	s.logLine(0, oracle.Line{Type: oracle.TypeRaise, Instance: instance})
}

// handle processes one report line.
func (s *supervisor) handle(w *worker, line []byte) {
	s.writeLog(w.id, line)
	if !bytes.HasPrefix(line, []byte("{")) {
		return // not a report (a panic trace goes to stderr, not here)
	}
	var l oracle.Line
	if err := json.Unmarshal(line, &l); err != nil {
		s.fail("worker %d: malformed report %.120q: %v", w.id, line, err)
		return
	}
	switch l.Type {
	case oracle.TypeReady:
		w.mu.Lock()
		w.ready, w.readyAt = &l, time.Now()
		w.mu.Unlock()
	case oracle.TypeStats:
		w.mu.Lock()
		w.stats = &l
		w.mu.Unlock()
	case oracle.TypeSlow:
		s.latMu.Lock()
		s.slowReports = append(s.slowReports, slowReport{slot: w.slot, worker: w.id, at: time.Now(), what: l.Err})
		s.latMu.Unlock()
	case oracle.TypeWorkAckRejected, oracle.TypeWorkAck, oracle.TypeWorkAckFailed:
		if l.Type == oracle.TypeWorkAckRejected && l.Stale {
			s.staleWorkAcks.Add(1)
		}
		s.latency(w, "work", l)
	default:
		if l.Type == oracle.TypeOK || l.Type == oracle.TypeErr {
			s.latency(w, "orch", l)
		}
		if err := s.b.Add(w.id, l); err != nil {
			s.fail("worker %d: %v", w.id, err)
			return
		}
		switch {
		case l.Type == oracle.TypeOK:
			s.okLines.Add(1)
		case l.Type == oracle.TypeIntent && l.Armed:
			select {
			case s.armed <- armedIntent{w.id, l.Seq}:
			default:
			}
		}
	}
}

// ackLatency is one ack call of a worker: when its report was read (about
// when it returned) and how long it took.
type ackLatency struct {
	kind   string    // "orch" or "work"
	begin  time.Time // when the call began (the worker's clock, this host's)
	end    time.Time // begin + d
	d      time.Duration
	sync   time.Duration // of d, the wait for the log's group fdatasync (disk)
	worker int
	ok     bool
	stale  bool   // rejected because the lock had expired or passed to another holder
	taken  bool   // rejected because the lock had passed to another holder
	inst   string // the instance of an orchestration ack
	err    string
}

// slowReport is a worker's report of an ack call running for long.
type slowReport struct {
	slot, worker int
	at           time.Time
	what         string
}

// latency records the latency an ack report carries.
func (s *supervisor) latency(w *worker, kind string, l oracle.Line) {
	if l.AckMs <= 0 {
		return
	}
	a := ackLatency{kind: kind, begin: time.UnixMicro(l.AckAtUs), d: time.Duration(l.AckMs * float64(time.Millisecond)), sync: time.Duration(l.SyncMs * float64(time.Millisecond)), worker: w.id,
		ok: l.Type == oracle.TypeOK || l.Type == oracle.TypeWorkAck, stale: l.Stale, taken: l.Taken, inst: l.Instance, err: l.Err}
	a.end = a.begin.Add(a.d)
	s.latMu.Lock()
	s.lats[w.slot] = append(s.lats[w.slot], a)
	s.latMu.Unlock()
}

// latencies returns the ack latencies of the slots for which keep is true.
func (s *supervisor) latencies(keep func(slot int) bool) []ackLatency {
	s.latMu.Lock()
	defer s.latMu.Unlock()
	var out []ackLatency
	for slot, ls := range s.lats {
		if keep(slot) {
			out = append(out, ls...)
		}
	}
	return out
}

// current returns slot's worker.
func (s *supervisor) current(slot int) *worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots[slot]
}

// kill SIGKILLs w and waits until it is reaped and its output read. The
// caller holds slotMu[w.slot].
func (s *supervisor) kill(w *worker) {
	w.mu.Lock()
	w.killed = true
	w.mu.Unlock()
	_ = w.cmd.Process.Kill()
	<-w.done
}

// pickVictim returns the first unprotected slot from v on, with its slotMu
// held, or -1 if every slot is protected.
func (s *supervisor) pickVictim(v int) int {
	for k := range s.cfg.workers {
		c := (v + k) % s.cfg.workers
		s.slotMu[c].Lock()
		s.mu.Lock()
		p := s.protected[c]
		s.mu.Unlock()
		if !p {
			return c
		}
		s.slotMu[c].Unlock()
	}
	return -1
}

// protect marks slot as (not) to be killed, returning its current worker.
func (s *supervisor) protect(slot int, on bool) *worker {
	s.slotMu[slot].Lock()
	defer s.slotMu[slot].Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.protected[slot] = on
	return s.slots[slot]
}

// stopAll asks every worker to stop (SIGTERM), waits up to grace for each
// to finish its current item and exit, and SIGKILLs the rest (a failure).
func (s *supervisor) stopAll(grace time.Duration) {
	s.mu.Lock()
	procs := append([]*worker(nil), s.slots...)
	s.mu.Unlock()
	for _, w := range procs {
		if w == nil {
			continue
		}
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, w := range procs {
		if w == nil {
			continue
		}
		select {
		case <-w.done:
		case <-deadline:
			s.fail("worker %d (slot %d) did not stop within %v of SIGTERM; killed", w.id, w.slot, grace)
			w.mu.Lock()
			w.killed = true
			w.mu.Unlock()
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	}
}

// killAll SIGKILLs every worker still running (on any exit path: error,
// timeout, interrupt, panic) and waits briefly for them.
func (s *supervisor) killAll() {
	s.mu.Lock()
	procs := append([]*worker(nil), s.all...)
	s.mu.Unlock()
	for _, w := range procs {
		select {
		case <-w.done:
			continue
		default:
		}
		w.mu.Lock()
		w.killed = true
		w.mu.Unlock()
		_ = w.cmd.Process.Kill()
	}
	for _, w := range procs {
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// incarnations returns every worker started so far.
func (s *supervisor) incarnations() []*worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*worker(nil), s.all...)
}
