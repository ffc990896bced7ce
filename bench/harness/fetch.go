package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver of the reference's unsynced set-up

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
)

// Fetch cases.
const (
	// FetchVisible: every queued message is visible.
	FetchVisible = "visible"
	// FetchDelayed: the queued messages are delayed (visible in 24 h),
	// enqueued before a handful of visible ones.
	FetchDelayed = "delayed"
)

// fetchDelay is the delay of the delayed case's messages.
const fetchDelay = 24 * time.Hour

// FetchCell is one provider × case × queue size.
type FetchCell struct {
	// Provider is ProviderDurofs or ProviderSQLite; Case is FetchVisible or
	// FetchDelayed.
	Provider, Case string
	// Queued is the number of queued orchestrator messages (N distinct
	// instances; in the delayed case N delayed plus Visible visible).
	Queued, Visible int
	// Setup says how the queue was filled and how long it took.
	Setup     string
	SetupTime time.Duration
	// Open is provider Open in the measuring process; FirstFetch its first
	// fetch (durofs builds its queue index); medians over runs.
	Open, FirstFetch time.Duration
	// P50, P90, P99 and Max are over the measured fetches of all runs;
	// AbandonP50 over the abandons between them; RunP50s is each run's p50.
	P50, P90, P99, Max, AbandonP50 time.Duration
	RunP50s                        []time.Duration
	// Samples is the number of measured fetches; Instances how many
	// distinct instances they returned.
	Samples, Instances int
	// MaxRSSKiB is the measuring process's peak RSS.
	MaxRSSKiB int64
}

// FetchResult is the fetch section's result.
type FetchResult struct {
	// Method explains what was timed.
	Method string
	Cells  []FetchCell
}

// Cell returns a cell or nil.
func (f *FetchResult) Cell(prov, fcase string, queued int) *FetchCell {
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Provider == prov && c.Case == fcase && c.Queued == queued {
			return c
		}
	}
	return nil
}

// fetchMethod explains the measurement (printed with the table).
const fetchMethod = "FetchOrchestrationItem with pollTimeout 0, each followed by " +
	"AbandonOrchestrationItem(delay 0, ignoreAttempt) of the same item, so the queue keeps exactly " +
	"its N messages and its visible set between fetches (an ack would shrink the visible set or, " +
	"with a refill, time a different instance's cold first fetch each time). " +
	"Each fetch returns the oldest visible instance's batch of one message; only the fetch is timed. " +
	"Every message targets its own instance; the delayed case enqueues the N delayed messages first, " +
	"then the visible ones, as timers scheduled long ago ahead of new work. " +
	"After the (unsynced) set-up the harness calls sync(2), then measures in fresh processes on the Durable provider."

// runFetch measures fetch latency for every provider, case and queue size.
func runFetch(ctx context.Context, cfg Config, root string) (*FetchResult, error) {
	sz := cfg.Sizes
	res := &FetchResult{Method: fetchMethod}
	for _, fcase := range []string{FetchVisible, FetchDelayed} {
		for _, n := range sz.FetchQueued {
			for _, prov := range cfg.Providers {
				dir := filepath.Join(root, fmt.Sprintf("fetch-%s-%s-%d", prov, fcase, n))
				c, err := fetchCell(ctx, cfg, prov, fcase, n, dir)
				if err != nil {
					return nil, fmt.Errorf("fetch %s %s %d: %w", prov, fcase, n, err)
				}
				res.Cells = append(res.Cells, c)
				cfg.logf("  fetch %-6s %-7s N=%-6d p50 %v p99 %v (first fetch %v, open %v, set-up %v)",
					prov, fcase, n, c.P50, c.P99, c.FirstFetch.Round(time.Microsecond), c.Open.Round(time.Microsecond), c.SetupTime.Round(time.Millisecond))
				if err := removeRunDir(cfg, dir); err != nil {
					return nil, fmt.Errorf("fetch: %w", err)
				}
			}
		}
	}
	return res, nil
}

// fetchCell prepares one queue and measures it in a child process.
func fetchCell(ctx context.Context, cfg Config, prov, fcase string, n int, dir string) (FetchCell, error) {
	sz := cfg.Sizes
	c := FetchCell{Provider: prov, Case: fcase, Queued: n, Visible: n}
	if fcase == FetchDelayed {
		c.Visible = sz.FetchVisible
	}
	if err := os.RemoveAll(dir); err != nil {
		return c, err
	}
	var items []queued
	var err error
	if fcase == FetchDelayed {
		items, err = startItems(items, "dly", n, fetchDelay)
		if err == nil {
			items, err = startItems(items, "vis", sz.FetchVisible, 0)
		}
	} else {
		items, err = startItems(items, "vis", n, 0)
	}
	if err != nil {
		return c, err
	}
	t := time.Now()
	setup, err := fillQueue(ctx, prov, dir, items)
	if err != nil {
		return c, fmt.Errorf("set-up: %w", err)
	}
	c.SetupTime, c.Setup = time.Since(t), setup
	flushAll() // the unsynced set-up's write-back must not run during the measurement

	// Several processes, one after the other: the machine is shared, and a
	// single process's figures drift by tens of percent.
	var all, abandons []int64
	var opens, firsts []time.Duration
	for range cfg.Runs {
		f, rss, err := fetchChild(ctx, cfg, prov, dir)
		if err != nil {
			return c, err
		}
		all, abandons = append(all, f.FetchNs...), append(abandons, f.AbandonNs...)
		opens, firsts = append(opens, time.Duration(f.OpenNs)), append(firsts, time.Duration(f.FirstFetchNs))
		c.RunP50s = append(c.RunP50s, percentile(f.FetchNs, 0.5))
		c.MaxRSSKiB = max(c.MaxRSSKiB, rss)
		c.Instances = max(c.Instances, f.Instances)
	}
	c.Open, c.FirstFetch = durationsMedian(opens), durationsMedian(firsts)
	c.P50, c.P90, c.P99 = percentile(all, 0.50), percentile(all, 0.90), percentile(all, 0.99)
	c.Max = percentile(all, 1)
	c.AbandonP50 = percentile(abandons, 0.50)
	c.Samples = len(all)
	return c, nil
}

// fetchChild runs one fetch child on a prepared queue.
func fetchChild(ctx context.Context, cfg Config, prov, dir string) (*fetchResult, int64, error) {
	sz := cfg.Sizes
	ch, err := startChild(cfg, roleFetch, "--provider", prov, "--dir", dir,
		"--iters", strconv.Itoa(sz.FetchIters), "--warmup", strconv.Itoa(sz.FetchWarmup))
	if err != nil {
		return nil, 0, err
	}
	defer ch.kill()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	m, err := ch.expect(rctx, msgResult)
	if err != nil {
		return nil, 0, err
	}
	if err := ch.wait(30 * time.Second); err != nil {
		return nil, 0, err
	}
	f := m.Fetch
	if f == nil || len(f.FetchNs) == 0 {
		return nil, 0, errors.New("the fetch child measured nothing")
	}
	for _, inst := range f.InstanceSample {
		if !strings.HasPrefix(inst, "vis-") {
			return nil, 0, fmt.Errorf("fetched %q, which is not a visible message's instance", inst)
		}
	}
	return f, ch.maxRSSKiB, nil
}

// queued is one message to enqueue.
type queued struct {
	item  provider.StartOrchestration
	delay time.Duration
}

// startItems appends n starts of distinct chain instances prefix-<i>.
func startItems(out []queued, prefix string, n int, delay time.Duration) ([]queued, error) {
	for i := range n {
		s, err := workload.NewSpec(fmt.Sprintf("%s-%07d", prefix, i), workload.KindChain, 1, i)
		if err != nil {
			return nil, err
		}
		out = append(out, queued{item: workload.StartItem(s), delay: delay})
	}
	return out, nil
}

// fillQueue enqueues items in order on a fresh provider directory without
// fsyncs, and says how. durofs: EnqueueForOrchestrator in ProcessCrashSafe
// mode (the files are the same as in Durable mode, only not fsynced);
// SQLite: the reference's own INSERT in one transaction with
// synchronous=OFF.
func fillQueue(ctx context.Context, prov, dir string, items []queued) (string, error) {
	switch prov {
	case ProviderDurofs:
		p, err := openProvider(prov, dir, openOptions{noSync: true, sweepOff: true})
		if err != nil {
			return "", err
		}
		defer p.Close()
		// The delayed messages go first, then the visible ones (message
		// names increase within a process), each group by a few goroutines.
		i := 0
		for i < len(items) {
			j := i
			for j < len(items) && items[j].delay == items[i].delay {
				j++
			}
			if err := enqueueParallel(ctx, p, items[i:j], 4); err != nil {
				return "", err
			}
			i = j
		}
		if err := p.Close(); err != nil {
			return "", err
		}
		return "durofs ProcessCrashSafe enqueues, then reopened Durable", nil
	case ProviderSQLite:
		p, err := openProvider(prov, dir, openOptions{})
		if err != nil {
			return "", err
		}
		if err := p.Close(); err != nil {
			return "", err
		}
		if err := sqliteBulkEnqueue(ctx, filepath.Join(dir, sqliteFile), items); err != nil {
			return "", err
		}
		return "SQLite: one INSERT transaction with synchronous=OFF (the reference's own INSERT statement), then reopened FULL", nil
	}
	return "", fmt.Errorf("unknown provider %q", prov)
}

// enqueueParallel enqueues items with k goroutines.
func enqueueParallel(ctx context.Context, p provider.Provider, items []queued, k int) error {
	var wg sync.WaitGroup
	errs := make([]error, k)
	for g := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(items); i += k {
				if err := p.EnqueueForOrchestrator(ctx, items[i].item, items[i].delay); err != nil {
					errs[g] = fmt.Errorf("enqueue %s: %w", items[i].item.Instance, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sqliteBulkEnqueue inserts items into the reference's orchestrator queue
// exactly as its EnqueueForOrchestrator does (same columns and values), in
// one unsynced transaction, and checks the count.
func sqliteBulkEnqueue(ctx context.Context, path string, items []queued) error {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("bulk enqueue: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk enqueue: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var before int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM orchestrator_queue`).Scan(&before); err != nil {
		return fmt.Errorf("bulk enqueue: %w", err)
	}
	st, err := tx.PrepareContext(ctx, `INSERT INTO orchestrator_queue (instance_id, work_item, visible_at) VALUES (?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("bulk enqueue (has the reference's schema changed?): %w", err)
	}
	defer st.Close()
	now := time.Now().UnixMilli()
	for _, q := range items {
		data, err := provider.MarshalWorkItem(q.item)
		if err != nil {
			return fmt.Errorf("bulk enqueue: %w", err)
		}
		if _, err := st.ExecContext(ctx, provider.TargetInstance(q.item), string(data), now+q.delay.Milliseconds()); err != nil {
			return fmt.Errorf("bulk enqueue: %w", err)
		}
	}
	var after int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM orchestrator_queue`).Scan(&after); err != nil {
		return fmt.Errorf("bulk enqueue: %w", err)
	}
	if after-before != len(items) {
		return fmt.Errorf("bulk enqueue: %d rows added, want %d", after-before, len(items))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bulk enqueue: %w", err)
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("bulk enqueue: checkpoint: %w", err)
	}
	return nil
}
