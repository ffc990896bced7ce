//go:build unix

package vfs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestLockReclaimedWhileWaiting: lock-then-verify. A waiter blocked in
// flock(2) on a lock file whose holder removes it (reclaims it: the last
// use of that lock file) and unlocks gets the flock on a file nobody can
// find any more. Lock must not return that lock: it locks what the name
// names now (a new file it creates), and fails with "not exist" if the
// directory went too. The holder is another open file description, as
// another process's would be (a goroutine of this process would wait on the
// in-process mutex instead, never opening the old file). The NoFollow FS
// (the provider's) polls flock on the file it opened, so its waiter meets
// the removed file every time; OS and the portable NoFollow poll through
// gofrs/flock, which reopens the name between polls, so theirs meets it
// only when the removal falls between an open and its flock.
func TestLockReclaimedWhileWaiting(t *testing.T) {
	ctx := context.Background()
	for _, im := range lockExistingImpls(t) {
		if im.name == "mem" {
			continue // no file descriptors: its locks are by name
		}
		for _, tc := range []struct {
			name   string
			try    bool // TryLock, polled, instead of a waiting Lock
			rmdir  bool // the holder removes the directory too
			create bool // someone else creates and holds the new lock file
		}{
			{name: "lock/removed"},
			{name: "lock/removed-and-recreated", create: true},
			{name: "lock/dir-removed", rmdir: true},
			{name: "trylock/removed", try: true},
		} {
			t.Run(im.name+"/"+tc.name, func(t *testing.T) {
				dir := filepath.Join(im.root, filepath.Base(tc.name))
				must(t, os.MkdirAll(dir, 0o700))
				name := filepath.Join(dir, "lock")
				must(t, os.WriteFile(name, nil, 0o600))
				old := flockFile(t, name)

				type result struct {
					u   vfs.Unlocker
					err error
				}
				got := make(chan result, 1)
				go func() {
					if !tc.try {
						u, err := im.fsys.Lock(ctx, name)
						got <- result{u, err}
						return
					}
					for {
						u, ok, err := im.fsys.TryLock(name)
						if ok || err != nil {
							got <- result{u, err}
							return
						}
						time.Sleep(time.Millisecond)
					}
				}()
				time.Sleep(30 * time.Millisecond) // the waiter opened the old file and polls flock
				must(t, os.Remove(name))
				var other *os.File
				if tc.create {
					// A creator (one that follows the protocol: create, then
					// lock) locks the new file; if it wins, the waiter must
					// queue behind it, not hold the dead file beside it. (A
					// waiter that reopens the name between its polls, as
					// gofrs/flock does, may win instead.)
					other = tryFlockFile(t, name)
				}
				dirGone := false
				if tc.rmdir {
					// A waiter that reopens the name between its polls
					// (gofrs/flock, the "os" implementation) may have
					// created the lock file anew since it was removed:
					// then the directory stays, as a reclaimer's rmdir of
					// a non-empty directory leaves it, and the waiter must
					// hold that new file, checked below.
					err := os.Remove(dir)
					if err != nil && !errors.Is(err, syscall.ENOTEMPTY) {
						t.Fatal(err)
					}
					dirGone = err == nil
				}
				must(t, syscall.Flock(int(old.Fd()), syscall.LOCK_UN))
				old.Close()
				if other != nil {
					select {
					case r := <-got:
						t.Fatalf("the waiter locked %s while a creator held the file it names (err %v)", name, r.err)
					case <-time.After(50 * time.Millisecond):
					}
					must(t, syscall.Flock(int(other.Fd()), syscall.LOCK_UN))
					other.Close()
				}
				r := <-got
				if dirGone {
					if !vfs.IsNotExist(r.err) {
						t.Fatalf("lock in a removed directory: err %v, want not-exist", r.err)
					}
					return
				}
				if r.err != nil {
					t.Fatal(r.err)
				}
				defer r.u.Unlock()
				// The waiter holds the file the name names: nobody else can
				// lock it.
				f, err := os.Open(name)
				must(t, err)
				defer f.Close()
				if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
					t.Fatalf("flock of %s beside the waiter's lock: %v, want EWOULDBLOCK (the waiter holds a dead file)", name, err)
				}
			})
		}
	}
}

// flockFile opens name and takes an exclusive flock on it, as another
// process would.
func flockFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o600)
	must(t, err)
	must(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	return f
}

// tryFlockFile opens (creating) name and takes an exclusive flock on it
// without waiting; nil if someone else holds it.
func tryFlockFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o600)
	must(t, err)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil
		}
		t.Fatal(err)
	}
	return f
}

// TestLockInRemovedDir: Lock and TryLock create a missing lock file but
// not its directory: a directory that is gone is "not exist".
func TestLockInRemovedDir(t *testing.T) {
	for _, im := range lockExistingImpls(t) {
		t.Run(im.name, func(t *testing.T) {
			name := filepath.Join(im.root, "gone", "lock")
			if im.name == "mem" {
				must(t, im.fsys.MkdirAll(im.root, vfs.DirPerm))
			}
			if _, err := im.fsys.Lock(context.Background(), name); !vfs.IsNotExist(err) {
				t.Fatalf("Lock: err %v, want not-exist", err)
			}
			if _, _, err := im.fsys.TryLock(name); !vfs.IsNotExist(err) {
				t.Fatalf("TryLock: err %v, want not-exist", err)
			}
		})
	}
}
