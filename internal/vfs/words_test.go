package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// mapPair opens the file at name twice in fsys (two processes' descriptors)
// and maps 4 words through each.
func mapPair(t *testing.T, fsys vfs.FS, name string) (a, b vfs.Words) {
	t.Helper()
	var ws []vfs.Words
	for range 2 {
		f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		must(t, err)
		t.Cleanup(func() { f.Close() })
		if fi, err := f.Stat(); err == nil && fi.Size() < 4096 {
			must(t, f.Truncate(4096))
		}
		w, err := vfs.MapWords(f, 4)
		must(t, err)
		t.Cleanup(func() { w.Close() })
		ws = append(ws, w)
	}
	return ws[0], ws[1]
}

// Two mappings of one file share their words: a compare-and-swap through
// one is seen through the other, a failed one changes nothing, and a Wake
// through one ends a Wait through the other.
func TestMapWordsShared(t *testing.T) {
	fss := map[string]func(t *testing.T) (vfs.FS, string){
		"memfs": func(t *testing.T) (vfs.FS, string) {
			m := vfs.NewStrictMem()
			return m, "/words"
		},
	}
	if runtime.GOOS == "linux" {
		fss["os"] = func(t *testing.T) (vfs.FS, string) { return osfs, filepath.Join(t.TempDir(), "words") }
		fss["nofollow"] = func(t *testing.T) (vfs.FS, string) {
			d := t.TempDir()
			return vfs.NoFollow(d, vfs.Perm{}), filepath.Join(d, "words")
		}
		fss["nosync(counting(os))"] = func(t *testing.T) (vfs.FS, string) {
			return vfs.NoSync(vfs.Counting(osfs)), filepath.Join(t.TempDir(), "words")
		}
	}
	for name, mk := range fss {
		t.Run(name, func(t *testing.T) {
			fsys, path := mk(t)
			a, b := mapPair(t, fsys, path)
			if a.Len() != 4 || a.Load(3) != 0 {
				t.Fatalf("new words: len %d, word 3 = %d", a.Len(), a.Load(3))
			}
			if !a.CompareAndSwap(1, 0, 42) || b.Load(1) != 42 {
				t.Fatalf("b sees %d after a set 42", b.Load(1))
			}
			if b.CompareAndSwap(1, 0, 7) || a.Load(1) != 42 {
				t.Fatal("a compare-and-swap from a stale value succeeded")
			}
			a.Wait(1, 0, time.Hour) // the word differs: returns at once
			done := make(chan struct{})
			go func() {
				b.Wait(2, 0, time.Hour)
				close(done)
			}()
			for {
				a.Wake(2) // until the waiter has started waiting
				select {
				case <-done:
					must(t, a.Close())
					must(t, a.Close())
					if a.Load(1) != 0 || a.CompareAndSwap(1, 42, 1) {
						t.Fatal("closed words must read zero and never change")
					}
					return
				case <-time.After(time.Millisecond):
				}
			}
		})
	}
}

// MemFS words are the file's unsynced data: a power loss that writes
// nothing back drops them, one that writes every file back keeps them, and
// the crashed process's mapping is dead.
func TestMapWordsMemFSCrash(t *testing.T) {
	m := vfs.NewStrictMem()
	a, _ := mapPair(t, m, "/words")
	must(t, m.SyncDir("/"))
	if !a.CompareAndSwap(0, 0, 99) {
		t.Fatal("set")
	}
	for _, tc := range []struct {
		name string
		fs   *vfs.MemFS
		want uint64
	}{
		{"nothing written back", m.CrashClone(), 0},
		{"everything written back", m.CrashCloneWriteback(), 99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := mapPair(t, tc.fs, "/words")
			if got := w.Load(0); got != tc.want {
				t.Fatalf("word 0 after the power loss = %d, want %d", got, tc.want)
			}
		})
	}
	m.Crash()
	if a.Load(0) != 0 || a.CompareAndSwap(0, 0, 1) {
		t.Fatal("a crashed process's words must read zero and never change")
	}
}

type opaqueFile struct{ vfs.File }

// MapWords refuses what it cannot map: a wrapper that does not unwrap, a
// file too short for the words, a read-only MemFS file.
func TestMapWordsRefuses(t *testing.T) {
	m := vfs.NewStrictMem()
	f, err := m.OpenFile("/w", os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	if _, err := vfs.MapWords(opaqueFile{f}, 1); !errors.Is(err, vfs.ErrNoMap) {
		t.Fatalf("opaque wrapper: %v, want ErrNoMap", err)
	}
	if _, err := vfs.MapWords(f, 1); err == nil {
		t.Fatal("an empty file mapped")
	}
	must(t, f.Truncate(8))
	ro, err := m.OpenFile("/w", os.O_RDONLY, 0)
	must(t, err)
	if _, err := vfs.MapWords(ro, 1); !errors.Is(err, vfs.ErrNoMap) {
		t.Fatalf("read-only file: %v, want ErrNoMap", err)
	}
	if runtime.GOOS == "linux" {
		of, err := osfs.OpenFile(filepath.Join(t.TempDir(), "w"), os.O_RDWR|os.O_CREATE, 0o600)
		must(t, err)
		defer of.Close()
		if _, err := vfs.MapWords(of, 1); err == nil {
			t.Fatal("an empty OS file mapped")
		}
	}
}
