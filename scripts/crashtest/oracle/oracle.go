// Package oracle records what the crash suite's worker processes were told
// by the provider, so that the invariant checker can compare the directory
// left behind with what was acknowledged.
//
// A worker wraps its provider in a [Recorder]. Before every
// AckOrchestrationItem call the recorder reports an "intent" line (the
// instance, execution and every history event's exact JSON); after a failed
// call it reports an "err" line; the runtime's OnAck hook (wired to
// [Recorder.OnAck]) reports an "ok" line. Each line is written and flushed
// before the worker continues, so when a worker is SIGKILLed the parent
// already knows every ack that returned OK (the oracle of invariant 1) and
// every ack that was in flight (whose effect must be all or nothing,
// invariant 2).
//
// The parent feeds the lines of every worker incarnation to a [Builder],
// tells it when an incarnation is gone (killed or stopped) and takes the
// resulting [Oracle] to the checker. Payloads are kept as digests, so a
// long run's oracle stays small.
package oracle

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// Outcome is how one AckOrchestrationItem call ended, as far as the oracle
// knows.
type Outcome int

// The outcomes.
const (
	// OutcomePending: no outcome reported yet (only before Builder.WorkerGone).
	OutcomePending Outcome = iota
	// OutcomeOK: the call returned nil and the runtime reported it (OnAck).
	OutcomeOK
	// OutcomeFailed: the call returned an error other than a lost lock.
	OutcomeFailed
	// OutcomeRejected: the call failed because the lock had expired or been
	// taken over (ErrLockExpired, ErrInvalidLockToken): a stale holder.
	OutcomeRejected
	// OutcomeKilled: the worker was SIGKILLed before it reported an outcome.
	OutcomeKilled
	// OutcomeUnreported: no outcome, although the worker was not killed (a
	// lost report: a bug in the worker or the harness).
	OutcomeUnreported
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OutcomePending:
		return "pending"
	case OutcomeOK:
		return "ok"
	case OutcomeFailed:
		return "failed"
	case OutcomeRejected:
		return "rejected"
	case OutcomeKilled:
		return "killed"
	case OutcomeUnreported:
		return "unreported"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Digest identifies an event's JSON: the first 16 bytes of the SHA-256 of
// its compacted bytes.
type Digest [16]byte

// String returns the digest's first 6 bytes in hex, for messages.
func (d Digest) String() string { return fmt.Sprintf("%x", d[:6]) }

// DigestOf returns the digest of an event's JSON. Insignificant whitespace
// does not change it; any other byte does (the provider stores events byte
// for byte).
func DigestOf(payload []byte) Digest {
	var buf bytes.Buffer
	if err := json.Compact(&buf, payload); err == nil {
		payload = buf.Bytes()
	}
	sum := sha256.Sum256(payload)
	var d Digest
	copy(d[:], sum[:len(d)])
	return d
}

// Event is one history event of an ack: its id and the digest of its JSON.
type Event struct {
	ID     uint64
	Digest Digest
}

// Ack is one AckOrchestrationItem call.
type Ack struct {
	// Worker is the reporting worker incarnation (unique per process start).
	Worker int
	// Seq numbers the calls of one incarnation from 1 (0 for an ack known
	// only from an OK report without an intent).
	Seq uint64
	// Instance and ExecutionID name the execution the delta was acked to.
	Instance    string
	ExecutionID uint64
	// Events is the history delta, in order.
	Events []Event
	// Outcome is how the call ended.
	Outcome Outcome
	// Err is the error of a failed or rejected call; TakenOver says a
	// rejected call's lock had been taken over by another holder (rather
	// than merely expired).
	Err       string
	TakenOver bool
	// Armed marks a call the parent asked to be delayed (zombie mode), and
	// Paused that the worker was stopped during that delay for longer than
	// the lock timeout: such a call must be rejected and leave no trace.
	Armed, Paused bool
}

// Oracle is everything the workers reported.
type Oracle struct {
	// Acks lists every ack call reported, in the order the parent read them.
	Acks []Ack
	// Complete is true when every ack was reported (as an intent) before it
	// was made. Only then can an event in the history that no ack explains
	// be called a phantom.
	Complete bool
	// MaxInFlight is how many acks one worker can have in flight at once
	// (its dispatcher loops). A killed worker can have left at most this
	// many committed but unreported turns. 0 disables the bound.
	MaxInFlight int
	// Raises counts the external events raised per instance (attempts,
	// including failed ones, which may still have been enqueued). An
	// instance missing here may record each external event at most once.
	Raises map[string]int
	// Killed lists the worker incarnations that were SIGKILLed.
	Killed map[int]bool
}
