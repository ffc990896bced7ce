// Package calltime lets a caller of the provider learn where a call's time
// went: a [Times] carried by the call's context collects how long the call
// waited for the write-ahead log's group fdatasync. The stall test uses it
// to tell an ack that was slow on the disk from one that waited for another
// process (scripts/crashtest/chaos). A context without one costs a lookup.
package calltime

import (
	"context"
	"sync/atomic"
	"time"
)

// Times collects the timings of the calls made with its context. It is
// safe for concurrent use.
type Times struct {
	logSync atomic.Int64
}

type key struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t *Times) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// AddLogSync adds d, time spent waiting for the log's group fdatasync, to
// the Times ctx carries, if any.
func AddLogSync(ctx context.Context, d time.Duration) {
	if t, ok := ctx.Value(key{}).(*Times); ok {
		t.logSync.Add(int64(d))
	}
}

// LogSync returns the time added by AddLogSync so far.
func (t *Times) LogSync() time.Duration { return time.Duration(t.logSync.Load()) }
