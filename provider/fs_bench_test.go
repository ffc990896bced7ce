package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/vfs"
)

// BenchmarkTurn measures one orchestration turn on the happy path: fetch a
// batch of one message, ack with one history event, one activity and one
// orchestrator message; then the worker fetch and ack with a completion.
//
// Counted exactly through the vfs layer (vfs.Counting), it reports:
//
//   - fdatasyncs/ack and fdatasyncs/work-ack: file syncs on the ack's path.
//     vfs.Counting counts File.Sync and vfs.Datasync alike; the only one an
//     ack makes is the write-ahead log's group fdatasync, its commit point.
//   - dir-fsyncs/ack and dir-fsyncs/work-ack: directory fsyncs on the path
//     (the log's segment is created once, not per ack: none).
//   - ckpt-fsyncs/turn and ckpt-dir-fsyncs/turn: what one checkpoint run
//     after all b.N turns costs (fsyncs of every file and directory the
//     turns touched, then of the checkpoint file and its directory), per
//     turn. A checkpoint covers whatever committed since the last one: what
//     the turns share (the queue directories, instances/; an instance's
//     files, for turns of one instance) is synced once per checkpoint, so
//     the cost per turn falls as more turns share a checkpoint.
//   - files/turn: files created per turn, both fetches and acks included
//     (staged messages, temporary files of atomic replaces, claims...).
//
// The background checkpoint is off while turns run, so that its syncs are
// not counted against the acks; ProcessCrashSafe syncs nothing at all.
func BenchmarkTurn(b *testing.B) {
	for _, d := range []Durability{Durable, ProcessCrashSafe} {
		b.Run(d.String(), func(b *testing.B) {
			// The provider's default file system (vfs.NoFollow), counted.
			dir := b.TempDir()
			cfs := vfs.Counting(vfs.NoFollow(dir, vfs.Perm{}))
			p, err := Open(dir, Options{fs: cfs, Durability: d, SweepInterval: -1, CheckpointInterval: -1})
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
			var created int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				inst := fmt.Sprintf("bench-%d", i)
				files := cfs.Files().Creates
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
				created += cfs.Files().Creates - files
			}
			b.StopTimer()
			before := cfs.Counts()
			if err := p.checkpointOnce(ctx, true, true); err != nil {
				b.Fatal(err)
			}
			if recs, _, _, err := p.scanLog(); err != nil || len(recs) != 0 {
				b.Fatalf("the checkpoint left %d records (%v)", len(recs), err)
			}
			ckpt := cfs.Counts().Sub(before)
			n := float64(b.N)
			b.ReportMetric(float64(ackSyncs.FileSyncs)/n, "fdatasyncs/ack")
			b.ReportMetric(float64(ackSyncs.DirSyncs)/n, "dir-fsyncs/ack")
			b.ReportMetric(float64(wackSyncs.FileSyncs)/n, "fdatasyncs/work-ack")
			b.ReportMetric(float64(wackSyncs.DirSyncs)/n, "dir-fsyncs/work-ack")
			b.ReportMetric(float64(ckpt.FileSyncs)/n, "ckpt-fsyncs/turn")
			b.ReportMetric(float64(ckpt.DirSyncs)/n, "ckpt-dir-fsyncs/turn")
			b.ReportMetric(float64(created)/n, "files/turn")
		})
	}
}

func addCounts(a, b vfs.Counts) vfs.Counts {
	return vfs.Counts{FileSyncs: a.FileSyncs + b.FileSyncs, DirSyncs: a.DirSyncs + b.DirSyncs}
}
