package fsqueue_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestFirstListingOpensNoMessage: a fresh Queue's first listing builds the
// index from the directory's names alone - it opens no file (counted
// through vfs.Counting) - and indexes every message, in name order, with
// the visibility time and route its name carries. Sizes below and above
// one index block.
func TestFirstListingOpensNoMessage(t *testing.T) {
	for _, n := range []int{3, 2500} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewManual(time.Now())
			q := openQueueAttr(t, vfs.OS{}, dir, clk, "i")
			var want []string
			type meta struct {
				vis   int64
				route string
			}
			made := map[string]meta{}
			for i := range n {
				route := strconv.Itoa(i % 7)
				m := fsqueue.Message{Payload: json.RawMessage(strconv.Itoa(i)), VisibleAtMs: int64(i), Attrs: map[string]string{"i": route}}
				data, err := q.Encode(&m)
				if err != nil {
					t.Fatal(err)
				}
				// Written directly (no Enqueue's fsyncs): the test is about
				// reading them.
				if err := os.WriteFile(filepath.Join(dir, m.Name+".json"), data, 0o600); err != nil {
					t.Fatal(err)
				}
				want = append(want, m.Name)
				made[m.Name] = meta{int64(i), route}
			}
			cfs := vfs.Counting(vfs.OS{})
			fresh := openQueueAttr(t, cfs, dir, clk, "i")
			before := cfs.Files().Opens
			got, err := fresh.List()
			if err != nil {
				t.Fatal(err)
			}
			if opens := cfs.Files().Opens - before; opens != 0 {
				t.Fatalf("the first listing opened %d files, want 0", opens)
			}
			slices.Sort(want)
			if !slices.Equal(entryNames(got), want) {
				t.Fatalf("listed %d messages, want %d in name order", len(got), len(want))
			}
			for _, e := range got {
				m := made[e.Name()]
				if e.VisibleAtMs != m.vis || e.Route != fsqueue.RouteOf(m.route) {
					t.Fatalf("entry %+v does not carry its name's visibility %d and route %q", e, m.vis, m.route)
				}
			}
			for r := range 7 {
				es, err := fresh.ListRoute(strconv.Itoa(r))
				if err != nil {
					t.Fatal(err)
				}
				if len(es) != (n+6-r)/7 {
					t.Fatalf("ListRoute(%d) = %d entries, want %d", r, len(es), (n+6-r)/7)
				}
			}
		})
	}
}

// TestSweepersDoNotList: the staged and temporary files that Staged and
// Sweep look for come from the index when a directory watch keeps it up to
// date - no listing of the queue directory, so a process that fetches
// pays nothing per sweep for the messages it holds - and otherwise from a
// streamed listing each (which builds no index). Either way they find the
// same files, and a file staged since is seen at once.
func TestSweepersDoNotList(t *testing.T) {
	for _, mode := range []string{"watch", "poll"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewManual(time.Now())
			writer := openQueueAttr(t, vfs.OS{}, dir, clk, "k")
			for range 3 {
				enqueue(t, writer, fsqueue.Message{Payload: json.RawMessage(`1`)})
			}
			staged := fsqueue.Message{Payload: json.RawMessage(`2`)}
			if err := writer.Stage(staged); err != nil {
				t.Fatal(err)
			}
			oldTemp := filepath.Join(dir, vfs.TempPrefix+"x.json-1")
			if err := os.WriteFile(oldTemp, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-time.Hour)
			if err := os.Chtimes(oldTemp, old, old); err != nil {
				t.Fatal(err)
			}
			cfs := vfs.Counting(vfs.OS{})
			var fsys vfs.FS = cfs
			if mode == "poll" {
				fsys = struct{ vfs.FS }{cfs} // no watch, no DirScanner: ReadDirNames
			}
			q := openQueueAttr(t, fsys, dir, clk, "k")
			if mode == "watch" {
				if _, ok := vfs.WatchDir(vfs.OS{}, t.TempDir()); !ok {
					t.Skip("no directory watch on this system")
				}
				if _, err := q.List(); err != nil { // a fetching process: its index is built
					t.Fatal(err)
				}
			}
			before := cfs.Files().Listings
			st, err := q.Staged()
			if err != nil || len(st) != 1 {
				t.Fatalf("Staged = %v, %v; want the one staged file", st, err)
			}
			sw, err := q.Sweep(context.Background(), time.Minute)
			if err != nil || sw.TempRemoved != 1 {
				t.Fatalf("Sweep = %+v, %v; want the old temporary file removed", sw, err)
			}
			// Sweep lists claims/ twice (its temporary files, its claims) in
			// both modes.
			want := int64(2)
			if mode == "poll" {
				want = 4 // and the queue directory once for each call
			}
			if got := cfs.Files().Listings - before; got != want {
				t.Fatalf("Staged and Sweep listed directories %d times, want %d", got, want)
			}
			// A file staged now is seen at once (with the watch, without a
			// listing).
			if err := writer.Stage(fsqueue.Message{Payload: json.RawMessage(`3`)}); err != nil {
				t.Fatal(err)
			}
			if st, err := q.Staged(); err != nil || len(st) != 2 {
				t.Fatalf("Staged after another stage = %v, %v; want 2", st, err)
			}
			if mode == "watch" {
				if got := cfs.Files().Listings - before; got != want {
					t.Fatalf("listed directories %d times, want still %d", got, want)
				}
			}
		})
	}
}
