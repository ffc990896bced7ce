package workload

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/durofs/durofs/provider"
)

// ev builds a history event for the hand-crafted states.
func ev(inst string, exec, id uint64, src *uint64, kind provider.EventKind) provider.Event {
	return newEvent(inst, exec, id, src, 1, kind)
}

func u64(v uint64) *uint64 { return &v }

// chainHistory is a correct history of Chain "1,1" (output 38), with the
// given output.
func chainHistory(inst, output string) []provider.Event {
	return []provider.Event{
		ev(inst, 1, 1, nil, provider.OrchestrationStarted{Name: OrchChain, Version: OrchestrationVersion, Input: "1,1"}),
		ev(inst, 1, 2, nil, provider.ActivityScheduled{Name: "Step", Input: "1"}),
		ev(inst, 1, 3, u64(2), provider.ActivityCompletedEvent{Result: "38"}),
		ev(inst, 1, 4, nil, provider.OrchestrationCompleted{Output: output}),
	}
}

// craft opens a fresh filesystem provider holding the given executions.
func craft(t *testing.T, histories map[string][][]provider.Event) provider.Provider {
	t.Helper()
	p, err := provider.Open(t.TempDir(), provider.Options{Durability: provider.ProcessCrashSafe, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for inst, execs := range histories {
		for i, h := range execs {
			if err := p.AppendWithExecution(context.Background(), inst, uint64(i+1), h); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

func chainSpec(t *testing.T, inst string) Spec {
	t.Helper()
	s, err := NewSpec(inst, KindChain, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpectOutput != "38" {
		t.Fatalf("chain 1,1 expects %q", s.ExpectOutput)
	}
	return s
}

// checks returns the Check of every violation.
func checks(r Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Check)
	}
	return out
}

func TestVerifyAcceptsCorrectState(t *testing.T) {
	p := craft(t, map[string][][]provider.Event{"good": {chainHistory("good", "38")}})
	r, err := Verify(context.Background(), p, nil, []Spec{chainSpec(t, "good")})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Completed != 1 || r.Events != 4 || r.Executions != 1 || r.ActivityResults != 1 {
		t.Fatalf("report %+v", r)
	}
}

func TestVerifyIsSharp(t *testing.T) {
	gap := chainHistory("gap", "38")
	gap[2].EventID, gap[3].EventID = 4, 5 // 1, 2, 4, 5
	dupID := chainHistory("dupid", "38")
	dupID[3].EventID = 3
	twice := chainHistory("twice", "38")
	twice = append(twice[:3], ev("twice", 1, 4, u64(2), provider.ActivityCompletedEvent{Result: "38"}),
		ev("twice", 1, 5, nil, provider.OrchestrationCompleted{Output: "38"}))
	orphan := chainHistory("orphan", "38")
	orphan[2].SourceEventID = u64(1) // names the started event
	early := chainHistory("early", "38")
	early = []provider.Event{early[0], early[1], ev("early", 1, 3, nil, provider.OrchestrationCompleted{Output: "x"}),
		ev("early", 1, 4, u64(2), provider.ActivityCompletedEvent{Result: "38"}), ev("early", 1, 5, nil, provider.OrchestrationCompleted{Output: "38"})}
	running := chainHistory("running", "38")[:3]
	canLatest := []provider.Event{
		ev("can", 2, 1, nil, provider.OrchestrationStarted{Name: OrchContinueAsNew, Version: OrchestrationVersion, Input: "0"}),
		ev("can", 2, 2, nil, provider.OrchestrationCompleted{Output: "done"}),
	}
	canFirst := []provider.Event{
		ev("can", 1, 1, nil, provider.OrchestrationStarted{Name: OrchContinueAsNew, Version: OrchestrationVersion, Input: "2"}),
		ev("can", 1, 2, nil, provider.OrchestrationCompleted{Output: "oops"}), // should have continued as new
	}

	fsp := craft(t, map[string][][]provider.Event{
		"wrong":   {chainHistory("wrong", "39")},
		"gap":     {gap},
		"twice":   {twice},
		"orphan":  {orphan},
		"early":   {early},
		"running": {running},
		"can":     {canFirst, canLatest},
	})
	// The filesystem provider refuses duplicate ids, so that state is served
	// by a wrapper, as a broken provider would.
	p := overlay{Provider: fsp, execs: map[string][][]provider.Event{"dupid": {dupID}}}
	canSpec, _ := NewSpec("can", KindContinueAsNew, 2, 0)
	failSpec, _ := NewSpec("wrong", KindFail, 0, 1) // "wrong" completed; a Fail spec expects Failed
	// asExpected: status and output are right (only the history is broken).
	cases := []struct {
		spec       Spec
		want       []string
		asExpected bool
	}{
		{chainSpec(t, "wrong"), []string{"output"}, false},
		{failSpec, []string{"status", "output"}, false},
		{chainSpec(t, "gap"), []string{"event_ids"}, true},
		{chainSpec(t, "dupid"), []string{"event_ids"}, true},
		{chainSpec(t, "twice"), []string{"completion"}, true},
		{chainSpec(t, "orphan"), []string{"completion"}, true},
		{chainSpec(t, "early"), []string{"history"}, true},
		{chainSpec(t, "running"), []string{"status", "output"}, false},
		{chainSpec(t, "missing"), []string{"status"}, false},
		{canSpec, []string{"executions", "history"}, true},
	}
	for _, c := range cases {
		r, err := Verify(context.Background(), p, nil, []Spec{c.spec})
		if err != nil {
			t.Fatal(err)
		}
		got := checks(r)
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s (%s): violations %v, want checks %v", c.spec.Instance, c.spec.Kind, r.Violations, c.want)
		}
		if r.OK() {
			t.Errorf("%s: Verify passed a broken state", c.spec.Instance)
		}
		if (r.Completed == 1) != c.asExpected {
			t.Errorf("%s: Completed = %d, want as-expected %v", c.spec.Instance, r.Completed, c.asExpected)
		}
	}
}

// overlay serves some instances' histories from memory, bypassing the
// provider's validation, and everything else from the provider.
type overlay struct {
	provider.Provider
	execs map[string][][]provider.Event
}

func (o overlay) ReadWithExecution(ctx context.Context, inst string, exec uint64) ([]provider.Event, error) {
	if e, ok := o.execs[inst]; ok {
		if exec == 0 || exec > uint64(len(e)) {
			return nil, nil
		}
		return e[exec-1], nil
	}
	return o.Provider.ReadWithExecution(ctx, inst, exec)
}

func (o overlay) Read(ctx context.Context, inst string) ([]provider.Event, error) {
	if e, ok := o.execs[inst]; ok {
		return e[len(e)-1], nil
	}
	return o.Provider.Read(ctx, inst)
}

func TestVerifyChecksChildren(t *testing.T) {
	child := "parent::sub::2"
	parent := []provider.Event{
		ev("parent", 1, 1, nil, provider.OrchestrationStarted{Name: OrchSub, Version: OrchestrationVersion, Input: "1,1"}),
		ev("parent", 1, 2, nil, provider.SubOrchestrationScheduled{Name: OrchChain, Instance: child, Input: "1,1"}),
		ev("parent", 1, 3, u64(2), provider.SubOrchestrationCompleted{Result: "38"}),
		ev("parent", 1, 4, nil, provider.OrchestrationCompleted{Output: "38"}),
	}
	kid := chainHistory(child, "37") // disagrees with what the parent recorded
	kid[0].Kind = provider.OrchestrationStarted{Name: OrchChain, Version: OrchestrationVersion, Input: "1,1",
		ParentInstance: func() *string { s := "parent"; return &s }(), ParentID: u64(2)}
	p := craft(t, map[string][][]provider.Event{"parent": {parent}, child: {kid}})
	s, _ := NewSpec("parent", KindSub, 1, 1)
	r, err := Verify(context.Background(), p, nil, []Spec{s})
	if err != nil {
		t.Fatal(err)
	}
	if r.Children != 1 || len(r.Violations) != 1 || r.Violations[0].Instance != child || r.Violations[0].Check != "output" {
		t.Fatalf("report %+v", r)
	}
}

// fakeAdmin answers GetInstanceInfo, ListExecutions, GetQueueDepths from
// fixed values; every other Admin method is unimplemented.
type fakeAdmin struct {
	provider.Admin
	info  map[string]provider.InstanceInfo
	execs map[string][]uint64
}

func (f fakeAdmin) GetInstanceInfo(_ context.Context, inst string) (provider.InstanceInfo, error) {
	i, ok := f.info[inst]
	if !ok {
		return provider.InstanceInfo{}, provider.Permanentf("get_instance_info", provider.ErrNotFound, "instance not found")
	}
	return i, nil
}

func (f fakeAdmin) ListExecutions(_ context.Context, inst string) ([]uint64, error) {
	return f.execs[inst], nil
}

func (f fakeAdmin) GetQueueDepths(context.Context) (provider.QueueDepths, error) {
	return provider.QueueDepths{}, nil
}

func (f fakeAdmin) LatestExecutionID(_ context.Context, inst string) (uint64, error) {
	if e := f.execs[inst]; len(e) > 0 {
		return e[len(e)-1], nil
	}
	return 0, errors.New("none")
}

func TestVerifyWithAdmin(t *testing.T) {
	p := craft(t, map[string][][]provider.Event{"a": {chainHistory("a", "38")}, "b": {chainHistory("b", "38")}})
	out := "38"
	wrong := "99"
	adm := fakeAdmin{
		info: map[string]provider.InstanceInfo{
			"a": {InstanceID: "a", CurrentExecutionID: 1, Status: StatusCompleted, Output: &out},
			// b's metadata disagrees with its history, and is wrong.
			"b": {InstanceID: "b", CurrentExecutionID: 1, Status: StatusCompleted, Output: &wrong},
		},
		execs: map[string][]uint64{"a": {1}, "b": {1}},
	}
	r, err := Verify(context.Background(), p, adm, []Spec{chainSpec(t, "a"), chainSpec(t, "b")})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(checks(r), ","); got != "metadata,output" || r.Completed != 1 || r.QueueDepths == nil {
		t.Fatalf("checks %s, report %+v", got, r)
	}

	st, err := Status(context.Background(), p, adm, "nobody")
	if err != nil || st.Started {
		t.Fatalf("Status of an unknown instance: %+v, %v", st, err)
	}
}
