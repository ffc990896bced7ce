package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

func ev(id int, body string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"event_id":%d,"type":"X","v":%q}`, id, body))
}

// TestBuilderOutcomes feeds the lines of two incarnations and checks every
// outcome: an ok matched to its intent (even with a wrong seq hint), a
// failure, a stale rejection, an intent cut by a kill, an intent left
// without a report by a worker that was stopped.
func TestBuilderOutcomes(t *testing.T) {
	lines := []struct {
		w int
		l Line
	}{
		{1, Line{Type: TypeIntent, Seq: 1, Instance: "a", Exec: 1, Events: []json.RawMessage{ev(1, "x"), ev(2, "y")}}},
		{1, Line{Type: TypeIntent, Seq: 2, Instance: "b", Exec: 1, Events: []json.RawMessage{ev(1, "z")}}},
		// The ok of seq 1 arrives with the seq of 2 (OnAck raced): matched by content.
		{1, Line{Type: TypeOK, Seq: 2, Instance: "a", Exec: 1, Events: []json.RawMessage{ev(1, "x"), ev(2, "y")}}},
		{1, Line{Type: TypeErr, Seq: 2, Instance: "b", Exec: 1, Err: "boom"}},
		{1, Line{Type: TypeIntent, Seq: 3, Instance: "c", Exec: 2, Events: []json.RawMessage{ev(5, "q")}}},
		{1, Line{Type: TypeErr, Seq: 3, Instance: "c", Exec: 2, Err: "lock expired", Stale: true}},
		{1, Line{Type: TypeIntent, Seq: 4, Instance: "d", Exec: 1, Events: []json.RawMessage{ev(1, "k")}}},
		{2, Line{Type: TypeIntent, Seq: 1, Instance: "e", Exec: 1, Events: []json.RawMessage{ev(1, "u")}}},
		{2, Line{Type: TypeActivity, Instance: "a", Exec: 1, Activity: 3}},
		{2, Line{Type: TypeActivity, Instance: "a", Exec: 1, Activity: 3}},
	}
	var log bytes.Buffer
	b := NewBuilder(2)
	for _, x := range lines {
		if err := b.Add(x.w, x.l); err != nil {
			t.Fatal(err)
		}
		enc, _ := x.l.Encode()
		fmt.Fprintf(&log, "%d %s", x.w, enc)
	}
	b.WorkerGone(1, true)
	b.WorkerGone(2, false)
	for _, g := range []struct {
		w      int
		killed bool
	}{{1, true}, {2, false}} {
		enc, _ := Line{Type: TypeGone, Killed: g.killed}.Encode()
		fmt.Fprintf(&log, "%d %s", g.w, enc)
	}

	check := func(t *testing.T, b *Builder) {
		t.Helper()
		o := b.Oracle()
		want := []Outcome{OutcomeOK, OutcomeFailed, OutcomeRejected, OutcomeKilled, OutcomeUnreported}
		if len(o.Acks) != len(want) {
			t.Fatalf("%d acks, want %d", len(o.Acks), len(want))
		}
		for i, a := range o.Acks {
			if a.Outcome != want[i] {
				t.Errorf("ack %d (%s seq %d): outcome %s, want %s", i, a.Instance, a.Seq, a.Outcome, want[i])
			}
		}
		if !o.Complete || !o.Killed[1] || o.Killed[2] {
			t.Errorf("complete %v, killed %v", o.Complete, o.Killed)
		}
		if o.Acks[0].Events[1].ID != 2 || o.Acks[0].Events[1].Digest != DigestOf(ev(2, "y")) {
			t.Errorf("events of the first ack: %+v", o.Acks[0].Events)
		}
		c := b.Counts()
		if c.DuplicateActivityRuns != 1 || c.KillsWithAckInFlight != 1 || c.Anomalies != 0 {
			t.Errorf("counts %+v", c)
		}
	}
	t.Run("live", func(t *testing.T) { check(t, b) })
	t.Run("replayed", func(t *testing.T) {
		rb, err := Replay(&log, 2)
		if err != nil {
			t.Fatal(err)
		}
		check(t, rb)
	})
}

// TestDigestIgnoresWhitespaceOnly: the provider stores compact JSON; any
// other difference is a different event.
func TestDigestIgnoresWhitespaceOnly(t *testing.T) {
	a := DigestOf([]byte(`{"event_id":1,"type":"X"}`))
	if b := DigestOf([]byte(`{ "event_id": 1, "type": "X" }`)); a != b {
		t.Error("whitespace changed the digest")
	}
	if b := DigestOf([]byte(`{"event_id":1,"type":"Y"}`)); a == b {
		t.Error("a different event has the same digest")
	}
}
