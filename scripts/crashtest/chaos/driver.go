//go:build unix

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// driver is the client side of the workload: it starts workload.Mix batches
// (keeping at least target instances running while starting is on), raises
// the external events of started instances, and tracks which instances are
// terminal. It uses its own provider in this process, which is never killed.
type driver struct {
	p   provider.Provider
	adm provider.Admin
	// onRaise is called before every attempt to raise an external event,
	// onStart after every instance started.
	onRaise func(instance string)
	onStart func(workload.Spec)
	log     *slog.Logger
	seed    int64
	batch   int
	target  int

	starting atomic.Bool

	mu      sync.Mutex
	specs   []workload.Spec
	pending map[string]workload.Spec // started, not terminal yet
	raised  map[string]bool
	batches int
	err     error // a start that failed for good
}

func newDriver(p provider.Provider, onRaise func(string), onStart func(workload.Spec), log *slog.Logger, seed int64, batch, target int) *driver {
	adm, ok := p.Admin()
	if !ok {
		adm = nil
	}
	d := &driver{p: p, adm: adm, onRaise: onRaise, onStart: onStart, log: log, seed: seed, batch: batch, target: target,
		pending: map[string]workload.Spec{}, raised: map[string]bool{}}
	d.starting.Store(true)
	return d
}

// run polls every 100 ms until ctx ends.
func (d *driver) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if err := d.poll(ctx); err != nil {
			d.mu.Lock()
			if d.err == nil {
				d.err = err
			}
			d.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll starts batches while needed, raises external events and retires
// terminal instances.
func (d *driver) poll(ctx context.Context) error {
	for d.starting.Load() && d.running() < d.target && ctx.Err() == nil {
		if err := d.startBatch(ctx); err != nil {
			return err
		}
	}
	d.mu.Lock()
	pending := make([]workload.Spec, 0, len(d.pending))
	for _, s := range d.pending {
		pending = append(pending, s)
	}
	d.mu.Unlock()
	for _, s := range pending {
		if ctx.Err() != nil {
			return nil
		}
		st, err := workload.Status(ctx, d.p, d.adm, s.Instance)
		if err != nil {
			continue // transient; next poll
		}
		if st.Started && workload.NeedsRaise(s) && !d.isRaised(s.Instance) {
			// Count the attempt first: a failed enqueue may still have
			// written the message.
			d.onRaise(s.Instance)
			if err := workload.Raise(ctx, d.p, s); err == nil {
				d.mu.Lock()
				d.raised[s.Instance] = true
				d.mu.Unlock()
			} else {
				d.log.Warn("chaos: raise", "instance", s.Instance, "err", err)
			}
		}
		if st.Terminal() {
			d.mu.Lock()
			delete(d.pending, s.Instance)
			d.mu.Unlock()
		}
	}
	return nil
}

func (d *driver) isRaised(instance string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.raised[instance]
}

// startBatch starts the next workload.Mix batch. Its seed derives from the
// run's seed and the batch number, so a run's workload is reproducible.
func (d *driver) startBatch(ctx context.Context) error {
	d.mu.Lock()
	n := d.batches
	d.batches++
	d.mu.Unlock()
	specs := workload.Mix(d.seed*100_000+int64(n), d.batch)
	for _, s := range specs {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if err = workload.Start(ctx, d.p, s); err == nil || !provider.IsRetryable(err) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("start batch %d: %w", n, err)
		}
		d.mu.Lock()
		d.specs = append(d.specs, s)
		d.pending[s.Instance] = s
		d.mu.Unlock()
		d.onStart(s)
	}
	return nil
}

// running is the number of started instances not terminal yet.
func (d *driver) running() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// started returns every spec started so far.
func (d *driver) started() []workload.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]workload.Spec(nil), d.specs...)
}

// failure returns the error that stopped batches from starting, if any.
func (d *driver) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}
