package vfs_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// lockExistingImpls are every FS implementation of LockExisting, each with
// a fresh root directory.
func lockExistingImpls(t *testing.T) []struct {
	name string
	fsys vfs.FS
	root string
} {
	mk := func() string { return t.TempDir() }
	osRoot, nfRoot, gRoot := mk(), mk(), mk()
	return []struct {
		name string
		fsys vfs.FS
		root string
	}{
		{"os", vfs.OS{}, osRoot},
		{"nofollow", vfs.NoFollow(nfRoot, vfs.Perm{}), nfRoot},
		{"nofollow-portable", vfs.NewNoFollowGeneric(gRoot, vfs.Perm{}), gRoot},
		{"mem", vfs.NewStrictMem(), "/q"},
	}
}

// TestLockExisting: the lock of a file that is its own lock. It is never
// created; it excludes others; a waiter whose file is removed or replaced
// while it waits gets "not exist", never a lock on a file nobody else can
// find (two holders of "the same" lock).
func TestLockExisting(t *testing.T) {
	ctx := context.Background()
	for _, im := range lockExistingImpls(t) {
		t.Run(im.name, func(t *testing.T) {
			fsys, dir := im.fsys, im.root
			must(t, fsys.MkdirAll(dir, vfs.DirPerm))
			name := filepath.Join(dir, "m.json")

			// Missing: an error satisfying IsNotExist, and nothing created.
			for _, wait := range []bool{false, true} {
				if _, _, err := fsys.LockExisting(ctx, name, wait); !vfs.IsNotExist(err) {
					t.Fatalf("missing file (wait %v): err %v, want not-exist", wait, err)
				}
			}
			if _, err := fsys.Lstat(name); !vfs.IsNotExist(err) {
				t.Fatalf("LockExisting created the file: %v", err)
			}

			must(t, vfs.WriteFile(fsys, name, []byte("{}")))
			u, ok, err := fsys.LockExisting(ctx, name, false)
			if err != nil || !ok {
				t.Fatalf("lock: ok %v err %v", ok, err)
			}
			// Held: a try fails, a bounded wait times out.
			if _, ok, err := fsys.LockExisting(ctx, name, false); ok || err != nil {
				t.Fatalf("second try-lock: ok %v err %v, want false nil", ok, err)
			}
			tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_, _, err = fsys.LockExisting(tctx, name, true)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait on a held lock: err %v, want deadline exceeded", err)
			}

			for _, tc := range []struct {
				name   string
				change func() error // done by the holder before it unlocks
			}{
				{"removed", func() error { return fsys.Remove(name) }},
				{"replaced", func() error {
					tmp := filepath.Join(dir, "tmp")
					if err := vfs.WriteFile(fsys, tmp, []byte("{}")); err != nil {
						return err
					}
					return fsys.Rename(tmp, name)
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if u == nil {
						must(t, vfs.WriteFile(fsys, name, []byte("{}")))
						var ok bool
						if u, ok, err = fsys.LockExisting(ctx, name, false); err != nil || !ok {
							t.Fatalf("lock: ok %v err %v", ok, err)
						}
					}
					got := make(chan error, 1)
					var wu vfs.Unlocker
					go func() {
						var err error
						wu, _, err = fsys.LockExisting(ctx, name, true)
						got <- err
					}()
					time.Sleep(20 * time.Millisecond) // let the waiter open the old file
					must(t, tc.change())
					must(t, u.Unlock())
					u = nil
					err := <-got
					if tc.name == "removed" {
						if !vfs.IsNotExist(err) {
							t.Fatalf("waiter on a removed file: err %v, want not-exist", err)
						}
						return
					}
					// Replaced: the waiter either saw the old file go (not
					// exist) or locked the new one; never a stale lock.
					if err != nil && !vfs.IsNotExist(err) {
						t.Fatalf("waiter on a replaced file: %v", err)
					}
					if err == nil {
						if _, ok, _ := fsys.LockExisting(ctx, name, false); ok {
							t.Fatal("the waiter's lock does not exclude a new locker of the new file")
						}
						must(t, wu.Unlock())
					}
					must(t, fsys.Remove(name))
				})
			}
		})
	}
}
