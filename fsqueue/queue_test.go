package fsqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

func TestEnqueueListFIFO(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, dir, clk)
	var want []string
	for i := range 5 {
		want = append(want, enqueue(t, q, fsqueue.Message{
			Attrs:   map[string]string{"i": string(rune('a' + i))},
			Payload: json.RawMessage(`{"n":` + string(rune('0'+i)) + `}`),
		}))
	}
	if !slices.IsSorted(want) {
		t.Fatalf("names not increasing: %v", want)
	}
	es, err := q.List()
	if err != nil {
		t.Fatal(err)
	}
	if got := entryNames(es); !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for i, e := range es {
		h, err := q.Header(e.Name())
		if err != nil || h.Attrs["i"] != string(rune('a'+i)) || h.EnqueuedAtMs != clock.Ms(clk.Now()) || h.Name != e.Name() {
			t.Fatalf("entry %d = %+v: header %+v, %v", i, e, h, err)
		}
	}
	// Files on disk: exactly the messages plus the config; no temp files.
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		if vfs.IsTemp(f.Name()) {
			t.Fatalf("temp file left: %s", f.Name())
		}
	}
	// A message file holds the documented JSON.
	data, err := os.ReadFile(filepath.Join(dir, want[0]+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "visible_at_ms", "enqueued_at_ms", "attrs", "payload"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("message file lacks %q: %s", k, data)
		}
	}
}

func TestEnqueueNames(t *testing.T) {
	q := openQueue(t, vfs.OS{}, t.TempDir(), nil)
	name := q.NewName(0, "")
	if got, err := q.Enqueue(fsqueue.Message{Name: name, Payload: json.RawMessage(`1`)}); err != nil || got != name {
		t.Fatalf("Enqueue(explicit) = %q, %v", got, err)
	}
	if _, err := q.Enqueue(fsqueue.Message{Name: name, Payload: json.RawMessage(`2`)}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Enqueue(taken name) = %v, want ErrExist", err)
	}
	m, err := q.Get(name)
	if err != nil || string(m.Payload) != "1" {
		t.Fatalf("Get = %+v, %v (the first message must survive)", m, err)
	}
	const id, vis, route = "01ARZ3NDEKTSV4RRFFQ69G5FAV", "0000000000", "0000000000000"
	for _, bad := range []string{
		"x", id, // a version-2 name: a bare ULID
		"01arz3ndektsv4rrffq69g5fav." + vis + "." + route,
		"81ARZ3NDEKTSV4RRFFQ69G5FAV." + vis + "." + route,
		"01ARZ3NDEKTSV4RRFFQ69G5FA!." + vis + "." + route,
		id + ".000000000I." + route,       // not a Crockford digit
		id + "." + vis + ".G000000000000", // a route of 65 bits
		id + "." + vis + "." + route + ".",
		id + "-" + vis + "." + route,
		"../01ARZ3NDEKTSV4RRFFQ69G5F." + vis + "." + route,
	} {
		if _, err := q.Enqueue(fsqueue.Message{Name: bad}); !errors.Is(err, fsqueue.ErrInvalidName) {
			t.Errorf("Enqueue(%q) = %v, want ErrInvalidName", bad, err)
		}
		if _, err := q.Get(bad); !errors.Is(err, fsqueue.ErrInvalidName) {
			t.Errorf("Get(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	// A name made for another visibility time or route than the message's.
	for _, other := range []string{q.NewName(5, ""), q.NewName(0, "x")} {
		if _, err := q.Enqueue(fsqueue.Message{Name: other, Payload: json.RawMessage(`1`)}); !errors.Is(err, fsqueue.ErrInvalidName) {
			t.Errorf("Enqueue under %q = %v, want ErrInvalidName", other, err)
		}
	}
	if _, err := q.Enqueue(fsqueue.Message{Payload: json.RawMessage(`{bad`)}); err == nil {
		t.Fatal("Enqueue with invalid JSON payload succeeded")
	}
}

func TestNewNameMonotonic(t *testing.T) {
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, t.TempDir(), clk)
	re := regexp.MustCompile(`^[0-7][0-9A-HJKMNP-TV-Z]{25}\.[0-9A-HJKMNP-TV-Z]{10}\.[0-9A-F][0-9A-HJKMNP-TV-Z]{12}$`)
	prev := ""
	for i := range 2000 {
		if i == 1000 {
			clk.Advance(-time.Hour) // the clock steps back
		}
		n := q.NewName(123, "")
		if !re.MatchString(n) || !fsqueue.ValidName(n) {
			t.Fatalf("name %q is not <ULID>.<visible>.<route>", n)
		}
		if n <= prev {
			t.Fatalf("name %d %q not after %q", i, n, prev)
		}
		prev = n
	}
}

func TestDelayedVisibility(t *testing.T) {
	clk := clock.NewManual(time.Now())
	q := openQueue(t, vfs.OS{}, t.TempDir(), clk)
	ctx := context.Background()
	at := clk.Now().Add(10 * time.Second)
	name := enqueue(t, q, fsqueue.Message{VisibleAtMs: clock.Ms(at), Payload: json.RawMessage(`"later"`)})
	es, _ := q.List()
	if len(es) != 1 || es[0].VisibleAtMs != clock.Ms(at) {
		t.Fatalf("List = %+v", es) // List shows invisible messages too
	}
	if c, err := q.ClaimNext(ctx, "w", time.Minute, nil); err != nil || c != nil {
		t.Fatalf("ClaimNext before visible_at = %+v, %v", c, err)
	}
	clk.Advance(10*time.Second - time.Millisecond)
	if c, _ := q.ClaimNext(ctx, "w", time.Minute, nil); c != nil {
		t.Fatal("claimed 1ms before visible_at")
	}
	clk.Advance(time.Millisecond)
	c, err := q.ClaimNext(ctx, "w", time.Minute, nil)
	if err != nil || c == nil || c.Message.Name != name || string(c.Message.Payload) != `"later"` {
		t.Fatalf("ClaimNext at visible_at = %+v, %v", c, err)
	}
}

func TestStagePublish(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, vfs.OS{}, dir, nil)
	name := q.NewName(0, "")
	if err := q.Stage(fsqueue.Message{Name: name, Payload: json.RawMessage(`"s"`)}); err != nil {
		t.Fatal(err)
	}
	if err := q.Stage(fsqueue.Message{Name: q.NewName(0, ""), VisibleAtMs: 7, Payload: json.RawMessage(`1`)}); !errors.Is(err, fsqueue.ErrInvalidName) {
		t.Fatalf("Stage under another visibility time's name = %v", err)
	}
	if err := q.SyncDir(); err != nil {
		t.Fatal(err)
	}
	if !fileExists(t, filepath.Join(dir, ".staged-"+name+".json")) {
		t.Fatal("staged file missing")
	}
	if es, _ := q.List(); len(es) != 0 {
		t.Fatalf("staged message listed: %+v", es)
	}
	if c, _ := q.ClaimNext(context.Background(), "w", time.Minute, nil); c != nil {
		t.Fatal("staged message claimed")
	}
	if _, err := q.Get(name); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, fsqueue.ErrNotFound) {
		t.Fatalf("Get(staged) = %v", err)
	}
	ok, err := q.Publish(name)
	if err != nil || !ok {
		t.Fatalf("Publish = %v, %v", ok, err)
	}
	if err := q.SyncDir(); err != nil {
		t.Fatal(err)
	}
	if es, _ := q.List(); len(es) != 1 || es[0].Name() != name {
		t.Fatalf("List after Publish = %+v", es)
	}
	if ok, err := q.Publish(name); err != nil || ok {
		t.Fatalf("second Publish = %v, %v, want false, nil", ok, err)
	}
	// After consumption, a redo of Publish cannot resurrect the message.
	if err := q.Delete(name); err != nil {
		t.Fatal(err)
	}
	if ok, err := q.Publish(name); err != nil || ok {
		t.Fatalf("Publish after Delete = %v, %v", ok, err)
	}
	if es, _ := q.List(); len(es) != 0 {
		t.Fatalf("message resurrected: %+v", es)
	}
	// Unstage.
	n2 := q.NewName(0, "")
	if err := q.Stage(fsqueue.Message{Name: n2}); err != nil {
		t.Fatal(err)
	}
	if err := q.Unstage(n2); err != nil {
		t.Fatal(err)
	}
	if err := q.Unstage(n2); err != nil {
		t.Fatalf("Unstage twice: %v", err)
	}
	if ok, _ := q.Publish(n2); ok {
		t.Fatal("published an unstaged message")
	}
}

func TestDeleteAndGetCache(t *testing.T) {
	dir := t.TempDir()
	cfs := &countFS{FS: vfs.OS{}}
	q := openQueue(t, cfs, dir, nil)
	ctx := context.Background()
	name := enqueue(t, q, fsqueue.Message{Attrs: map[string]string{"k": "v"}, Payload: json.RawMessage(`{"a":1}`)})
	cfs.reset()
	m1, err := q.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	m1.Attrs["k"] = "mutated"
	m1.Payload[2] = 'X'
	m2, err := q.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	if n := cfs.reads.Load(); n != 1 {
		t.Fatalf("two Gets read %d files, want 1 (cached)", n)
	}
	if m2.Attrs["k"] != "v" || string(m2.Payload) != `{"a":1}` {
		t.Fatalf("cached message mutated through a returned copy: %+v", m2)
	}
	c, err := q.ClaimNext(ctx, "w", time.Minute, nil)
	if err != nil || c == nil {
		t.Fatalf("ClaimNext = %v, %v", c, err)
	}
	if !fileExists(t, filepath.Join(dir, "claims", name+".json")) {
		t.Fatal("claim file missing")
	}
	if err := q.Delete(name); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(q.SyncDir(), q.SyncClaimsDir()); err != nil {
		t.Fatal(err)
	}
	if fileExists(t, filepath.Join(dir, name+".json")) || fileExists(t, filepath.Join(dir, "claims", name+".json")) {
		t.Fatal("Delete left files behind")
	}
	if err := q.Delete(name); err != nil {
		t.Fatalf("Delete twice: %v", err)
	}
	if _, err := q.Get(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get after Delete = %v", err)
	}
	if es, _ := q.List(); len(es) != 0 {
		t.Fatalf("List after Delete = %+v", es)
	}
}

// TestListCaching: the index is built from names alone - no listing,
// first or later, reads a message file - and the directory is listed again
// only when its mtime says it changed (this FS offers no watch).
func TestListCaching(t *testing.T) {
	dir := t.TempDir()
	cfs := &countFS{FS: vfs.OS{}}
	q := openQueue(t, cfs, dir, nil)
	for range 20 {
		enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`null`)})
	}
	ageDir(t, dir)
	cfs.reset()
	es, err := q.List()
	if err != nil || len(es) != 20 {
		t.Fatalf("List = %d entries, %v", len(es), err)
	}
	if r, d := cfs.reads.Load(), cfs.readdirs.Load(); r != 0 || d != 1 {
		t.Fatalf("first List: %d reads, %d readdirs; want 0, 1", r, d)
	}

	cfs.reset()
	es, err = q.List()
	if err != nil || len(es) != 20 {
		t.Fatalf("List = %d entries, %v", len(es), err)
	}
	if r, d, s := cfs.reads.Load(), cfs.readdirs.Load(), cfs.stats.Load(); r != 0 || d != 0 || s != 1 {
		t.Fatalf("unchanged List: %d reads, %d readdirs, %d stats; want 0, 0, 1", r, d, s)
	}

	// One new message: one listing, no file read.
	name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`null`)})
	cfs.reset()
	es, err = q.List()
	if err != nil || len(es) != 21 || es[20].Name() != name {
		t.Fatalf("List after Enqueue = %d entries, %v", len(es), err)
	}
	if r, d := cfs.reads.Load(), cfs.readdirs.Load(); r != 0 || d != 1 {
		t.Fatalf("List after one Enqueue: %d reads, %d readdirs; want 0, 1", r, d)
	}

	// A message deleted by another process (another Queue) disappears.
	other := openQueue(t, vfs.OS{}, dir, nil)
	if err := other.Delete(es[0].Name()); err != nil {
		t.Fatal(err)
	}
	cfs.reset()
	es2, err := q.List()
	if err != nil || len(es2) != 20 || es2[0] != es[1] {
		t.Fatalf("List after foreign Delete = %d entries, %v", len(es2), err)
	}
	if r := cfs.reads.Load(); r != 0 {
		t.Fatalf("List after a delete read %d files, want 0", r)
	}

	// Invalidate forces a re-list.
	ageDir(t, dir)
	q.List()
	q.Invalidate()
	cfs.reset()
	if es3, err := q.List(); err != nil || len(es3) != 20 {
		t.Fatalf("List after Invalidate = %d, %v", len(es3), err)
	}
	if r, d := cfs.reads.Load(), cfs.readdirs.Load(); r != 0 || d != 1 {
		t.Fatalf("List after Invalidate: %d reads, %d readdirs; want 0, 1", r, d)
	}
}

// TestListSkipsForeignFiles: only "<name>.json" entries are messages; a
// file with a message's name whose content does not decode, or does not
// match its name, is listed (the index reads no file) but never handed
// out: Get and Header fail with ErrCorrupt and ClaimNext skips it.
func TestListSkipsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, vfs.OS{}, dir, nil)
	name := enqueue(t, q, fsqueue.Message{Payload: json.RawMessage(`1`)})
	for _, f := range []string{
		vfs.TempPrefix + name + ".json-x",
		".staged-" + q.NewName(0, "") + ".json",
		"README",
		"01arz3ndektsv4rrffq69g5fav.json", // lower case
		"01ARZ3NDEKTSV4RRFFQ69G5FAV.json", // a version-2 name
		q.NewName(0, "") + ".json.bak",
	} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bad := q.NewName(0, "")
	if err := os.WriteFile(filepath.Join(dir, bad+".json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A body that decodes but says another visibility time than its name.
	lying := q.NewName(0, "")
	if err := os.WriteFile(filepath.Join(dir, lying+".json"), []byte(`{"name":"`+lying+`","visible_at_ms":99,"payload":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	es, err := q.List()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := entryNames(es), []string{name, bad, lying}; !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for _, n := range []string{bad, lying} {
		if _, err := q.Get(n); !errors.Is(err, fsqueue.ErrCorrupt) {
			t.Fatalf("Get(%s) = %v, want ErrCorrupt", n, err)
		}
		if _, err := q.Header(n); !errors.Is(err, fsqueue.ErrCorrupt) {
			t.Fatalf("Header(%s) = %v, want ErrCorrupt", n, err)
		}
	}
	ctx := context.Background()
	c, err := q.ClaimNext(ctx, "w", time.Minute, nil)
	if err != nil || c == nil || c.Message.Name != name {
		t.Fatalf("ClaimNext = %+v, %v; want %s", c, err, name)
	}
	if c, err := q.ClaimNext(ctx, "w", time.Minute, nil); err != nil || c != nil {
		t.Fatalf("ClaimNext = %+v, %v; want nothing (the damaged files are skipped)", c, err)
	}
	for _, n := range []string{bad, lying} {
		if fileExists(t, filepath.Join(dir, "claims", n+".json")) {
			t.Fatalf("a damaged message %s was claimed", n)
		}
	}
}

// TestOpenFormat: a new queue records format version 3 and its IndexAttr;
// a queue of another version (1 locked through shard lock files, 2 named
// messages by their ULID alone: processes of either would not work with
// this build's) or another IndexAttr is refused; claiming creates no lock
// files.
func TestOpenFormat(t *testing.T) {
	dir := t.TempDir()
	q, err := fsqueue.Open(vfs.OS{}, dir, fsqueue.Options{IndexAttr: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "fsqueue.json")); string(got) != `{"format":"fsqueue","version":3,"index_attr":"k"}` {
		t.Fatalf("fsqueue.json = %s", got)
	}
	if _, err := fsqueue.Open(vfs.OS{}, dir, fsqueue.Options{IndexAttr: "other"}); !errors.Is(err, fsqueue.ErrIndexAttr) {
		t.Fatalf("Open with another IndexAttr: err %v, want ErrIndexAttr", err)
	}
	ctx := context.Background()
	for range 5 {
		enqueue(t, q, fsqueue.Message{})
	}
	for {
		c, err := q.ClaimNext(ctx, "w", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			break
		}
	}
	if got := mustReadDir(t, dir); slices.Contains(got, "locks") {
		t.Fatalf("queue directory holds %v: no lock files expected", got)
	}
	for _, cfg := range []string{`{"format":"fsqueue","version":1,"shards":64}`, `{"format":"fsqueue","version":2}`, `{"format":"fsqueue","version":4}`, `{"format":"other","version":3}`} {
		old := t.TempDir()
		if err := os.WriteFile(filepath.Join(old, "fsqueue.json"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := fsqueue.Open(vfs.OS{}, old, fsqueue.Options{})
		if !errors.Is(err, fsqueue.ErrUnsupportedVersion) {
			t.Fatalf("Open with %s: err %v, want ErrUnsupportedVersion", cfg, err)
		}
		if strings.Contains(cfg, `"version":2`) && !strings.Contains(err.Error(), "<ULID>.json") {
			t.Fatalf("Open of a version-2 queue: %v does not say what version 2 was", err)
		}
	}
}
