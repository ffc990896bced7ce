package invariants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// Input is what Check compares the directory with.
type Input struct {
	// Oracle is what the workers reported. Nil skips the oracle-based
	// checks (invariants 1 and 2, and the oracle part of 7).
	Oracle *oracle.Oracle
	// Specs are the instances that were started; each must have finished
	// as expected (invariant 6).
	Specs []workload.Spec
	// Provider, if set, is an open provider on the directory (opened after
	// the workers stopped: its Open ran the final recovery). Invariant 6
	// then also runs workload.Verify through it.
	Provider provider.Provider
	// Now is the time leases and timers are judged at (zero: time.Now()).
	Now time.Time
	// Shared says the final recovery ran while another process had the
	// directory open (it held the log): an empty staged file - a writer
	// killed between creating it and writing it - is then not garbage yet,
	// as the sweep cannot tell it from a stopped writer's; the first process
	// to open the directory alone removes it. Not counted in invariant 5.
	Shared bool
	// Deleted are instances whose DeleteInstance returned OK, MaybeDeleted
	// those whose deletion failed (it may have committed all the same).
	// A deleted instance must have left nothing - no instance directory, no
	// queued message, claim or timer (invariant 5) - and its acks and spec
	// are not checked. A maybe-deleted instance is deleted if its directory
	// is gone, and is checked in full otherwise: all or nothing.
	Deleted, MaybeDeleted []string
}

// Check reads dir, a durofs directory at quiescence (no process using it,
// recovery done), and checks the invariants of design.md §6 against in.
// The returned error is for a directory that could not be read; broken
// invariants are in the Report.
func Check(ctx context.Context, dir string, in Input) (*Report, error) {
	st, err := load(dir)
	if err != nil {
		return nil, err
	}
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	c := &checker{st: st, in: in, r: &Report{}, nowMs: now.UnixMilli()}
	c.resolveDeletions()
	c.wellFormed()
	c.consumedOnce()
	c.fences()
	if err := c.quiescent(); err != nil {
		return nil, err
	}
	if in.Oracle != nil {
		c.committed()
		c.allOrNothing()
		c.fencedHolders()
	}
	if err := c.finished(ctx); err != nil {
		return nil, err
	}
	return c.r, nil
}

type checker struct {
	st    *store
	in    Input
	r     *Report
	nowMs int64
	// gone are the deleted instances (Input.Deleted, and the MaybeDeleted
	// whose directory is gone), by id.
	gone map[string]bool
}

// ---- deletions ----

// resolveDeletions settles which instances were deleted, reports what a
// deleted instance left (invariant 5; its queued messages are reported by
// quiescent), and takes the deleted instances' acks and specs out of the
// input: a deleted instance's history is gone with them.
func (c *checker) resolveDeletions() {
	c.gone = map[string]bool{}
	for _, id := range c.in.Deleted {
		c.gone[id] = true
	}
	for _, id := range c.in.MaybeDeleted {
		if c.st.instanceByID(id) == nil {
			c.gone[id] = true
		}
	}
	c.r.Figures.Deleted = len(c.gone)
	for _, id := range slices.Sorted(maps.Keys(c.gone)) {
		if in := c.st.instanceByID(id); in != nil {
			c.r.add(5, id, "deleted (DeleteInstance returned OK), but its directory instances/%s remains (%d executions)", in.key, len(in.execs))
		}
	}
	for _, key := range c.st.keys {
		if in := c.st.instances[key]; !c.gone[in.id] && c.isGone(in.id) {
			c.r.add(5, in.id, "a sub-orchestration of a deleted instance, but its directory instances/%s remains (%d executions)", in.key, len(in.execs))
		}
	}
	for _, key := range c.st.keys {
		if _, err := os.Lstat(filepath.Join(c.st.dir, "instances", key, "deleting")); err == nil {
			c.r.add(5, c.st.instances[key].id, "deletion marker instances/%s/deleting left behind", key)
		}
	}
	if len(c.gone) == 0 {
		return
	}
	c.in.Specs = slices.DeleteFunc(slices.Clone(c.in.Specs), func(s workload.Spec) bool { return c.isGone(s.Instance) })
	if o := c.in.Oracle; o != nil {
		kept := *o
		kept.Acks = slices.DeleteFunc(slices.Clone(o.Acks), func(a oracle.Ack) bool {
			if c.isGone(a.Instance) && a.Outcome == oracle.OutcomeOK {
				c.r.Figures.AcksOfDeleted++
			}
			return c.isGone(a.Instance)
		})
		c.in.Oracle = &kept
	}
}

// isGone reports whether instance id was deleted, or is a sub-orchestration
// of one that was (the workload names a child parent::sub::<event id>): a
// deletion takes the whole tree, children that had not started included.
func (c *checker) isGone(id string) bool {
	for {
		if c.gone[id] {
			return true
		}
		i := strings.LastIndex(id, "::sub::")
		if i < 0 {
			return false
		}
		id = id[:i]
	}
}

// ---- invariant 3: histories well formed ----

// wellFormed checks every history: every record passes its CRC (no corrupt
// line, no torn tail left after recovery), event ids are contiguous from 1
// and unique, every payload is an event whose event_id is the record's id,
// and the execution and instance records agree with the histories. Files in
// quarantine/ count too: durofs put them aside as unusable.
func (c *checker) wellFormed() {
	for _, key := range c.st.keys {
		in := c.st.instances[key]
		c.r.Figures.Instances++
		var total uint64
		var maxExec uint64
		for _, ex := range in.execs {
			w := where(in.id, ex.id)
			recs := ex.scan.Records
			if len(recs) > 0 {
				c.r.Figures.Executions++
				maxExec = ex.id
			}
			c.r.Figures.Events += len(recs)
			total += uint64(len(recs))
			if ex.readErr != nil {
				var ce *history.CorruptError
				if errors.As(ex.readErr, &ce) {
					c.r.add(3, w, "corrupt record at line %d (offset %d): %s", ce.Line, ce.Offset, ce.Reason)
				} else {
					c.r.add(3, w, "read history: %v", ex.readErr)
				}
			}
			if ex.scan.TornBytes > 0 {
				c.r.add(3, w, "torn tail of %d bytes left after recovery", ex.scan.TornBytes)
			}
			var bad []string
			seen := map[uint64]bool{}
			for i, rec := range recs {
				switch {
				case seen[rec.ID]:
					bad = append(bad, fmt.Sprintf("duplicate id %d at line %d", rec.ID, i+1))
				case rec.ID != uint64(i+1):
					bad = append(bad, fmt.Sprintf("id %d at line %d", rec.ID, i+1))
				}
				seen[rec.ID] = true
				if err := ex.decErr[i]; err != nil {
					bad = append(bad, fmt.Sprintf("line %d is not an event: %v", i+1, err))
				} else if ex.events[i].EventID != rec.ID {
					bad = append(bad, fmt.Sprintf("line %d: record id %d holds event_id %d", i+1, rec.ID, ex.events[i].EventID))
				}
			}
			if len(bad) > 0 {
				c.r.add(3, w, "event ids not contiguous from 1 and unique: %s", summarize(bad, 4))
			}
			switch {
			case ex.stateErr != nil:
				c.r.add(3, w, "state.json: %v", ex.stateErr)
			case ex.state == nil && len(recs) > 0:
				c.r.add(3, w, "history has %d events but state.json is missing", len(recs))
			case ex.state != nil && ex.state.EventCount != uint64(len(recs)):
				c.r.add(3, w, "state.json says %d events, history has %d", ex.state.EventCount, len(recs))
			}
		}
		switch {
		case in.fileErr != nil:
			c.r.add(3, in.id, "instance.json: %v", in.fileErr)
		case in.file == nil && total > 0:
			c.r.add(3, in.id, "instance.json is missing")
		case in.file != nil:
			if in.file.TotalEvents != total {
				c.r.add(3, in.id, "instance.json says %d events in total, the histories hold %d", in.file.TotalEvents, total)
			}
			if in.file.CurrentExecutionID != maxExec {
				c.r.add(3, in.id, "instance.json says current execution %d, the latest history is execution %d", in.file.CurrentExecutionID, maxExec)
			}
		}
	}
	qdir := filepath.Join(c.st.dir, "quarantine")
	if entries, err := os.ReadDir(qdir); err == nil {
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".reason") {
				reason, _ := os.ReadFile(filepath.Join(qdir, e.Name()+".reason"))
				c.r.add(3, filepath.Join("quarantine", e.Name()), "quarantined: %s", strings.TrimSpace(string(reason)))
			}
		}
	}
}

// summarize joins the first n items of list.
func summarize(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return strings.Join(list[:n], ", ") + fmt.Sprintf(" (+%d more)", len(list)-n)
}

// ---- invariant 4: each consumed message reflected in at most one turn ----

// consumedOnce checks that every message consumed shows up at most once in
// the history: a start (OrchestrationStarted, only as an execution's first
// event), each completion (ActivityCompleted, ActivityFailed, TimerFired,
// SubOrchestrationCompleted, SubOrchestrationFailed) per scheduling event,
// and each raised external event per instance (at most as often as it was
// raised).
func (c *checker) consumedOnce() {
	for _, key := range c.st.keys {
		in := c.st.instances[key]
		external := map[string]int{}
		for _, ex := range in.execs {
			w := where(in.id, ex.id)
			done := map[uint64]uint64{} // source id → completing event id
			for i, e := range ex.events {
				if ex.decErr[i] != nil {
					continue
				}
				switch k := e.Kind.(type) {
				case provider.OrchestrationStarted:
					if i != 0 {
						c.r.add(4, w, "OrchestrationStarted again as event %d (a start consumed twice)", e.EventID)
					}
				case provider.ExternalEvent:
					external[k.Name]++
				case provider.ActivityCompletedEvent, provider.ActivityFailedEvent, provider.TimerFiredEvent,
					provider.SubOrchestrationCompleted, provider.SubOrchestrationFailed:
					if e.SourceEventID == nil {
						continue // invariant 6 (workload.Verify) reports it
					}
					src := *e.SourceEventID
					if prev, dup := done[src]; dup {
						c.r.add(4, w, "%s for operation %d recorded twice (events %d and %d)", e.Kind.Type(), src, prev, e.EventID)
						continue
					}
					done[src] = e.EventID
				}
			}
		}
		allowed := 1
		if c.in.Oracle != nil && c.in.Oracle.Raises[in.id] > 1 {
			allowed = c.in.Oracle.Raises[in.id]
		}
		for name, n := range external {
			if n > allowed {
				c.r.add(4, in.id, "external event %q recorded %d times, raised %d", name, n, allowed)
			}
		}
	}
}

// ---- invariant 7: fences never decrease ----

// fences checks that the fence stored with each history record (the record
// epoch) never decreases, in file order within an execution and across
// executions in order, and that instance.json's last fence and the lease's
// fence are at least the highest fence in the history.
func (c *checker) fences() {
	for _, key := range c.st.keys {
		in := c.st.instances[key]
		var last uint64
		var lastAt string
		for _, ex := range in.execs {
			for i, rec := range ex.scan.Records {
				if rec.Epoch < last {
					c.r.add(7, where(in.id, ex.id), "fence %d at event %d (line %d) is below fence %d of %s", rec.Epoch, rec.ID, i+1, last, lastAt)
					continue
				}
				last, lastAt = rec.Epoch, fmt.Sprintf("execution %d event %d", ex.id, rec.ID)
			}
		}
		if in.file != nil && in.file.LastFence < last {
			c.r.add(7, in.id, "instance.json last_fence %d is below the history's fence %d", in.file.LastFence, last)
		}
		if in.lease != nil && in.lease.Fence < last {
			c.r.add(7, in.id, "lease.json fence %d is below the history's fence %d", in.lease.Fence, last)
		}
		if in.lease != nil && in.file != nil && in.lease.Fence < in.file.LastFence {
			c.r.add(7, in.id, "lease.json fence %d is below instance.json last_fence %d", in.lease.Fence, in.file.LastFence)
		}
	}
}

// ---- invariant 5: quiescence ----

// emptyFile reports whether d is a regular file of size 0.
func emptyFile(d fs.DirEntry) bool {
	fi, err := d.Info()
	return err == nil && fi.Mode().IsRegular() && fi.Size() == 0
}

// quiescent checks that nothing is pending: no lease or claim marks a
// commit pending, no staged or temporary files anywhere, no claims, no lease
// held at now, and the queues hold only timers that are not yet due (every
// outbound item of every committed turn was consumed).
func (c *checker) quiescent() error {
	err := filepath.WalkDir(c.st.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(c.st.dir, path)
		name := d.Name()
		switch {
		case vfs.IsTemp(name):
			c.r.add(5, rel, "temporary file left behind")
		case strings.HasPrefix(name, ".staged-"):
			if c.in.Shared && emptyFile(d) {
				return nil // left for a lone open (Input.Shared)
			}
			c.r.add(5, rel, "staged message never published or removed")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("invariants: walk %s: %w", c.st.dir, err)
	}
	if err := c.pendingCommits(); err != nil {
		return err
	}
	for _, q := range []string{"orchestrator", "worker"} {
		qdir := filepath.Join(c.st.dir, "queues", q)
		for _, sub := range []string{"", "claims"} {
			entries, err := os.ReadDir(filepath.Join(qdir, sub))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("invariants: %w", err)
			}
			for _, e := range entries {
				msg, ok := strings.CutSuffix(e.Name(), ".json")
				if !ok || !fsqueue.ValidName(msg) {
					continue
				}
				rel := filepath.Join("queues", q, sub, e.Name())
				switch {
				case sub == "claims":
					c.r.add(5, rel, "claim left behind")
				case q == "worker":
					c.r.add(5, rel, "work item never consumed%s", describeMessage(filepath.Join(qdir, e.Name())))
				default:
					c.orchMessage(rel, filepath.Join(qdir, e.Name()))
				}
			}
		}
	}
	for _, key := range c.st.keys {
		in := c.st.instances[key]
		switch {
		case in.leaseErr != nil:
			c.r.add(5, in.id, "lease.json: %v", in.leaseErr)
		case in.lease != nil && in.lease.HeldAt(c.nowMs):
			c.r.add(5, in.id, "lease held by %q until %s", in.lease.Owner, time.UnixMilli(in.lease.ExpiresAtMs).Format(time.RFC3339Nano))
		}
	}
	sessions, _ := filepath.Glob(filepath.Join(c.st.dir, "sessions", "*.json"))
	for _, path := range sessions {
		var l struct {
			Token       string `json:"token"`
			ExpiresAtMs int64  `json:"expires_at_ms"`
		}
		if _, err := readJSON(path, &l); err == nil && l.Token != "" && l.ExpiresAtMs > c.nowMs {
			c.r.add(5, filepath.Join("sessions", filepath.Base(path)), "session lease held")
		}
	}
	return nil
}

// pendingCommits checks that no commit is left pending: the provider's
// PendingCommits (a read-only provider: no recovery runs) lists no record
// of the write-ahead log that a lease or claim still marks - committed but
// never fully applied - and no lease holds a mark at all: a mark naming no
// record is a commit that never happened, which the instance's next flock
// holder must have cleared (every instance was fetched again after it, to
// consume the messages the commit did not).
func (c *checker) pendingCommits() error {
	p, err := provider.OpenReadOnly(c.st.dir, provider.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fmt.Errorf("invariants: open the directory read-only: %w", err)
	}
	defer p.Close()
	pcs, err := p.PendingCommits(context.Background())
	if err != nil {
		return fmt.Errorf("invariants: %w", err)
	}
	logged := map[string]bool{}
	for _, pc := range pcs {
		logged[pc.ID] = true
		what := pc.Instance
		if what == "" {
			what = pc.Key
		}
		c.r.add(5, what, "commit %s (%s, log position %s) is in the write-ahead log and still marked pending: committed, never applied in full", pc.ID, pc.Kind, pc.LSN)
	}
	for _, key := range c.st.keys {
		in := c.st.instances[key]
		if id := in.pendingMark(); id != "" && !logged[id] {
			c.r.add(5, in.id, "the lease marks commit %s pending, but no such record is in the log since the checkpoint: a commit that never happened, whose mark no later holder cleared", id)
		}
	}
	return nil
}

// queueMessage is a queue message file (fsqueue.Message).
type queueMessage struct {
	VisibleAtMs int64           `json:"visible_at_ms"`
	Payload     json.RawMessage `json:"payload"`
}

// orchMessage accepts a timer that is not yet due and reports anything else.
func (c *checker) orchMessage(rel, path string) {
	var m queueMessage
	if _, err := readJSON(path, &m); err != nil {
		c.r.add(5, rel, "unreadable message: %v", err)
		return
	}
	item, err := provider.UnmarshalWorkItem(m.Payload)
	if err != nil {
		c.r.add(5, rel, "message never consumed (undecodable payload: %v)", err)
		return
	}
	if target := provider.TargetInstance(item); c.isGone(target) {
		c.r.add(5, rel, "message for deleted instance %s left behind: %s", target, item.Kind())
		return
	}
	if _, timer := item.(provider.TimerFired); timer && m.VisibleAtMs > c.nowMs {
		c.r.Figures.PendingTimers++
		return
	}
	c.r.add(5, rel, "message never consumed: %s for %s", item.Kind(), provider.TargetInstance(item))
}

// describeMessage names a work item's target, for messages.
func describeMessage(path string) string {
	var m queueMessage
	if _, err := readJSON(path, &m); err != nil {
		return ""
	}
	item, err := provider.UnmarshalWorkItem(m.Payload)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(": %s for %s", item.Kind(), provider.TargetInstance(item))
}

// ---- invariants 1, 2 and the oracle part of 7 ----

// execOf returns the execution an ack names, or nil.
func (c *checker) execOf(a oracle.Ack) *execData {
	in := c.st.instances[names.Encode(a.Instance)]
	if in == nil {
		return nil
	}
	return in.exec(a.ExecutionID)
}

// presence counts the events of a that are in the history with the same
// bytes; it also returns the ids missing and changed.
func presence(ex *execData, a oracle.Ack) (present int, missing, changed []uint64) {
	for _, ev := range a.Events {
		i, ok := -1, false
		if ex != nil {
			i, ok = ex.byID[ev.ID]
		}
		switch {
		case !ok:
			missing = append(missing, ev.ID)
		case ex.digests[i] != ev.Digest:
			changed = append(changed, ev.ID)
		default:
			present++
		}
	}
	return present, missing, changed
}

// committed checks invariant 1: every ack that returned OK is in the history
// with the same event ids and the same bytes.
func (c *checker) committed() {
	for _, a := range c.in.Oracle.Acks {
		if a.Outcome != oracle.OutcomeOK {
			continue
		}
		c.r.Figures.AcksOK++
		if len(a.Events) == 0 {
			continue
		}
		_, missing, changed := presence(c.execOf(a), a)
		if len(missing)+len(changed) > 0 {
			c.r.add(1, where(a.Instance, a.ExecutionID), "ack %d of worker %d returned OK but %d of its %d events are missing (ids %v) and %d differ (ids %v)",
				a.Seq, a.Worker, len(missing), len(a.Events), missing, len(changed), changed)
		}
	}
}

// allOrNothing checks invariant 2: an ack that failed or never returned left
// none or all of its events; every event in a history was written by some
// reported ack (no phantom); a killed worker left at most MaxInFlight
// committed but unreported turns.
func (c *checker) allOrNothing() {
	o := c.in.Oracle
	type execKey struct {
		key  string
		exec uint64
	}
	type eventKey struct {
		id     uint64
		digest oracle.Digest
	}
	explained := map[execKey]map[eventKey]bool{}
	perKill := map[int]int{}
	for _, a := range o.Acks {
		k := execKey{names.Encode(a.Instance), a.ExecutionID}
		if explained[k] == nil {
			explained[k] = map[eventKey]bool{}
		}
		for _, ev := range a.Events {
			explained[k][eventKey{ev.ID, ev.Digest}] = true
		}
		if a.Outcome == oracle.OutcomeOK || len(a.Events) == 0 {
			continue
		}
		present, _, _ := presence(c.execOf(a), a)
		w := where(a.Instance, a.ExecutionID)
		switch {
		case present > 0 && present < len(a.Events):
			c.r.add(2, w, "partial turn: %d of the %d events of ack %d of worker %d (%s) are in the history",
				present, len(a.Events), a.Seq, a.Worker, a.Outcome)
		case present == 0:
			if a.Outcome == oracle.OutcomeKilled {
				c.r.Figures.KilledAbsent++
			}
		default: // complete
			switch a.Outcome {
			case oracle.OutcomeKilled:
				c.r.Figures.KilledCommitted++
				perKill[a.Worker]++
			case oracle.OutcomeFailed:
				c.r.Figures.FailedWithEffect++
			case oracle.OutcomeUnreported:
				c.r.add(2, w, "ack %d of worker %d committed but was never reported, and the worker was not killed", a.Seq, a.Worker)
			}
		}
	}
	if o.MaxInFlight > 0 {
		for w, n := range perKill {
			if n > o.MaxInFlight {
				c.r.add(2, fmt.Sprintf("worker %d", w), "%d committed turns were in flight when it was killed, at most %d can be", n, o.MaxInFlight)
			}
		}
	}

	// Phantoms: events no reported ack explains.
	runs := 0
	for _, key := range c.st.keys {
		in := c.st.instances[key]
		for _, ex := range in.execs {
			ek := explained[execKey{key, ex.id}]
			var ids []string
			prev := false
			for i, rec := range ex.scan.Records {
				unexplained := !ek[eventKey{rec.ID, ex.digests[i]}]
				if unexplained {
					ids = append(ids, fmt.Sprint(rec.ID))
					if !prev {
						runs++
					}
				}
				prev = unexplained
			}
			if len(ids) > 0 && o.Complete {
				c.r.add(2, where(in.id, ex.id), "phantom events (written by no reported ack): ids %s", summarize(ids, 8))
			}
		}
	}
	if !o.Complete && o.MaxInFlight > 0 && runs > len(o.Killed)*o.MaxInFlight {
		c.r.add(2, "histories", "%d runs of events no OK ack explains, but %d kills can explain at most %d",
			runs, len(o.Killed), len(o.Killed)*o.MaxInFlight)
	}
}

// committedElsewhere reports whether another OK ack (of another worker, or
// of another dispatcher of the same worker: its lease can pass to a second
// dispatcher of the same process when the process was stopped past it),
// for the same execution, carries every event of a (event id and bytes).
func (c *checker) committedElsewhere(a oracle.Ack) bool {
	for _, b := range c.in.Oracle.Acks {
		if b.Outcome != oracle.OutcomeOK || (b.Worker == a.Worker && b.Seq == a.Seq) || b.Instance != a.Instance || b.ExecutionID != a.ExecutionID {
			continue
		}
		byID := make(map[uint64]oracle.Digest, len(b.Events))
		for _, ev := range b.Events {
			byID[ev.ID] = ev.Digest
		}
		all := len(a.Events) > 0
		for _, ev := range a.Events {
			if d, ok := byID[ev.ID]; !ok || d != ev.Digest {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// fencedHolders checks the oracle part of invariant 7: an ack rejected for
// a lost lock, or held back while its worker was stopped past its lease (a
// zombie holder), left no trace and was not accepted; all events of one
// committed turn carry one fence, and no two committed turns of an instance
// share a fence (one lease commits at most one turn).
func (c *checker) fencedHolders() {
	type turnAt struct {
		exec uint64
		id   uint64
	}
	fenceOwner := map[string]map[uint64]turnAt{} // instance key → fence → first event of the turn
	for _, a := range c.in.Oracle.Acks {
		w := where(a.Instance, a.ExecutionID)
		ex := c.execOf(a)
		present, _, _ := presence(ex, a)
		if a.Paused {
			c.r.Figures.Paused++
			if a.Outcome == oracle.OutcomeOK {
				c.r.add(7, w, "ack %d of worker %d was accepted although its worker was stopped past its lease (zombie holder)", a.Seq, a.Worker)
			}
		}
		if a.Outcome == oracle.OutcomeRejected {
			c.r.Figures.Rejected++
			// A stale holder that resumes can re-decide the very turn its
			// successor committed, from the same history in the same
			// millisecond: byte-identical events. Those bytes are a trace
			// of the stale ack only if no committed ack accounts for them.
			if present > 0 && !c.committedElsewhere(a) {
				c.r.add(7, w, "ack %d of worker %d was rejected as stale (%s) but %d of its %d events are in the history", a.Seq, a.Worker, a.Err, present, len(a.Events))
			}
		}
		if len(a.Events) == 0 || present != len(a.Events) || (a.Outcome != oracle.OutcomeOK && a.Outcome != oracle.OutcomeKilled) {
			continue
		}
		fences := map[uint64]bool{}
		for _, ev := range a.Events {
			fences[ex.scan.Records[ex.byID[ev.ID]].Epoch] = true
		}
		if len(fences) > 1 {
			c.r.add(7, w, "the events of ack %d of worker %d carry %d different fences", a.Seq, a.Worker, len(fences))
			continue
		}
		fence := ex.scan.Records[ex.byID[a.Events[0].ID]].Epoch
		key := names.Encode(a.Instance)
		if fenceOwner[key] == nil {
			fenceOwner[key] = map[uint64]turnAt{}
		}
		at := turnAt{a.ExecutionID, a.Events[0].ID}
		if prev, ok := fenceOwner[key][fence]; ok && prev != at {
			c.r.add(7, w, "two turns committed under fence %d (first events: execution %d event %d, execution %d event %d)",
				fence, prev.exec, prev.id, at.exec, at.id)
			continue
		}
		fenceOwner[key][fence] = at
	}
}

// ---- invariant 6: every instance finished as expected ----

// expectation is what one instance must look like at the end.
type expectation struct {
	status     string  // "" means any terminal status
	output     *string // nil means any output
	executions int     // > 0: required number of executions
}

// finished checks that every spec's instance, and every sub-orchestration
// they started, reached its expected terminal status and output (from the
// files), and, with a provider, runs workload.Verify as well.
func (c *checker) finished(ctx context.Context) error {
	flagged := map[string]bool{}
	seen := map[string]bool{}
	var visit func(id string, exp expectation)
	visit = func(id string, exp expectation) {
		if seen[id] {
			return
		}
		seen[id] = true
		bad := func(format string, args ...any) {
			flagged[id] = true
			c.r.add(6, id, format, args...)
		}
		in := c.st.instanceByID(id)
		var latest *execData
		if in != nil {
			latest = in.latest()
		}
		if latest == nil {
			bad("never started (no history)")
			return
		}
		status, output := statusOf(latest)
		switch {
		case exp.status != "" && status != exp.status:
			bad("status %s (output %q), want %s %q", status, output, exp.status, deref(exp.output))
		case exp.status == "" && status != workload.StatusCompleted && status != workload.StatusFailed:
			bad("status %s, want a terminal status", status)
		case exp.output != nil && output != *exp.output:
			bad("output %q, want %q", output, *exp.output)
		}
		execs := 0
		for _, ex := range in.execs {
			if len(ex.scan.Records) > 0 {
				execs++
			}
		}
		if exp.executions > 0 && execs != exp.executions {
			bad("%d executions, want %d", execs, exp.executions)
		}
		// Children: each must have ended the way this instance recorded.
		for _, ex := range in.execs {
			results := map[uint64]provider.Event{}
			for i, e := range ex.events {
				if ex.decErr[i] == nil && e.SourceEventID != nil {
					results[*e.SourceEventID] = e
				}
			}
			for i, e := range ex.events {
				sub, ok := e.Kind.(provider.SubOrchestrationScheduled)
				if ex.decErr[i] != nil || !ok {
					continue
				}
				var cexp expectation
				switch k := results[e.EventID].Kind.(type) {
				case provider.SubOrchestrationCompleted:
					cexp.status, cexp.output = workload.StatusCompleted, &k.Result
				case provider.SubOrchestrationFailed:
					cexp.status = workload.StatusFailed
					if k.Details != nil {
						m := k.Details.DisplayMessage()
						cexp.output = &m
					}
				}
				c.r.Figures.Children++
				visit(sub.Instance, cexp)
			}
		}
	}
	for _, s := range c.in.Specs {
		c.r.Figures.Specs++
		exp := expectation{status: s.ExpectStatus, output: &s.ExpectOutput}
		if s.Kind == workload.KindContinueAsNew {
			exp.executions = s.N + 1
		}
		before := c.r.Counts[6]
		visit(s.Instance, exp)
		if c.r.Counts[6] == before && !flagged[s.Instance] {
			c.r.Figures.SpecsOK++
		}
	}
	if c.in.Provider == nil || len(c.in.Specs) == 0 {
		return nil
	}
	adm, ok := c.in.Provider.Admin()
	if !ok {
		adm = nil
	}
	rep, err := workload.Verify(ctx, c.in.Provider, adm, c.in.Specs)
	if err != nil {
		return fmt.Errorf("invariants: workload.Verify: %w", err)
	}
	for _, v := range rep.Violations {
		inv := 6
		switch v.Check {
		case "event_ids":
			inv = 3
		case "completion":
			inv = 4
		}
		// The file-based checks above already counted this instance's
		// failure; count Verify's finding only if it is new.
		if inv == 6 && flagged[v.Instance] {
			continue
		}
		if inv != 6 && c.hasViolation(inv, v.Instance) {
			continue
		}
		c.r.add(inv, where(v.Instance, v.ExecutionID), "workload.Verify %s: %s", v.Check, v.Detail)
	}
	return nil
}

// hasViolation reports whether a violation of inv about instance was
// already recorded.
func (c *checker) hasViolation(inv int, instance string) bool {
	return slices.ContainsFunc(c.r.Violations, func(v Violation) bool {
		return v.Invariant == inv && (v.Where == instance || strings.HasPrefix(v.Where, instance+"#"))
	})
}

// statusOf derives an execution's status and output from its last event.
func statusOf(ex *execData) (status, output string) {
	e, ok := ex.last()
	if !ok {
		return "Unknown", ""
	}
	switch k := e.Kind.(type) {
	case provider.OrchestrationCompleted:
		return workload.StatusCompleted, k.Output
	case provider.OrchestrationFailed:
		if k.Details != nil {
			return workload.StatusFailed, k.Details.DisplayMessage()
		}
		return workload.StatusFailed, ""
	case provider.OrchestrationContinuedAsNew:
		return "ContinuedAsNew", k.Input
	}
	return "Running", ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
