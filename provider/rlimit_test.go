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
// (docs/testing.md, "Faults without root"). The parent then checks, as a fresh process
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
	seg, _ := strconv.ParseInt(os.Getenv("DUROFS_SEGMENT_SIZE"), 10, 64)
	p, err := Open(os.Getenv("DUROFS_DIR"), Options{SweepInterval: -1, SegmentSize: seg})
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

// noLeftovers fails if a temporary or staged file, or a poison mark of the
// write-ahead log, is left anywhere.
func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	mustNoErr(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case vfs.IsTemp(d.Name()), strings.HasPrefix(d.Name(), ".staged-"), rel == filepath.Join("wal", "POISONED"):
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
	m, err := after.orchQ.Get(entries[0].Name())
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
// RLIMIT_FSIZE, which limits every file the process writes. Three places:
//
//   - the log append cut short: a record larger than what the limit leaves
//     of the log segment; the write stops mid-frame, before the commit point;
//   - the log segment past the limit (default segment size: the segment,
//     which holds every record since the directory was created, is larger
//     than the history file): the append writes nothing, before the commit
//     point - with one shared log, it is the first file an ack would grow
//     past a limit that the history file is near;
//   - the history append cut short: with small segments the newest one is
//     small, so the record commits and the history append, after the
//     commit point, is what the limit cuts (its apply is left to recovery).
//
// Either way a fresh process sees all or nothing of the turn - never a
// partial record - and the turn is complete after the next attempt without
// the limit (if the ack failed, it failed retryably, wrapping EFBIG, and kept
// its lock); fsck is clean.
func TestRlimitShortWriteAck(t *testing.T) {
	cases := []struct {
		name string
		// prefill is how many 4 KiB events are committed first (to grow
		// the history file), size the acked event's payload, and limit
		// the file size limit (relative to the history file's size if
		// relative). segment is the log's segment size (0: the default).
		prefill  int
		size     int
		limit    int64
		relative bool
		segment  int64
		// committed: the ack passes its commit point (and returns
		// success); else it fails retryably with EFBIG.
		committed bool
	}{
		{"log append cut short", 0, 64 << 10, 16 << 10, false, 4096, false},
		{"log segment past the limit", 16, 2 << 10, 300, true, 0, false},
		{"history append cut short", 16, 2 << 10, 300, true, 4096, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{SweepInterval: -1, SegmentSize: c.segment}
			p := openT(t, dir, opts)
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
			histPath := p.historyPath(instanceKey("big"), 1)
			hist, err := os.Stat(histPath)
			mustNoErr(t, err)
			mustNoErr(t, p.Close())
			limit := c.limit
			if c.relative {
				limit += hist.Size()
			}
			seg := newestSegmentSize(t, dir)
			env := []string{"DUROFS_OP=ack", "DUROFS_TOKEN=" + it.LockToken, "DUROFS_EVENT_ID=" + strconv.FormatUint(id, 10),
				"DUROFS_SIZE=" + strconv.Itoa(c.size), "DUROFS_SEGMENT_SIZE=" + strconv.FormatInt(c.segment, 10)}

			r := runRlimitChild(t, dir, limit, env...)
			if c.committed && r.Err != "" {
				t.Fatalf("ack under RLIMIT_FSIZE: %s; want success (the cut comes after the commit point)", r.Err)
			}
			if !c.committed && (r.Err == "" || !r.Retryable || !r.EFBIG) {
				t.Fatalf("ack under RLIMIT_FSIZE: %+v, want a retryable error wrapping EFBIG", r)
			}
			// The premises: where the limit cut.
			after := newestSegmentSize(t, dir)
			fi, err := os.Stat(histPath)
			mustNoErr(t, err)
			switch c.name {
			case "log append cut short":
				if seg >= limit || after != limit {
					t.Fatalf("log segment %d bytes before the child and %d after, want it below and then cut at the limit %d", seg, after, limit)
				}
			case "log segment past the limit":
				if seg < limit || after != seg || fi.Size() != hist.Size() {
					t.Fatalf("log segment %d -> %d bytes, history %d -> %d; want the segment past the limit %d and nothing written", seg, after, hist.Size(), fi.Size(), limit)
				}
			case "history append cut short":
				if after >= limit || fi.Size() != limit {
					t.Fatalf("log segment %d bytes, history %d bytes after the child; want the segment below the limit %d and the history cut at it", after, fi.Size(), limit)
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
			fresh := openT(t, dir, opts)
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
			final := openT(t, dir, opts)
			h, err = final.Read(ctx, "big")
			if err != nil || len(h) != len(before)+1 || len(h[len(h)-1].Kind.(ExternalEvent).Data) != c.size {
				t.Fatalf("history after the turn = %d events, %v; want %d with the whole last event", len(h), err, len(before)+1)
			}
			mustNoErr(t, final.Close())
			fsckClean(t, dir)
		})
	}
}

// newestSegmentSize returns the size of the newest write-ahead log segment.
func newestSegmentSize(t *testing.T, dir string) int64 {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment in %s: %v", dir, err)
	}
	fi, err := os.Stat(segs[len(segs)-1]) // Glob sorts; the names are fixed-width hex
	mustNoErr(t, err)
	return fi.Size()
}
