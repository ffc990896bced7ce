package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// buildDurofs builds this command into a temporary directory.
func buildDurofs(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build the CLI with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "durofs")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var (
	passedRe    = regexp.MustCompile(`invariant check:\s+passed \(0 violations`)
	completedRe = regexp.MustCompile(`instances completed:\s+12/12 as expected`)
	killsRe     = regexp.MustCompile(`kills survived:\s+\d`)
	// killWaitRe: after the kill the demo says what the others wait for.
	killWaitRe = regexp.MustCompile(`SIGKILLed worker \d \(pid \d+\).*\n(it held no locks: nothing waits for it|waiting for the locks it held to expire: \d+ orchestration turns? and \d+ activit(y|ies) it fetched and did not ack;.*\(the last in [0-9.]+m?s; the lock timeout is 5s\))`)
)

func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs worker processes")
	}
	bin := buildDurofs(t)
	dir := filepath.Join(t.TempDir(), "demo")
	demo := func(extra ...string) (stdout, stderr string, code int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args := append([]string{"demo", "--instances", "12", "--workers", "3", "--dir", dir, "--seed", "5"}, extra...)
		cmd := exec.CommandContext(ctx, bin, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code = exitCode(t, cmd.Run(), args)
		return out.String(), errb.String(), code
	}
	check := func(run int, out, stderr string, code int) {
		t.Helper()
		t.Logf("run %d:\n%s", run, out)
		if code != 0 {
			t.Fatalf("run %d: exit %d\nstderr:\n%s", run, code, stderr)
		}
		for _, re := range []*regexp.Regexp{passedRe, completedRe, killsRe, killWaitRe} {
			if !re.MatchString(out) {
				t.Errorf("run %d: output does not match %q", run, re)
			}
		}
		if !strings.Contains(out, "throughput:") || !strings.Contains(out, "elapsed:") {
			t.Errorf("run %d: summary incomplete", run)
		}
	}
	out, stderr, code := demo()
	check(1, out, stderr, code)

	// The directory now holds the first run's data: refused without
	// --force, and refused with it while a process has it open.
	before := dirNames(t, dir)
	if _, stderr, code := demo(); code != exitUsage || !strings.Contains(stderr, "--force") {
		t.Fatalf("demo on a used directory without --force: exit %d, want %d and a hint\n%s", code, exitUsage, stderr)
	}
	if after := dirNames(t, dir); !slices.Equal(before, after) {
		t.Errorf("a refused demo changed the directory: %d paths, was %d", len(after), len(before))
	}
	// In either durability mode (a process-crash-safe one makes demo's
	// own registration fail with wal.ErrModeMismatch: in use too).
	for _, mode := range []provider.Durability{provider.Durable, provider.ProcessCrashSafe} {
		p, err := provider.Open(dir, provider.Options{SweepInterval: -1, CheckpointInterval: -1, Durability: mode})
		if err != nil {
			t.Fatal(err)
		}
		before = dirNames(t, dir)
		if _, stderr, code := demo("--force"); code != exitFailure || !strings.Contains(stderr, "in use") {
			t.Errorf("demo --force on a directory a %v process has open: exit %d, want %d and \"in use\"\n%s", mode, code, exitFailure, stderr)
		}
		if after := dirNames(t, dir); !slices.Equal(before, after) {
			t.Errorf("a refused demo --force changed the directory: %d paths, was %d", len(after), len(before))
		}
		if _, err := p.Instances(context.Background(), ""); err != nil {
			t.Errorf("the open provider after a refused demo: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Closed: --force starts afresh.
	out, stderr, code = demo("--force")
	check(2, out, stderr, code)
	if _, err := os.Stat(filepath.Join(dir, "FORMAT")); err != nil {
		t.Errorf("demo directory: %v", err)
	}
}

// dirNames lists every path below dir (sorted), but for the registration
// files in wal/procs: a process that opens the log (as demo --force does to
// tell whether it is alone) may leave one, free, for the next to take over.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	procs := filepath.Join(dir, "wal", "procs") + string(filepath.Separator)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !strings.HasPrefix(path, procs) {
			names = append(names, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestUsageErrors(t *testing.T) {
	notDurofs := t.TempDir()
	if err := os.WriteFile(filepath.Join(notDurofs, "precious.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(notDurofs, "precious.txt")
	cases := []struct {
		args []string
		want int
	}{
		{nil, exitUsage},
		{[]string{"bogus"}, exitUsage},
		{[]string{"help"}, exitOK},
		{[]string{"demo", "--instances", "x"}, exitUsage},
		{[]string{"demo", "--instances", "0"}, exitUsage},
		{[]string{"demo", "--workers", "0"}, exitUsage},
		{[]string{"demo", "--no-such-flag"}, exitUsage},
		{[]string{"demo", "extra"}, exitUsage},
		{[]string{"demo", "--dir", notDurofs}, exitUsage},
		{[]string{"demo", "--dir", file}, exitUsage},
		{[]string{"demo", "-h"}, exitOK},
		{[]string{"worker"}, exitUsage},
		{[]string{"worker", "--dir", notDurofs, "--dispatchers", "0"}, exitUsage},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != c.want {
			t.Errorf("durofs %v: exit %d, want %d\nstderr: %s", c.args, got, c.want, stderr.String())
		}
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "keep me" {
		t.Fatalf("the demo touched a foreign directory: %q, %v", data, err)
	}
	var stderr bytes.Buffer
	run(nil, &bytes.Buffer{}, &stderr)
	if !strings.Contains(stderr.String(), "Usage:") || !strings.Contains(stderr.String(), "demo") {
		t.Errorf("usage text: %q", stderr.String())
	}
	if strings.Contains(stderr.String(), "\tworker") {
		t.Errorf("the hidden worker command is listed: %q", stderr.String())
	}
}
