//go:build unix

package vfs_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestLockExistingOtherHolder: the holder is another open file description
// (as another process's would be), so the waiter opens the file and then
// polls flock(2) on it. When the holder removes or replaces the file and
// unlocks, the waiter's flock succeeds on a file the name no longer names:
// LockExisting must report "not exist" rather than hand out that lock.
func TestLockExistingOtherHolder(t *testing.T) {
	ctx := context.Background()
	for _, im := range lockExistingImpls(t) {
		if im.name == "mem" {
			continue // no file descriptors
		}
		for _, change := range []string{"removed", "replaced"} {
			t.Run(im.name+"/"+change, func(t *testing.T) {
				name := filepath.Join(im.root, change+".json")
				must(t, os.WriteFile(name, []byte("{}"), 0o600))
				f, err := os.Open(name)
				must(t, err)
				defer f.Close()
				must(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))

				got := make(chan error, 1)
				go func() {
					u, _, err := im.fsys.LockExisting(ctx, name, true)
					if err == nil {
						_ = u.Unlock()
					}
					got <- err
				}()
				time.Sleep(30 * time.Millisecond) // the waiter is polling flock
				if change == "removed" {
					must(t, os.Remove(name))
				} else {
					tmp := name + ".tmp"
					must(t, os.WriteFile(tmp, []byte("{}"), 0o600))
					must(t, os.Rename(tmp, name))
				}
				must(t, syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
				err = <-got
				if change == "removed" && !vfs.IsNotExist(err) {
					t.Fatalf("waiter on a removed file: err %v, want not-exist", err)
				}
				if change == "replaced" && err != nil && !vfs.IsNotExist(err) {
					t.Fatalf("waiter on a replaced file: %v", err)
				}
			})
		}
	}
}
