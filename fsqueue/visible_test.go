package fsqueue_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// visibleAt filters a full listing the slow way: the reference ListVisible
// is checked against.
func visibleAt(all []fsqueue.Entry, nowMs int64) []string {
	var out []string
	for _, e := range all {
		if e.VisibleAtMs <= nowMs {
			out = append(out, e.Name)
		}
	}
	return out
}

// TestListVisible: the cases a fetch meets, each checked against the full
// listing filtered by visibility.
func TestListVisible(t *testing.T) {
	const base = int64(1_000_000)
	tests := []struct {
		name  string
		vis   []int64 // visibility times of the messages, enqueued in order
		calls []int64 // successive ListVisible times
		want  []int   // how many messages (the first k by name) are visible at the last call
	}{
		{"empty queue", nil, []int64{base}, nil},
		{"all visible", []int64{0, base - 5, base}, []int64{base}, []int{0, 1, 2}},
		{"delayed ahead of visible", []int64{base + 100, base + 50, 0}, []int64{base}, []int{2}},
		{"becomes due", []int64{base + 100, base + 50, 0}, []int64{base, base + 50}, []int{1, 2}},
		{"many due at once are merged", []int64{base + 9, base + 8, base + 7, base + 6, base + 5, base + 4, base + 3, base + 2, base + 1, base + 1}, []int64{base, base + 10}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"clock steps back", []int64{base + 100, base + 50, 0}, []int64{base + 60, base}, []int{2}},
		{"back then forward again", []int64{base + 100, base + 50, 0}, []int64{base + 60, base, base + 200}, []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := openQueue(t, vfs.OS{}, t.TempDir(), clock.NewManual(time.UnixMilli(base)))
			defer q.Close()
			var names []string
			for i, v := range tt.vis {
				names = append(names, enqueue(t, q, fsqueue.Message{VisibleAtMs: v, Payload: json.RawMessage(`1`), Attrs: map[string]string{"i": string(rune('a' + i))}}))
			}
			var got []fsqueue.Entry
			for _, now := range tt.calls {
				var err error
				if got, err = q.ListVisible(now); err != nil {
					t.Fatal(err)
				}
			}
			var want []string
			for _, i := range tt.want {
				want = append(want, names[i])
			}
			if !slices.Equal(entryNames(got), want) {
				t.Fatalf("ListVisible = %v, want %v", entryNames(got), want)
			}
			for _, e := range got {
				if e.Attrs["i"] == "" {
					t.Fatalf("entry %+v lost its header", e)
				}
			}
		})
	}
}

// TestListVisibleModel drives the index through random enqueues (by this
// queue and by another one on the same directory, as another process
// would), deletes, forced re-listings and clock movements (mostly forward,
// sometimes back), and after every step checks ListVisible against the full
// listing filtered by visibility, and that no slice handed out earlier has
// changed since. With and without the directory watch.
func TestListVisibleModel(t *testing.T) {
	for _, fc := range []struct {
		name string
		fsys vfs.FS
	}{{"watch", vfs.OS{}}, {"mtime", struct{ vfs.FS }{vfs.OS{}}}} {
		t.Run(fc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewManual(time.UnixMilli(1_000_000))
			q := openQueue(t, fc.fsys, dir, clk)
			other := openQueue(t, fc.fsys, dir, clk)
			defer q.Close()
			defer other.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			now := int64(1_000_000)
			var live []string
			type handed struct {
				s     []fsqueue.Entry
				names []string
			}
			var out []handed
			for step := range 1500 {
				switch r := rng.IntN(100); {
				case r < 40:
					w := q
					if rng.IntN(3) == 0 {
						w = other
					}
					vis := now + rng.Int64N(300) - 100
					if rng.IntN(10) == 0 {
						vis = now + 1_000_000 // far future
					}
					live = append(live, enqueue(t, w, fsqueue.Message{VisibleAtMs: vis, Payload: json.RawMessage(`{}`)}))
				case r < 60 && len(live) > 0:
					i := rng.IntN(len(live))
					w := q
					if rng.IntN(3) == 0 {
						w = other
					}
					if err := w.Delete(live[i]); err != nil {
						t.Fatal(err)
					}
					live = slices.Delete(live, i, i+1)
				case r < 63:
					q.Invalidate()
				case r < 93:
					now += rng.Int64N(40)
				default:
					now -= rng.Int64N(60) // a clock step back
				}
				got, err := q.ListVisible(now)
				if err != nil {
					t.Fatal(err)
				}
				all, err := q.List()
				if err != nil {
					t.Fatal(err)
				}
				if want := visibleAt(all, now); !slices.Equal(entryNames(got), want) {
					t.Fatalf("step %d, now %d: ListVisible = %d entries %v\nwant %d %v", step, now, len(got), entryNames(got), len(want), want)
				}
				out = append(out, handed{got, entryNames(got)})
				if len(out) > 20 {
					out = out[1:]
				}
				for i, h := range out {
					if !slices.Equal(entryNames(h.s), h.names) {
						t.Fatalf("step %d: a slice handed out %d calls ago changed", step, len(out)-1-i)
					}
				}
			}
		})
	}
}
