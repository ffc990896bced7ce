package provider

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/vfs"
)

// TestHistoryCacheServesWhatTheFileHolds: two processes take turns on one
// instance, each appending events; every fetch, served from the fetching
// process's history cache plus what was appended since it last read, equals
// a whole read of the file decoded afresh.
func TestHistoryCacheServesWhatTheFileHolds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog}
	procs := []*FSProvider{openT(t, dir, opts), openT(t, dir, opts)}
	ackThreeEvents(t, procs[0], "a")
	next := uint64(4)
	for turn := 0; turn < 12; turn++ {
		p := procs[turn%3%2] // 0, 1, 0, 0, 1, 0, ...: runs of both lengths
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil || it.Item.HistoryError != nil {
			t.Fatalf("turn %d: fetch = %+v, %v", turn, it, err)
		}
		scan, err := p.readCommittedHistory(instanceKey("a"), 1)
		mustNoErr(t, err)
		want := make([]Event, len(scan.Records))
		for i, r := range scan.Records {
			mustNoErr(t, want[i].UnmarshalJSON(r.Payload))
		}
		if !reflect.DeepEqual(it.Item.History, want) {
			t.Fatalf("turn %d: fetch served %d events, the file holds %d (or they differ)", turn, len(it.Item.History), len(want))
		}
		var evs []Event
		for range turn%3 + 1 {
			evs = append(evs, Event{EventID: next, InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26",
				Kind: ActivityScheduled{Name: fmt.Sprintf("act-%d", next), Input: "x"}})
			next++
		}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "go", Data: "1"}, 0))
	}
	if n := procs[0].hist.lru.Len() + procs[1].hist.lru.Len(); n != 2 {
		t.Errorf("%d cache entries in all, want one per process", n)
	}
}

// BenchmarkFetchLongHistory: fetch and abandon an instance with a history
// of n events: with the cache a fetch reads and decodes only what changed.
func BenchmarkFetchLongHistory(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			p := openT(b, b.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			mustNoErr(b, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				b.Fatal(it, err)
			}
			evs := []Event{started("a")}
			for i := 2; i <= n; i++ {
				evs = append(evs, Event{EventID: uint64(i), InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26",
					Kind: ActivityScheduled{Name: "A", Input: fmt.Sprint(i)}})
			}
			mustNoErr(b, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
			mustNoErr(b, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "go", Data: "1"}, 0))
			b.ResetTimer()
			for b.Loop() {
				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil || len(it.Item.History) != n {
					b.Fatal(it, err)
				}
				mustNoErr(b, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))
			}
		})
	}
}

// TestHistoryCacheAfterDeleteAndRecreate: an instance deleted and created
// again under the same id gets a history file of the same length whose
// bytes differ (here one activity input, "1" then "2"); a process that
// cached the first one must serve the second. The cache reads only what
// follows its mark, so nothing but the execution's generation (a new
// state.json, a new generation) tells the two files apart: keyed without
// it, the fetch serves input "1".
func TestHistoryCacheAfterDeleteAndRecreate(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	adm, _ := p.Admin()
	for round, input := range []string{"1", "2"} {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("round %d: fetch = %+v, %v", round, it, err)
		}
		s := started("a")
		s.TimestampMs = 1_000_000
		evs := []Event{s, {EventID: 2, InstanceID: "a", ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "A", Input: input}}}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
		// A fetch under the flock: read through the cache.
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "go", Data: "1"}, 0))
		it, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil || len(it.Item.History) != 2 {
			t.Fatalf("round %d: fetch = %+v, %v", round, it, err)
		}
		if got := it.Item.History[1].Kind.(ActivityScheduled).Input; got != input {
			t.Fatalf("round %d: the fetched activity's input is %q, want %q", round, got, input)
		}
		mustNoErr(t, p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true))
		if round == 0 {
			if _, err := adm.DeleteInstance(ctx, "a", true); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// historyReadFS counts the bytes read from history files through it.
type historyReadFS struct {
	vfs.FS
	read atomic.Int64
}

func isHistory(name string) bool { return filepath.Base(name) == "history.jsonl" }

func (f *historyReadFS) ReadFile(name string) ([]byte, error) {
	data, err := f.FS.ReadFile(name)
	if isHistory(name) {
		f.read.Add(int64(len(data)))
	}
	return data, err
}

func (f *historyReadFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || !isHistory(name) {
		return file, err
	}
	return historyReadFile{File: file, fs: f}, nil
}

type historyReadFile struct {
	vfs.File
	fs *historyReadFS
}

// Unwrap lets vfs.MapWords map the log's shared page through the wrapper.
func (f historyReadFile) Unwrap() vfs.File { return f.File }

func (f historyReadFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.fs.read.Add(int64(n))
	return n, err
}

func (f historyReadFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.read.Add(int64(n))
	return n, err
}

// TestTurnReadsOnlyNewHistory: a turn (fetch and ack) on an instance with a
// long history reads from its history file only what was appended since
// the process last read it - the fetch reads through the cache, the ack's
// validation uses the cached record ids and the mark at the end, and the
// apply appends at that mark - not the whole file, which cost every turn
// three whole reads.
func TestTurnReadsOnlyNewHistory(t *testing.T) {
	ctx := context.Background()
	hfs := &historyReadFS{FS: vfs.OS{}}
	p := openT(t, t.TempDir(), Options{fs: hfs, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem("a"), 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatal(it, err)
	}
	const n = 2000
	evs := []Event{started("a")}
	for i := 2; i <= n; i++ {
		evs = append(evs, Event{EventID: uint64(i), InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26",
			Kind: ActivityScheduled{Name: "A", Input: fmt.Sprint(i)}})
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
	fi, err := os.Stat(p.historyPath(instanceKey("a"), 1))
	mustNoErr(t, err)
	whole := fi.Size()

	next := uint64(n + 1)
	for turn := range 5 {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "go", Data: "1"}, 0))
		before := hfs.read.Load()
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil || len(it.Item.History) != int(next-1) {
			t.Fatalf("turn %d: fetch = %+v, %v", turn, it, err)
		}
		ev := Event{EventID: next, InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26",
			Kind: ActivityScheduled{Name: "A", Input: fmt.Sprint(next)}}
		next++
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, md("TestOrch", "1.0.0"), nil))
		read := hfs.read.Load() - before
		if turn == 0 {
			// The first fetch has no cache entry: it reads the file once.
			if read < whole || read >= 2*whole {
				t.Fatalf("turn 0 read %d bytes of a %d-byte history, want one whole read and little more", read, whole)
			}
			continue
		}
		// What the last turn appended (one short line) and the line ends
		// before the marks.
		if read > 512 {
			t.Fatalf("turn %d read %d bytes of a %d-byte history, want only what was appended since", turn, read, whole)
		}
	}
}

// TestAppendHistoryOffsetOnlySavesReading: the apply's append at the offset
// the committer read gives the same file whatever the offset says - right,
// unknown, too small, beyond the end, inside a line - and a redo of it
// changes nothing: the offset saves reading, a whole read decides.
func TestAppendHistoryOffsetOnlySavesReading(t *testing.T) {
	rec := func(id uint64) history.Record {
		return history.Record{ID: id, Epoch: 1, Payload: []byte(fmt.Sprintf(`{"event_id":%d}`, id))}
	}
	base := []history.Record{rec(1), rec(2), rec(3)}
	at3 := history.EncodedSize(base)
	at2 := history.EncodedSize(base[:2])
	cases := []struct {
		name string
		off  int64
	}{
		{"right", at3},
		{"unknown", 0},
		{"too small, at a line end", at2},
		{"beyond the end", at3 + 100},
		{"inside a line", at3 - 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := history.Open(vfs.OS{}, filepath.Join(t.TempDir(), "history.jsonl"))
			if _, err := h.AppendAt(0, base); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the apply, then a redo
				mustNoErr(t, appendHistory(h, 3, c.off, []history.Record{rec(4), rec(5)}))
				s, err := h.Read()
				mustNoErr(t, err)
				if len(s.Records) != 5 || s.Records[3].ID != 4 || s.Records[4].ID != 5 {
					t.Fatalf("history holds %d records after the append", len(s.Records))
				}
			}
		})
	}
}

// TestGWTaskReadsOnlyNewHistory: a go-workflows task's commit appends at
// the history size instance.json keeps (gwExec.HistoryBytes), so completing
// a task of a workflow with a long history reads nothing of it.
func TestGWTaskReadsOnlyNewHistory(t *testing.T) {
	ctx := context.Background()
	hfs := &historyReadFS{FS: vfs.OS{}}
	p := openT(t, t.TempDir(), Options{fs: hfs, SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
	ref := WorkflowRef{"wf", "e1"}
	mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: "default", Name: "W"}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task := gwFetchOf(t, p, "wf")
	var evs []WorkflowEvent
	for seq := int64(1); seq <= 2000; seq++ {
		evs = append(evs, gwEv(fmt.Sprintf("e%d", seq), "ActivityScheduled", seq))
	}
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive, Executed: evs}))
	fi, err := os.Stat(p.historyPath(instanceKey("wf"), 1))
	mustNoErr(t, err)
	if fi.Size() < 100_000 {
		t.Fatalf("history of %d bytes, want a long one", fi.Size())
	}
	seq := int64(2001)
	for turn := range 3 {
		mustNoErr(t, p.SendWorkflowEvent(ctx, "wf", "", gwEv(fmt.Sprintf("sig%d", turn), "SignalReceived", 0)))
		before := hfs.read.Load()
		task := gwFetchOf(t, p, "wf")
		mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
			Executed: []WorkflowEvent{gwEv(fmt.Sprintf("s%d", seq), "SignalReceived", seq)}}))
		seq++
		if read := hfs.read.Load() - before; read > 512 {
			t.Fatalf("turn %d read %d bytes of a %d-byte history, want only the line end before the append", turn, read, fi.Size())
		}
	}
	h, err := p.WorkflowHistory(ctx, ref, nil)
	mustNoErr(t, err)
	if len(h) != 2003 || h[2002].SequenceID != 2003 {
		t.Fatalf("history holds %d events", len(h))
	}
}
