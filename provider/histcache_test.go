package provider

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
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
// read the first one must serve the second (the cache's check covers every
// byte of the prefix, not its length alone).
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
		evs := []Event{s, {EventID: 2, InstanceID: "a", ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "A", Input: input}}}
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
		h, err := p.Read(ctx, "a")
		if err != nil || len(h) != 2 {
			t.Fatalf("round %d: Read = %d events, %v", round, len(h), err)
		}
		if got := h[1].Kind.(ActivityScheduled).Input; got != input {
			t.Fatalf("round %d: the activity's input is %q, want %q", round, got, input)
		}
		if round == 0 {
			if _, err := adm.DeleteInstance(ctx, "a", true); err != nil {
				t.Fatal(err)
			}
		}
	}
}
