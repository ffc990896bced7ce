//go:build unix

package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/durofs/durofs/internal/vfs"
)

// A real short write, with no fault injection: a child process runs with
// RLIMIT_FSIZE set low and SIGXFSZ ignored, so a write(2) that would grow a
// file past the limit writes what fits and then fails with EFBIG
// (filesystem-notes.md §3.3). The parent then checks, as a fresh process
// without the limit, that nothing partial is visible, that the next attempt
// (in a new child without the limit) succeeds, and that fsck finds the
// directory clean.

const rlimitHelperEnv = "DUROFS_RLIMIT_HELPER"

// rlimitResult is the helper's one-line answer.
type rlimitResult struct {
	Err       string `json:"err,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	EFBIG     bool   `json:"efbig,omitempty"`
}

// TestRlimitHelper is not a test: it is the body of a helper process that
// applies DUROFS_RLIMIT (bytes; 0 = none) to itself and runs one call.
func TestRlimitHelper(t *testing.T) {
	if os.Getenv(rlimitHelperEnv) != "1" {
		return
	}
	res := runRlimitHelper()
	b, _ := json.Marshal(res)
	fmt.Printf("%s\n", b)
	os.Exit(0)
}

func runRlimitHelper() rlimitResult {
	fail := func(err error) rlimitResult {
		return rlimitResult{Err: err.Error(), Retryable: IsRetryable(err), EFBIG: errors.Is(err, syscall.EFBIG)}
	}
	if lim, _ := strconv.ParseUint(os.Getenv("DUROFS_RLIMIT"), 10, 64); lim > 0 {
		signal.Ignore(syscall.SIGXFSZ) // write(2) returns EFBIG instead of killing us
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
			return rlimitResult{Err: "setrlimit: " + err.Error()}
		}
	}
	p, err := Open(os.Getenv("DUROFS_DIR"), Options{SweepInterval: -1})
	if err != nil {
		return rlimitResult{Err: "open: " + err.Error()}
	}
	defer p.Close()
	ctx := context.Background()
	size, _ := strconv.Atoi(os.Getenv("DUROFS_SIZE"))
	switch os.Getenv("DUROFS_OP") {
	case "enqueue":
		err = p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "big", Name: "e", Data: pad(size)}, 0)
	case "ack":
		id, _ := strconv.ParseUint(os.Getenv("DUROFS_EVENT_ID"), 10, 64)
		ev := started("big")
		ev.EventID, ev.Kind = id, ExternalEvent{Name: "e", Data: pad(size)}
		err = p.AckOrchestrationItem(ctx, os.Getenv("DUROFS_TOKEN"), 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
	default:
		return rlimitResult{Err: "unknown op"}
	}
	if err != nil {
		return fail(err)
	}
	return rlimitResult{}
}

// runRlimitChild runs one helper process and returns its answer.
func runRlimitChild(t *testing.T, dir string, limit int64, env ...string) rlimitResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRlimitHelper$")
	cmd.Env = append(os.Environ(), rlimitHelperEnv+"=1", "DUROFS_DIR="+dir, "DUROFS_RLIMIT="+strconv.FormatInt(limit, 10))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "{") {
			var r rlimitResult
			mustNoErr(t, json.Unmarshal([]byte(line), &r))
			if strings.HasPrefix(r.Err, "setrlimit") || strings.HasPrefix(r.Err, "open") || r.Err == "unknown op" {
				t.Fatalf("helper could not run: %s", r.Err)
			}
			return r
		}
	}
	t.Fatalf("helper gave no answer:\n%s", out)
	return rlimitResult{}
}

// noLeftovers fails if a temporary, staged or commit file is left anywhere.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	mustNoErr(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case vfs.IsTemp(d.Name()), strings.HasPrefix(d.Name(), ".staged-"),
			strings.HasPrefix(rel, "commits"+string(filepath.Separator)):
			t.Errorf("left behind: %s", rel)
		}
		return nil
	}))
}

func fsckClean(t *testing.T, dir string) {
	t.Helper()
	rep, err := Fsck(context.Background(), dir, FsckOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("fsck: %v, findings %+v", err, rep.Remaining())
	}
}

// TestRlimitShortWriteEnqueue: a message write cut short by RLIMIT_FSIZE
// fails the enqueue with a retryable error (wrapping EFBIG) and leaves no
// message and no temporary file; the next enqueue, in a process without the
// limit, stores the whole message.
func TestRlimitShortWriteEnqueue(t *testing.T) {
	const size = 256 << 10
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1})
	mustNoErr(t, p.Close())

	r := runRlimitChild(t, dir, 64<<10, "DUROFS_OP=enqueue", "DUROFS_SIZE="+strconv.Itoa(size))
	if r.Err == "" || !r.Retryable || !r.EFBIG {
		t.Fatalf("enqueue under RLIMIT_FSIZE: %+v, want a retryable error wrapping EFBIG", r)
	}
	fresh := openT(t, dir, Options{SweepInterval: -1})
	if entries, err := fresh.orchQ.List(); err != nil || len(entries) != 0 {
		t.Fatalf("queue after the failed enqueue = %d messages, %v; want none", len(entries), err)
	}
	noLeftovers(t, dir)
	mustNoErr(t, fresh.Close())

	if r := runRlimitChild(t, dir, 0, "DUROFS_OP=enqueue", "DUROFS_SIZE="+strconv.Itoa(size)); r.Err != "" {
		t.Fatalf("enqueue without the limit: %s", r.Err)
	}
	after := openT(t, dir, Options{SweepInterval: -1})
	entries, err := after.orchQ.List()
	if err != nil || len(entries) != 1 {
		t.Fatalf("queue after the retry = %d messages, %v; want 1", len(entries), err)
	}
	m, err := after.orchQ.Get(entries[0].Name)
	mustNoErr(t, err)
	w, err := UnmarshalWorkItem(m.Payload)
	if err != nil || len(w.(ExternalRaised).Data) != size {
		t.Fatalf("stored message = %v, want the whole %d-byte payload", err, size)
	}
	noLeftovers(t, dir)
	mustNoErr(t, after.Close())
	fsckClean(t, dir)
}

// TestRlimitShortWriteAck: an ack whose writes are cut short by
// RLIMIT_FSIZE. Two places: the commit record (a new file larger than the
// limit: before the commit point) and the history append (the history file
// is already near the limit, the commit record is small: after it). Either
// way a fresh process sees all or nothing of the turn - never a partial
// record - and the turn is complete after the next attempt without the limit
// (if the ack failed, it failed retryably and kept its lock); fsck is clean.
func TestRlimitShortWriteAck(t *testing.T) {
	cases := []struct {
		name string
		// prefill is how many 4 KiB events are committed first (to grow
		// the history file), size the acked event's payload, and limit
		// the file size limit (relative to the history file's size if
		// relative).
		prefill  int
		size     int
		limit    int64
		relative bool
	}{
		{"commit record cut short", 0, 64 << 10, 16 << 10, false},
		{"history append cut short", 16, 2 << 10, 300, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1})
			createInstance(t, p, "big")
			id := uint64(2)
			for range c.prefill {
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "big", Name: "e", Data: "1"}, 0))
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil {
					t.Fatal(it, err)
				}
				ev := started("big")
				ev.EventID, ev.Kind = id, ExternalEvent{Name: "e", Data: pad(4 << 10)}
				mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil))
				id++
			}
			mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "big", Name: "e", Data: "last"}, 0))
			it, err := p.FetchOrchestrationItem(ctx, 10*time.Minute, 0, nil)
			if err != nil || it == nil {
				t.Fatal(it, err)
			}
			before, err := p.Read(ctx, "big")
			mustNoErr(t, err)
			hist, err := os.Stat(p.historyPath(instanceKey("big"), 1))
			mustNoErr(t, err)
			mustNoErr(t, p.Close())
			limit := c.limit
			if c.relative {
				limit += hist.Size()
			}
			env := []string{"DUROFS_OP=ack", "DUROFS_TOKEN=" + it.LockToken, "DUROFS_EVENT_ID=" + strconv.FormatUint(id, 10), "DUROFS_SIZE=" + strconv.Itoa(c.size)}

			r := runRlimitChild(t, dir, limit, env...)
			if r.Err != "" && !r.Retryable {
				t.Fatalf("ack under RLIMIT_FSIZE: %s; want success or a retryable error", r.Err)
			}
			if c.name == "commit record cut short" && (r.Err == "" || !r.EFBIG) {
				t.Fatalf("ack with a commit record over the limit: %+v, want a retryable EFBIG", r)
			}
			if c.relative {
				// The premise: the append really was cut, so the file ends
				// exactly at the limit with part of a record.
				fi, err := os.Stat(p.historyPath(instanceKey("big"), 1))
				mustNoErr(t, err)
				if fi.Size() != limit {
					t.Fatalf("history file is %d bytes after the child, want %d (cut at the limit)", fi.Size(), limit)
				}
			}
			// A reader that does not recover sees whole records only: the
			// history before the turn, or (if the ack returned) with it.
			ro, err := OpenReadOnly(dir, Options{})
			mustNoErr(t, err)
			h, err := ro.Read(ctx, "big")
			mustNoErr(t, ro.Close())
			if err != nil || (len(h) != len(before) && len(h) != len(before)+1) {
				t.Fatalf("history seen without recovery = %d events (%v), want %d or %d", len(h), err, len(before), len(before)+1)
			}
			if len(h) == len(before)+1 && len(h[len(h)-1].Kind.(ExternalEvent).Data) != c.size {
				t.Fatal("a partial event is visible")
			}
			// A fresh process recovers: all or nothing.
			fresh := openT(t, dir, Options{SweepInterval: -1})
			h, err = fresh.Read(ctx, "big")
			mustNoErr(t, err)
			switch {
			case r.Err == "" && len(h) != len(before)+1:
				t.Fatalf("the ack returned success but a fresh process sees %d events, want %d", len(h), len(before)+1)
			case r.Err != "" && len(h) != len(before):
				t.Fatalf("the ack failed but a fresh process sees %d events, want %d", len(h), len(before))
			}
			if r.Err != "" {
				// The lock was kept: nobody else gets the turn.
				if again, err := fresh.FetchOrchestrationItem(ctx, time.Minute, 0, nil); err != nil || again != nil {
					t.Fatalf("fetch after the failed ack = %+v, %v; want nothing (the lock is kept)", again, err)
				}
			}
			mustNoErr(t, fresh.Close())
			noLeftovers(t, dir)

			if r.Err != "" {
				if r := runRlimitChild(t, dir, 0, env...); r.Err != "" {
					t.Fatalf("ack without the limit: %s", r.Err)
				}
			}
			final := openT(t, dir, Options{SweepInterval: -1})
			h, err = final.Read(ctx, "big")
			if err != nil || len(h) != len(before)+1 || len(h[len(h)-1].Kind.(ExternalEvent).Data) != c.size {
				t.Fatalf("history after the turn = %d events, %v; want %d with the whole last event", len(h), err, len(before)+1)
			}
			mustNoErr(t, final.Close())
			fsckClean(t, dir)
		})
	}
}
