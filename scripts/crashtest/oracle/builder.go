package oracle

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// ActivityKey identifies one scheduled activity.
type ActivityKey struct {
	Instance    string
	ExecutionID uint64
	ID          uint64
}

// Builder assembles an Oracle from the lines of many worker incarnations.
// It is safe for concurrent use.
type Builder struct {
	mu          sync.Mutex
	acks        []Ack
	pending     map[int]map[uint64]int // worker → seq → index in acks, until an outcome
	complete    bool
	maxInFlight int
	raises      map[string]int
	killed      map[int]bool
	activities  map[ActivityKey]int
	anomalies   []string
}

// NewBuilder returns an empty Builder; maxInFlight is Oracle.MaxInFlight.
func NewBuilder(maxInFlight int) *Builder {
	return &Builder{
		pending: map[int]map[uint64]int{}, complete: true, maxInFlight: maxInFlight,
		raises: map[string]int{}, killed: map[int]bool{}, activities: map[ActivityKey]int{},
	}
}

// decodeEvents returns the ids and digests of an ack's events.
func decodeEvents(raw []json.RawMessage) ([]Event, error) {
	out := make([]Event, 0, len(raw))
	for _, r := range raw {
		var head struct {
			EventID uint64 `json:"event_id"`
		}
		if err := json.Unmarshal(r, &head); err != nil {
			return nil, fmt.Errorf("event %s: %w", r, err)
		}
		out = append(out, Event{ID: head.EventID, Digest: DigestOf(r)})
	}
	return out, nil
}

// Add records one line of worker incarnation worker. Lines of other types
// than intent, ok, err and act are ignored. An error means the line was
// malformed; it is also kept as an anomaly.
func (b *Builder) Add(worker int, l Line) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch l.Type {
	case TypeIntent:
		evs, err := decodeEvents(l.Events)
		if err != nil {
			return b.anomaly("worker %d intent %d: %v", worker, l.Seq, err)
		}
		b.acks = append(b.acks, Ack{Worker: worker, Seq: l.Seq, Instance: l.Instance, ExecutionID: l.Exec, Events: evs, Armed: l.Armed})
		if b.pending[worker] == nil {
			b.pending[worker] = map[uint64]int{}
		}
		b.pending[worker][l.Seq] = len(b.acks) - 1
	case TypeOK:
		evs, err := decodeEvents(l.Events)
		if err != nil {
			return b.anomaly("worker %d ok %d: %v", worker, l.Seq, err)
		}
		i, found := b.match(worker, l, evs)
		if !found {
			// An ok without an intent: the oracle cannot tell phantoms.
			b.complete = false
			b.acks = append(b.acks, Ack{Worker: worker, Instance: l.Instance, ExecutionID: l.Exec, Events: evs})
			i = len(b.acks) - 1
		} else {
			delete(b.pending[worker], b.acks[i].Seq)
		}
		a := &b.acks[i]
		a.Outcome, a.Paused = OutcomeOK, l.Paused
		a.Armed = a.Armed || l.Armed
	case TypeErr:
		i, ok := b.pending[worker][l.Seq]
		if !ok {
			return b.anomaly("worker %d: err line for unknown ack %d", worker, l.Seq)
		}
		delete(b.pending[worker], l.Seq)
		a := &b.acks[i]
		a.Outcome, a.Err, a.Paused, a.TakenOver = OutcomeFailed, l.Err, l.Paused, l.Taken
		if l.Stale {
			a.Outcome = OutcomeRejected
		}
	case TypeActivity:
		b.activities[ActivityKey{l.Instance, l.Exec, l.Activity}]++
	}
	return nil
}

// match finds the pending intent an ok line reports: the same instance,
// execution and events, preferring the line's seq.
func (b *Builder) match(worker int, l Line, evs []Event) (int, bool) {
	same := func(i int) bool {
		a := b.acks[i]
		return a.Instance == l.Instance && a.ExecutionID == l.Exec && slices.Equal(a.Events, evs)
	}
	pend := b.pending[worker]
	if i, ok := pend[l.Seq]; ok && same(i) {
		return i, true
	}
	best, found := 0, false
	for _, i := range pend {
		if same(i) && (!found || i < best) {
			best, found = i, true
		}
	}
	return best, found
}

func (b *Builder) anomaly(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	b.anomalies = append(b.anomalies, err.Error())
	return err
}

// WorkerGone records that incarnation worker has exited and its output has
// been read to the end: its acks still without an outcome become
// OutcomeKilled if it was SIGKILLed, OutcomeUnreported otherwise.
func (b *Builder) WorkerGone(worker int, killed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if killed {
		b.killed[worker] = true
	}
	for _, i := range b.pending[worker] {
		if killed {
			b.acks[i].Outcome = OutcomeKilled
		} else {
			b.acks[i].Outcome = OutcomeUnreported
		}
	}
	delete(b.pending, worker)
}

// Raised records an attempt to raise an external event on instance.
func (b *Builder) Raised(instance string) {
	b.mu.Lock()
	b.raises[instance]++
	b.mu.Unlock()
}

// Outcome returns the outcome of worker's ack seq and whether it is known.
func (b *Builder) Outcome(worker int, seq uint64) (Ack, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, pending := b.pending[worker][seq]; pending {
		return Ack{}, false
	}
	for i := len(b.acks) - 1; i >= 0; i-- {
		if a := b.acks[i]; a.Worker == worker && a.Seq == seq {
			return a, true
		}
	}
	return Ack{}, false
}

// Counts are summary figures of what was reported so far.
type Counts struct {
	// OK, Failed, Rejected, Killed, Unreported and Pending count ack calls
	// by outcome.
	OK, Failed, Rejected, Killed, Unreported, Pending int
	// Activities counts distinct activities fetched; ActivityRuns counts
	// fetches; DuplicateActivityRuns is ActivityRuns - Activities: repeated
	// executions (at least once; legal).
	Activities, ActivityRuns, DuplicateActivityRuns int
	// KillsWithAckInFlight counts killed incarnations that had at least one
	// ack call in flight (reported as intent, no outcome) when they died.
	KillsWithAckInFlight int
	// Anomalies counts malformed or unmatched lines.
	Anomalies int
}

// Counts returns summary figures.
func (b *Builder) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	var c Counts
	inFlight := map[int]bool{}
	for _, a := range b.acks {
		if a.Outcome == OutcomeKilled {
			inFlight[a.Worker] = true
		}
		switch a.Outcome {
		case OutcomeOK:
			c.OK++
		case OutcomeFailed:
			c.Failed++
		case OutcomeRejected:
			c.Rejected++
		case OutcomeKilled:
			c.Killed++
		case OutcomeUnreported:
			c.Unreported++
		default:
			c.Pending++
		}
	}
	for _, n := range b.activities {
		c.Activities++
		c.ActivityRuns += n
	}
	c.DuplicateActivityRuns = c.ActivityRuns - c.Activities
	c.KillsWithAckInFlight = len(inFlight)
	c.Anomalies = len(b.anomalies)
	return c
}

// Anomalies returns the malformed or unmatched lines seen.
func (b *Builder) Anomalies() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.anomalies)
}

// Oracle returns a snapshot of the oracle. Call it once every worker is
// gone (WorkerGone), or acks may still be pending.
func (b *Builder) Oracle() *Oracle {
	b.mu.Lock()
	defer b.mu.Unlock()
	acks := slices.Clone(b.acks)
	for i := range acks {
		acks[i].Events = slices.Clone(acks[i].Events)
	}
	return &Oracle{
		Acks: acks, Complete: b.complete, MaxInFlight: b.maxInFlight,
		Raises: maps.Clone(b.raises), Killed: maps.Clone(b.killed),
	}
}
