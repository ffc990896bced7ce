package vfs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

var osfs vfs.FS = vfs.OS{}

// dirNames lists a real directory.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ns, err := osfs.ReadDirNames(dir)
	must(t, err)
	return ns
}

func TestOSWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	must(t, vfs.WriteFile(osfs, path, []byte("old")))
	must(t, vfs.WriteFile(osfs, path, []byte("new")))
	b, err := osfs.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if ns := dirNames(t, dir); len(ns) != 1 || ns[0] != "f" {
		t.Fatalf("directory holds %v, want [f] (a temporary file left?)", ns)
	}
	fi, err := osfs.Stat(path)
	must(t, err)
	if fi.Mode().Perm() != vfs.FilePerm {
		t.Fatalf("mode = %v, want %v", fi.Mode().Perm(), vfs.FilePerm)
	}

	// A failed write (missing directory) leaves nothing behind.
	err = vfs.WriteFile(osfs, filepath.Join(dir, "nope", "f"), []byte("x"))
	if !vfs.IsNotExist(err) {
		t.Fatalf("WriteFile into a missing dir: %v", err)
	}
	if ns := dirNames(t, dir); len(ns) != 1 {
		t.Fatalf("directory holds %v after a failed WriteFile", ns)
	}
}

func TestOSCreateExclusive(t *testing.T) {
	for _, noDirSync := range []bool{false, true} {
		t.Run(fmt.Sprint("noDirSync=", noDirSync), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			must(t, vfs.CreateExclusive(osfs, path, []byte("first"), noDirSync))
			err := vfs.CreateExclusive(osfs, path, []byte("second"), noDirSync)
			if !errors.Is(err, vfs.ErrExist) || !errors.Is(err, fs.ErrExist) || !vfs.IsExist(err) {
				t.Fatalf("second CreateExclusive: %v, want ErrExist", err)
			}
			b, err := osfs.ReadFile(path)
			if err != nil || string(b) != "first" {
				t.Fatalf("ReadFile = %q, %v", b, err)
			}
			if ns := dirNames(t, dir); len(ns) != 1 || ns[0] != "f" {
				t.Fatalf("directory holds %v, want [f] (a temporary file left?)", ns)
			}
		})
	}

	t.Run("race", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		var wins, losses atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				err := vfs.CreateExclusive(osfs, path, fmt.Appendf(nil, "writer %d", i), false)
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, vfs.ErrExist):
					losses.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 || losses.Load() != 7 {
			t.Fatalf("wins = %d, losses = %d; want 1 and 7", wins.Load(), losses.Load())
		}
		if ns := dirNames(t, dir); len(ns) != 1 {
			t.Fatalf("directory holds %v", ns)
		}
	})
}

func TestOSLockInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")
	u, err := osfs.Lock(context.Background(), path)
	must(t, err)
	if _, ok, err := osfs.TryLock(path); ok || err != nil {
		t.Fatalf("TryLock while held = %v, %v; want false, nil", ok, err)
	}

	// A Lock honours ctx while it waits.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := osfs.Lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an expiring ctx: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Lock returned %v after its deadline", d)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := osfs.Lock(ctx2, path)
		cancelled <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel2()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled ctx: %v", err)
	}

	// A second Lock waits until Unlock.
	acquired := make(chan vfs.Unlocker, 1)
	go func() {
		u2, err := osfs.Lock(context.Background(), path)
		if err != nil {
			t.Error(err)
		}
		acquired <- u2
	}()
	select {
	case <-acquired:
		t.Fatal("second Lock did not wait for the holder")
	case <-time.After(50 * time.Millisecond):
	}
	must(t, u.Unlock())
	var u2 vfs.Unlocker
	select {
	case u2 = <-acquired:
	case <-time.After(10 * time.Second):
		t.Fatal("second Lock not granted after Unlock")
	}

	// Unlock twice is harmless and does not release the new holder's lock.
	must(t, u.Unlock())
	if _, ok, _ := osfs.TryLock(path); ok {
		t.Fatal("a second Unlock released another holder's lock")
	}
	must(t, u2.Unlock())
	must(t, u2.Unlock())
	u3, ok, err := osfs.TryLock(path)
	if !ok || err != nil {
		t.Fatalf("TryLock when free = %v, %v", ok, err)
	}
	must(t, u3.Unlock())
}

func TestOSLockManyGoroutines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				u, err := osfs.Lock(context.Background(), path)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(50 * time.Microsecond)
				inside.Add(-1)
				if err := u.Unlock(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("the lock was held twice at once %d times", overlaps.Load())
	}
}

func TestOSNoSync(t *testing.T) {
	dir := t.TempDir()
	c := vfs.Counting(osfs)
	fsys := vfs.NoSync(c)
	must(t, vfs.WriteFile(fsys, filepath.Join(dir, "a"), []byte("a")))
	must(t, vfs.CreateExclusive(fsys, filepath.Join(dir, "b"), []byte("b"), false))
	if got := c.Counts(); got != (vfs.Counts{}) {
		t.Fatalf("syncs reached the inner FS through NoSync: %+v", got)
	}
	for name, want := range map[string]string{"a": "a", "b": "b"} {
		b, err := fsys.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Fatalf("%s = %q, %v", name, b, err)
		}
	}
	// The no-ops do not even look at their target.
	must(t, fsys.SyncDir(filepath.Join(dir, "missing")))
	f, err := fsys.OpenFile(filepath.Join(dir, "a"), os.O_RDONLY, 0)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
}

func TestOSCounting(t *testing.T) {
	tests := []struct {
		name string
		run  func(fsys vfs.FS, path string) error
		want vfs.Counts
	}{
		{"WriteFile", func(fsys vfs.FS, path string) error {
			return vfs.WriteFile(fsys, path, []byte("x"))
		}, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"WriteFileNoDirSync", func(fsys vfs.FS, path string) error {
			return vfs.WriteFileNoDirSync(fsys, path, []byte("x"))
		}, vfs.Counts{FileSyncs: 1, DirSyncs: 0}},
		{"CreateExclusive", func(fsys vfs.FS, path string) error {
			return vfs.CreateExclusive(fsys, path, []byte("x"), false)
		}, vfs.Counts{FileSyncs: 1, DirSyncs: 1}},
		{"CreateExclusive noDirSync", func(fsys vfs.FS, path string) error {
			return vfs.CreateExclusive(fsys, path, []byte("x"), true)
		}, vfs.Counts{FileSyncs: 1, DirSyncs: 0}},
		{"Sync and SyncDir directly", func(fsys vfs.FS, path string) error {
			f, err := fsys.OpenFile(path, os.O_WRONLY|os.O_CREATE, vfs.FilePerm)
			if err != nil {
				return err
			}
			defer f.Close()
			for range 3 {
				if err := f.Sync(); err != nil {
					return err
				}
			}
			return fsys.SyncDir(filepath.Dir(path))
		}, vfs.Counts{FileSyncs: 3, DirSyncs: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := vfs.Counting(osfs)
			path := filepath.Join(t.TempDir(), "f")
			// Setup outside the measured window.
			must(t, osfs.MkdirAll(filepath.Dir(path), vfs.DirPerm))
			before := c.Counts()
			must(t, tt.run(c, path))
			got := c.Counts().Sub(before)
			if got != tt.want {
				t.Fatalf("counts = %+v, want %+v", got, tt.want)
			}
			if got.Total() != tt.want.FileSyncs+tt.want.DirSyncs {
				t.Fatalf("Total = %d", got.Total())
			}
		})
	}
}

// ---- cross-process locking (helper-process pattern) ----

const helperEnv = "DUROFS_VFS_HELPER"

// TestHelperProcess is not a test: it is the child of the cross-process
// tests, run only when DUROFS_VFS_HELPER=1. DUROFS_VFS_MODE selects:
//
//	trylock  TryLock DUROFS_VFS_LOCK, print "locked" or "busy", exit.
//	hold     Lock it, print "held", hold it until stdin closes, exit.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	path := os.Getenv("DUROFS_VFS_LOCK")
	switch os.Getenv("DUROFS_VFS_MODE") {
	case "trylock":
		u, ok, err := vfs.OS{}.TryLock(path)
		switch {
		case err != nil:
			fmt.Println("error:", err)
			os.Exit(2)
		case ok:
			fmt.Println("locked")
			_ = u.Unlock()
		default:
			fmt.Println("busy")
		}
	case "hold":
		u, err := vfs.OS{}.Lock(context.Background(), path)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = u.Unlock()
	default:
		fmt.Println("error: unknown mode")
		os.Exit(2)
	}
	os.Exit(0)
}

// helper starts a child in mode on the lock at path and returns it with its
// stdin and the first line it printed.
func helper(t *testing.T, mode, path string) (*exec.Cmd, io.WriteCloser, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "DUROFS_VFS_MODE="+mode, "DUROFS_VFS_LOCK="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %s: reading its output: %v", mode, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return cmd, stdin, line[:len(line)-1]
}

func TestOSLockExcludesOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")

	t.Run("child cannot take a lock this process holds", func(t *testing.T) {
		u, err := osfs.Lock(context.Background(), path)
		must(t, err)
		if _, _, got := helper(t, "trylock", path); got != "busy" {
			t.Fatalf("child TryLock while the parent holds it: %q, want busy", got)
		}
		must(t, u.Unlock())
		if _, _, got := helper(t, "trylock", path); got != "locked" {
			t.Fatalf("child TryLock after Unlock: %q, want locked", got)
		}
	})

	t.Run("this process waits for the child's lock", func(t *testing.T) {
		cmd, stdin, got := helper(t, "hold", path)
		if got != "held" {
			t.Fatalf("child: %q", got)
		}
		if _, ok, err := osfs.TryLock(path); ok || err != nil {
			t.Fatalf("TryLock while the child holds it = %v, %v; want false, nil", ok, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := osfs.Lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock while the child holds it: %v", err)
		}
		acquired := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			u, err := osfs.Lock(ctx, path)
			if err == nil {
				err = u.Unlock()
			}
			acquired <- err
		}()
		select {
		case err := <-acquired:
			t.Fatalf("Lock returned %v while the child held the lock", err)
		case <-time.After(50 * time.Millisecond):
		}
		must(t, stdin.Close()) // the child unlocks and exits
		must(t, <-acquired)
		must(t, cmd.Wait())
	})

	t.Run("a killed holder's lock is released", func(t *testing.T) {
		cmd, _, got := helper(t, "hold", path)
		if got != "held" {
			t.Fatalf("child: %q", got)
		}
		if _, ok, _ := osfs.TryLock(path); ok {
			t.Fatal("TryLock succeeded while the child holds the lock")
		}
		must(t, cmd.Process.Kill())
		_ = cmd.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		u, err := osfs.Lock(ctx, path)
		must(t, err)
		must(t, u.Unlock())
	})
}
