package vfs

import (
	"errors"
	"syscall"
	"testing"
)

// TestMemFSBarrier: SyncFS makes every file and entry durable, is a sync
// point, can be failed, and a crash starts a new boot.
func TestMemFSBarrier(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/a/b", DirPerm); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenFile("/a/b/x", 0x41 /* O_WRONLY|O_CREATE */, FilePerm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	boot, _ := m.BootID()
	hits := 0
	m.OnSync(func(int) { hits++ })
	m.InjectError("syncfs", 1, syscall.EIO)
	if err := SyncFS(m, "/a"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected barrier failure: %v", err)
	}
	if err := SyncFS(m, "/a"); err != nil || hits != 1 {
		t.Fatalf("barrier: %v, %d sync points", err, hits)
	}
	if _, err := f.Write([]byte(" world")); err != nil { // after the barrier: lost
		t.Fatal(err)
	}
	clone := m.CrashClone()
	if got, err := clone.ReadFile("/a/b/x"); err != nil || string(got) != "hello" {
		t.Fatalf("after a crash: %q, %v; want the barrier's content", got, err)
	}
	if b, _ := clone.BootID(); b == boot {
		t.Fatal("a crash clone has the same boot id")
	}
	m.Crash()
	if b, _ := m.BootID(); b == boot {
		t.Fatal("Crash kept the boot id")
	}
}

// TestMemFSCrashCloneWriteback: the written-back image keeps every file's
// current data but only synced directory entries.
func TestMemFSCrashCloneWriteback(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/d", DirPerm); err != nil {
		t.Fatal(err)
	}
	writeAll(t, m, map[string]string{"/d/old": "v1"})
	m.MarkAllSynced()
	f, err := m.OpenFile("/d/old", 0x1 /* O_WRONLY */, FilePerm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("v2")); err != nil { // unsynced overwrite
		t.Fatal(err)
	}
	writeAll(t, NoSync(m), map[string]string{"/d/new": "n"}) // unsynced entry
	wb, strict := m.CrashCloneWriteback(), m.CrashClone()
	wantContent(t, wb, "/d/old", "v2")
	wantContent(t, strict, "/d/old", "v1")
	wantContent(t, wb, "/d/new", "")
	if _, err := f.Write([]byte("v3")); err != nil { // the clone is a copy
		t.Fatal(err)
	}
	wantContent(t, wb, "/d/old", "v2")
}
