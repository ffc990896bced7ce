package invariants

import (
	"fmt"
	"io"
	"strconv"
)

// NumInvariants is the number of invariants (design.md §6), numbered from 1.
const NumInvariants = 7

// Names are the invariants' short names, indexed by number (Names[0] is
// unused).
var Names = [NumInvariants + 1]string{
	"",
	"no lost committed turn",
	"no partial or phantom turn",
	"histories well formed",
	"each message consumed at most once",
	"quiescent directory",
	"every instance finished as expected",
	"fences never decrease, stale holders fenced",
}

// maxDetails bounds the violations kept with their details; all are counted.
const maxDetails = 500

// Violation is one broken invariant.
type Violation struct {
	// Invariant is the invariant's number (1..NumInvariants).
	Invariant int `json:"invariant"`
	// Where names the instance (and "#execution"), file or ack concerned.
	Where string `json:"where"`
	// Detail says what was found.
	Detail string `json:"detail"`
}

// String formats the violation for humans.
func (v Violation) String() string {
	return fmt.Sprintf("[%d %s] %s: %s", v.Invariant, Names[v.Invariant], v.Where, v.Detail)
}

// Figures are what the checker looked at and found besides violations.
type Figures struct {
	// Instances, Executions and Events count what was read from disk.
	Instances, Executions, Events int
	// Specs is the number of expected instances checked, SpecsOK how many of
	// them finished as expected, Children the sub-orchestrations checked.
	Specs, SpecsOK, Children int
	// AcksOK counts acks that returned OK (each checked by invariant 1).
	AcksOK int
	// KilledCommitted counts acks in flight when their worker was killed
	// whose turn is in the history in full; KilledAbsent those that left no
	// trace.
	KilledCommitted, KilledAbsent int
	// FailedWithEffect counts acks that returned an error other than a lost
	// lock but whose turn is in the history in full (the error came after
	// the commit point); allowed.
	FailedWithEffect int
	// Rejected counts acks rejected because their lock was lost (stale
	// holders); each must have left no trace.
	Rejected int
	// Paused counts acks whose worker was stopped past its lease while the
	// ack was held back (zombie holders); each must have been rejected.
	Paused int
	// PendingTimers counts timer messages not yet due left in the queue.
	PendingTimers int
	// Deleted counts the instances found deleted (Input.Deleted and
	// MaybeDeleted), AcksOfDeleted the acks that returned OK to them (not
	// checked: their history went with them).
	Deleted, AcksOfDeleted int
}

// Report is the result of Check.
type Report struct {
	// Counts[i] is the number of violations of invariant i (Counts[0] is
	// unused).
	Counts [NumInvariants + 1]int
	// Violations lists the first violations found with their details.
	Violations []Violation
	// Figures describe what was checked.
	Figures Figures
}

// Total returns the number of violations of all invariants.
func (r *Report) Total() int {
	n := 0
	for _, c := range r.Counts[1:] {
		n += c
	}
	return n
}

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return r.Total() == 0 }

// add records a violation of invariant inv.
func (r *Report) add(inv int, where, format string, args ...any) {
	r.Counts[inv]++
	if len(r.Violations) < maxDetails {
		r.Violations = append(r.Violations, Violation{Invariant: inv, Where: where, Detail: fmt.Sprintf(format, args...)})
	}
}

// Write prints the per-invariant counts, then up to details violations,
// and finally "violations: N".
func (r *Report) Write(w io.Writer, details int) {
	r.WriteCounts(w, details)
	fmt.Fprintf(w, "violations: %d\n", r.Total())
}

// WriteCounts prints the per-invariant counts, then up to details
// violations (Write without its last line).
func (r *Report) WriteCounts(w io.Writer, details int) {
	for i := 1; i <= NumInvariants; i++ {
		fmt.Fprintf(w, "  invariant %d %-46s %d\n", i, Names[i]+":", r.Counts[i])
	}
	for i, v := range r.Violations {
		if i == details {
			fmt.Fprintf(w, "    … %d more\n", r.Total()-i)
			break
		}
		fmt.Fprintf(w, "    %s\n", v)
	}
}

// Breakdown returns the per-invariant counts as "1:0 2:0 …".
func (r *Report) Breakdown() string {
	s := ""
	for i := 1; i <= NumInvariants; i++ {
		if i > 1 {
			s += " "
		}
		s += strconv.Itoa(i) + ":" + strconv.Itoa(r.Counts[i])
	}
	return s
}

// where names an execution for messages.
func where(instance string, exec uint64) string {
	if exec == 0 {
		return instance
	}
	return instance + "#" + strconv.FormatUint(exec, 10)
}
