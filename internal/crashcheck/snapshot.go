// Package crashcheck reads the durable content of a durofs directory as a
// canonical, comparable [Snapshot] and checks the invariants that must hold
// after recovery. The crash-point sweep (scripts/crashtest) and the
// power-loss simulation (provider/powerloss_test.go) share it.
//
// A snapshot is a sorted multiset of text facts, one per durable item that a
// client can observe:
//
//	instance <key> <instance.json without volatile fields>
//	execution <key>/<n> <state.json without volatile fields>
//	gwid <key>/<name>            a go-workflows execution's by-id entry
//	event <key>/<n> #<id> <event JSON>
//	orch <payload JSON>          a published orchestrator-queue message
//	work <payload JSON>          a published worker-queue message
//	gw:<queue dir> <payload>     a published message of a go-workflows queue
//	                             (queues/gw-workflow-*, queues/gw-activity-*)
//
// Commits still pending after recovery are problems: a lease or an acked
// claim whose pending mark names a record of the write-ahead log (since its
// checkpoint). So is a parent -> children index (children/) that disagrees
// with the instance records: a record naming a parent without its entry, or
// an entry whose instance does not name that parent.
//
// Volatile fields are those that legitimately differ between two runs of the
// same workload: timestamps (kept only as "set or not"), fences, lease and
// claim state, message names. Two runs of one deterministic workload
// therefore give equal facts, and a crash test can demand that the state
// after a crash and recovery equals the reference state before or after the
// operation that was in flight.
//
// Reading is done through a [vfs.FS], so a snapshot works on a real
// directory and on a [vfs.MemFS] crash image alike. It never writes.
package crashcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/jsonseal"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/wal"
)

// Snapshot is the canonical durable content of a durofs directory.
type Snapshot struct {
	// Facts are the observable items, sorted (see the package comment).
	Facts []string
	// Problems are invariant violations found while reading: commits a
	// lease or claim still marks pending although their record is in the
	// log, acked claims, corrupt or torn histories, event ids
	// not contiguous from 1, decreasing fences, summary counters that
	// disagree with the histories. After a completed recovery there must be
	// none.
	Problems []string
	// Garbage counts leftovers that are invisible to clients.
	Garbage Garbage

	dir    string          // the data directory (seals name files relative to it)
	logged map[string]bool // ids of the records in the log since its checkpoint
}

// Garbage counts invisible leftovers of interrupted operations.
type Garbage struct {
	// Staged counts .staged-* queue files: messages staged by an ack that
	// never committed (the sweep removes them once they are old enough).
	Staged int
	// Temps counts .tmp-* files in the queue, claims and tmp directories.
	Temps int
	// OrphanClaims counts worker claims whose message is gone.
	OrphanClaims int
	// DanglingMarks counts instance leases whose pending mark names a
	// record that is not in the write-ahead log: the commit never happened
	// (its writer died between marking and appending), and the instance's
	// next flock holder clears the mark.
	DanglingMarks int
	// EmptyDirs counts instance directories that hold nothing of an
	// instance (no instance.json, no execution, no lease or one without
	// queue state): a crash while an instance was deleted or created.
	EmptyDirs int
}

// String formats g compactly.
func (g Garbage) String() string {
	return fmt.Sprintf("staged=%d temps=%d orphan_claims=%d dangling_marks=%d empty_dirs=%d", g.Staged, g.Temps, g.OrphanClaims, g.DanglingMarks, g.EmptyDirs)
}

// Options configure TakeWith.
type Options struct {
	// SegmentSize is the write-ahead log's segment size the directory's
	// processes used (0: wal.DefaultSegmentSize). Frames that start past it
	// are void.
	SegmentSize int64
}

// TakeWith reads the directory dir of fsys. Unreadable files are reported
// as problems; an error means dir itself could not be listed.
func TakeWith(fsys vfs.FS, dir string, opts Options) (*Snapshot, error) {
	s := &Snapshot{dir: dir}
	logged, err := loggedCommits(fsys, dir, opts)
	if err != nil {
		return nil, err
	}
	s.logged = logged
	if err := s.readInstances(fsys, dir); err != nil {
		return nil, err
	}
	for _, q := range []struct{ dir, label string }{{"orchestrator", "orch"}, {"worker", "work"}} {
		if err := s.readQueue(fsys, filepath.Join(dir, "queues", q.dir), q.dir, q.label); err != nil {
			return nil, err
		}
	}
	queues, err := readDir(fsys, filepath.Join(dir, "queues"))
	if err != nil {
		return nil, fmt.Errorf("crashcheck: %w", err)
	}
	for _, q := range queues {
		if strings.HasPrefix(q, "gw-") && !strings.HasPrefix(q, tempPrefix) {
			if err := s.readQueue(fsys, filepath.Join(dir, "queues", q), q, "gw:"+q); err != nil {
				return nil, err
			}
		}
	}
	if err := s.readTemps(fsys, filepath.Join(dir, "tmp")); err != nil {
		return nil, err
	}
	slices.Sort(s.Facts)
	slices.Sort(s.Problems)
	return s, nil
}

// loggedCommits returns the ids of the records in dir's write-ahead log from
// its checkpoint on (every record a pending mark can name and still matter).
func loggedCommits(fsys vfs.FS, dir string, opts Options) (map[string]bool, error) {
	ids := map[string]bool{}
	wdir := filepath.Join(dir, "wal")
	if _, err := fsys.Stat(wdir); vfs.IsNotExist(err) {
		return ids, nil
	}
	l, err := wal.OpenReadOnly(fsys, wdir, wal.Options{SegmentSize: opts.SegmentSize})
	if err != nil {
		return nil, fmt.Errorf("crashcheck: %w", err)
	}
	from, err := l.Checkpoint()
	if err != nil {
		return nil, fmt.Errorf("crashcheck: %w", err)
	}
	_, err = l.Scan(from, func(_ wal.LSN, payload []byte) error {
		var rec struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(payload, &rec) == nil && rec.ID != "" {
			ids[rec.ID] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("crashcheck: scan the write-ahead log: %w", err)
	}
	return ids, nil
}

// pendingMark is the mark a lease (data.pending) or an acked claim (data)
// holds for a commit that may not be applied yet.
type pendingMark struct {
	ID string `json:"id"`
}

// readLeaseMark checks an instance's lease for a pending mark: one naming a
// logged record is a commit recovery did not finish (a problem), one naming
// no record is garbage. It reports whether the lease keeps anything: a
// holder or queue state.
func (s *Snapshot) readLeaseMark(fsys vfs.FS, idir, key string) (kept bool) {
	data, err := fsys.ReadFile(filepath.Join(idir, "lease.json"))
	if err != nil {
		return err != nil && !vfs.IsNotExist(err) // missing, or unreadable: a lease is volatile, never a commit
	}
	var l struct {
		Token string          `json:"token"`
		Data  json.RawMessage `json:"data"`
	}
	var d struct {
		Pending *pendingMark `json:"pending"`
	}
	if json.Unmarshal(data, &l) != nil {
		return true
	}
	kept = l.Token != "" || len(l.Data) > 0
	if len(l.Data) == 0 || json.Unmarshal(l.Data, &d) != nil || d.Pending == nil {
		return kept
	}
	if s.logged[d.Pending.ID] {
		s.problem("instance %s: its lease marks commit %s pending, and that record is in the log: committed but never applied", key, d.Pending.ID)
		return true
	}
	s.Garbage.DanglingMarks++
	return true
}

// readTemps counts the temporary files of tmp/.
func (s *Snapshot) readTemps(fsys vfs.FS, dir string) error {
	names, err := readDir(fsys, dir)
	if err != nil {
		return fmt.Errorf("crashcheck: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, tempPrefix) {
			s.Garbage.Temps++
		}
	}
	return nil
}

// readSealed reads a JSON file of the provider (instance.json, state.json)
// and checks its seal (format 5, package jsonseal): a snapshot is taken at
// rest, after recovery, so a seal that does not match is damage. The
// object is returned whole (canonical drops "crc32c" as volatile: it
// changes with every volatile field). dir is unused.
func readSealed(fsys vfs.FS, dir, path string) ([]byte, error) {
	data, err := fsys.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if _, _, err := jsonseal.Unseal(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

func (s *Snapshot) problem(format string, args ...any) {
	s.Problems = append(s.Problems, fmt.Sprintf(format, args...))
}

// readDir lists a directory; a missing one is empty.
func readDir(fsys vfs.FS, dir string) ([]string, error) {
	names, err := fsys.ReadDirNames(dir)
	if vfs.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// canonical parses a JSON object, drops the volatile keys (dropping a key
// "k!" keeps whether k was set and non-null as a boolean), and re-encodes it
// with sorted keys.
func canonical(data []byte, volatile []string, nested map[string][]string) (string, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return "", err
	}
	scrub(m, volatile)
	for k, vol := range nested {
		if sub, ok := m[k].(map[string]any); ok {
			scrub(sub, vol)
		}
	}
	if gw, ok := m["gw"].(map[string]any); ok {
		execs, _ := gw["executions"].([]any)
		for _, e := range execs {
			if em, ok := e.(map[string]any); ok {
				scrub(em, gwExecVolatile)
			}
		}
		if _, isExec := gw["n"]; isExec {
			// A go-workflows execution's record in its state.json.
			scrub(gw, gwExecVolatile)
		}
	}
	out, err := json.Marshal(m)
	return string(out), err
}

func scrub(m map[string]any, volatile []string) {
	for _, k := range volatile {
		if name, keepSet := strings.CutSuffix(k, "!"); keepSet {
			m[name] = m[name] != nil
			continue
		}
		delete(m, k)
	}
}

var (
	instanceVolatile = []string{"crc32c", "updated_at_ms", "last_fence", "completed_at_ms!"}
	recordVolatile   = []string{"created_at_ms", "updated_at_ms"}
	stateVolatile    = []string{"crc32c", "started_at_ms", "completed_at_ms!", "generation!"}
	// gwExecVolatile are the volatile fields of each go-workflows execution
	// record, in instance.json's "gw" and in a state.json's "gw"
	// (history_bytes follows the history's fences).
	gwExecVolatile = []string{"created_ns", "completed_ns!", "history_bytes!"}
)

func (s *Snapshot) readInstances(fsys vfs.FS, dir string) error {
	keys, err := readDir(fsys, filepath.Join(dir, "instances"))
	if err != nil {
		return fmt.Errorf("crashcheck: %w", err)
	}
	indexed := map[string]bool{} // "<parent key>/<child key>" the records want in children/
	for _, key := range keys {
		idir := filepath.Join(dir, "instances", key)
		hasLease := s.readLeaseMark(fsys, idir, key)
		var inst struct {
			Executions  execRuns `json:"executions"`
			TotalEvents uint64   `json:"total_events"`
			Record      *struct {
				Parent *string `json:"parent_instance_id"`
			} `json:"record"`
		}
		hasInst := false
		if data, err := readSealed(fsys, dir, filepath.Join(idir, "instance.json")); err == nil {
			c, err := canonical(data, instanceVolatile, map[string][]string{"record": recordVolatile})
			if err != nil || json.Unmarshal(data, &inst) != nil {
				s.problem("instance %s: unparseable instance.json: %v", key, err)
			} else {
				s.Facts = append(s.Facts, "instance "+key+" "+c)
				hasInst = true
			}
		} else if !vfs.IsNotExist(err) {
			s.problem("instance %s: read instance.json: %v", key, err)
		}
		if hasInst && inst.Record != nil && inst.Record.Parent != nil {
			entry := names.Encode(*inst.Record.Parent) + "/" + key
			indexed[entry] = true
			if _, err := fsys.Lstat(filepath.Join(dir, "children", entry)); err != nil {
				s.problem("instance %s: its record names parent %q, and the children index has no entry for it (%v)", key, *inst.Record.Parent, err)
			}
		}
		execs, err := readDir(fsys, filepath.Join(idir, "executions"))
		if err != nil {
			s.problem("instance %s: list executions: %v", key, err)
			continue
		}
		if !hasInst && len(execs) == 0 && !hasLease {
			s.Garbage.EmptyDirs++
		}
		var withState []uint64
		var total uint64
		for _, e := range execs {
			n, err := strconv.ParseUint(e, 10, 64)
			if e == "by-id" {
				s.readGWIDs(fsys, filepath.Join(idir, "executions", e), key)
			}
			if err != nil {
				continue
			}
			events, hasState := s.readExecution(fsys, filepath.Join(idir, "executions", e), key+"/"+e)
			total += uint64(events)
			if hasState {
				withState = append(withState, n)
			}
		}
		if hasInst {
			slices.Sort(withState)
			if !slices.Equal(withState, []uint64(inst.Executions)) {
				s.problem("instance %s: instance.json lists executions %v, directories with state.json are %v", key, inst.Executions, withState)
			}
			if total != inst.TotalEvents {
				s.problem("instance %s: instance.json total_events=%d, histories hold %d", key, inst.TotalEvents, total)
			}
		}
	}
	return s.readChildren(fsys, dir, indexed)
}

// readGWIDs adds a fact per by-id entry of go-workflows instance key (the
// number of an execution its instance.json does not list).
func (s *Snapshot) readGWIDs(fsys vfs.FS, idDir, key string) {
	ids, err := readDir(fsys, idDir)
	if err != nil {
		s.problem("instance %s: list executions/by-id: %v", key, err)
		return
	}
	for _, name := range ids {
		if vfs.IsTemp(name) {
			continue
		}
		data, err := readSealed(fsys, s.dir, filepath.Join(idDir, name))
		if err != nil {
			s.problem("instance %s: read executions/by-id/%s: %v", key, name, err)
			continue
		}
		c, err := canonical(data, []string{"crc32c"}, nil)
		if err != nil {
			s.problem("instance %s: unparseable executions/by-id/%s: %v", key, name, err)
			continue
		}
		s.Facts = append(s.Facts, "gwid "+key+"/"+name+" "+c)
	}
}

// readChildren checks that every entry of the children index is one that
// an instance record wants.
func (s *Snapshot) readChildren(fsys vfs.FS, dir string, indexed map[string]bool) error {
	parents, err := readDir(fsys, filepath.Join(dir, "children"))
	if err != nil {
		return fmt.Errorf("crashcheck: %w", err)
	}
	for _, pk := range parents {
		kids, err := readDir(fsys, filepath.Join(dir, "children", pk))
		if err != nil {
			s.problem("children index of %s: %v", pk, err)
			continue
		}
		for _, ck := range kids {
			if !indexed[pk+"/"+ck] {
				s.problem("children index entry %s/%s: instance %s does not exist or its record does not name that parent", pk, ck, ck)
			}
		}
	}
	return nil
}

// readExecution adds an execution's facts and returns its event count and
// whether it has a state.json.
func (s *Snapshot) readExecution(fsys vfs.FS, edir, label string) (events int, hasState bool) {
	var st struct {
		EventCount uint64 `json:"event_count"`
	}
	if data, err := readSealed(fsys, s.dir, filepath.Join(edir, "state.json")); err == nil {
		c, err := canonical(data, stateVolatile, nil)
		if err != nil || json.Unmarshal(data, &st) != nil {
			s.problem("execution %s: unparseable state.json: %v", label, err)
		} else {
			s.Facts = append(s.Facts, "execution "+label+" "+c)
			hasState = true
		}
	} else if !vfs.IsNotExist(err) {
		s.problem("execution %s: read state.json: %v", label, err)
	}
	scan, err := history.Open(fsys, filepath.Join(edir, "history.jsonl")).Read()
	if err != nil {
		var ce *history.CorruptError
		if errors.As(err, &ce) {
			s.problem("history %s: corrupt: %v", label, err)
		} else {
			s.problem("history %s: read: %v", label, err)
		}
	}
	if scan.TornBytes > 0 {
		s.problem("history %s: torn tail of %d bytes", label, scan.TornBytes)
	}
	var lastEpoch uint64
	for i, r := range scan.Records {
		if r.ID != uint64(i+1) {
			s.problem("history %s: event #%d has id %d (ids must be contiguous from 1 and unique)", label, i+1, r.ID)
		}
		if r.Epoch < lastEpoch {
			s.problem("history %s: fence decreases from %d to %d at event id %d", label, lastEpoch, r.Epoch, r.ID)
		}
		lastEpoch = r.Epoch
		s.Facts = append(s.Facts, fmt.Sprintf("event %s #%d %s", label, r.ID, r.Payload))
	}
	if hasState && st.EventCount != uint64(len(scan.Records)) {
		s.problem("execution %s: state.json event_count=%d, history holds %d", label, st.EventCount, len(scan.Records))
	}
	return len(scan.Records), hasState
}

const (
	msgSuffix    = ".json"
	stagedPrefix = ".staged-"
	tempPrefix   = vfs.TempPrefix
)

// isMessageFile reports whether a queue directory entry is a published
// message ("<ULID>.<visible>.<route>.json").
func isMessageFile(name string) bool {
	base, ok := strings.CutSuffix(name, msgSuffix)
	return ok && fsqueue.ValidName(base)
}

func (s *Snapshot) readQueue(fsys vfs.FS, qdir, queue, label string) error {
	names, err := readDir(fsys, qdir)
	if err != nil {
		return fmt.Errorf("crashcheck: %w", err)
	}
	present := map[string]bool{}
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, stagedPrefix):
			s.Garbage.Staged++
		case strings.HasPrefix(n, tempPrefix):
			s.Garbage.Temps++
		case isMessageFile(n):
			present[strings.TrimSuffix(n, msgSuffix)] = true
			data, err := fsys.ReadFile(filepath.Join(qdir, n))
			if err != nil {
				s.problem("queue %s: read %s: %v", queue, n, err)
				continue
			}
			var m struct {
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(data, &m); err != nil {
				s.problem("queue %s: unparseable message %s: %v", queue, n, err)
				continue
			}
			s.Facts = append(s.Facts, label+" "+string(m.Payload))
		}
	}
	claims, err := readDir(fsys, filepath.Join(qdir, "claims"))
	if err != nil {
		return fmt.Errorf("crashcheck: %w", err)
	}
	for _, n := range claims {
		if strings.HasPrefix(n, tempPrefix) {
			s.Garbage.Temps++
			continue
		}
		if !isMessageFile(n) {
			continue
		}
		data, err := fsys.ReadFile(filepath.Join(qdir, "claims", n))
		if err != nil {
			s.problem("queue %s: read claim %s: %v", queue, n, err)
			continue
		}
		var c struct {
			State string          `json:"state"`
			Data  json.RawMessage `json:"data"`
		}
		msgGone := !present[strings.TrimSuffix(n, msgSuffix)]
		if err := json.Unmarshal(data, &c); err == nil && c.State != "" {
			// An acked claim marks a work ack pending. Recovery settles
			// every one: applied (the claim goes) if its record is in the
			// log, put back to held if not.
			var m pendingMark
			_ = json.Unmarshal(c.Data, &m)
			if s.logged[m.ID] {
				s.problem("queue %s: claim %s is %q and its work ack %s is in the log: committed but never applied", queue, n, c.State, m.ID)
			} else {
				s.problem("queue %s: claim %s is %q but no record %q is in the log: a work ack that never committed was not put back", queue, n, c.State, m.ID)
			}
		}
		if msgGone {
			s.Garbage.OrphanClaims++
		}
	}
	return nil
}

// Duplicates returns the facts that occur more than once. In a workload whose
// messages and events are all distinct, any duplicate is a violation (a
// message published twice, or resurrected next to its copy).
func Duplicates(facts []string) []string {
	var out []string
	for i := 1; i < len(facts); i++ {
		if facts[i] == facts[i-1] && (len(out) == 0 || out[len(out)-1] != facts[i]) {
			out = append(out, facts[i])
		}
	}
	return out
}

// Diff returns the multiset differences of two sorted fact lists: the facts
// only in a and the facts only in b.
func Diff(a, b []string) (onlyA, onlyB []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return onlyA, onlyB
}

// DescribeDiff explains how got differs from want in at most max lines per
// side ("missing: ..." and "extra: ..."), for violation reports.
func DescribeDiff(want, got []string, max int) string {
	missing, extra := Diff(want, got)
	var b strings.Builder
	list := func(label string, xs []string) {
		for i, x := range xs {
			if i == max {
				fmt.Fprintf(&b, "%s ... and %d more; ", label, len(xs)-max)
				break
			}
			if len(x) > 160 {
				x = x[:160] + "…"
			}
			fmt.Fprintf(&b, "%s %s; ", label, x)
		}
	}
	list("missing:", missing)
	list("extra:", extra)
	return strings.TrimSuffix(b.String(), "; ")
}

// execRuns is instance.json's "executions" read as the ids it names: runs
// [first,last] and single ids (format 7), or a plain list of ids (format
// 6 and before), in the order written.
type execRuns []uint64

// UnmarshalJSON implements json.Unmarshaler.
func (r *execRuns) UnmarshalJSON(data []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return err
	}
	*r = nil
	for _, it := range items {
		var id uint64
		if json.Unmarshal(it, &id) == nil {
			*r = append(*r, id)
			continue
		}
		var run []uint64
		if err := json.Unmarshal(it, &run); err != nil || len(run) != 2 || run[0] == 0 || run[0] > run[1] || run[1]-run[0] > 1<<20 {
			return fmt.Errorf("executions: bad run %s", it)
		}
		for id := run[0]; id <= run[1]; id++ {
			*r = append(*r, id)
		}
	}
	return nil
}
