package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// buildDurofs builds this command into a temporary directory.
func buildDurofs(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
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
)

func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs worker processes")
	}
	bin := buildDurofs(t)
	dir := filepath.Join(t.TempDir(), "demo")
	// Twice in a row on the same directory: the second run starts afresh.
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, bin, "demo", "--instances", "12", "--workers", "3", "--dir", dir, "--seed", "5")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		cancel()
		out := stdout.String()
		t.Logf("run %d (%v):\n%s", run, time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Fatalf("run %d: %v\nstderr:\n%s", run, err, stderr.String())
		}
		for _, re := range []*regexp.Regexp{passedRe, completedRe, killsRe} {
			if !re.MatchString(out) {
				t.Errorf("run %d: output does not match %q", run, re)
			}
		}
		if !strings.Contains(out, "throughput:") || !strings.Contains(out, "elapsed:") {
			t.Errorf("run %d: summary incomplete", run)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "FORMAT")); err != nil {
		t.Errorf("demo directory: %v", err)
	}
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
