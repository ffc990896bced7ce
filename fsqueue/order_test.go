package fsqueue_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

// sharedOrder is an Options.Order the way the provider's write-ahead log
// gives one to every process of a directory (wal.Log.Stamp): one counter.
type sharedOrder struct{ last atomic.Uint64 }

func (o *sharedOrder) next(ms uint64) uint64 {
	for {
		old := o.last.Load()
		v := max(ms<<16, old+1)
		if o.last.CompareAndSwap(old, v) {
			return v
		}
	}
}

// TestOrderAcrossProcesses: two processes (two Queues on one directory,
// the process-wide name source started afresh before each name, as in a
// process of its own) enqueue in turn within one clock ms, and once with
// one process's clock stepped back. With a shared Options.Order the queue
// lists the messages in the order they were enqueued: an event raised by
// one process after another process's start of the instance returned
// sorts after it. (Without Order the names of two processes are ordered by
// ms only, so within one ms about half of these pairs come out reversed:
// the test fails when NewName ignores Order.)
func TestOrderAcrossProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		step time.Duration // process B's clock against A's
	}{
		{"one clock ms", 0},
		{"B's clock stepped back", -time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewStrictMem()
			order := &sharedOrder{}
			at := time.UnixMilli(1_700_000_000_000)
			open := func(clk clock.Clock) *fsqueue.Queue {
				q, err := fsqueue.Open(fsys, "/q", fsqueue.Options{Clock: clk, Order: order.next})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { q.Close() })
				return q
			}
			procs := []*fsqueue.Queue{open(clock.NewManual(at)), open(clock.NewManual(at.Add(tc.step)))}
			var want []string
			for i := range 64 {
				fsqueue.AsAnotherProcess()
				want = append(want, enqueue(t, procs[i%2], fsqueue.Message{Payload: json.RawMessage(fmt.Sprintf("%d", i))}))
			}
			got, err := procs[0].List()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("listed %d messages, enqueued %d", len(got), len(want))
			}
			for i, e := range got {
				if e.Name() != want[i] {
					t.Fatalf("message %d in the queue's order is the one enqueued as %d: names are not in the order they were made", i, indexOf(want, e.Name()))
				}
			}
		})
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
