package fsqueue

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// TestWatchSeesOtherQueuesEnqueue checks the directory watch: a message
// enqueued through one Queue is listed by another at once, every time.
func TestWatchSeesOtherQueuesEnqueue(t *testing.T) {
	dir := t.TempDir()
	q1, err := Open(vfs.OS{}, dir, Options{IndexAttr: "k"})
	if err != nil {
		t.Fatal(err)
	}
	q2, err := Open(vfs.OS{}, dir, Options{IndexAttr: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q2.List(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		name, err := q1.Enqueue(Message{Attrs: map[string]string{"k": "v"}, Payload: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		l, err := q2.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != 1 || l[0].Name() != name {
			t.Fatalf("round %d: q2 lists %v, want [%s]", i, l, name)
		}
		if err := q1.Delete(name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNotifyTellsOfOtherQueuesAdds checks Options.Notify: after Quiet
// said the queue was quiet, a message that another Queue on the directory
// (another process) enqueues or publishes calls it, from the watch's own
// goroutine - this Queue is not called between the change and the
// notification - while this Queue's own enqueues and publishes never do
// (its callers know of them).
func TestNotifyTellsOfOtherQueuesAdds(t *testing.T) {
	msg := func() Message { return Message{Attrs: map[string]string{"k": "v"}, Payload: []byte("{}")} }
	enqueue := func(t *testing.T, q *Queue) {
		if _, err := q.Enqueue(msg()); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(t *testing.T, q *Queue) {
		m := msg()
		data, err := q.Encode(&m)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.StageData(m.Name, data); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.Publish(m.Name); err != nil || !ok {
			t.Fatalf("publish = %v, %v", ok, err)
		}
	}
	for _, tc := range []struct {
		name       string
		own, other func(t *testing.T, q *Queue)
	}{
		{"another's enqueue", nil, enqueue},
		{"another's publish", nil, publish},
		{"own enqueue, then another's", enqueue, enqueue},
		{"own publish, then another's", publish, publish},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if runtime.GOOS != "linux" {
				t.Skip("no directory watch: consumers poll")
			}
			dir := t.TempDir()
			var calls atomic.Int64
			called := make(chan struct{}, 1)
			q, other := notifyPair(t, dir, func() {
				calls.Add(1)
				select {
				case called <- struct{}{}:
				default:
				}
			})
			// The first call starts the watch; an empty queue is quiet, and
			// the answer asks for the next foreign addition.
			if _, quiet, err := q.ArmQuiet(time.Now().UnixMilli()); err != nil || !quiet {
				t.Fatalf("ArmQuiet on an empty queue = %v, %v", quiet, err)
			}
			if tc.own != nil {
				tc.own(t, q)
				// Its event was queued before the call returned: List
				// applies it, if the watch's goroutine has not.
				if l, err := q.List(); err != nil || len(l) != 1 {
					t.Fatalf("List after the own add = %v, %v", l, err)
				}
				if n := calls.Load(); n != 0 {
					t.Fatalf("Notify called %d times for this Queue's own add, want 0", n)
				}
			}
			tc.other(t, other)
			select {
			case <-called:
			case <-time.After(time.Minute):
				t.Fatal("Notify not called for another Queue's add")
			}
			if _, err := q.List(); err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("Notify called %d times, want 1", n)
			}
		})
	}
}

// TestNotifyOnlyAfterQuiet (mutation that fails it: Quiet arming like
// ArmQuiet): Options.Notify is an answer to an ArmQuiet
// that found nothing visible; a queue whose consumer did not ask (or only
// asked Quiet, which arms nothing), or was told a message is visible, is
// not notified of additions (a busy queue's consumers find them by
// looking).
func TestNotifyOnlyAfterQuiet(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no directory watch")
	}
	dir := t.TempDir()
	var calls atomic.Int64
	q, other := notifyPair(t, dir, func() { calls.Add(1) })
	add := func() {
		if _, err := other.Enqueue(Message{Attrs: map[string]string{"k": "v"}, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.List(); err != nil { // starts the watch; nobody asked
		t.Fatal(err)
	}
	// Quiet tells, and asks for nothing.
	if _, quiet, err := q.Quiet(time.Now().UnixMilli()); err != nil || !quiet {
		t.Fatalf("Quiet on an empty queue = %v, %v", quiet, err)
	}
	add()
	if l, err := q.List(); err != nil || len(l) != 1 {
		t.Fatalf("List = %v, %v", l, err)
	}
	if _, quiet, err := q.ArmQuiet(time.Now().UnixMilli()); err != nil || quiet {
		t.Fatalf("ArmQuiet with a visible message = %v, %v", quiet, err)
	}
	add()
	if l, err := q.List(); err != nil || len(l) != 2 {
		t.Fatalf("List = %v, %v", l, err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("Notify called %d times without a quiet answer outstanding", n)
	}
}

// notifyPair opens two Queues on dir, as two processes would: q with
// Options.Notify set to notify, other without.
func notifyPair(t *testing.T, dir string, notify func()) (q, other *Queue) {
	t.Helper()
	q, err := Open(vfs.OS{}, dir, Options{IndexAttr: "k", Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	other, err = Open(vfs.OS{}, dir, Options{IndexAttr: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return q, other
}
