package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/durofs/durofs/history"
)

// damageLine flips one payload bit of line n (1-based) of the history file
// at path, keeping its '\n': the line fails its CRC. It returns the file's
// new bytes.
func damageLine(t *testing.T, p *FSProvider, path string, n int) []byte {
	t.Helper()
	data, err := p.fs.ReadFile(path)
	mustNoErr(t, err)
	end := 0
	for i := 0; i < n; i++ {
		j := bytes.IndexByte(data[end:], '\n')
		if j < 0 {
			t.Fatalf("%s has fewer than %d lines", path, n)
		}
		end += j + 1
	}
	data[end-5] ^= 0x01 // inside the payload's last bytes, before the '\n'
	mustNoErr(t, writeFileForTest(p, path, data))
	return data
}

// poisonAck acks what the runtime acks for an item whose history does not
// deserialize and that crossed the poison threshold: OrchestrationFailed at
// the sentinel event_id 99999, status Failed (contract §4).
func poisonAck(ctx context.Context, p *FSProvider, it *LockedOrchestrationItem) error {
	status, out := StatusFailed, "poison: history deserialization failed"
	m := md(it.Item.OrchestrationName, it.Item.Version)
	m.Status, m.Output = &status, &out
	herr := "no history_error"
	if it.Item.HistoryError != nil {
		herr = *it.Item.HistoryError
	}
	poison := Event{EventID: 99999, InstanceID: it.Item.Instance, ExecutionID: it.Item.ExecutionID, TimestampMs: 1, DuroxideVersion: "0.1.26",
		Kind: OrchestrationFailed{Details: PoisonError{AttemptCount: 11, MaxAttempts: 10,
			MessageType: PoisonMessageType{Kind: "FailedDeserialization", Instance: it.Item.Instance, ExecutionID: it.Item.ExecutionID, Error: herr},
			Message:     herr}}}
	return p.AckOrchestrationItem(ctx, it.LockToken, it.Item.ExecutionID, []Event{poison}, nil, nil, m, nil)
}

// checkPoisonedHistory checks that the history file at path is before (the
// damaged history, torn tail cut) followed by exactly the poison record,
// that every read still reports the damaged line, and that the instance is
// Failed.
func checkPoisonedHistory(t *testing.T, p *FSProvider, inst, path string, before []byte) {
	t.Helper()
	ctx := context.Background()
	after, err := p.fs.ReadFile(path)
	mustNoErr(t, err)
	if !bytes.HasPrefix(after, before) {
		t.Fatalf("the history's bytes before the poison record changed:\n%q\nwas\n%q", after, before)
	}
	r, err := history.DecodeLine(bytes.TrimSuffix(after[len(before):], []byte("\n")))
	if err != nil || r.ID != 99999 || !bytes.HasSuffix(after, []byte("\n")) {
		t.Fatalf("after the damaged history: %q (%v); want exactly the poison record", after[len(before):], err)
	}
	x, err := history.Open(p.fs, path).End()
	mustNoErr(t, err)
	if len(x.Damaged) != 1 {
		t.Errorf("%d damaged lines after the poison ack, want the 1 there was", len(x.Damaged))
	}
	ef, err := p.readExecutionFile(instanceKey(inst), 1)
	mustNoErr(t, err)
	if ef.EventCount != uint64(x.End.Records) {
		t.Errorf("state.json counts %d events; the history holds %d lines", ef.EventCount, x.End.Records)
	}
	if h, err := p.Read(ctx, inst); !errors.Is(err, ErrCorrupt) || IsRetryable(err) {
		t.Errorf("Read after the poison ack = %d events, %v; want a permanent ErrCorrupt (the damaged line is still there)", len(h), err)
	}
	info, err := p.GetInstanceInfo(ctx, inst)
	mustNoErr(t, err)
	if info.Status != StatusFailed {
		t.Errorf("status after the poison ack = %q, want Failed", info.Status)
	}
}

// TestPoisonAckOverDamagedHistoryRecord: contract §2.5 step 7 ("This is
// append-only: never read or re-serialize existing rows (test 128)") and
// §10.3 ("Ack is append-only, so it succeeds even over corrupted rows").
// The runtime's only way out of a history it cannot read is the poison ack:
// OrchestrationFailed at the sentinel event_id 99999 with status "Failed".
// A history line that fails its CRC (a flipped bit, not the catalog's
// hook, which keeps the CRC valid) is reported as history_error at fetch,
// and the poison ack is appended after the history's last complete line:
// the damaged line and every valid one stay as they are, a torn tail is
// cut, reads and fsck still report the damaged line, and an id the history
// holds - in a valid record or, most likely, in the damaged line's frame -
// is still a duplicate.
func TestPoisonAckOverDamagedHistoryRecord(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(t *testing.T, p *FSProvider) string // the history's path
		damaged int                                      // the line damaged
		torn    bool                                     // a torn tail after the damage
		dups    []uint64                                 // ids the ack must refuse
	}{
		{name: "the last and only line", damaged: 1, dups: []uint64{1},
			setup: func(t *testing.T, p *FSProvider) string {
				createInstance(t, p, "rot")
				return p.historyPath(instanceKey("rot"), 1)
			}},
		{name: "a middle line", damaged: 2, dups: []uint64{1, 2, 3},
			setup: func(t *testing.T, p *FSProvider) string { return ackThreeEvents(t, p, "rot") }},
		{name: "a middle line, then a torn tail", damaged: 2, torn: true, dups: []uint64{2},
			setup: func(t *testing.T, p *FSProvider) string { return ackThreeEvents(t, p, "rot") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			p := openManualQuiet(t)
			path := c.setup(t, p)
			before := damageLine(t, p, path, c.damaged)
			if c.torn {
				torn := append(bytes.Clone(before), `0badc0de 4 1 {"event_id":4,"ty`...)
				mustNoErr(t, writeFileForTest(p, path, torn))
			}

			it := pokeAndFetch(t, p, "rot")
			if it.Item.HistoryError == nil {
				t.Fatalf("fetch over a damaged record: no history_error")
			}
			for _, id := range c.dups {
				ev := Event{EventID: id, InstanceID: "rot", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: ExternalEvent{Name: "x", Data: "y"}}
				err := p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil)
				if !errors.Is(err, ErrDuplicateEvent) {
					t.Errorf("ack of event %d over a history holding it (line %d damaged) = %v; want ErrDuplicateEvent", id, c.damaged, err)
				}
			}
			if err := poisonAck(ctx, p, it); err != nil {
				t.Fatalf("poison ack over a damaged history record failed (retryable=%v): %v", IsRetryable(err), err)
			}
			checkPoisonedHistory(t, p, "rot", path, before)
			if noPendingState(t, p, "rot"); t.Failed() {
				return
			}
			rep := fsckT(t, p.dir, false)
			if f := findingOf(rep, FsckCorruptRecord, "history.jsonl"); f == nil || f.Detail == "" ||
				!bytes.Contains([]byte(f.Detail), []byte(fmt.Sprintf("line %d ", c.damaged))) {
				t.Errorf("fsck after the poison ack does not report damaged line %d: %+v", c.damaged, rep.Findings)
			}
		})
	}
}

// TestPoisonAckOverDamagedRecordIsRedone: the poison ack's writer dies
// right after its commit point (kill -9: the page cache stays). Whoever next
// finishes the record (here the checkpoint) appends the poison record after
// the damaged line - reading only what follows the ack's mark, so the
// damaged line does not stop it - cutting what a killed apply left torn.
func TestPoisonAckOverDamagedRecordIsRedone(t *testing.T) {
	ctx := context.Background()
	p := openManualQuiet(t)
	path := ackThreeEvents(t, p, "rot")
	before := damageLine(t, p, path, 2)
	it := pokeAndFetch(t, p, "rot")
	if it.Item.HistoryError == nil {
		t.Fatalf("fetch over a damaged record: no history_error")
	}
	crashAfterCommit(t, "ack", func() { _ = poisonAck(ctx, p, it) })
	// What an apply killed in the middle of its history append leaves.
	mustNoErr(t, writeFileForTest(p, path, append(bytes.Clone(before), `a0a0a0a0 99999 2 {"event_id":99`...)))
	mustNoErr(t, p.checkpointOnce(ctx, true, true))
	checkPoisonedHistory(t, p, "rot", path, before)
	noPendingState(t, p, "rot")
}

// TestPoisonAckOverDamagedRecordIsReplayed: a power loss after the poison
// ack's commit point, before its applied files reached the disk. The replay
// rewrites the ack's records at the byte offset the ack read - after the
// damaged line, which it keeps as it is (history.Log.RewriteAtMark) -
// instead of failing on the damaged line or cutting the history there.
func TestPoisonAckOverDamagedRecordIsReplayed(t *testing.T) {
	ctx := context.Background()
	mem, opts, p := strictMemT(t)
	path := ackThreeEvents(t, p, "rot")
	mustNoErr(t, p.checkpointOnce(ctx, true, true))
	before := damageLine(t, p, path, 2)
	mem.MarkAllSynced() // the damage is on the disk
	it := pokeAndFetch(t, p, "rot")
	if it.Item.HistoryError == nil {
		t.Fatalf("fetch over a damaged record: no history_error")
	}
	mustNoErr(t, poisonAck(ctx, p, it))
	mem.Crash() // the ack's record is in the log; its applied files are lost
	if after, err := mem.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("after the power loss the history is %q (%v), want the damaged history alone (the test's premise)", after, err)
	}

	p2, err := Open("/d", opts)
	if err != nil {
		t.Fatalf("reopen after the power loss: %v", err)
	}
	defer p2.Close()
	if n := p2.RecoveryStats().RecordsReplayed; n < 1 {
		t.Errorf("replayed %d records, want the poison ack", n)
	}
	checkPoisonedHistory(t, p2, "rot", path, before)
	rep, err := fsck(ctx, "/d", FsckOptions{Logger: quietLog}, Options{fs: mem})
	mustNoErr(t, err)
	if findingOf(rep, FsckCorruptRecord, "history.jsonl") == nil {
		t.Errorf("fsck after the replay does not report the damaged line: %+v", rep.Findings)
	}
}
