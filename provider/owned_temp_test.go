package provider

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// TestRedoTakesAwayAKilledReplacesTemp: a writer killed in the middle of
// replacing instance.json or state.json leaves the fixed temporary file
// beside it (vfs.WriteFileOwned); the redo of the same record writes the
// same files again and takes both away. Mutation that fails it: temporary
// files named per write (the old vfs.WriteFileVia through tmp/, or a fresh
// name beside the file) - the left ones stay.
func TestRedoTakesAwayAKilledReplacesTemp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := openT(t, dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	crashAfterCommit(t, "ack", func() { createInstance(t, p, "a") })
	key := instanceKey("a")
	if m := leaseMark(t, p, "a"); m == nil {
		t.Fatal("the killed ack left no mark")
	}
	// What a kill in the middle of each replacement leaves.
	mustNoErr(t, p.fs.MkdirAll(p.execDir(key, 1), vfs.DirPerm))
	for _, target := range []string{p.instFilePath(key), p.execStatePath(key, 1)} {
		mustNoErr(t, vfs.WriteNew(p.fs, vfs.OwnedTemp(target), []byte(`{"partial`)))
	}
	mustNoErr(t, p.Checkpoint(ctx)) // redoes the marked record
	if m := leaseMark(t, p, "a"); m != nil {
		t.Fatalf("the record is not redone: the lease still marks %+v", m)
	}
	var temps []string
	mustNoErr(t, filepath.WalkDir(p.instDir(key), func(path string, d fs.DirEntry, err error) error {
		if err == nil && vfs.IsTemp(d.Name()) {
			temps = append(temps, strings.TrimPrefix(path, dir))
		}
		return err
	}))
	if len(temps) > 0 {
		t.Errorf("temporary files stay after the redo: %v", temps)
	}
	if inf, err := p.readInstanceFile(key); err != nil || inf == nil || inf.TotalEvents != 1 {
		t.Errorf("instance.json = %+v, %v; want the redone turn's", inf, err)
	}
	if ef, err := p.readExecutionFile(key, 1); err != nil || ef == nil || ef.EventCount != 1 {
		t.Errorf("state.json = %+v, %v; want the redone turn's", ef, err)
	}
}
