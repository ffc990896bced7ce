package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/durofs/durofs/conformance/workload"
)

// pool runs the demo's worker processes: re-executions of this binary as
// "durofs worker".
type pool struct {
	exe  string
	args []string // after "worker"
	tail *tailBuffer

	mu    sync.Mutex
	slots []*proc
	// retired holds the last report of every process that has exited.
	retired    []workerReport
	unexpected []string // processes that exited without being asked to
	starts     int
}

// proc is one worker process.
type proc struct {
	slot int
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and stdout is drained

	mu       sync.Mutex
	last     workerReport
	reported bool
	stopping bool // killed or stopped on purpose
	exitErr  error
}

func newPool(exe string, args []string, n int, tail *tailBuffer) *pool {
	return &pool{exe: exe, args: args, tail: tail, slots: make([]*proc, n)}
}

// start starts the worker of slot i.
func (pl *pool) start(i int) (*proc, error) {
	cmd := exec.Command(pl.exe, append([]string{"worker"}, pl.args...)...)
	cmd.Stderr = pl.tail.prefixed(fmt.Sprintf("[worker %d] ", i))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", i, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %d: %w", i, err)
	}
	p := &proc{slot: i, cmd: cmd, done: make(chan struct{})}
	go p.read(out, pl)
	pl.mu.Lock()
	pl.slots[i] = p
	pl.starts++
	pl.mu.Unlock()
	return p, nil
}

// read consumes the worker's stats lines until it exits, then reaps it.
func (p *proc) read(out io.Reader, pl *pool) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var r workerReport
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			pl.tail.add(fmt.Sprintf("[worker %d] stdout: %s", p.slot, sc.Text()))
			continue
		}
		p.mu.Lock()
		p.last, p.reported = r, true
		p.mu.Unlock()
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exitErr = err
	stopping := p.stopping
	last, reported := p.last, p.reported
	p.mu.Unlock()
	pl.mu.Lock()
	if reported {
		pl.retired = append(pl.retired, last)
	}
	if !stopping {
		pl.unexpected = append(pl.unexpected, fmt.Sprintf("worker %d (pid %d) exited on its own: %v", p.slot, p.cmd.Process.Pid, err))
	}
	pl.mu.Unlock()
	close(p.done)
}

// kill SIGKILLs the worker of slot i and waits until it is gone.
func (pl *pool) kill(i int) (pid int, err error) {
	pl.mu.Lock()
	p := pl.slots[i]
	pl.mu.Unlock()
	if p == nil {
		return 0, fmt.Errorf("worker %d is not running", i)
	}
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		return 0, fmt.Errorf("kill worker %d: %w", i, err)
	}
	<-p.done
	return p.cmd.Process.Pid, nil
}

// stopAll asks every worker to stop (SIGTERM), waits up to grace for them
// to write their final stats and exit, and SIGKILLs the rest.
func (pl *pool) stopAll(grace time.Duration) {
	pl.mu.Lock()
	procs := append([]*proc(nil), pl.slots...)
	pl.mu.Unlock()
	for _, p := range procs {
		if p == nil {
			continue
		}
		p.mu.Lock()
		p.stopping = true
		p.mu.Unlock()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			_ = p.cmd.Process.Kill() // no SIGTERM on this platform, or already gone
		}
	}
	deadline := time.After(grace)
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// totals sums the last report of every process that has exited and says
// how many processes had reported at all.
func (pl *pool) totals() (sum workload.Stats, reports int) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, r := range pl.retired {
		sum = sum.Add(r.Stats)
	}
	return sum, len(pl.retired)
}

// started is the number of processes started so far.
func (pl *pool) started() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.starts
}

// unexpectedExits counts processes that exited without being asked to.
func (pl *pool) unexpectedExits() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.unexpected)
}

// unexpectedList describes the processes that exited without being asked to.
func (pl *pool) unexpectedList() []string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return append([]string(nil), pl.unexpected...)
}

// tailBuffer keeps the last lines written by the workers (and the demo's
// provider) to show them when something goes wrong.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
	max   int
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

// prefixed returns a writer that adds each line written to it, prefixed.
func (t *tailBuffer) prefixed(prefix string) io.Writer {
	return &lineWriter{t: t, prefix: prefix}
}

// dump writes the kept lines to w.
func (t *tailBuffer) dump(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		fmt.Fprintln(w, l)
	}
}

type lineWriter struct {
	t      *tailBuffer
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.t.add(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

// executable is the binary to re-execute as a worker.
func executable() string {
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return os.Args[0]
}
