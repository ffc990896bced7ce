package fsqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/vfs"
)

func ExampleQueue() {
	dir, err := os.MkdirTemp("", "fsqueue-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	clk := clock.NewManual(time.Now())
	q, err := fsqueue.Open(vfs.OS{}, dir, fsqueue.Options{Clock: clk, IndexAttr: "instance"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	// One message visible now, one a minute from now.
	if _, err := q.Enqueue(fsqueue.Message{
		Attrs:   map[string]string{"instance": "order-1"},
		Payload: json.RawMessage(`{"step":1}`),
	}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := q.Enqueue(fsqueue.Message{
		VisibleAtMs: clock.Ms(clk.Now().Add(time.Minute)),
		Attrs:       map[string]string{"instance": "order-2"},
		Payload:     json.RawMessage(`{"step":2}`),
	}); err != nil {
		fmt.Println(err)
		return
	}
	// The index knows each message's visibility and route from its name;
	// the attributes are in the file.
	for e, err := range q.All() {
		if err != nil {
			fmt.Println(err)
			return
		}
		h, err := q.Header(e.Name())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("queued:", h.Attrs["instance"], e.Route == fsqueue.RouteOf(h.Attrs["instance"]))
	}
	o2, _ := q.ListRoute("order-2")
	fmt.Println("messages of order-2:", len(o2))

	// Peek-lock the first visible message, then acknowledge it by deleting it.
	c, err := q.ClaimNext(ctx, "worker-1", 30*time.Second, nil)
	if err != nil || c == nil {
		fmt.Println("claim:", c, err)
		return
	}
	fmt.Printf("claimed %s %s attempt %d\n", c.Message.Attrs["instance"], c.Message.Payload, c.Claim.Attempt)
	next, _ := q.ClaimNext(ctx, "worker-1", 30*time.Second, nil)
	fmt.Println("next before its time:", next)
	if err := q.Delete(c.Message.Name); err != nil {
		fmt.Println(err)
		return
	}
	if err := q.SyncDir(); err != nil {
		fmt.Println(err)
		return
	}
	if err := q.SyncClaimsDir(); err != nil {
		fmt.Println(err)
		return
	}

	// A minute later the delayed message is visible. Abandoning it makes it
	// visible again at once, with the next attempt number.
	clk.Advance(time.Minute)
	c, _ = q.ClaimNext(ctx, "worker-1", 30*time.Second, nil)
	fmt.Printf("claimed %s attempt %d\n", c.Message.Attrs["instance"], c.Claim.Attempt)
	if err := q.Abandon(ctx, c.Claim.Token, 0, false); err != nil {
		fmt.Println(err)
		return
	}
	c, _ = q.ClaimNext(ctx, "worker-2", 30*time.Second, nil)
	fmt.Printf("claimed %s attempt %d by %s\n", c.Message.Attrs["instance"], c.Claim.Attempt, c.Claim.Owner)

	// Output:
	// queued: order-1 true
	// queued: order-2 true
	// messages of order-2: 1
	// claimed order-1 {"step":1} attempt 1
	// next before its time: <nil>
	// claimed order-2 attempt 1
	// claimed order-2 attempt 2 by worker-2
}

// A consumer that owns its messages (it locks them its own way, as the
// durofs provider does per instance) finds due work with Visible: the
// queue skips messages that are not due yet in blocks, so a fetch does not
// slow down with the number of timers scheduled far ahead.
func ExampleQueue_Visible() {
	dir, err := os.MkdirTemp("", "fsqueue-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	q, err := fsqueue.Open(vfs.OS{}, dir, fsqueue.Options{Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
	now := clock.Ms(clk.Now())
	for i, delay := range []time.Duration{24 * time.Hour, time.Hour, 0, time.Minute} {
		if _, err := q.Enqueue(fsqueue.Message{
			VisibleAtMs: now + delay.Milliseconds(),
			Attrs:       map[string]string{"timer": fmt.Sprint(i)},
			Payload:     json.RawMessage(`{}`),
		}); err != nil {
			fmt.Println(err)
			return
		}
	}
	for _, at := range []time.Duration{0, time.Minute, 2 * time.Hour} {
		var timers []string
		for e, err := range q.Visible(now + at.Milliseconds()) {
			if err != nil {
				fmt.Println(err)
				return
			}
			h, err := q.Header(e.Name())
			if err != nil {
				fmt.Println(err)
				return
			}
			timers = append(timers, h.Attrs["timer"])
		}
		fmt.Printf("after %v: %v\n", at, timers)
	}
	// Output:
	// after 0s: [2]
	// after 1m0s: [2 3]
	// after 2h0m0s: [1 2 3]
}

// A Recycler shared by a queue: a consumed message's file waits until
// Promote has fsynced the queue's directory, and then the next staged
// message takes it instead of a new inode.
func ExampleRecycler() {
	dir, err := os.MkdirTemp("", "fsqueue-recycler")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	rec, err := fsqueue.NewRecycler(vfs.OS{}, dir+"/recycled", fsqueue.RecyclerOptions{
		BootID: func() (string, error) { return "boot-1", nil }, // Linux: /proc/sys/kernel/random/boot_id
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	q, err := fsqueue.Open(vfs.OS{}, dir+"/q", fsqueue.Options{Recycler: rec, VolatileClaims: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
	stage := func(payload string) string {
		m := fsqueue.Message{Payload: json.RawMessage(payload)}
		data, err := q.Encode(&m)
		if err == nil {
			err = q.StageData(m.Name, data)
		}
		if err == nil {
			_, err = q.Publish(m.Name)
		}
		if err != nil {
			fmt.Println(err)
		}
		return m.Name
	}

	name := stage(`{"n":1}`)
	if err := q.Delete(name); err != nil { // consumed: its file goes to the pool
		fmt.Println(err)
		return
	}
	fmt.Println("waiting:", rec.Waiting(), "pooled:", rec.Pooled())
	if err := rec.Promote(); err != nil { // in the background: fsyncs q's directory
		fmt.Println(err)
		return
	}
	fmt.Println("waiting:", rec.Waiting(), "pooled:", rec.Pooled())
	stage(`{"n":2}`) // takes the pooled file
	fmt.Println("waiting:", rec.Waiting(), "pooled:", rec.Pooled())
	// Output:
	// waiting: 1 pooled: 0
	// waiting: 0 pooled: 1
	// waiting: 0 pooled: 0
}
