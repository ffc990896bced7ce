package fsqueue_test

import (
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
