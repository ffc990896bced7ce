package provider

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDeleteInstance measures DeleteInstance of one root instance with
// two sub-orchestrations (three instances, one tree; the root's history
// schedules both, so the deletion reads it: unstartedChildren) among n other
// (completed, unrelated) instances on disk: what a deletion and its tree
// query cost as the directory grows. n is 1,000 unless
// DUROFS_BENCH_DELETE_AMONG sets it (BENCHMARKS.md reports 100,000):
//
//	DUROFS_BENCH_DELETE_AMONG=100000 go test -run XXX -bench DeleteInstance -benchtime 20x ./provider/
//
// The n instances are copies of one created through the API (their files
// as an ack writes them, instance.json naming each copy), so that setting
// up 100,000 takes seconds; each iteration creates its tree through the
// API with the timer stopped. ProcessCrashSafe: the deletion's one log
// record is not synced, so the figure is the deletion's own work.
func BenchmarkDeleteInstance(b *testing.B) {
	n := 1000
	if s := os.Getenv("DUROFS_BENCH_DELETE_AMONG"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("DUROFS_BENCH_DELETE_AMONG=%q: want a positive number", s)
		}
		n = v
	}
	dir := b.TempDir()
	p, err := Open(dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	benchComplete(b, p, "template", nil)
	if err := cloneInstances(p, "template", "other-", n); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		root := fmt.Sprintf("root-%d", i)
		benchComplete(b, p, root, nil, root+"::c1", root+"::c2")
		benchComplete(b, p, root+"::c1", &root)
		benchComplete(b, p, root+"::c2", &root)
		b.StartTimer()
		res, err := p.DeleteInstance(ctx, root, false)
		if err != nil || res.InstancesDeleted != 3 {
			b.Fatalf("DeleteInstance(%s) = %+v, %v; want 3 instances deleted", root, res, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "instances-on-disk")
}

// benchComplete creates a completed instance through the API, a child of
// parent if parent is set, whose history schedules and completes kids as
// sub-orchestrations.
func benchComplete(tb testing.TB, p *FSProvider, inst string, parent *string, kids ...string) {
	tb.Helper()
	ctx := context.Background()
	v := "1.0.0"
	if err := p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}, 0); err != nil {
		tb.Fatal(err)
	}
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != inst {
		tb.Fatalf("fetch %s: %+v %v", inst, it, err)
	}
	st, out := "Completed", `"ok"`
	m := md("TestOrch", "1.0.0")
	m.Status, m.Output, m.ParentInstanceID = &st, &out, parent
	s := started(inst)
	events := []Event{s}
	ev := func(k EventKind) {
		events = append(events, Event{EventID: uint64(len(events) + 1), InstanceID: inst, ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: k})
	}
	for _, kid := range kids {
		ev(SubOrchestrationScheduled{Name: "TestOrch", Instance: kid, Input: "{}"})
		ev(SubOrchestrationCompleted{Result: `"ok"`})
	}
	ev(OrchestrationCompleted{Output: out})
	if err := p.AckOrchestrationItem(ctx, it.LockToken, 1, events, nil, nil, m, nil); err != nil {
		tb.Fatal(err)
	}
}

// cloneInstances copies the directory of instance tmpl (a completed root
// instance, applied and unlocked) n times as instances prefix0..prefix<n-1>,
// each instance.json naming its copy: test setup of a large directory
// without n acks. The copies have no queued messages and no log records.
func cloneInstances(p *FSProvider, tmpl, prefix string, n int) error {
	src := p.instDir(instanceKey(tmpl))
	var files []string
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, path)
		files = append(files, rel)
		return err
	})
	if err != nil {
		return err
	}
	contents := map[string][]byte{}
	for _, f := range files {
		if contents[f], err = os.ReadFile(filepath.Join(src, f)); err != nil {
			return err
		}
	}
	old := []byte(`"instance":"` + tmpl + `"`)
	for i := range n {
		id := prefix + strconv.Itoa(i)
		dst := p.instDir(instanceKey(id))
		for _, f := range files {
			data := contents[f]
			if f == "instance.json" {
				data = bytes.Replace(data, old, []byte(`"instance":"`+id+`"`), 1)
			}
			path := filepath.Join(dst, f)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}
