package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// Child roles: the first argument after "child".
const (
	roleRun   = "run"   // run a workload.Runtime until told to stop
	roleFetch = "fetch" // measure fetch latency on a prepared queue
	roleProbe = "probe" // time Open and the first fetched items after a crash
)

// Message types a child writes, one JSON object per line on stdout.
const (
	msgReady  = "ready"
	msgStats  = "stats"
	msgResult = "result"
	msgError  = "error"
)

// Commands the parent writes to a child's stdin, one per line. End of
// input means stop as well.
const (
	cmdGo   = "go"
	cmdStop = "stop"
)

// childMsg is one line of a child's output.
type childMsg struct {
	Type string `json:"type"`
	Pid  int    `json:"pid,omitempty"`
	// PeakRSSKiB is the child's peak RSS so far (every message has it).
	PeakRSSKiB int64  `json:"peak_rss_kib,omitempty"`
	Error      string `json:"error,omitempty"`
	// Stats are a run child's runtime counters.
	Stats *workload.Stats `json:"stats,omitempty"`
	// Log is a durofs run child's write-ahead log counters.
	Log *provider.LogStats `json:"log,omitempty"`
	// LastEndUnixNs is when a run child's last execution-ending ack returned.
	LastEndUnixNs int64 `json:"last_end_unix_ns,omitempty"`
	// Fetch is a fetch child's result.
	Fetch *fetchResult `json:"fetch,omitempty"`
	// Probe is a probe child's result.
	Probe *probeResult `json:"probe,omitempty"`
}

// child is the parent's handle on a child process.
type child struct {
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan childMsg
	done   chan struct{} // closed once the process has exited and been waited for
	stderr *tailBuffer

	// waitErr is set before done is closed.
	waitErr error
	// maxRSSKiB is the largest peak RSS the child reported; read it after
	// done is closed.
	maxRSSKiB int64

	spawnedAt time.Time
}

// childOutputLimit bounds one line of child output.
const childOutputLimit = 4 << 20

// startChild starts `exe child <role> args...`.
func startChild(cfg Config, role string, args ...string) (*child, error) {
	exe := cfg.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
	}
	cmd := exec.Command(exe, append([]string{"child", role}, args...)...)
	cmd.Env = append(os.Environ(), cfg.ChildEnv...)
	cmd.SysProcAttr = childProcAttr()
	c := &child{role: role, cmd: cmd, msgs: make(chan childMsg, 4096), done: make(chan struct{}), stderr: newTailBuffer(16 << 10)}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("child %s: %w", role, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("child %s: %w", role, err)
	}
	c.stdin = stdin
	c.spawnedAt = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child %s: %w", role, err)
	}
	go c.read(stdout)
	return c, nil
}

// read decodes the child's output lines until it closes stdout, then waits
// for the process.
func (c *child) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), childOutputLimit)
	for sc.Scan() {
		var m childMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			m = childMsg{Type: msgError, Error: fmt.Sprintf("undecodable output line %q: %v", sc.Text(), err)}
		}
		c.maxRSSKiB = max(c.maxRSSKiB, m.PeakRSSKiB)
		c.msgs <- m
	}
	_, _ = io.Copy(io.Discard, stdout)
	c.waitErr = c.cmd.Wait()
	close(c.msgs)
	close(c.done)
}

// send writes one command line to the child.
func (c *child) send(cmd string) error {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("child %s (pid %d): send %q: %w", c.role, c.cmd.Process.Pid, cmd, err)
	}
	return nil
}

// next returns the child's next message. It fails if the child exits
// without one, reports an error, or nothing arrives before ctx ends.
func (c *child) next(ctx context.Context) (childMsg, error) {
	select {
	case m, ok := <-c.msgs:
		if !ok {
			<-c.done
			return childMsg{}, c.failure("exited without a result")
		}
		if m.Type == msgError {
			return m, c.failure(m.Error)
		}
		return m, nil
	case <-ctx.Done():
		return childMsg{}, fmt.Errorf("child %s (pid %d): %w", c.role, c.cmd.Process.Pid, ctx.Err())
	}
}

// expect returns the child's next message of type typ, skipping others.
func (c *child) expect(ctx context.Context, typ string) (childMsg, error) {
	for {
		m, err := c.next(ctx)
		if err != nil || m.Type == typ {
			return m, err
		}
	}
}

// failure describes an abnormal child, with the tail of its stderr.
func (c *child) failure(what string) error {
	msg := fmt.Sprintf("child %s (pid %d): %s", c.role, c.cmd.Process.Pid, what)
	select {
	case <-c.done:
		if c.waitErr != nil {
			msg += fmt.Sprintf(" (%v)", c.waitErr)
		}
	default:
	}
	if tail := bytes.TrimSpace(c.stderr.Bytes()); len(tail) > 0 {
		msg += "; stderr:\n" + string(tail)
	}
	return errors.New(msg)
}

// wait closes the child's stdin (which tells it to stop) and waits for it
// to exit, killing it after timeout. It returns the exit error.
func (c *child) wait(timeout time.Duration) error {
	_ = c.stdin.Close()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-c.msgs:
			if !ok {
				<-c.done
				if c.waitErr != nil {
					return c.failure("exit")
				}
				return nil
			}
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.done
			return c.failure(fmt.Sprintf("did not exit within %v; killed", timeout))
		}
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.stdin.Close()
	for range c.msgs {
	}
	<-c.done
}

// killAll kills every child that is still running (cleanup after an error).
func killAll(cs []*child) {
	for _, c := range cs {
		if c != nil {
			c.kill()
		}
	}
}

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

// Write implements io.Writer.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of the kept bytes.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}

// isTerminal reports whether an event ends an execution.
func isTerminal(e provider.Event) bool {
	switch e.Kind.(type) {
	case provider.OrchestrationCompleted, provider.OrchestrationFailed, provider.OrchestrationContinuedAsNew:
		return true
	}
	return false
}
