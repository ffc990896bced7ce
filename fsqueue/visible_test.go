package fsqueue_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// TestVisible: the cases a fetch meets.
func TestVisible(t *testing.T) {
	const base = int64(1_000_000)
	tests := []struct {
		name  string
		vis   []int64 // visibility times of the messages, enqueued in order
		calls []int64 // successive Visible times
		want  []int   // how many messages (the first k by name) are visible at the last call
	}{
		{"empty queue", nil, []int64{base}, nil},
		{"all visible", []int64{0, base - 5, base}, []int64{base}, []int{0, 1, 2}},
		{"delayed ahead of visible", []int64{base + 100, base + 50, 0}, []int64{base}, []int{2}},
		{"becomes due", []int64{base + 100, base + 50, 0}, []int64{base, base + 50}, []int{1, 2}},
		{"many due at once", []int64{base + 9, base + 8, base + 7, base + 6, base + 5, base + 4, base + 3, base + 2, base + 1, base + 1}, []int64{base, base + 10}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"clock steps back", []int64{base + 100, base + 50, 0}, []int64{base + 60, base}, []int{2}},
		{"back then forward again", []int64{base + 100, base + 50, 0}, []int64{base + 60, base, base + 200}, []int{0, 1, 2}},
		{"before the epoch counts as 0", []int64{-5, base + 1}, []int64{0}, []int{0}},
		{"beyond the last visibility time a name holds", []int64{fsqueue.MaxVisibleAtMs + 10, 0}, []int64{fsqueue.MaxVisibleAtMs}, []int{0, 1}},
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
				if got, err = listVisible(q, now); err != nil {
					t.Fatal(err)
				}
			}
			var want []string
			for _, i := range tt.want {
				want = append(want, names[i])
			}
			if !slices.Equal(entryNames(got), want) {
				t.Fatalf("Visible = %v, want %v", entryNames(got), want)
			}
		})
	}
}

// TestIndexModel drives the index through random enqueues (by this queue
// and by another one on the same directory, as another process would),
// deletes, forced re-listings and clock movements (mostly forward,
// sometimes back), with enough messages to fill, split and merge index
// blocks, and after every step checks Visible, All and ListRoute against a
// model of the directory. With and without the directory watch.
func TestIndexModel(t *testing.T) {
	for _, fc := range []struct {
		name  string
		fsys  vfs.FS
		steps int
	}{{"watch", vfs.NoSync(vfs.OS{}), 5000}, {"mtime", struct{ vfs.FS }{vfs.NoSync(vfs.OS{})}, 1000}} {
		t.Run(fc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewManual(time.UnixMilli(1_000_000))
			q := openQueueAttr(t, fc.fsys, dir, clk, "r")
			other := openQueueAttr(t, fc.fsys, dir, clk, "r")
			rng := rand.New(rand.NewPCG(1, 2))
			now := int64(1_000_000)
			type msg struct {
				vis   int64
				route string
			}
			live := map[string]msg{}
			var names []string // the live names, in no order
			for step := -1200; step < fc.steps; step++ {
				switch r := rng.IntN(100); {
				case r < 45 || step < 0:
					w := q
					if rng.IntN(3) == 0 {
						w = other
					}
					vis := now + rng.Int64N(300) - 100
					if rng.IntN(10) == 0 {
						vis = now + 1_000_000 // far future
					}
					route := strconv.Itoa(rng.IntN(40))
					name := enqueue(t, w, fsqueue.Message{VisibleAtMs: vis, Attrs: map[string]string{"r": route}, Payload: json.RawMessage(`{}`)})
					live[name] = msg{vis, route}
					names = append(names, name)
				case r < 75 && len(names) > 0:
					i := rng.IntN(len(names))
					w := q
					if rng.IntN(3) == 0 {
						w = other
					}
					if err := w.Delete(names[i]); err != nil {
						t.Fatal(err)
					}
					delete(live, names[i])
					names[i] = names[len(names)-1]
					names = names[:len(names)-1]
				case r < 76:
					q.Invalidate()
				case r < 95:
					now += rng.Int64N(40)
				default:
					now -= rng.Int64N(60) // a clock step back
				}
				want := func(keep func(msg) bool) []string {
					var out []string
					for n, m := range live {
						if keep(m) {
							out = append(out, n)
						}
					}
					slices.Sort(out)
					return out
				}
				if step < 0 {
					continue // filling: the checks start with more than a block
				}
				got, err := listVisible(q, now)
				if err != nil {
					t.Fatal(err)
				}
				if w := want(func(m msg) bool { return m.vis <= now }); !slices.Equal(entryNames(got), w) {
					t.Fatalf("step %d, now %d: Visible = %d entries %v\nwant %d %v", step, now, len(got), entryNames(got), len(w), w)
				}
				if step%10 != 0 {
					continue
				}
				all, err := q.List()
				if err != nil {
					t.Fatal(err)
				}
				if w := want(func(msg) bool { return true }); !slices.Equal(entryNames(all), w) {
					t.Fatalf("step %d: List = %d entries, want %d", step, len(all), len(w))
				}
				route := strconv.Itoa(rng.IntN(40))
				es, err := q.ListRoute(route)
				if err != nil {
					t.Fatal(err)
				}
				if w := want(func(m msg) bool { return m.route == route }); !slices.Equal(entryNames(es), w) {
					t.Fatalf("step %d: ListRoute(%s) = %v, want %v", step, route, entryNames(es), w)
				}
			}
		})
	}
}
