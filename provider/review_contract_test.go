package provider

// Contract review (branch review-contract): tests that pin divergences
// between durofs and the duroxide provider contract
// (/work/shared/spec/duroxide-contract.md). Each test fails on the code as
// reviewed; none depends on timing (a manual clock, no sleeps).

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
)

// reviewOpen opens a provider on a fresh directory with a manual clock and
// no background work.
func reviewOpen(t *testing.T) *FSProvider {
	t.Helper()
	clk := clock.NewManual(time.UnixMilli(1_700_000_000_000))
	return openT(t, t.TempDir(), Options{Clock: clk, SweepInterval: -1, CheckpointInterval: -1, Durability: ProcessCrashSafe, Logger: quietLog})
}

// reviewFetchPoke enqueues an ExternalRaised for inst and fetches its turn.
func reviewFetchPoke(t *testing.T, p *FSProvider, inst string) *LockedOrchestrationItem {
	t.Helper()
	ctx := context.Background()
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "poke", Data: "{}"}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil || it.Item.Instance != inst {
		t.Fatalf("fetch %s = %+v, %v", inst, it, err)
	}
	return it
}

// TestReviewCorruptStateFilesArePermanentErrors: contract §4 classifies
// "corruption (missing instance, invalid format)" as a PERMANENT error, and
// durofs itself reports an undecodable history permanently (readExec:
// Permanentf(ErrCorrupt)). But an instance.json or state.json that does not
// decode is reported as RETRYABLE by every management and read call, so a
// caller that retries retryable errors (duroxide's client passes
// is_retryable through) retries forever on a file that will never decode.
func TestReviewCorruptStateFilesArePermanentErrors(t *testing.T) {
	ctx := context.Background()
	p := reviewOpen(t)
	createInstance(t, p, "bad-inst") // Completed, record and execution 1
	createInstance(t, p, "bad-exec")
	mustNoErr(t, writeFileForTest(p, p.instFilePath(instanceKey("bad-inst")), []byte("not json{{{")))
	mustNoErr(t, writeFileForTest(p, p.execStatePath(instanceKey("bad-exec"), 1), []byte("not json{{{")))

	calls := map[string]func() error{
		"GetInstanceInfo": func() error { _, err := p.GetInstanceInfo(ctx, "bad-inst"); return err },
		"Read":            func() error { _, err := p.Read(ctx, "bad-inst"); return err },
		"GetParentID":     func() error { _, _, err := p.GetParentID(ctx, "bad-inst"); return err },
		"DeleteInstance":  func() error { _, err := p.DeleteInstance(ctx, "bad-inst", true); return err },
		"PruneExecutions": func() error { _, err := p.PruneExecutions(ctx, "bad-inst", PruneOptions{}); return err },
		"GetCustomStatus": func() error { _, err := p.GetCustomStatus(ctx, "bad-inst", 0); return err },
		"GetExecutionInfo": func() error {
			_, err := p.GetExecutionInfo(ctx, "bad-exec", 1)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if err == nil {
				t.Fatalf("%s on an undecodable file: no error", name)
			}
			if IsRetryable(err) {
				t.Errorf("%s on an undecodable file: retryable error %q; contract §4: corruption / invalid format is permanent", name, err)
			}
		})
	}
}

// TestReviewPoisonAckOverDamagedHistoryRecord: contract §2.5 step 7 ("This
// is append-only: never read or re-serialize existing rows (test 128)") and
// §10.3 ("Ack is append-only, so it succeeds even over corrupted rows").
// The runtime's only way out of a history it cannot read is the poison ack:
// OrchestrationFailed at the sentinel event_id 99999 with status "Failed".
// durofs reports a history record that fails its CRC as history_error at
// fetch (as it should), but then refuses every ack of that execution with a
// permanent ErrCorrupt, so the poison ack fails, the runtime abandons, and
// the instance is fetched, abandoned and re-failed forever: it never becomes
// "Failed". (The catalog's hook keeps the CRC valid and corrupts only the
// JSON, so test 128 passes; a real bit flip or torn page does not.)
func TestReviewPoisonAckOverDamagedHistoryRecord(t *testing.T) {
	ctx := context.Background()
	p := reviewOpen(t)
	createInstance(t, p, "rot")
	path := p.historyPath(instanceKey("rot"), 1)
	data, err := p.fs.ReadFile(path)
	mustNoErr(t, err)
	data[len(data)-5] ^= 0x01 // one flipped payload bit: the line fails its CRC
	mustNoErr(t, writeFileForTest(p, path, data))

	it := reviewFetchPoke(t, p, "rot")
	if it.Item.HistoryError == nil {
		t.Fatalf("fetch over a damaged record: no history_error")
	}
	status, out := StatusFailed, "poison: orchestration rot history deserialization failed"
	m := md(it.Item.OrchestrationName, it.Item.Version)
	m.Status, m.Output = &status, &out
	poison := Event{EventID: 99999, InstanceID: "rot", ExecutionID: it.Item.ExecutionID, TimestampMs: 1, DuroxideVersion: "0.1.26",
		Kind: OrchestrationFailed{Details: PoisonError{AttemptCount: 11, MaxAttempts: 10,
			MessageType: PoisonMessageType{Kind: "FailedDeserialization", Instance: "rot", ExecutionID: it.Item.ExecutionID, Error: *it.Item.HistoryError},
			Message:     *it.Item.HistoryError}}}
	if err := p.AckOrchestrationItem(ctx, it.LockToken, it.Item.ExecutionID, []Event{poison}, nil, nil, m, nil); err != nil {
		t.Fatalf("poison ack over a damaged history record failed (retryable=%v): %v", IsRetryable(err), err)
	}
	info, err := p.GetInstanceInfo(ctx, "rot")
	mustNoErr(t, err)
	if info.Status != StatusFailed {
		t.Errorf("status after the poison ack = %q, want Failed", info.Status)
	}
}

// TestReviewCustomStatusFromPointerKind: contract §2.5 step 9 / §7.2 - the
// last CustomStatusUpdated of an ack's delta sets the custom status and
// bumps its version. durofs accepts pointer event kinds (a *Kind is stored
// like its Kind: the event below is stored and reads back as a
// CustomStatusUpdated), but the ack materializes the custom status with a
// type switch on the value type only, so a delta carrying
// &CustomStatusUpdated{...} stores the event and silently leaves the status
// unset: GetCustomStatus returns nil (and the MaxCustomStatusBytes limit and
// the SubOrchestrationScheduled count that deletion relies on are skipped
// the same way).
func TestReviewCustomStatusFromPointerKind(t *testing.T) {
	ctx := context.Background()
	p := reviewOpen(t)
	createInstance(t, p, "cs-ptr")
	it := reviewFetchPoke(t, p, "cs-ptr")
	s := "progress"
	ev := Event{EventID: 2, InstanceID: "cs-ptr", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: &CustomStatusUpdated{Status: &s}}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil))

	h, err := p.Read(ctx, "cs-ptr")
	mustNoErr(t, err)
	if _, ok := h[len(h)-1].Kind.(CustomStatusUpdated); !ok {
		t.Fatalf("stored event reads back as %T, want CustomStatusUpdated", h[len(h)-1].Kind)
	}
	cs, err := p.GetCustomStatus(ctx, "cs-ptr", 0)
	mustNoErr(t, err)
	if cs == nil || cs.Status == nil || *cs.Status != "progress" || cs.Version != 1 {
		t.Errorf("GetCustomStatus after a CustomStatusUpdated (pointer kind) = %+v, want (\"progress\", 1)", cs)
	}
}

// TestReviewStoredEventIDsStayUnique: contract §2.2 - "A duplicate
// (instance, execution, event_id) must fail the whole ack; it must never
// overwrite an existing event", and durofs's own invariant (design.md §6.3:
// per execution, event ids are unique). The ack checks Event.EventID but
// stores Event.Raw verbatim when it is set, without checking that Raw's
// event_id agrees. An event read from the history (Raw set) and re-numbered
// is accepted as id 2 and stored as id 1: the execution's history then holds
// event_id 1 twice. (event.go documents "Clear Raw after changing a decoded
// event's fields"; the provider still validates one id and stores another.)
func TestReviewStoredEventIDsStayUnique(t *testing.T) {
	ctx := context.Background()
	p := reviewOpen(t)
	createInstance(t, p, "raw")
	h, err := p.Read(ctx, "raw")
	mustNoErr(t, err)
	it := reviewFetchPoke(t, p, "raw")
	ev := h[0] // decoded: Raw holds event_id 1
	ev.EventID = 2
	ackErr := p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
	h, err = p.Read(ctx, "raw")
	mustNoErr(t, err)
	seen := map[uint64]bool{}
	for _, e := range h {
		if seen[e.EventID] {
			t.Errorf("ack returned %v, and the history now holds event_id %d twice (%d events)", ackErr, e.EventID, len(h))
		}
		seen[e.EventID] = true
	}
}

// TestReviewReadsFollowExecutionRecords: contract §2.15 - "read(instance)
// returns the events of the latest execution (MAX(execution_id) over
// execution records)" - and §2.4 step 4.1 - with an instance record, fetch
// uses its current_execution_id and loads that execution's history.
// AppendWithExecution (the contract's test/debug path, which, as in SQLite,
// creates no execution record) into a higher execution makes durofs's Read
// and FetchOrchestrationItem switch to that record-less execution, while
// LatestExecutionID, ListExecutions and GetInstanceInfo still say 1: Read
// and ReadHistory disagree with ReadHistoryWithExecutionID(LatestExecutionID),
// and the runtime is handed execution 2 with a history that has no
// OrchestrationStarted.
func TestReviewReadsFollowExecutionRecords(t *testing.T) {
	ctx := context.Background()
	p := reviewOpen(t)
	createInstance(t, p, "dbg")
	ev := started("dbg")
	ev.ExecutionID, ev.Kind = 2, ExternalEvent{Name: "x", Data: "y"}
	mustNoErr(t, p.AppendWithExecution(ctx, "dbg", 2, []Event{ev}))

	latest, err := p.LatestExecutionID(ctx, "dbg")
	mustNoErr(t, err)
	info, err := p.GetInstanceInfo(ctx, "dbg")
	mustNoErr(t, err)
	want, err := p.ReadHistoryWithExecutionID(ctx, "dbg", latest)
	mustNoErr(t, err)
	got, err := p.Read(ctx, "dbg")
	mustNoErr(t, err)
	if len(got) != len(want) || (len(got) > 0 && got[0].Kind.Type() != want[0].Kind.Type()) {
		t.Errorf("Read returns %d events (first %s); LatestExecutionID is %d, whose history has %d events (first %s)",
			len(got), got[0].Kind.Type(), latest, len(want), want[0].Kind.Type())
	}
	it := reviewFetchPoke(t, p, "dbg")
	if it.Item.ExecutionID != info.CurrentExecutionID {
		t.Errorf("fetch reports execution %d; the instance record's current execution is %d", it.Item.ExecutionID, info.CurrentExecutionID)
	}
	if startedIn(it.Item.History) == nil {
		t.Errorf("fetch hands out a history without OrchestrationStarted (%d events)", len(it.Item.History))
	}
}
