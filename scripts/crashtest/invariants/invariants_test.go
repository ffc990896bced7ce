package invariants_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/invariants"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
	"github.com/durofs/durofs/wal"
)

// The sharpness tests: a directory produced by a real workload passes every
// invariant; each kind of damage, done by hand to a copy, makes the
// matching invariant fail.

// fixture is the healthy directory, built once.
type fixture struct {
	dir   string
	spare string // a start message file copied aside before it was consumed
	orc   *oracle.Oracle
	specs []workload.Spec
}

var (
	fixOnce sync.Once
	fix     fixture
	fixErr  error
	fixRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixRoot != "" {
		_ = os.RemoveAll(fixRoot)
	}
	os.Exit(code)
}

// healthy returns the shared healthy directory (do not modify it: copy it).
func healthy(t *testing.T) fixture {
	t.Helper()
	fixOnce.Do(func() {
		fixRoot, fixErr = os.MkdirTemp("", "invariants-fixture-")
		if fixErr != nil {
			return
		}
		fix.dir = filepath.Join(fixRoot, "data")
		fix.spare = filepath.Join(fixRoot, "spare")
		fix.specs = workload.Mix(7, 16)
		fix.orc, fixErr = runWorkload(fix.dir, fix.specs, fix.specs, nil, fix.spare)
	})
	if fixErr != nil {
		t.Fatalf("build the healthy directory: %v", fixErr)
	}
	return fix
}

// runWorkload runs specs on a fresh directory in this process (two
// dispatchers, two activity workers) with a Recorder, waits until the
// specs in await are terminal and the queues are empty, and returns the
// oracle. wrap, if set, wraps the provider under the recorder. spare, if
// set, is a directory that receives a copy of one start message (under its
// own name) before any is consumed.
func runWorkload(dir string, specs, await []workload.Spec, wrap func(provider.Provider) provider.Provider, spare string) (*oracle.Oracle, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := provider.Open(dir, provider.Options{Durability: provider.ProcessCrashSafe, Logger: log})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	adm, _ := p.Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range specs {
		if err := workload.Start(ctx, p, s); err != nil {
			return nil, err
		}
	}
	if spare != "" {
		msgs, _ := filepath.Glob(filepath.Join(dir, "queues", "orchestrator", "0*.json"))
		if len(msgs) == 0 {
			return nil, errors.New("no queued start message to copy")
		}
		if err := copyFile(msgs[0], filepath.Join(spare, filepath.Base(msgs[0]))); err != nil {
			return nil, err
		}
	}
	b := oracle.NewBuilder(2)
	var inner provider.Provider = p
	if wrap != nil {
		inner = wrap(p)
	}
	rec := oracle.NewRecorder(inner, func(l oracle.Line) { _ = b.Add(1, l) }, 0, 0)
	rt := workload.NewRuntime(rec, workload.RuntimeOptions{
		Dispatchers: 2, Workers: 2, LockTimeout: 2 * time.Second, Logger: log, OnAck: rec.OnAck,
	})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = rt.Run(rctx); close(done) }()
	err = workload.Await(ctx, p, adm, await, nil)
	for err == nil {
		d, qerr := adm.GetQueueDepths(ctx)
		marks, merr := invariants.PendingWork(dir, time.Now())
		if qerr == nil && merr == nil && d.OrchestratorQueue == 0 && d.WorkerQueue == 0 && marks.PendingMarks == 0 {
			break
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	b.WorkerGone(1, false)
	if err != nil {
		return nil, err
	}
	if a := b.Anomalies(); len(a) > 0 {
		return nil, errors.New("oracle anomalies: " + strings.Join(a, "; "))
	}
	return b.Oracle(), nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// copyDir copies the healthy directory for one test to damage.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func check(t *testing.T, dir string, orc *oracle.Oracle, specs []workload.Spec) *invariants.Report {
	t.Helper()
	r, err := invariants.Check(context.Background(), dir, invariants.Input{Oracle: orc, Specs: specs})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	var buf bytes.Buffer
	r.Write(&buf, 6)
	t.Logf("report:\n%s", buf.String())
	return r
}

// histories returns every history file of dir, sorted.
func histories(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "instances", "*", "executions", "*", "history.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no histories in %s (%v)", dir, err)
	}
	return files
}

func readRecords(t *testing.T, path string) []history.Record {
	t.Helper()
	s, err := history.Open(vfs.OS{}, path).Read()
	if err != nil {
		t.Fatal(err)
	}
	return s.Records
}

func writeRecords(t *testing.T, path string, recs []history.Record) {
	t.Helper()
	var buf bytes.Buffer
	for _, r := range recs {
		line, err := history.EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(line)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// findHistory returns the first history whose records satisfy ok.
func findHistory(t *testing.T, dir string, ok func([]history.Record) bool) (string, []history.Record) {
	t.Helper()
	for _, h := range histories(t, dir) {
		if recs := readRecords(t, h); ok(recs) {
			return h, recs
		}
	}
	t.Fatal("no history matches")
	return "", nil
}

func eventOf(t *testing.T, r history.Record) provider.Event {
	t.Helper()
	var e provider.Event
	if err := json.Unmarshal(r.Payload, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestHealthyDirectoryPasses(t *testing.T) {
	f := healthy(t)
	r := check(t, copyDir(t, f.dir), f.orc, f.specs)
	if !r.OK() {
		t.Fatalf("healthy directory: %d violations (%s)", r.Total(), r.Breakdown())
	}
	if r.Figures.SpecsOK != len(f.specs) || r.Figures.AcksOK == 0 || r.Figures.Events == 0 {
		t.Fatalf("figures %+v: the check looked at too little", r.Figures)
	}
	t.Logf("figures: %+v", r.Figures)
}

func TestSharpness(t *testing.T) {
	f := healthy(t)
	cases := []struct {
		name string
		inv  int
		// damage changes the copy dir; it may return a changed oracle.
		damage func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle
	}{
		{"lost event: last record of a history truncated", 1, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h, recs := findHistory(t, dir, func(r []history.Record) bool { return len(r) >= 3 })
			writeRecords(t, h, recs[:len(recs)-1])
			return orc
		}},
		{"duplicate event id: a record appended again", 3, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h, recs := findHistory(t, dir, func(r []history.Record) bool { return len(r) >= 2 })
			writeRecords(t, h, append(recs, recs[len(recs)-1]))
			return orc
		}},
		{"leftover message: a consumed start message put back", 5, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			msg := spareMessage(t)
			if err := copyFile(msg, filepath.Join(dir, "queues", "orchestrator", filepath.Base(msg))); err != nil {
				t.Fatal(err)
			}
			return orc
		}},
		{"decreasing fence: a record rewritten with a smaller epoch", 7, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h, recs := findHistory(t, dir, func(r []history.Record) bool {
				return len(r) >= 3 && r[len(r)-2].Epoch > r[0].Epoch
			})
			recs[len(recs)-1].Epoch = recs[0].Epoch
			writeRecords(t, h, recs)
			return orc
		}},
		{"committed record never applied: a lease marks a logged record pending", 5, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			inst := f.specs[1].Instance
			key := names.Encode(inst)
			l, err := wal.Open(context.Background(), vfs.OS{}, filepath.Join(dir, "wal"), wal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			l.Ready()
			id := "11111111-2222-4333-8444-000000000001"
			rec := `{"id":"` + id + `","instance":"` + inst + `","key":"` + key + `","committed_at_ms":1,"kind":"prune"}`
			if _, err := l.Commit(context.Background(), []byte(rec)); err != nil {
				t.Fatal(err)
			}
			markLease(t, dir, key, id)
			return orc
		}},
		{"dangling mark: a lease marks a commit that never happened", 5, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			markLease(t, dir, names.Encode(f.specs[2].Instance), "11111111-2222-4333-8444-000000000002")
			return orc
		}},
		{"completed instance's final event removed", 6, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h := filepath.Join(dir, "instances", names.Encode(f.specs[0].Instance), "executions", "1", "history.jsonl")
			if f.specs[0].Kind == workload.KindContinueAsNew {
				t.Skip("first spec continues as new")
			}
			recs := readRecords(t, h)
			writeRecords(t, h, recs[:len(recs)-1])
			return orc
		}},
		{"phantom event: an event no ack wrote", 2, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h, recs := findHistory(t, dir, func(r []history.Record) bool { return len(r) >= 2 })
			last := recs[len(recs)-1]
			ev := eventOf(t, last).WithoutRaw()
			ev.EventID++
			ev.TimestampMs++
			payload, err := ev.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			writeRecords(t, h, append(recs, history.Record{ID: ev.EventID, Epoch: last.Epoch, Payload: payload}))
			return orc
		}},
		{"partial turn: half of a killed worker's ack", 2, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			// Take an OK ack of two or more events that ends its history,
			// pretend its worker was killed before reporting, and drop its
			// last event.
			for i, a := range orc.Acks {
				if a.Outcome != oracle.OutcomeOK || len(a.Events) < 2 {
					continue
				}
				h := filepath.Join(dir, "instances", names.Encode(a.Instance), "executions", strconv.FormatUint(a.ExecutionID, 10), "history.jsonl")
				recs := readRecords(t, h)
				if recs[len(recs)-1].ID != a.Events[len(a.Events)-1].ID {
					continue
				}
				writeRecords(t, h, recs[:len(recs)-1])
				orc.Acks[i].Outcome = oracle.OutcomeKilled
				orc.Killed = map[int]bool{a.Worker: true}
				return orc
			}
			t.Fatal("no multi-event ack ends a history")
			return nil
		}},
		{"stale ack left a trace", 7, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			for i, a := range orc.Acks {
				if a.Outcome == oracle.OutcomeOK && len(a.Events) > 0 {
					orc.Acks[i].Outcome, orc.Acks[i].Err = oracle.OutcomeRejected, "lock expired"
					return orc
				}
			}
			t.Fatal("no ack with events")
			return nil
		}},
		{"torn tail left after recovery", 3, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h := histories(t, dir)[0]
			appendBytes(t, h, []byte(`1a2b3c4d 99 1 {"event_id":9`))
			return orc
		}},
		{"corrupt record: a payload byte flipped", 3, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h := histories(t, dir)[0]
			data, err := os.ReadFile(h)
			if err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(data, []byte(`"type":"`))
			data[i+8] ^= 0x20 // the first letter of the first event's type changes case
			if err := os.WriteFile(h, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return orc
		}},
		{"timer fired twice", 4, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			h, recs := findHistory(t, dir, func(r []history.Record) bool {
				return bytes.Contains(r[len(r)-1].Payload, []byte(`"type":"OrchestrationCompleted"`)) &&
					bytes.Contains(r[len(r)-2].Payload, []byte(`"type":"TimerFired"`))
			})
			fired, done := recs[len(recs)-2], recs[len(recs)-1]
			ev := eventOf(t, fired).WithoutRaw()
			ev.EventID = done.ID
			dupPayload, _ := ev.MarshalJSON()
			end := eventOf(t, done).WithoutRaw()
			end.EventID++
			endPayload, _ := end.MarshalJSON()
			recs = append(recs[:len(recs)-1],
				history.Record{ID: ev.EventID, Epoch: done.Epoch, Payload: dupPayload},
				history.Record{ID: end.EventID, Epoch: done.Epoch, Payload: endPayload})
			writeRecords(t, h, recs)
			return orc
		}},
		{"temporary file left", 5, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			p := filepath.Join(filepath.Dir(histories(t, dir)[0]), vfs.TempPrefix+"state.json-1234")
			if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
			return orc
		}},
		{"staged message left", 5, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			p := filepath.Join(dir, "queues", "worker", ".staged-01J00000000000000000000000.json")
			if err := copyFile(spareMessage(t), p); err != nil {
				t.Fatal(err)
			}
			return orc
		}},
		{"lease still held", 5, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			p := filepath.Join(dir, "instances", names.Encode(f.specs[1].Instance), "lease.json")
			var l map[string]any
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &l); err != nil {
				t.Fatal(err)
			}
			l["token"], l["owner"] = "11111111-2222-4333-8444-555555555555", "zombie"
			l["expires_at_ms"] = time.Now().Add(time.Hour).UnixMilli()
			data, _ = json.Marshal(l)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return orc
		}},
		{"lost ack report: OK ack missing from the history", 1, func(t *testing.T, dir string, orc *oracle.Oracle) *oracle.Oracle {
			// An OK ack naming an event id past the end of its history.
			for i, a := range orc.Acks {
				if a.Outcome == oracle.OutcomeOK && len(a.Events) > 0 {
					orc.Acks[i].Events = append(orc.Acks[i].Events, oracle.Event{ID: 9999})
					return orc
				}
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, f.dir)
			orc := cloneOracle(f.orc)
			orc = tc.damage(t, dir, orc)
			r := check(t, dir, orc, f.specs)
			if r.Counts[tc.inv] == 0 {
				t.Fatalf("invariant %d (%s) did not fail; counts %s", tc.inv, invariants.Names[tc.inv], r.Breakdown())
			}
			t.Logf("invariant %d fails as it should: counts %s", tc.inv, r.Breakdown())
		})
	}
}

// markLease sets the pending mark of instance key's lease to id.
func markLease(t *testing.T, dir, key, id string) {
	t.Helper()
	p := filepath.Join(dir, "instances", key, "lease.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var l map[string]any
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	d, _ := l["data"].(map[string]any)
	if d == nil {
		d = map[string]any{}
	}
	d["pending"] = map[string]any{"id": id, "hint": 0}
	l["data"] = d
	data, _ = json.Marshal(l)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMissingCompletion loses one activity's completion: the work item is
// acked without enqueuing its ActivityCompleted, as if the message had been
// deleted before the orchestration consumed it. The instance never
// finishes: invariant 6.
func TestMissingCompletion(t *testing.T) {
	specs := workload.Mix(11, 8)
	victim := ""
	for _, s := range specs {
		if s.Kind == workload.KindChain {
			victim = s.Instance
		}
	}
	var others []workload.Spec
	for _, s := range specs {
		if s.Instance != victim {
			others = append(others, s)
		}
	}
	dir := filepath.Join(t.TempDir(), "data")
	orc, err := runWorkload(dir, specs, others, func(p provider.Provider) provider.Provider {
		return &dropCompletion{Provider: p, victim: victim, tokens: map[string]string{}}
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	r := check(t, dir, orc, specs)
	if r.Counts[6] == 0 {
		t.Fatalf("invariant 6 did not fail; counts %s", r.Breakdown())
	}
	for i := 1; i <= invariants.NumInvariants; i++ {
		if i != 6 && r.Counts[i] != 0 {
			t.Errorf("invariant %d failed too (%d)", i, r.Counts[i])
		}
	}
}

// dropCompletion acks the victim's activities without their completion.
type dropCompletion struct {
	provider.Provider
	victim string
	mu     sync.Mutex
	tokens map[string]string
}

func (d *dropCompletion) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *provider.SessionFetchConfig, tf provider.TagFilter) (*provider.LockedWorkItem, error) {
	li, err := d.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tf)
	if err == nil && li != nil {
		if ae, ok := li.Item.(provider.ActivityExecute); ok {
			d.mu.Lock()
			d.tokens[li.LockToken] = ae.Instance
			d.mu.Unlock()
		}
	}
	return li, err
}

func (d *dropCompletion) AckWorkItem(ctx context.Context, token string, completion provider.WorkItem) error {
	d.mu.Lock()
	inst := d.tokens[token]
	d.mu.Unlock()
	if inst == d.victim {
		completion = nil
	}
	return d.Provider.AckWorkItem(ctx, token, completion)
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(b); err != nil {
		t.Fatal(err)
	}
}

// spareMessage is the start message copied aside by the healthy run.
func spareMessage(t *testing.T) string {
	t.Helper()
	msgs, err := filepath.Glob(filepath.Join(fix.spare, "*.json"))
	if err != nil || len(msgs) != 1 {
		t.Fatalf("spare message: %v %v", msgs, err)
	}
	return msgs[0]
}

func cloneOracle(o *oracle.Oracle) *oracle.Oracle {
	c := *o
	c.Acks = make([]oracle.Ack, len(o.Acks))
	for i, a := range o.Acks {
		a.Events = append([]oracle.Event(nil), a.Events...)
		c.Acks[i] = a
	}
	return &c
}

// TestEmptyStagedFileBesideALiveProcess: an empty staged file (a writer
// killed between creating and writing it) breaks quiescence, unless the
// check is of a recovery beside a live process (Input.Shared), where the
// sweep must leave it (it cannot tell it from a stopped writer's); a
// non-empty one breaks it either way.
func TestEmptyStagedFileBesideALiveProcess(t *testing.T) {
	f := healthy(t)
	for _, c := range []struct {
		name    string
		content string
		shared  bool
		want    bool // a violation of invariant 5
	}{
		{"empty, alone", "", false, true},
		{"empty, beside a live process", "", true, false},
		{"partial, beside a live process", `{"na`, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, f.dir)
			name := filepath.Join(dir, "queues", "worker", ".staged-01KJMQQY40TKHG7D7C7EW05Z9V.01KJMMA2G5.DFVYHP2RFJW42.json")
			if err := os.WriteFile(name, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := invariants.Check(context.Background(), dir, invariants.Input{Oracle: f.orc, Specs: f.specs, Shared: c.shared})
			if err != nil {
				t.Fatal(err)
			}
			if got := !r.OK(); got != c.want {
				t.Fatalf("violation = %v (%s), want %v", got, r.Breakdown(), c.want)
			}
		})
	}
}

// TestDeletions: a deleted instance is checked for what it left, not for
// its acks and spec; a maybe-deleted one is deleted if its directory is
// gone and checked in full otherwise; whatever a deletion should have
// removed and did not is a violation of invariant 5.
func TestDeletions(t *testing.T) {
	f := healthy(t)
	var victim, parent string // a chain (no sub-orchestration), and a sub (one child)
	for _, s := range f.specs {
		switch {
		case s.Kind == workload.KindChain && victim == "":
			victim = s.Instance
		case s.Kind == workload.KindSub && parent == "":
			parent = s.Instance
		}
	}
	child := parent + "::sub::2"
	deleteID := func(id string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			t.Helper()
			p, err := provider.Open(dir, provider.Options{SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := p.DeleteInstance(context.Background(), id, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteIt := deleteID(victim)
	for _, c := range []struct {
		name           string
		damage         func(t *testing.T, dir string)
		deleted, maybe []string
		want           []int // the invariants that must fail (none: the check passes)
		gone           int   // Figures.Deleted
	}{
		{"deleted, reported", deleteIt, []string{victim}, nil, nil, 1},
		{"deleted, its deletion failed (maybe)", deleteIt, nil, []string{victim}, nil, 1},
		{"not deleted, its deletion failed (maybe)", nil, nil, []string{victim}, nil, 0},
		{"deleted, not reported", deleteIt, nil, nil, []int{1, 6}, 0},
		// Its events are phantoms too (2): no ack of a deleted instance counts.
		{"reported deleted, its directory remains", nil, []string{victim}, nil, []int{2, 5}, 1},
		{"deleted, a message for it left behind", func(t *testing.T, dir string) {
			deleteIt(t, dir)
			writeStart(t, dir, victim)
		}, []string{victim}, nil, []int{5}, 1},
		{"a tree deleted, reported", deleteID(parent), []string{parent}, nil, nil, 1},
		{"a tree reported deleted, its child's directory remains", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "instances", names.Encode(parent))); err != nil {
				t.Fatal(err)
			}
		}, []string{parent}, nil, []int{2, 5}, 1}, // the child's events are phantoms (2), as above
		{"a tree deleted, a message for its child left behind", func(t *testing.T, dir string) {
			deleteID(parent)(t, dir)
			writeStart(t, dir, child)
		}, []string{parent}, nil, []int{5}, 1},
		{"a deletion marker left behind", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "instances", names.Encode(victim), "deleting"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, nil, nil, []int{5}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, f.dir)
			if c.damage != nil {
				c.damage(t, dir)
			}
			r, err := invariants.Check(context.Background(), dir, invariants.Input{Oracle: cloneOracle(f.orc), Specs: f.specs,
				Deleted: c.deleted, MaybeDeleted: c.maybe})
			if err != nil {
				t.Fatal(err)
			}
			var failed []int
			for inv := 1; inv < len(r.Counts); inv++ {
				if r.Counts[inv] > 0 {
					failed = append(failed, inv)
				}
			}
			if !slices.Equal(failed, c.want) || r.Figures.Deleted != c.gone {
				t.Fatalf("failed invariants %v (%s), %d deleted; want %v, %d", failed, r.Breakdown(), r.Figures.Deleted, c.want, c.gone)
			}
		})
	}
}

// writeStart enqueues a start message for instance with its own provider
// on dir (a message that stays: nothing fetches it).
func writeStart(t *testing.T, dir, instance string) {
	t.Helper()
	p, err := provider.Open(dir, provider.Options{SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	v := workload.OrchestrationVersion
	item := provider.StartOrchestration{Instance: instance, Orchestration: workload.OrchChain, Version: &v, Input: "1", ExecutionID: 1}
	if err := p.EnqueueForOrchestrator(context.Background(), item, 0); err != nil {
		t.Fatal(err)
	}
}
