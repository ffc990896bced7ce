package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestOpenFormat: Open creates FORMAT (version 8) in a fresh directory,
// reopens a current one and upgrades a version-3, -4 or -5 one in place; it refuses, with an error wrapping
// ErrUnsupportedFS, a FORMAT of version 1 or 2 (saying what to do), of a
// future version or of another kind, and creates nothing in a directory it
// refuses.
func TestOpenFormat(t *testing.T) {
	cases := []struct {
		name    string
		format  string // "" = no FORMAT file
		wantErr string // "" = Open succeeds; else a part of the error
	}{
		{"fresh directory", "", ""},
		{"current version", `{"format":"durofs","version":8}`, ""},
		{"version 7 (every go-workflows execution in instance.json): upgraded", `{"format":"durofs","version":7}`, ""},
		{"version 6 (executions listed id by id): upgraded", `{"format":"durofs","version":6}`, ""},
		{"version 5 (no deletion markers): replayed and upgraded", `{"format":"durofs","version":5}`, ""},
		{"version 4 (files replaced, never written in place): upgraded", `{"format":"durofs","version":4}`, ""},
		{"version 3 (log not preallocated): upgraded", `{"format":"durofs","version":3}`, ""},
		{"version 1 (commit records)", `{"format":"durofs","version":1}`, "format version 1 (per-instance commit records) is not read by this build, which commits through a write-ahead log (version 8); finish the directory's work with durofs 0.1"},
		{"version 2 (messages named by ULID alone)", `{"format":"durofs","version":2}`, "format version 2 (queue messages named <ULID>.json) is not read by this build, which names them <ULID>.<visible>.<route>.json (version 8); finish the directory's work with the build that wrote it"},
		{"future major version", `{"format":"durofs","version":9}`, "format version 9 (this build reads version 8)"},
		{"not durofs", `{"format":"other","version":2}`, "is not a durofs FORMAT file"},
		{"garbage", `not json`, "is not a durofs FORMAT file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.format != "" {
				if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(c.format), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Open(dir, Options{SweepInterval: -1})
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrUnsupportedFS) || !strings.Contains(err.Error(), c.wantErr) {
					if p != nil {
						p.Close()
					}
					t.Fatalf("Open = %v, want an ErrUnsupportedFS error saying %q", err, c.wantErr)
				}
				// Refused before anything was created.
				if names, _ := os.ReadDir(dir); len(names) != 1 {
					t.Errorf("a refused Open changed the directory: %v", names)
				}
				if data, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(data) != c.format {
					t.Errorf("a refused Open changed FORMAT: %q", data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
			data, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
			if err != nil || !strings.Contains(string(data), `"format":"durofs"`) || !strings.Contains(string(data), `"version":8`) {
				t.Fatalf("FORMAT = %q, %v; want version 8", data, err)
			}
			// Reopening works and keeps the FORMAT file.
			p2, err := Open(dir, Options{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			p2.Close()
			if again, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(again) != string(data) {
				t.Fatalf("FORMAT changed by a reopen: %q, was %q", again, data)
			}
		})
	}
}

// TestOpenRefusesOlderFormatInUse: a version-3, -4, -5 or -7 directory that
// other processes have open (processes of an older build: one appends at the
// end of a log segment, one reads instance.json without checking a seal, one
// deletes without a deletion marker, one looks for every go-workflows
// execution in instance.json) is refused; nothing is upgraded under them.
func TestOpenRefusesOlderFormatInUse(t *testing.T) {
	for _, version := range []string{"3", "4", "5", "7"} {
		t.Run("version "+version, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1, Logger: quietLog})
			defer p.Close()
			old := `{"format":"durofs","version":` + version + `}`
			if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(old), 0o600); err != nil {
				t.Fatal(err)
			}
			q, err := Open(dir, Options{SweepInterval: -1, Logger: quietLog})
			if err == nil {
				q.Close()
				t.Fatalf("Open of a version-%s directory in use succeeded", version)
			}
			if !errors.Is(err, ErrUnsupportedFS) || !strings.Contains(err.Error(), "older durofs (on-disk format "+version+")") {
				t.Fatalf("Open = %v, want ErrUnsupportedFS naming the older processes", err)
			}
			if data, _ := os.ReadFile(filepath.Join(dir, "FORMAT")); string(data) != old {
				t.Fatalf("FORMAT = %q: upgraded under the other processes", data)
			}
		})
	}
}

// TestOpenRefusesForeignDirectory: Open makes a durofs directory only of a
// missing or empty one (or one whose creation another Open began); a
// directory with no FORMAT that holds anything else is refused with
// ErrNotDurofsDir and left exactly as it was.
func TestOpenRefusesForeignDirectory(t *testing.T) {
	cases := []struct {
		name   string
		files  []string // created before Open; a trailing "/" makes a folder
		refuse bool
	}{
		{"missing directory", nil, false},
		{"empty directory", []string{}, false},
		{"a creation cut short", []string{"instances/", "wal/", "queues/", ".tmp-FORMAT-0c6d"}, false},
		{"a new file system's root", []string{"lost+found/"}, false},
		{"a stray file", []string{"important.txt"}, true},
		{"a stray folder", []string{"photos/"}, true},
		{"durofs folders and a stray file", []string{"instances/", "notes.md"}, true},
		{"a hidden file", []string{".profile"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if c.files != nil {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range c.files {
				path := filepath.Join(dir, f)
				var err error
				if strings.HasSuffix(f, "/") {
					err = os.Mkdir(path, 0o700)
				} else {
					err = os.WriteFile(path, []byte("keep me"), 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadDir(dir)
			p, err := Open(dir, Options{SweepInterval: -1})
			if !c.refuse {
				if err != nil {
					t.Fatalf("Open = %v, want success", err)
				}
				p.Close()
				if _, err := os.Stat(filepath.Join(dir, "FORMAT")); err != nil {
					t.Fatalf("no FORMAT after Open: %v", err)
				}
				return
			}
			if err == nil {
				p.Close()
				t.Fatal("Open made a durofs directory of a directory holding other files")
			}
			if !errors.Is(err, ErrNotDurofsDir) || !strings.Contains(err.Error(), strings.TrimSuffix(c.files[len(c.files)-1], "/")) {
				t.Fatalf("Open = %v, want an ErrNotDurofsDir error naming the foreign entry", err)
			}
			after, _ := os.ReadDir(dir)
			if len(after) != len(before) {
				t.Fatalf("a refused Open changed the directory: %v, was %v", after, before)
			}
		})
	}
	// A durofs directory with a stray file in it is still a durofs directory.
	dir := t.TempDir()
	p, err := Open(dir, Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if err := os.WriteFile(filepath.Join(dir, "important.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err = Open(dir, Options{SweepInterval: -1}); err != nil {
		t.Fatalf("reopen of a durofs directory: %v", err)
	}
	p.Close()
}

// TestOpenReplaysWhenUpgrading: the first process to open a version-5 (or
// -6, -7) directory alone replays its log before it writes version 8, even in the
// boot its last process died in (when a reopen would otherwise only
// finish the marked commits): a deletion committed by an older build made
// no deletion marker, and the replay applies every committed deletion, or
// marks one it cannot apply together with its marker (fs_deleting.go).
func TestOpenReplaysWhenUpgrading(t *testing.T) {
	for _, c := range []struct {
		version    string
		wantReplay bool
	}{{"5", true}, {"6", true}, {"7", true}, {"8", false}} {
		t.Run("version "+c.version, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			mustNoErr(t, mem.MkdirAll("/d", vfs.DirPerm))
			opts := Options{fs: mem, Clock: clock.NewManual(time.Now()), SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
			sw := &plKillSwitch{at: -1}
			oldOpts := opts
			oldOpts.fs = memBoot{sw.newFS(mem, "old"), mem}
			old, err := Open("/d", oldOpts)
			mustNoErr(t, err)
			createInstance(t, old, "a")
			sw.mu.Lock()
			sw.at = sw.ops + 1 // killed at its next change
			sw.mu.Unlock()
			_ = old.EnqueueForOrchestrator(context.Background(), startItem("b"), 0)
			if !sw.fired() {
				t.Fatal("the old process was not killed")
			}
			mustNoErr(t, vfs.WriteFile(mem, "/d/FORMAT", []byte(`{"format":"durofs","version":`+c.version+`}`)))
			p := openT(t, "/d", opts)
			if got := p.RecoveryStats().RecordsReplayed > 0; got != c.wantReplay {
				t.Fatalf("version %s reopened alone in the same boot: records replayed = %d; want replay %v", c.version, p.RecoveryStats().RecordsReplayed, c.wantReplay)
			}
			if data, _ := mem.ReadFile("/d/FORMAT"); !strings.Contains(string(data), `"version":8`) {
				t.Fatalf("FORMAT = %q; want version 8", data)
			}
		})
	}
}

// memBoot is a process's view of a MemFS that reports the simulated
// machine's boot id, as the MemFS does.
type memBoot struct {
	vfs.FS
	mem *vfs.MemFS
}

func (m memBoot) BootID() (string, error) { return m.mem.BootID() }
