//go:build unix

package vfs_test

import (
	"bytes"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestOSWriteFileConcurrentReaders checks that readers never see a missing or
// partial file while WriteFile replaces it (rename(2) semantics; on Windows a
// replace fails while a reader holds the target open, so this is Unix-only).
func TestOSWriteFileConcurrentReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a := bytes.Repeat([]byte("a"), 64<<10)
	b := bytes.Repeat([]byte("b"), 8<<10+3)
	must(t, vfs.WriteFile(osfs, path, a))
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				got, err := osfs.ReadFile(path)
				if err != nil {
					t.Errorf("ReadFile during replace: %v", err)
					return
				}
				if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
					t.Errorf("ReadFile saw %d bytes, neither version", len(got))
					return
				}
				reads.Add(1)
			}
		})
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := vfs.WriteFile(osfs, path, data); err != nil {
			t.Error(err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if ns := dirNames(t, filepath.Dir(path)); len(ns) != 1 {
		t.Fatalf("directory holds %v after the writes", ns)
	}
	t.Logf("%d reads", reads.Load())
}

// TestOSSyncDir checks that SyncDir really opens the directory on Unix.
func TestOSSyncDir(t *testing.T) {
	dir := t.TempDir()
	must(t, osfs.SyncDir(dir))
	if err := osfs.SyncDir(filepath.Join(dir, "missing")); !vfs.IsNotExist(err) {
		t.Fatalf("SyncDir of a missing directory: %v", err)
	}
}
