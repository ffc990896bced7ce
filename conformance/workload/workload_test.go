package workload

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/conformance/internal/memref"
	"github.com/durofs/durofs/provider"
)

// quietLogger drops the runtime's logs below Error.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

// ackLog records every successful ack (the crash suite's oracle).
type ackLog struct {
	mu   sync.Mutex
	acks map[string]map[uint64][]provider.Event
}

func (a *ackLog) record(instance string, exec uint64, events []provider.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.acks == nil {
		a.acks = map[string]map[uint64][]provider.Event{}
	}
	if a.acks[instance] == nil {
		a.acks[instance] = map[uint64][]provider.Event{}
	}
	a.acks[instance][exec] = append(a.acks[instance][exec], events...)
}

// runMix runs a Mix to completion on p and verifies it.
func runMix(t *testing.T, p provider.Provider, seed int64, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := Mix(seed, n)
	for _, s := range specs {
		if err := Start(ctx, p, s); err != nil {
			t.Fatal(err)
		}
	}
	var acks ackLog
	rt := NewRuntime(p, RuntimeOptions{Dispatchers: 2, Workers: 2, Logger: quietLogger(), OnAck: acks.record})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()

	start := time.Now()
	awaitCtx, cancelAwait := context.WithTimeout(ctx, 20*time.Second)
	defer cancelAwait()
	adm, _ := p.Admin()
	err := Await(awaitCtx, p, adm, specs, nil)
	stop()
	if rerr := <-done; rerr != nil {
		t.Errorf("Run: %v", rerr)
	}
	if err != nil {
		t.Fatalf("Await: %v (stats %+v)", err, rt.Stats())
	}
	t.Logf("%d instances in %v; stats %+v", len(specs), time.Since(start).Round(time.Millisecond), rt.Stats())

	rep, err := Verify(ctx, p, adm, specs)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	t.Logf("verify: %s", rep)
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if rep.Completed != len(specs) {
		t.Errorf("completed %d of %d", rep.Completed, len(specs))
	}
	if adm != nil {
		// The history-only path must agree.
		rep2, err := Verify(ctx, p, nil, specs)
		if err != nil {
			t.Fatalf("Verify without Admin: %v", err)
		}
		for _, v := range rep2.Violations {
			t.Errorf("violation (history only): %s", v)
		}
		if rep.QueueDepths == nil || *rep.QueueDepths != (provider.QueueDepths{}) {
			t.Errorf("queues not empty at the end: %+v", rep.QueueDepths)
		}
	}

	// Every acked event is in the history with its id and type (invariant 1).
	st := rt.Stats()
	if st.Turns == 0 || st.ActivitiesExecuted == 0 || st.ActivitiesAcked == 0 {
		t.Errorf("stats look empty: %+v", st)
	}
	var acked int
	for inst, execs := range acks.acks {
		for exec, evs := range execs {
			h, err := p.ReadWithExecution(ctx, inst, exec)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				acked++
				i := slices.IndexFunc(h, func(x provider.Event) bool { return x.EventID == e.EventID })
				if i < 0 || h[i].Kind.Type() != e.Kind.Type() {
					t.Errorf("%s#%d: acked event %d (%s) missing from history", inst, exec, e.EventID, e.Kind.Type())
				}
			}
		}
	}
	if int64(acked) != st.Events {
		t.Errorf("OnAck saw %d events, stats say %d", acked, st.Events)
	}
	if acked != rep.Events {
		t.Errorf("OnAck saw %d events, histories hold %d", acked, rep.Events)
	}
}

func TestRunMixFilesystem(t *testing.T) {
	for _, d := range []provider.Durability{provider.Durable, provider.ProcessCrashSafe} {
		t.Run(d.String(), func(t *testing.T) {
			p, err := provider.Open(t.TempDir(), provider.Options{Durability: d, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			runMix(t, p, 42, 20)
		})
	}
}

func TestRunMixMemref(t *testing.T) {
	runMix(t, memref.New(), 7, 40)
}

func TestMixDeterministic(t *testing.T) {
	a, b := Mix(3, 40), Mix(3, 40)
	if !slices.Equal(a, b) {
		t.Fatal("Mix is not a function of its seed")
	}
	if slices.Equal(a, Mix(4, 40)) {
		t.Error("different seeds give the same mix")
	}
	kinds := map[string]int{}
	for _, s := range Mix(9, len(Kinds)) {
		kinds[s.Kind]++
		if s.ExpectStatus == "" || s.ExpectOutput == "" || s.Input == "" {
			t.Errorf("incomplete spec %+v", s)
		}
	}
	if len(kinds) != len(Kinds) {
		t.Errorf("Mix(%d) covers kinds %v, want all of %v", len(Kinds), kinds, Kinds)
	}
	if got := len(Mix(1, 0)); got != 0 {
		t.Errorf("Mix(1, 0) has %d specs", got)
	}
}

func TestNewSpecExpectations(t *testing.T) {
	cases := []struct {
		kind       string
		n, x       int
		status     string
		input, out string
	}{
		{KindChain, 2, 1, StatusCompleted, "2,1", "1185"}, // 1 → 38 → 1185
		{KindFanOut, 3, 2, StatusCompleted, "3,2", "29"},  // 4 + 9 + 16
		{KindTimer, 150, 0, StatusCompleted, "150", "timer fired after 150ms"},
		{KindSub, 1, 1, StatusCompleted, "1,1", "38"},
		{KindExternal, 0, 5, StatusCompleted, "token-5", "approved:token-5"},
		{KindContinueAsNew, 3, 0, StatusCompleted, "3", "done"},
		{KindCancel, 100, 0, StatusCompleted, "100", "cancelled"},
		{KindFail, 0, 7, StatusFailed, "7", "activity Boom failed: boom 7"},
	}
	for _, c := range cases {
		s, err := NewSpec("i", c.kind, c.n, c.x)
		if err != nil {
			t.Fatal(err)
		}
		if s.Input != c.input || s.ExpectStatus != c.status || s.ExpectOutput != c.out {
			t.Errorf("%s: got (%q, %s, %q), want (%q, %s, %q)", c.kind, s.Input, s.ExpectStatus, s.ExpectOutput, c.input, c.status, c.out)
		}
	}
	if _, err := NewSpec("i", "nope", 1, 1); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := NewSpec("i", KindChain, -1, 1); err == nil {
		t.Error("negative size accepted")
	}
}
