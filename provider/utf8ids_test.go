package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Ids that are not valid UTF-8. encoding/json stores each invalid byte as
// U+FFFD, so "\xff\xfe" and "\xfe\xff" would be stored under different keys
// and both read back as "\uFFFD\uFFFD".
var invalidUTF8IDs = []struct{ name, id string }{
	{"ff fe", "\xff\xfe"},
	{"fe ff", "\xfe\xff"},
	{"truncated sequence", "order-\xc3"},
	{"overlong slash", "a\xc0\xafb"},
	{"surrogate half", "x\xed\xa0\x80"},
}

// badIDsFor returns the invalid ids to try at the i-th site of a table:
// all of them at the first, "\xff\xfe" elsewhere (each subtest builds a
// fresh provider; the kinds of invalid UTF-8 are utf8.ValidString's
// business, the sites are ours).
func badIDsFor(i int) []struct{ name, id string } {
	if i == 0 {
		return invalidUTF8IDs
	}
	return invalidUTF8IDs[:1]
}

// validNonASCIIID is the valid counterpart every call must accept.
const validNonASCIIID = "ok-é-日本-🎉"

// idSite is one place a caller can pass an id. call passes id in that
// place; it runs on a fresh tokenFixture (instance "real" locked, a work
// item claimed) after setup, if any.
type idSite struct {
	name  string
	setup func(t *testing.T, f tokenFixture)
	call  func(f tokenFixture, id string) error
	// validOK: the same call with validNonASCIIID succeeds (proving the
	// refusal is about the encoding, not the call).
	validOK bool
}

func enqOrchIDSite(name string, build func(id string) WorkItem) idSite {
	return idSite{name: "enqueue_for_orchestrator/" + name, validOK: true, call: func(f tokenFixture, id string) error {
		return f.p.EnqueueForOrchestrator(context.Background(), build(id), 0)
	}}
}

func enqWorkerIDSite(name string, build func(id string) WorkItem) idSite {
	return idSite{name: "enqueue_for_worker/" + name, validOK: true, call: func(f tokenFixture, id string) error {
		return f.p.EnqueueForWorker(context.Background(), build(id))
	}}
}

// ackSite acks the held turn of "real" with [Started], whatever the row adds.
func ackIDSite(name string, build func(id string) (delta []Event, workerItems, orchItems []WorkItem, m ExecutionMetadata)) idSite {
	return idSite{name: "ack_orchestration_item/" + name, validOK: true, call: func(f tokenFixture, id string) error {
		delta, wi, oi, m := build(id)
		delta = append([]Event{started("real")}, delta...)
		return f.p.AckOrchestrationItem(context.Background(), f.orchToken, 1, delta, wi, oi, m, nil)
	}}
}

// event returns an event of "real"'s first execution.
func realEvent(id uint64, k EventKind) Event {
	e := started("real")
	e.EventID, e.Kind = id, k
	return e
}

func act() ActivityExecute {
	return ActivityExecute{Instance: "real", ExecutionID: 1, ID: 2, Name: "act", Input: "{}"}
}

func idSites() []idSite {
	v := "1.0.0"
	sites := []idSite{
		enqOrchIDSite("StartOrchestration.Instance", func(id string) WorkItem {
			return StartOrchestration{Instance: id, Orchestration: "O", Input: "{}", Version: &v, ExecutionID: 1}
		}),
		enqOrchIDSite("*StartOrchestration.Instance", func(id string) WorkItem {
			return &StartOrchestration{Instance: id, Orchestration: "O", Input: "{}", ExecutionID: 1}
		}),
		enqOrchIDSite("StartOrchestration.Orchestration", func(id string) WorkItem {
			return StartOrchestration{Instance: "i", Orchestration: id, Input: "{}", ExecutionID: 1}
		}),
		enqOrchIDSite("StartOrchestration.Version", func(id string) WorkItem {
			return StartOrchestration{Instance: "i", Orchestration: "O", Input: "{}", Version: &id, ExecutionID: 1}
		}),
		enqOrchIDSite("StartOrchestration.ParentInstance", func(id string) WorkItem {
			return StartOrchestration{Instance: "i", Orchestration: "O", Input: "{}", ParentInstance: &id, ParentID: ptr(uint64(2)), ExecutionID: 1}
		}),
		enqOrchIDSite("ExternalRaised.Instance", func(id string) WorkItem { return ExternalRaised{Instance: id, Name: "e", Data: "d"} }),
		enqOrchIDSite("ExternalRaised.Name", func(id string) WorkItem { return ExternalRaised{Instance: "i", Name: id, Data: "d"} }),
		enqOrchIDSite("QueueMessage.Instance", func(id string) WorkItem { return QueueMessage{Instance: id, Name: "q", Data: "d"} }),
		enqOrchIDSite("QueueMessage.Name", func(id string) WorkItem { return QueueMessage{Instance: "i", Name: id, Data: "d"} }),
		enqOrchIDSite("CancelInstance.Instance", func(id string) WorkItem { return CancelInstance{Instance: id, Reason: "r"} }),
		enqOrchIDSite("TimerFired.Instance", func(id string) WorkItem { return TimerFired{Instance: id, ExecutionID: 1, ID: 2, FireAtMs: 1} }),
		enqOrchIDSite("ActivityCompleted.Instance", func(id string) WorkItem {
			return ActivityCompleted{Instance: id, ExecutionID: 1, ID: 2, Result: "r"}
		}),
		enqOrchIDSite("ActivityFailed.Instance", func(id string) WorkItem {
			return ActivityFailed{Instance: id, ExecutionID: 1, ID: 2, Details: ApplicationError{Kind: AppActivityFailed, Message: "m"}}
		}),
		enqOrchIDSite("SubOrchCompleted.ParentInstance", func(id string) WorkItem {
			return SubOrchCompleted{ParentInstance: id, ParentExecutionID: 1, ParentID: 2, Result: "r"}
		}),
		enqOrchIDSite("SubOrchFailed.ParentInstance", func(id string) WorkItem {
			return SubOrchFailed{ParentInstance: id, ParentExecutionID: 1, ParentID: 2, Details: ApplicationError{Kind: AppActivityFailed, Message: "m"}}
		}),
		enqOrchIDSite("ContinueAsNew.Instance", func(id string) WorkItem { return ContinueAsNew{Instance: id, Orchestration: "O", Input: "{}"} }),
		enqOrchIDSite("ContinueAsNew.Orchestration", func(id string) WorkItem { return ContinueAsNew{Instance: "i", Orchestration: id, Input: "{}"} }),
		enqOrchIDSite("ContinueAsNew.Version", func(id string) WorkItem {
			return ContinueAsNew{Instance: "i", Orchestration: "O", Input: "{}", Version: &id}
		}),

		enqWorkerIDSite("ActivityExecute.Instance", func(id string) WorkItem { a := act(); a.Instance = id; return a }),
		enqWorkerIDSite("*ActivityExecute.Instance", func(id string) WorkItem { a := act(); a.Instance = id; return &a }),
		enqWorkerIDSite("ActivityExecute.Name", func(id string) WorkItem { a := act(); a.Name = id; return a }),
		enqWorkerIDSite("ActivityExecute.SessionID", func(id string) WorkItem { a := act(); a.SessionID = &id; return a }),
		enqWorkerIDSite("ActivityExecute.Tag", func(id string) WorkItem { a := act(); a.Tag = &id; return a }),

		ackIDSite("worker item ActivityExecute.Name", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			a := act()
			a.Name = id
			return []Event{realEvent(2, ActivityScheduled{Name: "act", Input: "{}"})}, []WorkItem{a}, nil, ExecutionMetadata{}
		}),
		ackIDSite("worker item ActivityExecute.SessionID", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			a := act()
			a.SessionID = &id
			return []Event{realEvent(2, ActivityScheduled{Name: "act", Input: "{}"})}, []WorkItem{a}, nil, ExecutionMetadata{}
		}),
		ackIDSite("worker item ActivityExecute.Tag", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			a := act()
			a.Tag = &id
			return []Event{realEvent(2, ActivityScheduled{Name: "act", Input: "{}"})}, []WorkItem{a}, nil, ExecutionMetadata{}
		}),
		ackIDSite("orchestrator item StartOrchestration.Instance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			parent := "real"
			return nil, nil, []WorkItem{StartOrchestration{Instance: id, Orchestration: "O", Input: "{}", ParentInstance: &parent, ParentID: ptr(uint64(2)), ExecutionID: 1}}, ExecutionMetadata{}
		}),
		ackIDSite("orchestrator item ExternalRaised.Instance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return nil, nil, []WorkItem{ExternalRaised{Instance: id, Name: "e", Data: "d"}}, ExecutionMetadata{}
		}),
		ackIDSite("orchestrator item SubOrchCompleted.ParentInstance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return nil, nil, []WorkItem{SubOrchCompleted{ParentInstance: id, ParentExecutionID: 1, ParentID: 2, Result: "r"}}, ExecutionMetadata{}
		}),
		ackIDSite("event SubOrchestrationScheduled.Instance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, SubOrchestrationScheduled{Name: "O", Instance: id, Input: "{}"})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event *SubOrchestrationScheduled.Instance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, &SubOrchestrationScheduled{Name: "O", Instance: id, Input: "{}"})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event OrchestrationChained.Instance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, OrchestrationChained{Name: "O", Instance: id, Input: "{}"})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event ActivityScheduled.SessionID", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, ActivityScheduled{Name: "act", Input: "{}", SessionID: &id})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event ActivityScheduled.Tag", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, ActivityScheduled{Name: "act", Input: "{}", Tag: &id})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event ExternalSubscribed.Name", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, ExternalSubscribed{Name: id})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event OrchestrationStarted.ParentInstance", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return []Event{realEvent(2, OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}", ParentInstance: &id, ParentID: ptr(uint64(1))})}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("event InstanceID", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			e := realEvent(2, ExternalSubscribed{Name: "e"})
			e.InstanceID = id
			return []Event{e}, nil, nil, ExecutionMetadata{}
		}),
		ackIDSite("metadata ParentInstanceID", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			m := md("TestOrch", "1.0.0")
			m.ParentInstanceID = &id
			return nil, nil, nil, m
		}),
		ackIDSite("metadata OrchestrationName", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return nil, nil, nil, md(id, "1.0.0")
		}),
		ackIDSite("metadata OrchestrationVersion", func(id string) ([]Event, []WorkItem, []WorkItem, ExecutionMetadata) {
			return nil, nil, nil, md("TestOrch", id)
		}),

		{name: "ack_work_item/ActivityCompleted.Instance", validOK: true, call: func(f tokenFixture, id string) error {
			return f.p.AckWorkItem(context.Background(), f.workToken, ActivityCompleted{Instance: id, ExecutionID: 1, ID: 2, Result: "r"})
		}},
		{name: "ack_work_item/ActivityFailed.Instance", validOK: true, call: func(f tokenFixture, id string) error {
			return f.p.AckWorkItem(context.Background(), f.workToken, ActivityFailed{Instance: id, ExecutionID: 1, ID: 2, Details: ApplicationError{Kind: AppActivityFailed, Message: "m"}})
		}},

		{name: "append_with_execution/instance", validOK: true, call: func(f tokenFixture, id string) error {
			// The event's InstanceID is a valid id: only the parameter is invalid.
			return f.p.AppendWithExecution(context.Background(), id, 1, []Event{started("x")})
		}},
		{name: "append_with_execution/event SubOrchestrationScheduled.Instance", validOK: true, call: func(f tokenFixture, id string) error {
			return f.p.AppendWithExecution(context.Background(), "real", 1, []Event{realEvent(1, SubOrchestrationScheduled{Name: "O", Instance: id, Input: "{}"})})
		}},

		// Admin writes. With a valid id that names no instance they fail
		// with ErrNotFound or delete nothing; only the invalid id is checked.
		{name: "delete_instances_atomic", call: func(f tokenFixture, id string) error {
			_, err := f.p.DeleteInstancesAtomic(context.Background(), []string{id}, true)
			return err
		}},
		{name: "delete_instances_atomic/second of two", call: func(f tokenFixture, id string) error {
			_, err := f.p.DeleteInstancesAtomic(context.Background(), []string{"real", id}, true)
			return err
		}},
		{name: "delete_instance", call: func(f tokenFixture, id string) error {
			_, err := f.p.DeleteInstance(context.Background(), id, true)
			return err
		}},
		{name: "prune_executions", call: func(f tokenFixture, id string) error {
			_, err := f.p.PruneExecutions(context.Background(), id, PruneOptions{KeepLast: ptr(uint32(1))})
			return err
		}},

		// A session owner id is stored in sessions/<key>.json when the
		// owner claims a session.
		{name: "fetch_work_item/session OwnerID",
			setup: func(t *testing.T, f tokenFixture) {
				a := act()
				a.ID, a.SessionID = 3, ptr("s1")
				mustNoErr(t, f.p.EnqueueForWorker(context.Background(), a))
			},
			validOK: true,
			call: func(f tokenFixture, id string) error {
				w, err := f.p.FetchWorkItem(context.Background(), time.Minute, 0, &SessionFetchConfig{OwnerID: id, LockTimeout: time.Minute}, TagFilter{})
				if err == nil && w == nil {
					return errors.New("no item fetched")
				}
				return err
			}},
	}
	return sites
}

// TestInvalidUTF8IDsRejected: every call that would store an id (instance,
// parent, session, tag, activity/orchestration/event name, version) refuses
// one that is not valid UTF-8 with a permanent ErrInvalidID, writing nothing
// and keeping any lock it was given; the same call with a valid non-ASCII id
// succeeds.
func TestInvalidUTF8IDsRejected(t *testing.T) {
	for i, s := range idSites() {
		for _, bad := range badIDsFor(i) {
			t.Run(s.name+"/"+bad.name, func(t *testing.T) {
				f := newTokenFixture(t)
				if s.setup != nil {
					s.setup(t, f)
				}
				before := treeSnapshot(t, f.dir)
				err := s.call(f, bad.id)
				if err == nil || IsRetryable(err) || !errors.Is(err, ErrInvalidID) {
					t.Errorf("%s with id %q = %v (retryable %v); want a permanent ErrInvalidID", s.name, bad.id, err, IsRetryable(err))
				}
				assertTreeUnchanged(t, f.dir, before, fmt.Sprintf("%s with id %q", s.name, bad.id))
				// Locks given to the call are kept.
				ctx := context.Background()
				mustNoErr(t, f.p.RenewOrchestrationItemLock(ctx, f.orchToken, time.Minute))
				mustNoErr(t, f.p.RenewWorkItemLock(ctx, f.workToken, time.Minute))
			})
		}
		if s.validOK {
			t.Run(s.name+"/valid", func(t *testing.T) {
				f := newTokenFixture(t)
				if s.setup != nil {
					s.setup(t, f)
				}
				if err := s.call(f, validNonASCIIID); err != nil {
					t.Errorf("%s with id %q = %v; want success", s.name, validNonASCIIID, err)
				}
			})
		}
	}
}

// TestInvalidUTF8IDsNotMangled is issue 19's example: "\xff\xfe" and
// "\xfe\xff" used to be stored under two keys and come back from fetch and
// ListInstances as the same "\uFFFD\uFFFD". Both are now refused, and valid
// non-ASCII ids (which encoding/json keeps) come back exactly.
func TestInvalidUTF8IDsNotMangled(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	for _, id := range []string{"\xff\xfe", "\xfe\xff"} {
		if err := p.EnqueueForOrchestrator(ctx, startItem(id), 0); err == nil || IsRetryable(err) || !errors.Is(err, ErrInvalidID) {
			t.Errorf("enqueue start of %q = %v; want a permanent ErrInvalidID", id, err)
		}
	}
	valid := []string{"é", "e\u0301", "日本語", "emoji🎉", "\uFFFD\uFFFD"}
	for _, id := range valid {
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, startItem(id), 0))
	}
	var fetched []string
	for {
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		mustNoErr(t, err)
		if it == nil {
			break
		}
		fetched = append(fetched, it.Item.Instance)
		mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{started(it.Item.Instance)}, nil, nil, md("TestOrch", "1.0.0"), nil))
	}
	listed, err := p.ListInstances(ctx)
	mustNoErr(t, err)
	slices.Sort(fetched)
	slices.Sort(listed)
	want := slices.Clone(valid)
	slices.Sort(want)
	if !slices.Equal(fetched, want) || !slices.Equal(listed, want) {
		t.Errorf("fetched %q, listed %q; want exactly %q", fetched, listed, want)
	}
	for _, id := range valid {
		if info, err := p.GetInstanceInfo(ctx, id); err != nil || info.InstanceID != id {
			t.Errorf("GetInstanceInfo(%q) = %+v, %v", id, info, err)
		}
	}
}

// TestInvalidUTF8IDReads: reads of an id that is not valid UTF-8 (which no
// instance can have) find nothing and write nothing.
func TestInvalidUTF8IDReads(t *testing.T) {
	ctx := context.Background()
	reads := []struct {
		name string
		call func(p *FSProvider, id string) error
	}{
		{"read", func(p *FSProvider, id string) error { _, err := p.Read(ctx, id); return err }},
		{"read_with_execution", func(p *FSProvider, id string) error { _, err := p.ReadWithExecution(ctx, id, 1); return err }},
		{"get_custom_status", func(p *FSProvider, id string) error { _, err := p.GetCustomStatus(ctx, id, 0); return err }},
		{"list_executions", func(p *FSProvider, id string) error { _, err := p.ListExecutions(ctx, id); return err }},
		{"read_history", func(p *FSProvider, id string) error { _, err := p.ReadHistory(ctx, id); return err }},
		{"read_history_with_execution_id", func(p *FSProvider, id string) error {
			_, err := p.ReadHistoryWithExecutionID(ctx, id, 1)
			return err
		}},
		{"latest_execution_id", func(p *FSProvider, id string) error { _, err := p.LatestExecutionID(ctx, id); return err }},
		{"get_instance_info", func(p *FSProvider, id string) error { _, err := p.GetInstanceInfo(ctx, id); return err }},
		{"get_execution_info", func(p *FSProvider, id string) error { _, err := p.GetExecutionInfo(ctx, id, 1); return err }},
		{"list_children", func(p *FSProvider, id string) error { _, err := p.ListChildren(ctx, id); return err }},
		{"get_parent_id", func(p *FSProvider, id string) error { _, _, err := p.GetParentID(ctx, id); return err }},
		{"get_instance_tree", func(p *FSProvider, id string) error { _, err := p.GetInstanceTree(ctx, id); return err }},
	}
	for i, r := range reads {
		for _, bad := range badIDsFor(i) {
			t.Run(r.name+"/"+bad.name, func(t *testing.T) {
				f := newTokenFixture(t)
				before := treeSnapshot(t, f.dir)
				if err := r.call(f.p, bad.id); err != nil && (IsRetryable(err) || !errors.Is(err, ErrNotFound)) {
					t.Errorf("%s(%q) = %v; want nothing found (no error, or a permanent ErrNotFound)", r.name, bad.id, err)
				}
				assertTreeUnchanged(t, f.dir, before, fmt.Sprintf("%s(%q)", r.name, bad.id))
			})
		}
	}
}

// TestInvalidIDErrorMessage: the error names the call, the field and the
// id, cut short for a long id (an id may be as long as MaxPayloadBytes).
func TestInvalidIDErrorMessage(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1, Durability: ProcessCrashSafe})
	err := p.EnqueueForWorker(ctx, ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "act", Tag: ptr("gpu\xff")})
	if want := `enqueue_for_worker: work item: tag "gpu\xff" is not valid UTF-8`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v; want it to start with %s", err, want)
	}
	long := strings.Repeat("\xff", 1<<20)
	_, err = p.DeleteInstance(ctx, long, true)
	if err == nil || !errors.Is(err, ErrInvalidID) || len(err.Error()) > 400 || !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Errorf("error for a 1 MiB id = %.500v (%d bytes); want a short ErrInvalidID message naming the length", err, len(fmt.Sprint(err)))
	}
}
