package provider

import (
	"context"
	"testing"
)

// TestReadsFollowExecutionRecords: contract §2.15 - "read(instance)
// returns the events of the latest execution (MAX(execution_id) over
// execution records)" - and §2.4 step 4.1 - with an instance record, fetch
// uses its current_execution_id and loads that execution's history.
// AppendWithExecution (the contract's test/debug path, which, as in SQLite,
// creates no execution record) into a higher execution does not make Read
// or FetchOrchestrationItem switch to that record-less execution: they
// agree with LatestExecutionID, ListExecutions and GetInstanceInfo, and
// ReadWithExecution still reads what was appended.
func TestReadsFollowExecutionRecords(t *testing.T) {
	ctx := context.Background()
	p := openManualQuiet(t)
	createInstance(t, p, "dbg")
	ev := started("dbg")
	ev.ExecutionID, ev.Kind = 2, ExternalEvent{Name: "x", Data: "y"}
	mustNoErr(t, p.AppendWithExecution(ctx, "dbg", 2, []Event{ev}))

	latest, err := p.LatestExecutionID(ctx, "dbg")
	mustNoErr(t, err)
	info, err := p.GetInstanceInfo(ctx, "dbg")
	mustNoErr(t, err)
	if latest != 1 || info.CurrentExecutionID != 1 {
		t.Fatalf("LatestExecutionID %d, current execution %d; want 1 (execution 2 has no record)", latest, info.CurrentExecutionID)
	}
	want, err := p.ReadHistoryWithExecutionID(ctx, "dbg", latest)
	mustNoErr(t, err)
	for name, read := range map[string]func() ([]Event, error){
		"Read":        func() ([]Event, error) { return p.Read(ctx, "dbg") },
		"ReadHistory": func() ([]Event, error) { return p.ReadHistory(ctx, "dbg") },
	} {
		got, err := read()
		mustNoErr(t, err)
		if len(got) != len(want) || got[0].Kind.Type() != want[0].Kind.Type() {
			t.Errorf("%s returns %d events (first %s); LatestExecutionID is %d, whose history has %d events (first %s)",
				name, len(got), got[0].Kind.Type(), latest, len(want), want[0].Kind.Type())
		}
	}
	if h, err := p.ReadWithExecution(ctx, "dbg", 2); err != nil || len(h) != 1 || h[0].Kind.Type() != "ExternalEvent" {
		t.Errorf("ReadWithExecution(2) = %d events, %v; want the appended event", len(h), err)
	}
	it := pokeAndFetch(t, p, "dbg")
	if it.Item.ExecutionID != info.CurrentExecutionID {
		t.Errorf("fetch reports execution %d; the instance record's current execution is %d", it.Item.ExecutionID, info.CurrentExecutionID)
	}
	if startedIn(it.Item.History) == nil {
		t.Errorf("fetch hands out a history without OrchestrationStarted (%d events)", len(it.Item.History))
	}
}
