package workload

import (
	"reflect"
	"testing"

	"github.com/durofs/durofs/provider"
)

// types lists the event types of evs.
func types(evs []provider.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Kind.Type()
	}
	return out
}

// checkIDs asserts that delta's ids continue from first, one by one.
func checkIDs(t *testing.T, delta []provider.Event, first uint64) {
	t.Helper()
	for i, e := range delta {
		if e.EventID != first+uint64(i) {
			t.Fatalf("delta ids %v: want contiguous from %d", ids(delta), first)
		}
	}
}

func ids(evs []provider.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.EventID
	}
	return out
}

func item(inst string, exec uint64, hist []provider.Event, msgs ...provider.WorkItem) provider.OrchestrationItem {
	return provider.OrchestrationItem{Instance: inst, ExecutionID: exec, History: hist, Messages: msgs}
}

func TestDecideChain(t *testing.T) {
	s, _ := NewSpec("c", KindChain, 2, 1)
	t1 := decide(item("c", 1, nil, StartItem(s)), 1000)
	if got := types(t1.delta); !reflect.DeepEqual(got, []string{"OrchestrationStarted", "ActivityScheduled"}) {
		t.Fatalf("turn 1 delta %v", got)
	}
	checkIDs(t, t1.delta, 1)
	md := t1.metadata
	if md.OrchestrationName == nil || *md.OrchestrationName != OrchChain || md.OrchestrationVersion == nil ||
		md.PinnedDuroxideVersion == nil || *md.PinnedDuroxideVersion != pinnedVersion || md.Status != nil {
		t.Fatalf("turn 1 metadata %+v", md)
	}
	want := provider.ActivityExecute{Instance: "c", ExecutionID: 1, ID: 2, Name: "Step", Input: "1"}
	if len(t1.worker) != 1 || t1.worker[0] != want {
		t.Fatalf("turn 1 worker items %+v", t1.worker)
	}

	h := t1.delta
	t2 := decide(item("c", 1, h, provider.ActivityCompleted{Instance: "c", ExecutionID: 1, ID: 2, Result: "38"}), 2000)
	if got := types(t2.delta); !reflect.DeepEqual(got, []string{"ActivityCompleted", "ActivityScheduled"}) {
		t.Fatalf("turn 2 delta %v", got)
	}
	checkIDs(t, t2.delta, 3)
	if src := t2.delta[0].SourceEventID; src == nil || *src != 2 {
		t.Fatalf("completion source %v", src)
	}
	if t2.metadata.OrchestrationName != nil {
		t.Error("name sent again after the first turn")
	}

	h = append(h, t2.delta...)
	msg := provider.ActivityCompleted{Instance: "c", ExecutionID: 1, ID: 4, Result: "1185"}
	stale := provider.ActivityCompleted{Instance: "c", ExecutionID: 7, ID: 4, Result: "nope"}
	dup := provider.ActivityCompleted{Instance: "c", ExecutionID: 1, ID: 2, Result: "again"}
	t3 := decide(item("c", 1, h, stale, msg, dup), 3000)
	if got := types(t3.delta); !reflect.DeepEqual(got, []string{"ActivityCompleted", "OrchestrationCompleted"}) {
		t.Fatalf("turn 3 delta %v", got)
	}
	checkIDs(t, t3.delta, 5)
	if t3.skipped != 2 || t3.ended != StatusCompleted || *t3.metadata.Status != StatusCompleted || *t3.metadata.Output != s.ExpectOutput {
		t.Fatalf("turn 3: skipped %d, ended %q, metadata %+v", t3.skipped, t3.ended, t3.metadata)
	}

	// Replay is a pure function of its input.
	if again := decide(item("c", 1, h, stale, msg, dup), 3000); !reflect.DeepEqual(again, t3) {
		t.Fatal("decide is not deterministic")
	}

	// Late messages for the ended execution are consumed without effect.
	h = append(h, t3.delta...)
	t4 := decide(item("c", 1, h, provider.ExternalRaised{Instance: "c", Name: "x"}), 4000)
	if len(t4.delta) != 0 || t4.skipped != 1 || t4.metadata.Status != nil {
		t.Fatalf("turn on an ended execution: %+v", t4)
	}
}

func TestDecideContinueAsNew(t *testing.T) {
	s, _ := NewSpec("k", KindContinueAsNew, 1, 0)
	t1 := decide(item("k", 1, nil, StartItem(s)), 1)
	h := t1.delta
	t2 := decide(item("k", 1, h, provider.ActivityCompleted{Instance: "k", ExecutionID: 1, ID: 2, Result: "x"}), 2)
	if got := types(t2.delta); !reflect.DeepEqual(got, []string{"ActivityCompleted", "OrchestrationContinuedAsNew"}) {
		t.Fatalf("delta %v", got)
	}
	if *t2.metadata.Status != "ContinuedAsNew" || *t2.metadata.Output != "0" || t2.notify != nil {
		t.Fatalf("metadata %+v", t2.metadata)
	}
	can, ok := t2.orchItems[0].(provider.ContinueAsNew)
	if !ok || can.Input != "0" || can.Orchestration != OrchContinueAsNew || can.CarryForwardEvents == nil {
		t.Fatalf("orchestrator items %+v", t2.orchItems)
	}

	// The fetch of the ContinueAsNew still reports execution 1 and its history.
	h = append(h, t2.delta...)
	late := provider.ActivityCompleted{Instance: "k", ExecutionID: 1, ID: 2, Result: "late"}
	t3 := decide(item("k", 1, h, late, can), 3)
	if t3.execID != 2 {
		t.Fatalf("new execution id %d", t3.execID)
	}
	if got := types(t3.delta); !reflect.DeepEqual(got, []string{"OrchestrationStarted", "ActivityScheduled"}) {
		t.Fatalf("delta %v", got)
	}
	checkIDs(t, t3.delta, 1)
	if t3.skipped != 1 || t3.metadata.OrchestrationName == nil || t3.worker[0].(provider.ActivityExecute).ExecutionID != 2 {
		t.Fatalf("turn %+v", t3)
	}
}

func TestDecideCancelAndSub(t *testing.T) {
	s, _ := NewSpec("x", KindCancel, 100, 0)
	t1 := decide(item("x", 1, nil, StartItem(s)), 1000)
	if got := types(t1.delta); !reflect.DeepEqual(got, []string{"OrchestrationStarted", "ActivityScheduled", "TimerCreated"}) {
		t.Fatalf("delta %v", got)
	}
	tf, ok := t1.orchItems[0].(provider.TimerFired)
	if !ok || tf.FireAtMs != 1100 || tf.ID != 3 {
		t.Fatalf("timer item %+v", t1.orchItems)
	}
	t2 := decide(item("x", 1, t1.delta, tf), 1100)
	if got := types(t2.delta); !reflect.DeepEqual(got, []string{"TimerFired", "ActivityCancelRequested", "OrchestrationCompleted"}) {
		t.Fatalf("delta %v", got)
	}
	checkIDs(t, t2.delta, 4)
	want := []provider.ScheduledActivityIdentifier{{Instance: "x", ExecutionID: 1, ActivityID: 2}}
	if !reflect.DeepEqual(t2.cancelled, want) || *t2.metadata.Output != "cancelled" {
		t.Fatalf("cancelled %+v, metadata %+v", t2.cancelled, t2.metadata)
	}

	// A child reports to its parent.
	parent := "p"
	pid := uint64(2)
	start := provider.StartOrchestration{Instance: "p::sub::2", Orchestration: OrchChain, Input: "0,5", ParentInstance: &parent, ParentID: &pid, ExecutionID: 1}
	c1 := decide(item("p::sub::2", 1, nil, start), 1)
	if c1.notify == nil || c1.notify.parent != "p" || c1.notify.parentID != 2 || c1.notify.result != "5" || c1.notify.details != nil {
		t.Fatalf("child notice %+v", c1.notify)
	}
	if c1.metadata.ParentInstanceID == nil || *c1.metadata.ParentInstanceID != "p" {
		t.Fatalf("child metadata %+v", c1.metadata)
	}
}

func TestDecideNondeterminism(t *testing.T) {
	hist := []provider.Event{
		ev("n", 1, 1, nil, provider.OrchestrationStarted{Name: OrchChain, Version: OrchestrationVersion, Input: "1,1"}),
		ev("n", 1, 2, nil, provider.ActivityScheduled{Name: "Other", Input: "1"}),
	}
	tn := decide(item("n", 1, hist, provider.ActivityCompleted{Instance: "n", ExecutionID: 1, ID: 2, Result: "1"}), 1)
	last := tn.delta[len(tn.delta)-1]
	f, ok := last.Kind.(provider.OrchestrationFailed)
	if !ok {
		t.Fatalf("delta %v", types(tn.delta))
	}
	if _, ok := f.Details.(provider.ConfigurationError); !ok || tn.ended != StatusFailed {
		t.Fatalf("details %#v", f.Details)
	}
}
