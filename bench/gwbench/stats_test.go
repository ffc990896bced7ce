package gwbench

import (
	"strings"
	"testing"
	"time"

	"github.com/cschleiden/go-workflows/backend/metrics"
)

// TestTaskStats: series are kept by metric name and event or activity
// name (tags given to WithTags or to the call), and summarized in
// milliseconds with count, mean and percentiles.
func TestTaskStats(t *testing.T) {
	s := newTaskStats()
	act := s.WithTags(metrics.Tags{"activity": "Step", "other": "x"})
	for i := 1; i <= 100; i++ {
		act.Distribution("workflows.activity.task.time_in_queue", nil, float64(i))
	}
	s.Timing("workflows.workflow.task.processed", metrics.Tags{"event": "TimerFired"}, 1500*time.Microsecond)
	s.Counter("ignored", nil, 1)
	s.Gauge("ignored", nil, 1)
	var b strings.Builder
	s.write(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 series, got:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"workflows.activity.task.time_in_queue activity=Step ", "n=100 ", "mean=   50.5ms", "p50=   51.0", "p90=   91.0", "p99=  100.0", "max=  100.0"},
		{"workflows.workflow.task.processed event=TimerFired ", "n=1 ", "mean=    1.5ms", "max=    1.5"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}
