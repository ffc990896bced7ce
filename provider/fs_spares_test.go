package provider

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/seal"
	"github.com/durofs/durofs/internal/vfs"
)

// TestRecycledFilesReadWithoutLock: writers replace two instances' files
// through one spare pool (each writer owns its file, as the instance flock
// guarantees), so an inode that held a's file is soon overwritten with
// b's, while readers that hold no lock read both. Every read must return
// a complete version of the file it asked for, and one reader must never
// see a file's version go back. (Without readStable's swap check, a reader
// sees a version go back in about one run of three. Foreign or torn content
// that comes back to the path - an inode that left it, was overwritten and
// returned - is what the seal catches; TestSealedFilesOnDisk and
// internal/seal check that deterministically.)
func TestRecycledFilesReadWithoutLock(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode recycling needs renameat2 (Linux)")
	}
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	if !p.spares.Enabled() {
		t.Skip("file system cannot exchange names")
	}
	type doc struct {
		Instance string `json:"instance"`
		N        int    `json:"n"`
		Pad      string `json:"pad"`
	}
	keys := []string{"a", "b"}
	for _, k := range keys {
		mustNoErr(t, p.fs.MkdirAll(p.instDir(k), vfs.DirPerm))
	}
	const writes = 3000
	afs := vfs.NoSync(p.fs) // as a barrier-mode apply writes
	var wg sync.WaitGroup
	var done atomic.Bool
	for wi, k := range keys {
		wg.Go(func() {
			for n := 1; n <= writes; n++ {
				// Lengths differ per writer and per write, so that mixed
				// versions are not simply aligned copies.
				d := doc{Instance: k, N: n, Pad: strings.Repeat("x", (n*7+wi*131)%300)}
				data, _ := jsonMarshal(d)
				if err := p.replaceSealed(afs, p.instFilePath(k), data, nil, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var reads, errs atomic.Int64
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			last := map[string]int{}
			for !done.Load() {
				for _, k := range keys {
					var d doc
					ok, err := p.readJSON(p.instFilePath(k), &d)
					reads.Add(1)
					switch {
					case err != nil:
						errs.Add(1)
						t.Errorf("read %s: %v", k, err)
					case !ok:
						// not written yet
					case d.Instance != k:
						t.Errorf("read %s's file, got %s's content (n=%d)", k, d.Instance, d.N)
					case d.N < last[k]:
						t.Errorf("read %s: version %d after version %d", k, d.N, last[k])
					default:
						last[k] = d.N
					}
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	readers.Wait()
	t.Logf("%d writes per file, %d lock-free reads, %d errors", writes, reads.Load(), errs.Load())
	for _, k := range keys {
		var d doc
		if _, err := p.readJSON(p.instFilePath(k), &d); err != nil || d.N != writes {
			t.Fatalf("final %s = %+v, %v; want version %d", k, d, err, writes)
		}
	}
	spares, _ := filepath.Glob(filepath.Join(p.tmpDir, vfs.SparePrefix+"*"))
	if len(spares) > 2 {
		t.Errorf("%d spare files for 2 writers: %v", len(spares), spares)
	}
}

// TestSealedFilesOnDisk: the files a commit writes carry a seal for their
// own path, jq-readable, and a file damaged on disk reads as ErrCorrupt.
func TestSealedFilesOnDisk(t *testing.T) {
	for _, mode := range []CommitSync{CommitPerFile, CommitAuto} {
		t.Run(mode.String(), func(t *testing.T) {
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CommitSync: mode})
			createInstance(t, p, "sealed")
			key := instanceKey("sealed")
			for _, path := range []string{p.instFilePath(key), p.execStatePath(key, 1)} {
				raw, err := p.fs.ReadFile(path)
				mustNoErr(t, err)
				if _, sealed, err := seal.Open(p.sealID(path), raw); !sealed || err != nil {
					t.Fatalf("%s: sealed=%v err=%v:\n%s", path, sealed, err, raw)
				}
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil || m[seal.Member] == nil {
					t.Fatalf("%s is not one JSON object with its seal: %v", path, err)
				}
				damaged := []byte(strings.Replace(string(raw), `":`, `": `, 1)) // valid JSON, other bytes
				mustNoErr(t, vfs.WriteFile(p.fs, path, damaged))
				var v map[string]any
				if _, err := p.readJSON(path, &v); !errors.Is(err, ErrCorrupt) || !errors.Is(err, seal.ErrMismatch) {
					t.Fatalf("damaged %s: %v, want ErrCorrupt wrapping seal.ErrMismatch", path, err)
				}
				mustNoErr(t, vfs.WriteFile(p.fs, path, raw))
			}
			// Another instance's file moved into place is refused too.
			mustNoErr(t, p.fs.MkdirAll(p.instDir("other"), vfs.DirPerm))
			raw, _ := p.fs.ReadFile(p.instFilePath(key))
			mustNoErr(t, vfs.WriteFile(p.fs, p.instFilePath("other"), raw))
			if _, err := p.readInstanceFile("other"); !errors.Is(err, seal.ErrMismatch) {
				t.Fatalf("foreign instance.json: %v, want seal.ErrMismatch", err)
			}
		})
	}
}

// TestSpareSweep: a sweep removes old spares of other pools, never its own.
func TestSpareSweep(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode recycling needs renameat2 (Linux)")
	}
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	if !p.spares.Enabled() {
		t.Skip("file system cannot exchange names")
	}
	createInstance(t, p, "s")
	own := p.spares.Get()
	p.spares.Put(own)
	mustNoErr(t, vfs.WriteFile(p.fs, own, []byte("x")))
	dead := filepath.Join(p.tmpDir, vfs.SparePrefix+"deadbeef0000-1")
	fresh := filepath.Join(p.tmpDir, vfs.SparePrefix+"deadbeef0000-2")
	for _, f := range []string{dead, fresh} {
		mustNoErr(t, vfs.WriteFile(p.fs, f, []byte("x")))
	}
	old := time.Now().Add(-spareSweepAge - time.Minute)
	for _, f := range []string{own, dead} {
		mustNoErr(t, os.Chtimes(f, old, old))
	}
	mustNoErr(t, p.sweepTemps(time.Minute))
	for f, want := range map[string]bool{own: true, dead: false, fresh: true} {
		if _, err := p.fs.Lstat(f); (err == nil) != want {
			t.Errorf("%s exists=%v after the sweep, want %v", filepath.Base(f), err == nil, want)
		}
	}
}
