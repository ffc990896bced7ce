package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// entryCountFS counts the directory entries its listings return (ScanDir
// and ReadDirNames), on top of a CountingFS (whose WatchDir it keeps, so
// queues can watch their directories as they do on the OS).
// It also counts the listings of each directory.
type entryCountFS struct {
	*vfs.CountingFS
	entries atomic.Int64

	mu       sync.Mutex
	listings map[string]int
}

func (c *entryCountFS) listed(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listings == nil {
		c.listings = map[string]int{}
	}
	c.listings[filepath.Clean(dir)]++
}

// listingsOf returns how many times dir was listed.
func (c *entryCountFS) listingsOf(dir string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listings[filepath.Clean(dir)]
}

func (c *entryCountFS) ReadDirNames(name string) ([]string, error) {
	c.listed(name)
	names, err := c.CountingFS.ReadDirNames(name)
	c.entries.Add(int64(len(names)))
	return names, err
}

func (c *entryCountFS) ScanDir(dir string, fn func(name []byte) error) error {
	c.listed(dir)
	return c.CountingFS.ScanDir(dir, func(name []byte) error {
		c.entries.Add(1)
		return fn(name)
	})
}

// sweepEntriesListed opens a provider that only enqueues (a client: it
// never fetches), enqueues n starts, and returns how many directory entries
// one pass of its background sweep (recoverPass, as sweepRound runs it every
// SweepInterval, 2 s by default) lists.
func sweepEntriesListed(t *testing.T, n int) int64 {
	t.Helper()
	dir := t.TempDir()
	efs := &entryCountFS{CountingFS: vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))}
	p := openT(t, dir, Options{fs: efs, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	ctx := context.Background()
	for i := 0; i < n; i++ {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("s-%05d", i)), 0))
	}
	before := efs.entries.Load()
	mustNoErr(t, p.recoverPass(ctx, 2*time.Second, false))
	return efs.entries.Load() - before
}

// TestBackgroundSweepOfNonFetchingProcessListsNoQueue (mutation that
// fails it: sweepsDir always true): the background sweep of a process that
// does not fetch (an enqueuing client) used to list every queue directory
// in full to find staged and temporary files, twice per queue per pass
// (Queue.Staged, then Queue.Sweep), every SweepInterval: several million
// directory entries every 2 s per such process with a million queued. It
// now leaves the queue directories to the processes that keep their index
// (sweepsDir), so a pass lists what does not grow with the queue (claims/,
// the temporary directory).
func TestBackgroundSweepOfNonFetchingProcessListsNoQueue(t *testing.T) {
	wantFlatCost(t, "directory entries listed by one background sweep pass of a non-fetching process, per queued messages", 500, 4000,
		func(n int) int64 { return sweepEntriesListed(t, n) })
}

// TestBackgroundSweepOfFetchingProcessRemovesLeftovers: a dead process's
// staged orphan and old temporary file in the orchestrator queue are not
// looked for by the background sweep of a process that does not fetch
// from it (a client), but are removed by the next background pass of a
// process that does (it finds them in its index, kept current by the
// directory watch, without listing the directory), and by Recover, which
// looks everywhere.
func TestBackgroundSweepOfFetchingProcessRemovesLeftovers(t *testing.T) {
	ctx := context.Background()
	for _, by := range []string{"fetching process", "recover"} {
		t.Run(by, func(t *testing.T) {
			dir := t.TempDir()
			efs := &entryCountFS{CountingFS: vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))}
			consumer := openT(t, dir, Options{fs: efs, Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
			client := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
			// The consumer fetches (nothing there): it keeps the queue's index.
			if it, err := consumer.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || it != nil {
				t.Fatalf("fetch = %v, %v", it, err)
			}
			for i := 0; i < 50; i++ {
				mustNoErr(t, client.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("q-%03d", i)), 0))
			}
			// What a process killed between staging and its commit point
			// leaves (a staged file whose commit never happened, named by no
			// source), and one killed in a write (a temporary file), both
			// old enough for the sweep.
			m, err := client.orchMessage(ExternalRaised{Instance: "q-000", Name: "e", Data: "x"}, client.nowMs(), client.nowMs(), "")
			mustNoErr(t, err)
			m = named(client.orchQ, m)
			mustNoErr(t, client.orchQ.Stage(m))
			staged := filepath.Join(client.orchQ.Dir(), ".staged-"+m.Name+".json")
			temp := filepath.Join(client.orchQ.Dir(), vfs.TempPrefix+"left-by-a-killed-writer")
			mustNoErr(t, os.WriteFile(temp, []byte("partial"), 0o600))
			old := time.Now().Add(-2 * time.Hour)
			mustNoErr(t, os.Chtimes(staged, old, old))
			mustNoErr(t, os.Chtimes(temp, old, old))
			exists := func(path string) bool {
				_, err := os.Lstat(path)
				return err == nil
			}

			mustNoErr(t, client.recoverPass(ctx, 2*time.Second, false))
			if !exists(staged) || !exists(temp) {
				t.Fatalf("the background sweep of a process that does not fetch from the queue removed its leftovers (staged %v, temp %v): it looked into the directory",
					exists(staged), exists(temp))
			}
			if by == "recover" {
				mustNoErr(t, client.Recover(ctx))
			} else {
				before := efs.listingsOf(consumer.orchQ.Dir())
				mustNoErr(t, consumer.recoverPass(ctx, 2*time.Second, false))
				if n := efs.listingsOf(consumer.orchQ.Dir()) - before; n != 0 {
					t.Errorf("the fetching process's background pass listed the queue directory %d times; its index names the leftovers", n)
				}
			}
			if exists(staged) || exists(temp) {
				t.Errorf("leftovers still there after the %s swept (staged %v, temp %v)", by, exists(staged), exists(temp))
			}
		})
	}
}
