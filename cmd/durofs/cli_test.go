package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/provider"
)

// TestCLIConventions runs the built binary as a newcomer would: global
// flags before the command, help, version, flag spelling, an unknown
// --status, unknown instances, pending instances, and the text of every
// error (one "durofs <command>: " prefix, no operation names).
func TestCLIConventions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildDurofs(t)
	dir := fixture(t)

	t.Run("global flags before the command", func(t *testing.T) {
		for _, args := range [][]string{
			{"ls", "--json"},
			{"stats", "--json"},
			{"show", "run-1", "--json"},
		} {
			after := mustRun(t, bin, 0, append(append([]string{}, args...), "--dir", dir)...)
			before := mustRun(t, bin, 0, append([]string{"--dir", dir}, args...)...)
			eq := mustRun(t, bin, 0, append([]string{"--dir=" + dir, "--json"}, args[:len(args)-1]...)...)
			if scrub(after.stdout) != scrub(before.stdout) || scrub(eq.stdout) != scrub(before.stdout) {
				t.Errorf("durofs --dir D %s differs from durofs %s --dir D:\n%s\nvs\n%s", strings.Join(args, " "), strings.Join(args, " "), before.stdout, after.stdout)
			}
		}
		mustRun(t, bin, exitUsage, "--bogus", "ls")
		mustRun(t, bin, exitUsage, "--dir")
		mustRun(t, bin, exitUsage, "--dir", dir) // no command
	})

	t.Run("help and version", func(t *testing.T) {
		r := mustRun(t, bin, 0, "help")
		mustContain(t, "durofs help", r.stdout, "Usage:", "version", "help")
		for _, c := range []string{"demo", "ls", "show", "history", "queues", "leases", "stats", "fsck", "delete", "prune", "drain", "version"} {
			r := mustRun(t, bin, 0, "help", c)
			mustContain(t, "durofs help "+c, r.stdout, "Usage: durofs "+c)
			// Flags are spelled as the README spells them: --dir, not -dir.
			if regexp.MustCompile(`(?m)^  -[a-z]`).MatchString(r.stdout) {
				t.Errorf("durofs help %s spells a flag with one dash:\n%s", c, r.stdout)
			}
			if c != "demo" && c != "version" && !strings.Contains(r.stdout, "  --dir D\n") {
				t.Errorf("durofs help %s does not list --dir D:\n%s", c, r.stdout)
			}
		}
		mustRun(t, bin, exitUsage, "help", "bogus")
		mustRun(t, bin, exitUsage, "help", "worker")
		for _, args := range [][]string{{"version"}, {"--version"}} {
			r := mustRun(t, bin, 0, args...)
			if !strings.HasPrefix(r.stdout, "durofs "+provider.Version+" (on-disk format "+strconv.Itoa(provider.FormatVersion)+", duroxide provider contract "+provider.DuroxideVersion) {
				t.Errorf("durofs %v: %q", args, r.stdout)
			}
		}
		var v versionInfo
		r = mustRun(t, bin, 0, "--json", "version")
		must(t, json.Unmarshal([]byte(r.stdout), &v))
		if v.Version != provider.Version || v.FormatVersion != provider.FormatVersion || v.DuroxideVersion != provider.DuroxideVersion {
			t.Errorf("durofs version --json: %+v", v)
		}
	})

	t.Run("status filter", func(t *testing.T) {
		r := mustRun(t, bin, exitUsage, "ls", "--status", "Bogus", "--dir", dir)
		mustContain(t, "ls --status Bogus", r.stderr, "unknown --status", "Running, Completed, Failed, ContinuedAsNew, Pending")
		if r.stdout != "" {
			t.Errorf("ls --status Bogus printed a table:\n%s", r.stdout)
		}
		r = mustRun(t, bin, 0, "ls", "--status", "completed", "--dir", dir)
		mustContain(t, "ls --status completed", r.stdout, "done-1", "3 instance(s)")
	})

	t.Run("pending instances", func(t *testing.T) {
		pdir := filepath.Join(t.TempDir(), "pending")
		copyTree(t, dir, pdir)
		p, err := provider.Open(pdir, provider.Options{SweepInterval: -1, Logger: quietLogger()})
		must(t, err)
		v := "3.0.0"
		for _, id := range []string{"queued-1", "queued-2", "queued-3"} {
			must(t, p.EnqueueForOrchestrator(context.Background(), provider.StartOrchestration{Instance: id, Orchestration: "Later", Input: "{}", Version: &v, ExecutionID: 1}, 0))
		}
		must(t, p.Close())
		r := mustRun(t, bin, 0, "ls", "--status", "Pending", "--dir", pdir)
		mustContain(t, "ls --status Pending", r.stdout, "queued-1", "queued-2", "queued-3", "Later", "3.0.0", "held-1", "4 instance(s)")
		r = mustRun(t, bin, 0, "stats", "--dir", pdir)
		mustContain(t, "stats", r.stdout, "4 (started")
		r = mustRun(t, bin, 0, "show", "queued-2", "--dir", pdir)
		mustContain(t, "show queued-2", r.stdout, "Pending", "StartOrchestration")
	})

	t.Run("unknown instances", func(t *testing.T) {
		udir := filepath.Join(t.TempDir(), "unknown")
		copyTree(t, dir, udir)
		for _, args := range [][]string{
			{"show", "nobody"}, {"history", "nobody"}, {"delete", "nobody"}, {"delete", "nobody", "--force"}, {"prune", "nobody"},
		} {
			r := mustRun(t, bin, exitFailure, append(args, "--dir", udir)...)
			mustContain(t, "durofs "+strings.Join(args, " "), r.stderr, "not found")
			if _, err := os.Stat(filepath.Join(udir, "instances", "nobody")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("durofs %s left instances/nobody: %v", strings.Join(args, " "), err)
			}
		}
		// What a deletion leaves is not an instance either.
		mustRun(t, bin, 0, "delete", "done-1", "--dir", udir)
		r := mustRun(t, bin, exitFailure, "show", "done-1", "--dir", udir)
		mustContain(t, "show of a deleted instance", r.stderr, "not found")
	})

	t.Run("error messages", func(t *testing.T) {
		empty, file := t.TempDir(), filepath.Join(t.TempDir(), "file")
		writeFile(t, file, "x")
		missing := filepath.Join(t.TempDir(), "missing")
		cmds := [][]string{{"ls"}, {"show", "x"}, {"history", "x"}, {"queues"}, {"leases"}, {"stats"}, {"fsck"}, {"fsck", "--repair"}, {"delete", "x"}, {"prune", "x"}, {"drain"}}
		opRe := regexp.MustCompile(`\b[a-z]+_[a-z_]+: `) // instance_detail: , prune_executions: , ...
		for _, d := range []string{empty, file, missing, dir} {
			for _, c := range cmds {
				args := append(append([]string{}, c...), "--dir", d)
				r := runCLI(t, bin, nil, args...)
				if r.code == 0 {
					continue // a command that works on the fixture (ls, queues, ...)
				}
				prefix := "durofs " + c[0] + ": "
				msg, ok := strings.CutPrefix(r.stderr, prefix)
				switch {
				case !ok:
					t.Errorf("durofs %s: stderr does not start with %q: %q", strings.Join(args, " "), prefix, r.stderr)
				case strings.Contains(msg, "durofs "+c[0]+": ") || strings.HasPrefix(msg, "durofs: ") || strings.Contains(msg, ": durofs: "):
					t.Errorf("durofs %s: a doubled prefix: %q", strings.Join(args, " "), r.stderr)
				case opRe.MatchString(msg):
					t.Errorf("durofs %s: an operation name in the message: %q", strings.Join(args, " "), r.stderr)
				}
				if d == missing && !strings.Contains(r.stderr, "no such directory") {
					t.Errorf("durofs %s: %q, want \"no such directory\"", strings.Join(args, " "), r.stderr)
				}
			}
		}
	})

	t.Run("fsck hints", func(t *testing.T) {
		cases := []struct {
			name   string
			damage func(t *testing.T, d string)
			want   string // in the result line
		}{
			{"a format fsck cannot repair", func(t *testing.T, d string) {
				writeFile(t, filepath.Join(d, "FORMAT"), `{"format":"durofs","version":`+strconv.Itoa(provider.FormatVersion+1)+`}`)
			}, "--repair cannot fix these"},
			{"an old temporary file", func(t *testing.T, d string) {
				p := filepath.Join(d, "tmp", ".tmp-lease.json-0f0f")
				writeFile(t, p, "{")
				age(t, p, time.Hour)
			}, "durofs fsck --repair fixes the findings it can repair"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				d := filepath.Join(t.TempDir(), "d")
				copyTree(t, dir, d)
				c.damage(t, d)
				r := mustRun(t, bin, exitFailure, "fsck", "--dir", d)
				mustContain(t, "fsck", r.stdout, "result: NOT clean ("+c.want)
			})
		}
	})

	t.Run("fsck permission denied", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "d")
		copyTree(t, dir, d)
		stdout, code := fsckUnreadable(t, bin, d)
		if code != exitFailure {
			t.Fatalf("fsck of an unreadable FORMAT: exit %d, want %d\n%s", code, exitFailure, stdout)
		}
		mustContain(t, "fsck", stdout, "io_error", "permission denied: run durofs as a user that may read and write", "--repair cannot fix these")
		if strings.Contains(stdout, "this build reads format version") {
			t.Errorf("fsck blames the format for a permission problem:\n%s", stdout)
		}
	})
}

// scrub removes what changes between two runs of a command (times).
func scrub(s string) string {
	return regexp.MustCompile(`"(at_ms|expires_at_ms)": \d+`).ReplaceAllString(s, "")
}

// quietLogger discards the provider's logs.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
