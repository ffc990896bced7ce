package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// exchangeFS is one file system under test with a directory to work in.
type exchangeFS struct {
	name string
	fsys FS
	dir  string
}

func exchangeFSs(t *testing.T) []exchangeFS {
	t.Helper()
	m := NewStrictMem()
	if err := m.MkdirAll("/d", DirPerm); err != nil {
		t.Fatal(err)
	}
	out := []exchangeFS{{"memfs", m, "/d"}}
	if runtime.GOOS == "linux" {
		dir := t.TempDir()
		out = append(out, exchangeFS{"os", OS{}, dir}, exchangeFS{"nofollow", NoFollow(dir, Perm{}), dir})
	}
	return out
}

func writeAll(t *testing.T, fsys FS, files map[string]string) {
	t.Helper()
	for p, c := range files {
		if err := WriteFile(fsys, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
}

func wantContent(t *testing.T, fsys FS, path, want string) {
	t.Helper()
	got, err := fsys.ReadFile(path)
	if want == "" {
		if !IsNotExist(err) {
			t.Fatalf("%s: (%q, %v), want it missing", path, got, err)
		}
		return
	}
	if err != nil || string(got) != want {
		t.Fatalf("%s = (%q, %v), want %q", path, got, err, want)
	}
}

// TestExchange: two existing names swap; a missing one is ErrNotExist and
// changes nothing.
func TestExchange(t *testing.T) {
	for _, x := range exchangeFSs(t) {
		t.Run(x.name, func(t *testing.T) {
			a, b, c := filepath.Join(x.dir, "a"), filepath.Join(x.dir, "b"), filepath.Join(x.dir, "c")
			writeAll(t, x.fsys, map[string]string{a: "A", b: "B"})
			if err := Exchange(x.fsys, a, b); err != nil {
				t.Fatal(err)
			}
			wantContent(t, x.fsys, a, "B")
			wantContent(t, x.fsys, b, "A")
			if err := Exchange(x.fsys, a, c); !IsNotExist(err) {
				t.Fatalf("exchange with a missing name: %v, want ErrNotExist", err)
			}
			wantContent(t, x.fsys, a, "B")
			if ok, err := ProbeExchange(x.fsys, x.dir); err != nil || !ok {
				t.Fatalf("ProbeExchange = %v, %v", ok, err)
			}
		})
	}
}

// TestExchangeUnsupported: wrappers pass the capability through, and an FS
// without it reports ErrNoExchange (and ProbeExchange false).
func TestExchangeUnsupported(t *testing.T) {
	m := NewStrictMem()
	if err := Exchange(NoSync(m), "/a", "/b"); !IsNotExist(err) {
		t.Fatalf("NoSync(MemFS) exchange of missing names: %v, want ErrNotExist (capability passed through)", err)
	}
	if err := Exchange(Counting(m), "/a", "/b"); !IsNotExist(err) {
		t.Fatalf("Counting(MemFS) exchange: %v, want ErrNotExist (capability passed through)", err)
	}
	plain := struct{ FS }{m} // hides Exchange
	if err := Exchange(plain, "/a", "/b"); !errors.Is(err, ErrNoExchange) {
		t.Fatalf("exchange on an FS without it: %v, want ErrNoExchange", err)
	}
	if ok, err := ProbeExchange(plain, "/"); ok || err != nil {
		t.Fatalf("ProbeExchange without the capability = %v, %v", ok, err)
	}
	if got := exchangeUnsupported(&os.LinkError{Err: syscall.EINVAL}); !errors.Is(got, ErrNoExchange) {
		t.Fatalf("EINVAL from renameat2 = %v, want ErrNoExchange", got)
	}
}

// TestMemFSExchangeCrash: an exchange is durable only with a SyncDir of
// each directory; a crash before it restores the old names.
func TestMemFSExchangeCrash(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/d/e", DirPerm); err != nil {
		t.Fatal(err)
	}
	writeAll(t, m, map[string]string{"/d/a": "A", "/d/e/b": "B"})
	m.MarkAllSynced()
	if err := m.Exchange("/d/a", "/d/e/b"); err != nil {
		t.Fatal(err)
	}
	c := m.CrashClone()
	wantContent(t, c, "/d/a", "A")
	wantContent(t, c, "/d/e/b", "B")
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	c = m.CrashClone() // /d synced, /d/e not: the inode of B is named twice
	wantContent(t, c, "/d/a", "B")
	wantContent(t, c, "/d/e/b", "B")
	if err := m.SyncDir("/d/e"); err != nil {
		t.Fatal(err)
	}
	c = m.CrashClone()
	wantContent(t, c, "/d/a", "B")
	wantContent(t, c, "/d/e/b", "A")
	m.InjectError("exchange", 1, syscall.EIO)
	if err := m.Exchange("/d/a", "/d/e/b"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected exchange fault: %v", err)
	}
	wantContent(t, m, "/d/a", "B") // a failed exchange changes nothing
}

// spareThief removes the spare file right after it is closed, as a sweeper
// that thought it abandoned would.
type spareThief struct {
	FS
	spare  string
	thefts int
}

func (s *spareThief) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil || name != s.spare || s.thefts == 0 {
		return f, err
	}
	s.thefts--
	return thiefFile{File: f, fsys: s.FS, name: name}, nil
}

func (s *spareThief) Exchange(a, b string) error { return Exchange(s.FS, a, b) }

type thiefFile struct {
	File
	fsys FS
	name string
}

func (f thiefFile) Close() error {
	err := f.File.Close()
	_ = f.fsys.Remove(f.name)
	return err
}

// TestReplaceVia: the target gets the data in every case; the spare keeps
// the target's old inode when both existed, and is consumed otherwise.
func TestReplaceVia(t *testing.T) {
	tests := []struct {
		name      string
		target    string // old content, "" = missing
		spare     string // old spare content, "" = missing
		data      string
		noXchg    bool
		thefts    int
		barrier   bool
		wantKept  bool
		wantSpare string
	}{
		{name: "first write", data: "v1", wantKept: false},
		{name: "replace, no spare yet", target: "old", data: "v2", wantKept: true, wantSpare: "old"},
		{name: "replace over a longer spare", target: "old", spare: "a much longer previous spare", data: "v3", wantKept: true, wantSpare: "old"},
		{name: "replace after a barrier", target: "old", spare: "x", data: "v4", barrier: true, wantKept: true, wantSpare: "old"},
		{name: "no exchange: rename", target: "old", spare: "x", data: "v5", noXchg: true, wantKept: false},
		{name: "spare swept while in use", target: "old", spare: "x", data: "v6", thefts: 1, wantKept: true, wantSpare: "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewStrictMem()
			if err := m.MkdirAll("/d/tmp", DirPerm); err != nil {
				t.Fatal(err)
			}
			target, spare := "/d/t.json", "/d/tmp/.spare-x-1"
			if tt.target != "" {
				writeAll(t, m, map[string]string{target: tt.target})
			}
			if tt.spare != "" {
				writeAll(t, m, map[string]string{spare: tt.spare})
			}
			var fsys FS = m
			if tt.noXchg {
				fsys = struct{ FS }{m}
			}
			if tt.thefts > 0 {
				fsys = &spareThief{FS: m, spare: spare, thefts: tt.thefts}
			}
			var barriers int
			var barrier func() error
			if tt.barrier {
				barrier = func() error { barriers++; return m.SyncFS("/") }
			}
			kept, err := ReplaceVia(fsys, spare, target, []byte(tt.data), barrier, nil)
			if err != nil {
				t.Fatal(err)
			}
			if kept != tt.wantKept {
				t.Fatalf("kept = %v, want %v", kept, tt.wantKept)
			}
			wantContent(t, m, target, tt.data)
			wantContent(t, m, spare, tt.wantSpare)
			if tt.barrier && barriers != 1 {
				t.Fatalf("%d barriers, want 1", barriers)
			}
		})
	}
}

// TestReplaceViaDurable: without a barrier the spare is fsynced before the
// swap and the target's directory after it, so a crash right after
// ReplaceVia returns keeps the new content; a crash before the directory
// sync keeps the old or the new, whole.
func TestReplaceViaDurable(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/d/tmp", DirPerm); err != nil {
		t.Fatal(err)
	}
	writeAll(t, m, map[string]string{"/d/t": "old"})
	m.MarkAllSynced()
	var crashed []*MemFS
	m.OnSync(func(int) { crashed = append(crashed, m.CrashClone()) })
	if _, err := ReplaceVia(m, "/d/tmp/.spare-x-1", "/d/t", []byte("new"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(crashed) != 2 {
		t.Fatalf("%d sync points, want 2 (spare fsync, directory fsync)", len(crashed))
	}
	wantContent(t, crashed[0], "/d/t", "old")
	wantContent(t, crashed[1], "/d/t", "new")
	wantContent(t, m.CrashClone(), "/d/t", "new")
}

// TestSparePool: spares are reused, named per pool, and removed by Close.
func TestSparePool(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/tmp", DirPerm); err != nil {
		t.Fatal(err)
	}
	p1, err := NewSparePool(m, "/tmp")
	if err != nil || !p1.Enabled() {
		t.Fatalf("NewSparePool = %v, %v", p1, err)
	}
	p2, _ := NewSparePool(m, "/tmp")
	a, b := p1.Get(), p1.Get()
	if a == b || !p1.Owns(filepath.Base(a)) || p2.Owns(filepath.Base(a)) || !IsSpare(filepath.Base(a)) {
		t.Fatalf("spares %q, %q: want distinct names owned by pool 1 only", a, b)
	}
	p1.Put(a)
	if c := p1.Get(); c != a {
		t.Fatalf("Get after Put = %q, want %q again", c, a)
	}
	for i, s := range []string{a, b} {
		if _, err := ReplaceVia(m, s, "/t"+string(rune('0'+i)), []byte("x"), nil, nil); err != nil {
			t.Fatal(err)
		}
		writeAll(t, m, map[string]string{s: "spare"})
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{a, b} {
		wantContent(t, m, s, "")
	}
	if names, _ := m.ReadDirNames("/tmp"); len(names) != 0 {
		t.Fatalf("after Close, /tmp holds %v", names)
	}
	var none *SparePool
	if none.Enabled() || none.Owns("x") || none.Close() != nil {
		t.Fatal("a nil pool must be disabled")
	}
	if p, err := NewSparePool(struct{ FS }{m}, "/tmp"); p != nil || err != nil {
		t.Fatalf("pool on an FS without exchange = %v, %v, want nil, nil", p, err)
	}
}

// TestSparePoolPrefersFiles: Get hands out a spare that holds a file before
// an empty name, Reserve an empty name (never one with a file), Idle
// counts only spares with files, and Close removes every file the pool
// made, retired ones included.
func TestSparePoolPrefersFiles(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/tmp", DirPerm); err != nil {
		t.Fatal(err)
	}
	p, err := NewSparePool(m, "/tmp")
	if err != nil || !p.Enabled() {
		t.Fatalf("NewSparePool = %v, %v", p, err)
	}
	full, empty := p.Get(), p.Get()
	writeAll(t, m, map[string]string{full: "old"})
	p.PutEmpty(empty)
	p.Put(full)
	if n := p.Idle(); n != 1 {
		t.Fatalf("Idle = %d, want 1 (the empty name does not count)", n)
	}
	if r := p.Reserve(); r != empty {
		t.Fatalf("Reserve = %q, want the empty name %q", r, empty)
	}
	p.PutEmpty(empty)
	if g := p.Get(); g != full {
		t.Fatalf("Get = %q, want the spare with a file %q", g, full)
	}
	if g := p.Get(); g != empty {
		t.Fatalf("second Get = %q, want the empty name %q", g, empty)
	}
	// a removed file retired into a reserved name is the pool's to remove
	writeAll(t, m, map[string]string{"/q": "message"})
	r := p.Reserve()
	if err := m.Rename("/q", r); err != nil {
		t.Fatal(err)
	}
	p.Put(r)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := m.ReadDirNames("/tmp"); len(names) != 0 {
		t.Fatalf("after Close, /tmp holds %v", names)
	}
}

// TestMoveVia: the new file gets its content in the spare's inode (where
// the FS has inodes), the spare name is left without a file, and a spare
// that a sweeper removed meanwhile, or a symlink planted at its name, is
// replaced by a fresh file.
func TestMoveVia(t *testing.T) {
	for _, x := range exchangeFSs(t) {
		t.Run(x.name, func(t *testing.T) {
			spare, path := filepath.Join(x.dir, "spare"), filepath.Join(x.dir, "new")
			writeAll(t, x.fsys, map[string]string{spare: "a longer old content"})
			before, _ := x.fsys.Lstat(spare)
			if err := MoveVia(x.fsys, spare, path, []byte("new"), false); err != nil {
				t.Fatal(err)
			}
			wantContent(t, x.fsys, path, "new")
			if _, err := x.fsys.Lstat(spare); !IsNotExist(err) {
				t.Fatalf("spare after MoveVia: %v, want it gone", err)
			}
			if after, _ := x.fsys.Lstat(path); before.Sys() != nil && !os.SameFile(before, after) {
				t.Fatal("MoveVia did not reuse the spare's inode")
			}
			// no spare file at all: one is created
			if err := MoveVia(x.fsys, spare, path+"2", []byte("two"), true); err != nil {
				t.Fatal(err)
			}
			wantContent(t, x.fsys, path+"2", "two")
			if x.name != "nofollow" {
				return // symlinks are refused by the no-follow FS only
			}
			if err := os.Symlink(path, spare); err != nil {
				t.Fatal(err)
			}
			if err := MoveVia(x.fsys, spare, path+"3", []byte("three"), false); err != nil {
				t.Fatalf("MoveVia over a planted symlink: %v", err)
			}
			wantContent(t, x.fsys, path+"3", "three")
			wantContent(t, x.fsys, path, "new") // the symlink's target untouched
		})
	}
}

// hookFS runs a hook after a file opened through it is first read: the
// moment a concurrent writer could act between a reader's open and its
// checks.
type hookFS struct {
	FS
	afterRead func()
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || h.afterRead == nil {
		return f, err
	}
	return &hookFile{File: f, hook: h}, nil
}

type hookFile struct {
	File
	hook *hookFS
	done bool
}

func (f *hookFile) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	if !f.done {
		f.done = true
		if fn := f.hook.afterRead; fn != nil {
			f.hook.afterRead = nil
			fn()
		}
	}
	return n, err
}

// TestReadStable: a read reports moved when, by its end, the path names
// another inode or nothing (replaced or removed while it was read), and
// returns the content otherwise.
func TestReadStable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inode identities checked on Linux")
	}
	dir := t.TempDir()
	path, other := filepath.Join(dir, "f"), filepath.Join(dir, "other")
	tests := []struct {
		name      string
		during    func() error
		wantMoved bool
	}{
		{"nothing happens", func() error { return nil }, false},
		{"rewritten in place", func() error { return os.WriteFile(path, []byte("v1"), 0o600) }, false},
		{"replaced", func() error { return os.Rename(other, path) }, true},
		{"removed", func() error { return os.Remove(path) }, true},
		{"moved away", func() error { return os.Rename(path, filepath.Join(dir, "spare")) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeAll(t, OS{}, map[string]string{path: "v1", other: "v2"})
			fsys := &hookFS{FS: OS{}}
			fsys.afterRead = func() {
				if err := tt.during(); err != nil {
					t.Error(err)
				}
			}
			data, moved, err := ReadStable(fsys, path)
			if err != nil || moved != tt.wantMoved {
				t.Fatalf("ReadStable = %q, moved %v, %v; want moved %v", data, moved, err, tt.wantMoved)
			}
			if !moved && string(data) != "v1" {
				t.Fatalf("ReadStable = %q, want v1", data)
			}
		})
	}
}
