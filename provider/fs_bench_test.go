package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// BenchmarkTurn measures one durable orchestration turn on the happy path:
// fetch a batch of one message, ack with one history event, one activity and
// one orchestrator message; then the worker fetch and ack with a completion.
// It reports fsyncs (files and directories) per orchestration ack and per
// work ack, counted exactly through the vfs layer.
func BenchmarkTurn(b *testing.B) {
	for _, d := range []Durability{Durable, ProcessCrashSafe} {
		b.Run(d.String(), func(b *testing.B) {
			// The provider's default file system (vfs.NoFollow), counted.
			dir := b.TempDir()
			cfs := vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))
			p, err := Open(dir, Options{FS: cfs, Durability: d, SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if err := p.EnqueueForOrchestrator(ctx, startItem(fmt.Sprintf("bench-%d", i)), 0); err != nil {
					b.Fatal(err)
				}
			}
			var ackSyncs, wackSyncs vfs.Counts
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				inst := fmt.Sprintf("bench-%d", i)
				it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil)
				if err != nil || it == nil {
					b.Fatal(i, it, err)
				}
				before := cfs.Counts()
				err = p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(inst)},
					[]WorkItem{ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}},
					[]WorkItem{ExternalRaised{Instance: inst, Name: "e", Data: "d"}}, md("TestOrch", "1.0.0"), nil)
				if err != nil {
					b.Fatal(err)
				}
				ackSyncs = addCounts(ackSyncs, cfs.Counts().Sub(before))
				w, err := p.FetchWorkItem(ctx, 30*time.Second, time.Second, nil, DefaultOnlyTags())
				if err != nil || w == nil {
					b.Fatal(w, err)
				}
				before = cfs.Counts()
				if err := p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "r"}); err != nil {
					b.Fatal(err)
				}
				wackSyncs = addCounts(wackSyncs, cfs.Counts().Sub(before))
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(ackSyncs.FileSyncs)/n, "file-fsyncs/ack")
			b.ReportMetric(float64(ackSyncs.DirSyncs)/n, "dir-fsyncs/ack")
			b.ReportMetric(float64(wackSyncs.FileSyncs)/n, "file-fsyncs/work-ack")
			b.ReportMetric(float64(wackSyncs.DirSyncs)/n, "dir-fsyncs/work-ack")
		})
	}
}

func addCounts(a, b vfs.Counts) vfs.Counts {
	return vfs.Counts{FileSyncs: a.FileSyncs + b.FileSyncs, DirSyncs: a.DirSyncs + b.DirSyncs}
}
