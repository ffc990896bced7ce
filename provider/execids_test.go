package provider

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestExecIDs(t *testing.T) {
	cases := []struct {
		name string
		add  []uint64
		json string
	}{
		{"empty", nil, `[]`},
		{"one", []uint64{1}, `[1]`},
		{"in order", []uint64{1, 2, 3, 4}, `[[1,4]]`},
		{"out of order, repeats", []uint64{3, 1, 2, 2, 7, 5, 0}, `[[1,3],5,7]`},
		{"a gap filled joins both runs", []uint64{1, 2, 4, 5, 3}, `[[1,5]]`},
		{"after a prune", []uint64{1498, 1499, 1500}, `[[1498,1500]]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := execIDsOf(c.add...)
			b, err := json.Marshal(s)
			if err != nil || string(b) != c.json {
				t.Fatalf("JSON = %s, %v; want %s", b, err, c.json)
			}
			want := slices.Compact(slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(c.add), func(id uint64) bool { return id == 0 }))))
			if got := s.Slice(); !slices.Equal(got, want) {
				t.Fatalf("Slice = %v; want %v", got, want)
			}
			if s.Len() != uint64(len(want)) {
				t.Errorf("Len = %d; want %d", s.Len(), len(want))
			}
			for id := uint64(0); id < 10; id++ {
				if s.Has(id) != slices.Contains(want, id) {
					t.Errorf("Has(%d) = %v", id, s.Has(id))
				}
			}
			if last := s.Last(); (len(want) == 0 && last != 0) || (len(want) > 0 && last != want[len(want)-1]) {
				t.Errorf("Last = %d; want the largest of %v", last, want)
			}
			var back execIDs
			if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.Slice(), want) {
				t.Errorf("round trip = %v, %v; want %v", back.Slice(), err, want)
			}
		})
	}
}

// TestExecIDsReadsEveryForm: the runs as written, a plain list of ids as
// format 6 wrote it (instance.json files and log records), null; and
// refuses what is neither.
func TestExecIDsReadsEveryForm(t *testing.T) {
	for in, want := range map[string][]uint64{
		`[1,2,3,5]`:           {1, 2, 3, 5},
		`[[1,3],5]`:           {1, 2, 3, 5},
		`[5,[1,3],[2,4]]`:     {1, 2, 3, 4, 5},
		`null`:                nil,
		`[]`:                  nil,
		`[[7,7]]`:             {7},
		` [ [ 1 , 2 ] , 4 ] `: {1, 2, 4},
	} {
		var s execIDs
		if err := json.Unmarshal([]byte(in), &s); err != nil || !slices.Equal(s.Slice(), want) {
			t.Errorf("%s: %v, %v; want %v", in, s.Slice(), err, want)
		}
	}
	for _, in := range []string{`{}`, `[0]`, `[[0,3]]`, `[[3,1]]`, `[[1,2,3]]`, `["1"]`, `[-1]`} {
		var s execIDs
		if err := json.Unmarshal([]byte(in), &s); err == nil {
			t.Errorf("%s: read as %v; want an error", in, s.Slice())
		}
	}
	var inf instanceFile
	if err := json.Unmarshal([]byte(`{"instance":"a","executions":[1,2,3]}`), &inf); err != nil || inf.Executions.String() != `[[1,3]]` {
		t.Errorf("a format-6 instance.json: %v, %v", inf.Executions, err)
	}
}

// TestExecIDsAddLeavesCopies: instanceFile values are copied and the copy
// changed (nf := *inf; nf.Executions.Add), so Add must not change the
// original's runs.
func TestExecIDsAddLeavesCopies(t *testing.T) {
	for _, id := range []uint64{4, 6, 9, 2} { // extends, joins, new run, before
		orig := execIDsOf(1, 2, 3, 5, 7)
		before := orig.String()
		cp := orig
		cp.Add(id)
		if orig.String() != before {
			t.Errorf("Add(%d) to a copy changed the original: %s, was %s", id, orig, before)
		}
	}
}

// canAckCost runs one instance through k executions (a start, then k-1
// continue-as-new turns, as an eternal orchestration does) and returns the
// bytes the k-th turn's ack appended to the write-ahead log and the size of
// instance.json afterwards.
func canAckCost(t *testing.T, k int) (walBytes int64, instSize int64) {
	t.Helper()
	dir := t.TempDir()
	// Segments large enough that the measured record is in the same one.
	p := openT(t, dir, Options{Durability: ProcessCrashSafe, SweepInterval: -1, CheckpointInterval: -1, SegmentSize: 64 << 20})
	ctx := context.Background()
	const inst = "eternal"
	v := "1.0.0"
	for n := 1; n <= k; n++ {
		var item WorkItem = startItem(inst)
		if n > 1 {
			item = ContinueAsNew{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, CarryForwardEvents: [][2]string{}}
		}
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, item, 0))
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch %d: %v %v", n, it, err)
		}
		ev := started(inst)
		ev.ExecutionID = uint64(n)
		before := p.wal.End()
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, uint64(n), []Event{ev}, nil, nil, md("TestOrch", v), nil))
		after := p.wal.End()
		if n == k {
			if before.Segment() != after.Segment() {
				t.Fatalf("the measured record crossed a segment boundary")
			}
			walBytes = int64(after.Offset()) - int64(before.Offset())
		}
	}
	fi, err := p.fs.Lstat(p.instFilePath(instanceKey(inst)))
	mustNoErr(t, err)
	return walBytes, fi.Size()
}

// TestContinueAsNewAckCostStaysFlat: an eternal orchestration's ack costs
// the same at its 1,500th execution as at its 10th. instance.json, which
// every ack writes whole into its log record and applies, listed every
// execution id (format 6): 1,319 log bytes per ack at execution 10, 7,707
// at 1,500; its executions are now one run ([[1,1500]]).
func TestContinueAsNewAckCostStaysFlat(t *testing.T) {
	small, large := 10, 1500
	ws, is := canAckCost(t, small)
	wl, il := canAckCost(t, large)
	t.Logf("execution %d: ack appended %d log bytes, instance.json %d bytes; execution %d: %d log bytes, instance.json %d bytes",
		small, ws, is, large, wl, il)
	if wl > ws+64 || il > is {
		t.Errorf("an ack of execution %d appends %d bytes to the log (instance.json %d), of execution %d %d (%d): the per-ack cost grows with the executions run",
			large, wl, il, small, ws, is)
	}
}

// TestExecIDsReadsOverlappingRunsAtOnce: runs out of order or overlapping
// (a damaged or hand-edited file) are merged, not added id by id: a run of
// a million million ids costs what any run costs.
func TestExecIDsReadsOverlappingRunsAtOnce(t *testing.T) {
	var s execIDs
	if err := json.Unmarshal([]byte(`[[5,10],[1,1000000000000],7,[1000000000002,1000000000003]]`), &s); err != nil {
		t.Fatal(err)
	}
	if got := s.String(); got != `[[1,1000000000000],[1000000000002,1000000000003]]` || s.Len() != 1000000000002 {
		t.Errorf("read as %s (%d ids)", got, s.Len())
	}
}
