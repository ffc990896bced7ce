package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
)

// SyncClass aggregates the fsyncs of one kind of provider call.
type SyncClass struct {
	// Label says which calls these are.
	Label string
	// Calls is how many calls were counted.
	Calls int
	// FileSyncs and DirSyncs are totals over those calls.
	FileSyncs, DirSyncs int64
	// MinTotal and MaxTotal are the fewest and most syncs of one call.
	MinTotal, MaxTotal int64
	// Creates and Unlinks are the files created and names unlinked (or
	// replaced by a rename) over those calls: the inode churn, which costs
	// CPU on ext4 without a journal (BENCHMARKS.md).
	Creates, Unlinks int64
}

// FilesPerCall returns the mean files created and names unlinked per call.
func (c SyncClass) FilesPerCall() (creates, unlinks float64) {
	if c.Calls == 0 {
		return 0, 0
	}
	return float64(c.Creates) / float64(c.Calls), float64(c.Unlinks) / float64(c.Calls)
}

// PerCall returns the mean file and directory fsyncs per call.
func (c SyncClass) PerCall() (file, dir float64) {
	if c.Calls == 0 {
		return 0, 0
	}
	return float64(c.FileSyncs) / float64(c.Calls), float64(c.DirSyncs) / float64(c.Calls)
}

// Total returns the mean syncs (files + directories) per call.
func (c SyncClass) Total() float64 {
	f, d := c.PerCall()
	return f + d
}

func (c *SyncClass) add(d vfs.Counts, f vfs.FileCounts) {
	c.Creates += f.Creates
	c.Unlinks += f.Unlinks
	t := d.Total()
	if c.Calls == 0 || t < c.MinTotal {
		c.MinTotal = t
	}
	if c.Calls == 0 || t > c.MaxTotal {
		c.MaxTotal = t
	}
	c.Calls++
	c.FileSyncs += d.FileSyncs
	c.DirSyncs += d.DirSyncs
}

// FsyncResult is the fsync section's result.
type FsyncResult struct {
	// Workload describes what ran.
	Workload string
	// Classes are the per-call-kind counts, in first-seen order.
	Classes []SyncClass
	// OrchAcks and WorkAcks aggregate every orchestration and work-item ack.
	OrchAcks, WorkAcks SyncClass
	// FirstTurn is the first turn of a chain instance (start in, one
	// activity out); SteadyTurn a middle turn of a chain (one completion
	// in, one activity out). Calls is 0 if the workload had none.
	FirstTurn, SteadyTurn SyncClass
	// Total is every sync the FS saw; Unattributed those made outside the
	// counted calls (the background checkpoint's).
	Total, Unattributed vfs.Counts
	// PreallocSyncs are the log's segment grows (zeros appended and synced
	// ahead of the frames, in the background), counted apart from the calls;
	// GrowWaits the appends that waited for zeros (provider.LogStats).
	PreallocSyncs, GrowWaits int64
	// RecycleSyncs are the directory fsyncs that let recycled queue files
	// be reused (provider.LogStats): part of the background rounds' syncs.
	RecycleSyncs int64
	// Files are all files created and names unlinked; FilesUnattributed
	// those outside the counted calls (the checkpoint's and the sweeper's).
	Files, FilesUnattributed vfs.FileCounts
	// CommitMode is the provider's commit mode ("barrier" or "per-file").
	CommitMode string
	// Verify is the workload check.
	Verify string
}

// syncCounter wraps a durofs provider and attributes every fsync to the
// provider call that made it. It serialises the calls it counts (a fetch's
// long poll is turned into short polls outside the lock), so deltas of the
// counting FS are exact.
type syncCounter struct {
	provider.Provider
	cfs *vfs.CountingFS

	mu      sync.Mutex
	batches map[string]int // lock token → messages in the batch
	classes map[string]*SyncClass
	order   []string
	orch    SyncClass
	work    SyncClass
	first   SyncClass // chain first turns: start in, one activity out
	steady  SyncClass // chain middle turns: one completion in, one activity out
	counted vfs.Counts
	files   vfs.FileCounts
}

func newSyncCounter(p provider.Provider, cfs *vfs.CountingFS) *syncCounter {
	return &syncCounter{Provider: p, cfs: cfs, batches: map[string]int{}, classes: map[string]*SyncClass{}}
}

// call runs f under the lock and attributes its syncs to label(err).
func (s *syncCounter) call(f func() (label string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, fbefore := s.cfs.Counts(), s.cfs.Files()
	label := f()
	d := s.cfs.Counts().Sub(before)
	fd := subFiles(s.cfs.Files(), fbefore)
	s.counted = vfs.Counts{FileSyncs: s.counted.FileSyncs + d.FileSyncs, DirSyncs: s.counted.DirSyncs + d.DirSyncs}
	s.files = vfs.FileCounts{Creates: s.files.Creates + fd.Creates, Unlinks: s.files.Unlinks + fd.Unlinks}
	c, ok := s.classes[label]
	if !ok {
		c = &SyncClass{Label: label}
		s.classes[label] = c
		s.order = append(s.order, label)
	}
	c.add(d, fd)
}

// subFiles returns a - b.
func subFiles(a, b vfs.FileCounts) vfs.FileCounts {
	return vfs.FileCounts{Creates: a.Creates - b.Creates, Unlinks: a.Unlinks - b.Unlinks}
}

// pollStep is how long a counted fetch sleeps between short polls.
const pollStep = time.Millisecond

// FetchOrchestrationItem implements provider.Provider.
func (s *syncCounter) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *provider.DispatcherCapabilityFilter) (*provider.LockedOrchestrationItem, error) {
	deadline := time.Now().Add(pollTimeout)
	for {
		var it *provider.LockedOrchestrationItem
		var err error
		s.call(func() string {
			it, err = s.Provider.FetchOrchestrationItem(ctx, lockTimeout, 0, filter)
			if it == nil {
				return "orchestration fetch, no work"
			}
			s.batches[it.LockToken] = len(it.Item.Messages)
			return "orchestration fetch"
		})
		if it != nil || err != nil || !sleepUntil(ctx, deadline) {
			return it, err
		}
	}
}

// AckOrchestrationItem implements provider.Provider.
func (s *syncCounter) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []provider.Event, workerItems, orchestratorItems []provider.WorkItem, metadata provider.ExecutionMetadata, cancelled []provider.ScheduledActivityIdentifier) error {
	var err error
	s.call(func() string {
		before, fbefore := s.cfs.Counts(), s.cfs.Files()
		err = s.Provider.AckOrchestrationItem(ctx, lockToken, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelled)
		if err != nil {
			return "orchestration ack, failed"
		}
		d, fd := s.cfs.Counts().Sub(before), subFiles(s.cfs.Files(), fbefore)
		s.orch.add(d, fd)
		in := s.batches[lockToken]
		delete(s.batches, lockToken)
		label := fmt.Sprintf("orchestration ack: %s, %d message(s) in, %d item(s) out", turnPhase(historyDelta), in, len(workerItems)+len(orchestratorItems))
		if in == 1 && len(workerItems) == 1 && len(orchestratorItems) == 0 {
			switch turnPhase(historyDelta) {
			case phaseFirst:
				s.first.add(d, fd)
			case phaseMiddle:
				s.steady.add(d, fd)
			}
		}
		return label
	})
	return err
}

// AbandonOrchestrationItem implements provider.Provider.
func (s *syncCounter) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	var err error
	s.call(func() string {
		delete(s.batches, lockToken)
		err = s.Provider.AbandonOrchestrationItem(ctx, lockToken, delay, ignoreAttempt)
		return "orchestration abandon"
	})
	return err
}

// RenewOrchestrationItemLock implements provider.Provider.
func (s *syncCounter) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	var err error
	s.call(func() string {
		err = s.Provider.RenewOrchestrationItemLock(ctx, lockToken, extendFor)
		return "orchestration lock renewal"
	})
	return err
}

// EnqueueForOrchestrator implements provider.Provider.
func (s *syncCounter) EnqueueForOrchestrator(ctx context.Context, item provider.WorkItem, delay time.Duration) error {
	var err error
	s.call(func() string {
		err = s.Provider.EnqueueForOrchestrator(ctx, item, delay)
		return "client enqueue (" + item.Kind() + ")"
	})
	return err
}

// EnqueueForWorker implements provider.Provider.
func (s *syncCounter) EnqueueForWorker(ctx context.Context, item provider.WorkItem) error {
	var err error
	s.call(func() string {
		err = s.Provider.EnqueueForWorker(ctx, item)
		return "client enqueue for worker"
	})
	return err
}

// FetchWorkItem implements provider.Provider.
func (s *syncCounter) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *provider.SessionFetchConfig, tagFilter provider.TagFilter) (*provider.LockedWorkItem, error) {
	deadline := time.Now().Add(pollTimeout)
	for {
		var w *provider.LockedWorkItem
		var err error
		s.call(func() string {
			w, err = s.Provider.FetchWorkItem(ctx, lockTimeout, 0, session, tagFilter)
			if w == nil {
				return "work-item fetch, no work"
			}
			return "work-item fetch"
		})
		if w != nil || err != nil || !sleepUntil(ctx, deadline) {
			return w, err
		}
	}
}

// AckWorkItem implements provider.Provider.
func (s *syncCounter) AckWorkItem(ctx context.Context, token string, completion provider.WorkItem) error {
	var err error
	s.call(func() string {
		before, fbefore := s.cfs.Counts(), s.cfs.Files()
		err = s.Provider.AckWorkItem(ctx, token, completion)
		if err != nil {
			return "work-item ack, failed"
		}
		s.work.add(s.cfs.Counts().Sub(before), subFiles(s.cfs.Files(), fbefore))
		kind := "no completion"
		if completion != nil {
			kind = completion.Kind()
		}
		return "work-item ack (" + kind + " out)"
	})
	return err
}

// RenewWorkItemLock implements provider.Provider.
func (s *syncCounter) RenewWorkItemLock(ctx context.Context, token string, extendFor time.Duration) error {
	var err error
	s.call(func() string {
		err = s.Provider.RenewWorkItemLock(ctx, token, extendFor)
		return "work-item lock renewal"
	})
	return err
}

// AbandonWorkItem implements provider.Provider.
func (s *syncCounter) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	var err error
	s.call(func() string {
		err = s.Provider.AbandonWorkItem(ctx, token, delay, ignoreAttempt)
		return "work-item abandon"
	})
	return err
}

// sleepUntil sleeps one poll step; it reports false once deadline has
// passed or ctx is done.
func sleepUntil(ctx context.Context, deadline time.Time) bool {
	if !time.Now().Before(deadline) {
		return false
	}
	t := time.NewTimer(pollStep)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Turn phases.
const (
	phaseFirst  = "first turn"
	phaseMiddle = "steady-state turn"
	phaseFinal  = "final turn"
	phaseOnly   = "first and final turn"
)

// turnPhase classifies a turn by its history delta.
func turnPhase(delta []provider.Event) string {
	var first, final bool
	for _, e := range delta {
		if _, ok := e.Kind.(provider.OrchestrationStarted); ok {
			first = true
		}
		if isTerminal(e) {
			final = true
		}
	}
	switch {
	case first && final:
		return phaseOnly
	case first:
		return phaseFirst
	case final:
		return phaseFinal
	default:
		return phaseMiddle
	}
}

// backgroundEvery is how often runFsyncs runs a background round, as the
// provider's promote loop would; backgroundLabel is the class of its syncs.
const (
	backgroundEvery = 100 * time.Millisecond
	backgroundLabel = "background round: checkpoint, then promotion of recycled files (every 100 ms)"
)

// runFsyncs counts fsyncs of a durable happy-path workload (chains and one
// fan-out) run in one process with one dispatcher and one worker.
func runFsyncs(ctx context.Context, cfg Config, root string) (*FsyncResult, error) {
	sz := cfg.Sizes
	dir := filepath.Join(root, "fsyncs")
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("fsyncs: %w", err)
	}
	cfs := vfs.Counting(vfs.OS{})
	pfs := &preallocFS{CountingFS: cfs, raw: vfs.OS{}}
	// The background rounds (a checkpoint, then the promotion of recycled
	// files) run here, through the counter, so that their syncs are
	// attributed to them and never to a call they overlap.
	p, err := openProvider(ProviderDurofs, dir, openOptions{fs: pfs, sweepOff: true, bgOff: true})
	if err != nil {
		return nil, fmt.Errorf("fsyncs: %w", err)
	}
	defer p.Close()
	sc := newSyncCounter(p, cfs)

	var specs []workload.Spec
	for i := range sz.FsyncChains {
		s, err := workload.NewSpec(fmt.Sprintf("sync-chain-%d", i), workload.KindChain, sz.FsyncChainLength, i+1)
		if err != nil {
			return nil, fmt.Errorf("fsyncs: %w", err)
		}
		specs = append(specs, s)
	}
	s, err := workload.NewSpec("sync-fanout", workload.KindFanOut, sz.FsyncFanOut, 3)
	if err != nil {
		return nil, fmt.Errorf("fsyncs: %w", err)
	}
	specs = append(specs, s)
	base, fbase, pbase := cfs.Counts(), cfs.Files(), pfs.syncs.Load()
	stats := func() provider.LogStats {
		if lp, ok := p.(interface{ LogStats() provider.LogStats }); ok {
			return lp.LogStats()
		}
		return provider.LogStats{}
	}
	sbase := stats()
	for _, s := range specs {
		if err := workload.Start(ctx, sc, s); err != nil {
			return nil, fmt.Errorf("fsyncs: start: %w", err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bgDone := make(chan struct{})
	go func() {
		defer close(bgDone)
		t := time.NewTicker(backgroundEvery)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				sc.call(func() string {
					if cp, ok := p.(interface{ Checkpoint(context.Context) error }); ok {
						_ = cp.Checkpoint(rctx)
					}
					return backgroundLabel
				})
			}
		}
	}()
	rt := workload.NewRuntime(sc, workload.RuntimeOptions{Dispatchers: 1, Workers: 1, Logger: warnLogger(os.Stderr)})
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(rctx) }()
	actx, acancel := context.WithTimeout(ctx, sz.RunTimeout)
	err = workload.Await(actx, p, admin(p), specs, nil)
	acancel()
	cancel()
	if rerr := <-runErr; err == nil && rerr != nil {
		err = rerr
	}
	<-bgDone
	if err != nil {
		return nil, fmt.Errorf("fsyncs: run: %w", err)
	}
	rep, err := workload.Verify(ctx, p, admin(p), specs)
	if err != nil {
		return nil, fmt.Errorf("fsyncs: verify: %w", err)
	}
	if !rep.OK() {
		return nil, fmt.Errorf("fsyncs: the workload's result is wrong: %s", rep)
	}

	sc.mu.Lock()
	defer sc.mu.Unlock()
	total, last := cfs.Counts(), stats()
	res := &FsyncResult{
		Workload: fmt.Sprintf("%d chains × %d activities + 1 fan-out × %d, 1 process, 1 dispatcher + 1 worker, durofs Durable",
			sz.FsyncChains, sz.FsyncChainLength, sz.FsyncFanOut),
		OrchAcks: sc.orch, WorkAcks: sc.work,
		FirstTurn: sc.first, SteadyTurn: sc.steady,
		Total:         total.Sub(base),
		Files:         subFiles(cfs.Files(), fbase),
		Verify:        rep.String(),
		PreallocSyncs: pfs.syncs.Load() - pbase,
		GrowWaits:     last.GrowWaits - sbase.GrowWaits,
		RecycleSyncs:  last.RecycleSyncs - sbase.RecycleSyncs,
		CommitMode:    "write-ahead log",
	}
	res.OrchAcks.Label, res.WorkAcks.Label = "orchestration ack (all)", "work-item ack (all)"
	res.FirstTurn.Label = "orchestration ack, first turn of a chain (start in, 1 activity out)"
	res.SteadyTurn.Label = "orchestration ack, steady-state turn of a chain (1 completion in, 1 activity out)"
	res.Unattributed = res.Total.Sub(sc.counted)
	res.FilesUnattributed = subFiles(res.Files, sc.files)
	for _, l := range sc.order {
		res.Classes = append(res.Classes, *sc.classes[l])
	}
	return res, nil
}
