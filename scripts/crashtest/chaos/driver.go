//go:build unix

package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// driver is the client side of the workload: it starts workload.Mix batches
// (keeping at least target instances running while starting is on), raises
// the external events of started instances, deletes some of them (deletes),
// and tracks which instances are terminal. It uses its own provider in this
// process, which is never killed.
type driver struct {
	p   provider.Provider
	adm provider.Admin
	// onRaise is called before every attempt to raise an external event,
	// onStart after every instance started, onDelete after every deletion
	// attempt (err nil: the instance is deleted) with the call's start and
	// end.
	onRaise  func(instance string)
	onStart  func(workload.Spec)
	onDelete func(instance string, forced bool, start, end time.Time, err error)
	log      *slog.Logger
	seed     int64
	batch    int
	target   int
	// deletes is the fraction of chain, fan-out, cancel and sub instances
	// deleted once started.
	deletes float64

	starting atomic.Bool

	mu      sync.Mutex
	specs   []workload.Spec
	pending map[string]workload.Spec // started, not terminal yet
	raised  map[string]bool
	deleted map[string]bool // DeleteInstance returned OK
	delErrs map[string]int  // failed DeleteInstance calls (each may have committed)
	batches int
	err     error // a start that failed for good
}

func newDriver(p provider.Provider, onRaise func(string), onStart func(workload.Spec), log *slog.Logger, seed int64, batch, target int) *driver {
	adm, ok := p.Admin()
	if !ok {
		adm = nil
	}
	d := &driver{p: p, adm: adm, onRaise: onRaise, onStart: onStart, log: log, seed: seed, batch: batch, target: target,
		pending: map[string]workload.Spec{}, raised: map[string]bool{}, deleted: map[string]bool{}, delErrs: map[string]int{}}
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
		if del, late := d.toDelete(s); del && st.Started && (!late || st.Terminal()) {
			// Forced while it runs (its activities may be held by
			// workers that are being killed), plain once it finished.
			forced := !st.Terminal()
			start := time.Now()
			_, err := d.adm.DeleteInstance(ctx, s.Instance, forced)
			d.onDelete(s.Instance, forced, start, time.Now(), err)
			d.mu.Lock()
			if err == nil {
				d.deleted[s.Instance] = true
				delete(d.pending, s.Instance)
			} else {
				d.delErrs[s.Instance]++
			}
			d.mu.Unlock()
			if err == nil {
				continue
			}
			d.log.Warn("chaos: delete", "instance", s.Instance, "forced", forced, "err", err)
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

// toDelete reports whether s is one of the instances to delete (a chain,
// fan-out, cancel or sub - a tree, its child perhaps not started yet; no
// event to raise - picked by a hash of its id and the seed) not yet
// deleted, and not given up on after three failed attempts (it then runs to
// its end, and is checked in full if none of them took effect). Half of
// them (late) are deleted once they finished, the others as soon as they
// started.
func (d *driver) toDelete(s workload.Spec) (del, late bool) {
	if d.deletes <= 0 || d.adm == nil {
		return false, false
	}
	switch s.Kind {
	case workload.KindChain, workload.KindFanOut, workload.KindCancel, workload.KindSub:
	default:
		return false, false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", d.seed, s.Instance)
	sum := h.Sum64()
	if float64(sum%10_000) >= d.deletes*10_000 {
		return false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.deleted[s.Instance] && d.delErrs[s.Instance] < 3, sum/10_000%2 == 1
}

// deletions returns the instances deleted (DeleteInstance returned OK) and
// those whose every deletion attempt failed (any of them may have
// committed).
func (d *driver) deletions() (deleted, maybe []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	failed := map[string]bool{}
	for id := range d.delErrs {
		failed[id] = true
	}
	return splitDeletions(d.deleted, failed)
}

// splitDeletions returns, sorted, the instances a deletion call deleted
// (ok) and those whose every call failed (in failed, not in ok): any of
// those may have committed.
func splitDeletions(ok, failed map[string]bool) (deleted, maybe []string) {
	for id := range ok {
		deleted = append(deleted, id)
	}
	for id := range failed {
		if !ok[id] {
			maybe = append(maybe, id)
		}
	}
	slices.Sort(deleted)
	slices.Sort(maybe)
	return deleted, maybe
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
