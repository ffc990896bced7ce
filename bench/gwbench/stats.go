package gwbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/history"
	"github.com/cschleiden/go-workflows/backend/metrics"
	"github.com/cschleiden/go-workflows/core"
	"github.com/cschleiden/go-workflows/workflow"
)

// WorkerStatsEnv names the environment variable that makes every worker
// process of a multi-process run write a summary of go-workflows' own task
// metrics - how long each workflow and activity task waited in its queue
// (time_in_queue: from its first event to its fetch) and how long it took
// to process - to "<value>-<store>-<worker name>.txt".
const WorkerStatsEnv = "GWBENCH_WORKER_STATS"

// taskStats is a metrics.Client that keeps every distribution and timing
// go-workflows records, by name and event or activity name.
type taskStats struct {
	mu   *sync.Mutex
	vals map[string][]float64 // milliseconds
	tags metrics.Tags
}

func newTaskStats() *taskStats {
	return &taskStats{mu: new(sync.Mutex), vals: map[string][]float64{}}
}

func (s *taskStats) key(name string, tags metrics.Tags) string {
	for _, t := range []metrics.Tags{s.tags, tags} {
		for _, k := range []string{"event", "activity"} {
			if v, ok := t[k]; ok {
				name += " " + k + "=" + v
			}
		}
	}
	return name
}

func (s *taskStats) add(name string, tags metrics.Tags, ms float64) {
	k := s.key(name, tags)
	s.mu.Lock()
	s.vals[k] = append(s.vals[k], ms)
	s.mu.Unlock()
}

// Counter implements metrics.Client (counters are not kept).
func (s *taskStats) Counter(string, metrics.Tags, int64) {}

// Gauge implements metrics.Client (gauges are not kept).
func (s *taskStats) Gauge(string, metrics.Tags, int64) {}

// Distribution implements metrics.Client.
func (s *taskStats) Distribution(name string, tags metrics.Tags, v float64) { s.add(name, tags, v) }

// Timing implements metrics.Client.
func (s *taskStats) Timing(name string, tags metrics.Tags, d time.Duration) {
	s.add(name, tags, float64(d)/float64(time.Millisecond))
}

// WithTags implements metrics.Client.
func (s *taskStats) WithTags(tags metrics.Tags) metrics.Client {
	merged := metrics.Tags{}
	for _, t := range []metrics.Tags{s.tags, tags} {
		for k, v := range t {
			merged[k] = v
		}
	}
	return &taskStats{mu: s.mu, vals: s.vals, tags: merged}
}

// writeStats writes stats to "<prefix>-<store>-<worker>.txt", store being
// the base name of the measurement's directory.
func writeStats(stats *taskStats, prefix, dir, worker string) {
	f, err := os.Create(fmt.Sprintf("%s-%s-%s.txt", prefix, filepath.Base(dir), worker))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwbench:", err)
		return
	}
	stats.write(f)
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "gwbench:", err)
	}
}

// write prints count, mean and percentiles (ms) of every series.
func (s *taskStats) write(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.vals))
	for k := range s.vals {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := slices.Clone(s.vals[k])
		slices.Sort(v)
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		q := func(f float64) float64 { return v[min(len(v)-1, int(f*float64(len(v))))] }
		fmt.Fprintf(w, "%-70s n=%-6d mean=%7.1fms p50=%7.1f p90=%7.1f p99=%7.1f max=%7.1f\n",
			k, len(v), sum/float64(len(v)), q(0.5), q(0.9), q(0.99), v[len(v)-1])
	}
}

// timedBackend records how long the backend calls a worker makes take, as
// "backend.<call>" series of its taskStats (gets: only those that returned
// a task).
type timedBackend struct {
	backend.Backend
	stats *taskStats
}

func (b timedBackend) since(name string, start time.Time) {
	b.stats.add("backend."+name, nil, float64(time.Since(start))/float64(time.Millisecond))
}

// GetWorkflowTask implements backend.Backend.
func (b timedBackend) GetWorkflowTask(ctx context.Context, queues []workflow.Queue) (*backend.WorkflowTask, error) {
	start := time.Now()
	t, err := b.Backend.GetWorkflowTask(ctx, queues)
	if t != nil {
		b.since("GetWorkflowTask", start)
	}
	return t, err
}

// CompleteWorkflowTask implements backend.Backend.
func (b timedBackend) CompleteWorkflowTask(ctx context.Context, task *backend.WorkflowTask, state core.WorkflowInstanceState,
	executed, activities, timers []*history.Event, events []*history.WorkflowEvent) error {
	defer b.since("CompleteWorkflowTask", time.Now())
	return b.Backend.CompleteWorkflowTask(ctx, task, state, executed, activities, timers, events)
}

// GetActivityTask implements backend.Backend.
func (b timedBackend) GetActivityTask(ctx context.Context, queues []workflow.Queue) (*backend.ActivityTask, error) {
	start := time.Now()
	t, err := b.Backend.GetActivityTask(ctx, queues)
	if t != nil {
		b.since("GetActivityTask", start)
	}
	return t, err
}

// CompleteActivityTask implements backend.Backend.
func (b timedBackend) CompleteActivityTask(ctx context.Context, task *backend.ActivityTask, result *history.Event) error {
	defer b.since("CompleteActivityTask", time.Now())
	return b.Backend.CompleteActivityTask(ctx, task, result)
}

// GetWorkflowInstanceHistory implements backend.Backend (go-workflows'
// executor calls it when a task's history is ahead of its cached state).
func (b timedBackend) GetWorkflowInstanceHistory(ctx context.Context, instance *workflow.Instance, lastSequenceID *int64) ([]*history.Event, error) {
	defer b.since("GetWorkflowInstanceHistory", time.Now())
	return b.Backend.GetWorkflowInstanceHistory(ctx, instance, lastSequenceID)
}
