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

// TestFirstListingReadsEveryMessage: a fresh Queue's first listing reads
// every message file (in parallel when there are many) and indexes exactly
// the readable ones, in name order, with their headers; unreadable files
// are skipped, whatever their position. Sizes below and above the parallel
// threshold.
func TestFirstListingReadsEveryMessage(t *testing.T) {
	for _, n := range []int{3, 500} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewManual(time.Now())
			q := openQueue(t, vfs.OS{}, dir, clk)
			var want []string
			visible := map[string]int64{}
			for i := range n {
				m := fsqueue.Message{Payload: json.RawMessage(strconv.Itoa(i)), VisibleAtMs: int64(i), Attrs: map[string]string{"i": strconv.Itoa(i)}}
				name := enqueue(t, q, m)
				want = append(want, name)
				visible[name] = int64(i)
				if i%97 == 0 { // an unreadable file among them
					bad := q.NewName()
					if err := os.WriteFile(filepath.Join(dir, bad+".json"), []byte("{not json"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			fresh := openQueue(t, vfs.OS{}, dir, clk)
			got, err := fresh.List()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(want)
			if !slices.Equal(entryNames(got), want) {
				t.Fatalf("listed %d messages, want the %d readable ones in name order", len(got), len(want))
			}
			for _, e := range got {
				if e.VisibleAtMs != visible[e.Name] || e.Attrs["i"] != strconv.FormatInt(visible[e.Name], 10) {
					t.Fatalf("entry %+v does not carry its header", e)
				}
			}
		})
	}
}
