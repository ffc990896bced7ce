package provhook_test

import (
	"os"
	"testing"

	"github.com/durofs/durofs/internal/provhook"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
)

// TestWithFS: a provider opened with options from WithFS does its I/O
// through the given file system (here an in-memory one: nothing reaches
// the disk), and WithFS refuses anything but provider.Options.
func TestWithFS(t *testing.T) {
	mem := vfs.NewStrictMem()
	opts, ok := provhook.WithFS(provider.Options{SweepInterval: -1, CheckpointInterval: -1}, vfs.FS(mem))
	if !ok {
		t.Fatal("WithFS refused provider.Options")
	}
	p, err := provider.Open("/durofs-provhook-test", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := mem.ReadFile("/durofs-provhook-test/FORMAT"); err != nil {
		t.Fatalf("FORMAT not on the given file system: %v", err)
	}
	if _, err := os.Stat("/durofs-provhook-test"); err == nil {
		t.Fatal("the provider wrote to the OS file system")
	}
	if _, ok := provhook.WithFS(struct{}{}, vfs.FS(mem)); ok {
		t.Fatal("WithFS accepted a value that is not provider.Options")
	}
}
