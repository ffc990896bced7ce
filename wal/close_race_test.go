package wal

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/durofs/durofs/internal/vfs"
)

// lockHookFS runs afterUnlock(path) right after a lock taken with TryLock
// is released: what another process does the moment a registration frees.
type lockHookFS struct {
	*hookFS
	afterUnlock func(path string)
}

type hookUnlocker struct {
	vfs.Unlocker
	fs   *lockHookFS
	path string
}

func (u hookUnlocker) Unlock() error {
	err := u.Unlocker.Unlock()
	if f := u.fs.afterUnlock; f != nil {
		f(u.path)
	}
	return err
}

func (h *lockHookFS) TryLock(name string) (vfs.Unlocker, bool, error) {
	u, ok, err := h.hookFS.TryLock(name)
	if ok {
		u = hookUnlocker{Unlocker: u, fs: h, path: name}
	}
	return u, ok, err
}

// A process closing while one of its goroutines still runs a group sync
// must not publish that sync's mark into a page that a process opening the
// log alone - possible as soon as the closing process's registration is
// free - has rebuilt with a different tail: the stale mark would cover that
// process's later, unsynced frames.
func TestCloseDoesNotPublishIntoARebuiltPage(t *testing.T) {
	mem := newMem(t)
	fsys := &lockHookFS{hookFS: &hookFS{MemFS: mem}}
	open := func() *Log {
		l, err := Open(context.Background(), fsys, testDir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		l.Ready()
		return l
	}
	a := open()
	if _, err := a.Commit(context.Background(), payload(0, 0)); err != nil {
		t.Fatal(err)
	}
	_, aEnd, err := a.Append(payload(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	// a's next frame is reserved but its write fails: a hole below the
	// tail that no slot holds, so a sync's mark goes past it.
	hole := payload(0, 2)
	mem.InjectError("write", 1, errors.New("EIO"))
	if _, _, err := a.Append(hole); err == nil {
		t.Fatal("the injected write error did not fail the append")
	}
	mem.ClearFaults()

	// a's Sync runs in the background and is held inside its fdatasync.
	inSync, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fsys.before = func(string) {
		once.Do(func() {
			close(inSync)
			<-release
		})
	}
	syncDone := make(chan error, 1)
	go func() { syncDone <- a.Sync(context.Background(), aEnd) }()
	select {
	case <-inSync:
	case err := <-syncDone:
		// (A guard, not a timing: without it a Sync that syncs nothing
		// made this test hang until go test's timeout.)
		t.Fatalf("a's Sync returned (%v) without reaching its fdatasync", err)
	}
	fsys.before = nil

	// a closes; the moment its registration is free, b opens the log alone
	// and rebuilds the page, and a's fdatasync returns.
	var b *Log
	fsys.afterUnlock = func(path string) {
		if b != nil || path != a.procPath {
			return
		}
		fsys.afterUnlock = nil
		b = open()
		if !b.Alone() {
			t.Error("b is not alone")
		}
		close(release)
		if err := <-syncDone; err != nil {
			t.Error(err)
		}
	}
	a.Close()
	if b == nil {
		t.Fatal("b did not open")
	}
	defer b.Close()

	// b's frames go where a's failed one was reserved (the rebuilt tail is
	// after a's last whole frame). b syncs its first itself (raising from);
	// its second still ends below the end of a's failed reservation.
	_, bEnd, err := b.Append([]byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), bEnd); err != nil {
		t.Fatal(err)
	}
	lsn, end, err := b.Append([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), end); err != nil {
		t.Fatal(err)
	}
	if !durableIn(mem, b, lsn, []byte("x")) {
		t.Fatalf("b's frame at %v acknowledged (synced mark %v), lost at a power loss", lsn, LSN(b.group.w.Load(wSynced)))
	}
}
