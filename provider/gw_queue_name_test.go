package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
)

// Queue names whose encodings are longer than names.MaxLen, so that their
// directories are named by their hashes (upper-case letters and non-ASCII
// bytes encode to three bytes each).
var (
	gwLongWF  = "注文処理と返金処理のための高優先度ワークフローキュー"
	gwLongAct = "ORDERS_" + strings.Repeat("HIGH_PRIORITY_", 5)
)

func gwNameFile(dir, q string, activity bool) string {
	return filepath.Join(dir, "queues", gwQueueDirOf(q, activity), gwQueueNameFile)
}

// gwFsckFindings returns fsck's findings of kind in dir.
func gwFsckFindings(t *testing.T, dir, kind string) []FsckFinding {
	t.Helper()
	rep, err := Fsck(context.Background(), dir, FsckOptions{})
	mustNoErr(t, err)
	var out []FsckFinding
	for _, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// TestGWLongQueueNames: a workflow queue and an activity queue whose names
// encode to more than names.MaxLen bytes work as any other: their
// directories are named by the hash and keep the name in their name file,
// from which another process (a fresh provider) maps them back for the
// stats and listings.
func TestGWLongQueueNames(t *testing.T) {
	for _, q := range []string{gwLongWF, gwLongAct} {
		if enc := names.Encode(q); !names.IsHashed(enc) {
			t.Fatalf("%q encodes to %q: not hashed", q, enc)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SweepInterval: -1, CheckpointInterval: -1}
	p := openT(t, dir, opts)
	mustNoErr(t, p.PrepareWorkflowQueues([]string{gwLongWF}, false))
	mustNoErr(t, p.PrepareWorkflowQueues([]string{gwLongAct}, true))
	ref := WorkflowRef{"long", "e1"}
	mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: gwLongWF, Name: "W"}, gwEv("start", "WorkflowExecutionStarted", 0)))
	task, err := p.FetchWorkflowTask(ctx, []string{gwLongWF}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if task == nil || task.Execution.Queue != gwLongWF || len(task.NewEvents) != 1 {
		t.Fatalf("task %+v", task)
	}
	mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{
		State: WorkflowActive, Executed: []WorkflowEvent{gwEv("start", "WorkflowExecutionStarted", 1)},
		Activities: []WorkflowActivity{{Queue: gwLongAct, EventID: "a1", Payload: json.RawMessage(`{}`)}},
	}))
	for _, c := range []struct {
		q        string
		activity bool
	}{{gwLongWF, false}, {gwLongAct, true}} {
		data, err := os.ReadFile(gwNameFile(dir, c.q, c.activity))
		mustNoErr(t, err)
		var rec gwQueueNameRec
		if err := json.Unmarshal(data, &rec); err != nil || rec.Queue != c.q {
			t.Fatalf("name file of %q: %s (%v)", c.q, data, err)
		}
	}

	// Another process maps the directories back to the names.
	p2 := openT(t, dir, opts)
	st, err := p2.WorkflowStats(ctx)
	mustNoErr(t, err)
	if st.ActivityTasks[gwLongAct] != 1 || st.ActiveExecutions != 1 {
		t.Fatalf("stats %+v", st)
	}
	qs, err := p2.QueueStats(ctx)
	mustNoErr(t, err)
	var got []string
	for _, s := range qs.Workflow {
		got = append(got, s.Name)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values([]string{gwLongWF, gwLongAct})); !slices.Equal(got, want) {
		t.Fatalf("queue stats names %q, want %q", got, want)
	}
	at, err := p2.FetchWorkflowActivity(ctx, []string{gwLongAct}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if at == nil || at.Queue != gwLongAct || at.EventID != "a1" {
		t.Fatalf("activity task %+v", at)
	}
	mustNoErr(t, p2.CompleteWorkflowActivity(ctx, at.Token, gwEv("a1-done", "ActivityCompleted", 0)))
	st, err = p2.WorkflowStats(ctx)
	mustNoErr(t, err)
	if st.ReadyTasks[gwLongWF] != 1 || len(st.ActivityTasks) != 0 {
		t.Fatalf("stats after the activity %+v", st)
	}
	task, err = p.FetchWorkflowTask(ctx, []string{gwLongWF}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if task == nil || len(task.NewEvents) != 1 || task.NewEvents[0].ID != "a1-done" {
		t.Fatalf("task %+v", task)
	}
	mustNoErr(t, p.gwSweep(ctx, 0, 0, true))
	if f := gwFsckFindings(t, dir, FsckFormat); len(f) > 0 {
		t.Fatalf("fsck: %+v", f)
	}
}

// TestGWQueueNameFileMissing: what a process killed between making a
// hashed queue directory and its name file leaves (the directory, perhaps
// a temporary file), and a name file that names another queue, break
// nothing else: another process opens (recovery and its sweep), sweeps,
// counts and lists; fsck reports both; the first open of the queue by name
// writes the missing file and works, and the one naming another queue is
// refused.
func TestGWQueueNameFileMissing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{SweepInterval: -1, CheckpointInterval: -1}
	p := openT(t, dir, opts)
	mustNoErr(t, p.PrepareWorkflowQueues([]string{"default"}, false))
	p.Close()

	killed := filepath.Join(dir, "queues", gwWorkflowQueue(gwLongWF))
	mustNoErr(t, os.MkdirAll(killed, 0o755))
	mustNoErr(t, os.WriteFile(filepath.Join(killed, vfs.TempPrefix+"gw-queue.json-1"), []byte(`{"qu`), 0o644))
	other := gwLongWF + "!"
	wrong := filepath.Join(dir, "queues", gwActivityQueue(other))
	mustNoErr(t, os.MkdirAll(wrong, 0o755))
	mustNoErr(t, os.WriteFile(filepath.Join(wrong, gwQueueNameFile), []byte(`{"queue":"someone else"}`), 0o644))

	p = openT(t, dir, opts) // recovery sweeps every queue
	mustNoErr(t, p.gwSweep(ctx, 0, 0, true))
	if _, err := p.WorkflowStats(ctx); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if _, err := p.QueueStats(ctx); err != nil {
		t.Fatalf("queue stats: %v", err)
	}
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"short", "e1"}, WorkflowStart{Queue: "default"}, gwEv("s", "WorkflowExecutionStarted", 0)))
	if task := gwFetch(t, p); task == nil || task.Execution.InstanceID != "short" {
		t.Fatalf("task %+v", task)
	}
	f := gwFsckFindings(t, dir, FsckFormat)
	if len(f) != 2 {
		t.Fatalf("fsck findings %+v, want the two directories", f)
	}
	for _, x := range f {
		if x.Severity != SeverityWarning || !strings.HasSuffix(x.Path, gwQueueNameFile) {
			t.Fatalf("finding %+v", x)
		}
	}

	// The queue opened by name gets its name file, and works.
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"long", "e1"}, WorkflowStart{Queue: gwLongWF}, gwEv("l", "WorkflowExecutionStarted", 0)))
	task, err := p.FetchWorkflowTask(ctx, []string{gwLongWF}, "w", time.Minute, 0)
	mustNoErr(t, err)
	if task == nil || task.Execution.InstanceID != "long" {
		t.Fatalf("task %+v", task)
	}
	if _, err := os.Stat(filepath.Join(killed, gwQueueNameFile)); err != nil {
		t.Fatal(err)
	}
	if f := gwFsckFindings(t, dir, FsckFormat); len(f) != 1 || !strings.Contains(f[0].Path, gwActivityQueue(other)) {
		t.Fatalf("fsck findings %+v, want the wrongly named one only", f)
	}
	if err := p.PrepareWorkflowQueues([]string{other}, true); !errors.Is(err, errGWQueueUnnamed) {
		t.Fatalf("open of a queue whose name file names another: %v", err)
	}
}

// TestGWQueueNameRace: processes (providers, each with its own cache)
// that open a new queue with a long name at once all succeed, and agree on
// one complete name file.
func TestGWQueueNameRace(t *testing.T) {
	opts := Options{SweepInterval: -1, CheckpointInterval: -1}
	for round := range 5 {
		dir := t.TempDir()
		ps := make([]*FSProvider, 6)
		for i := range ps {
			ps[i] = openT(t, dir, opts)
		}
		q := fmt.Sprintf("%s-%d", gwLongAct, round)
		var wg sync.WaitGroup
		errs := make([]error, len(ps))
		start := make(chan struct{})
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = p.PrepareWorkflowQueues([]string{q}, i%2 == 0)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: provider %d: %v", round, i, err)
			}
		}
		for _, activity := range []bool{false, true} {
			n, err := ps[0].gwReadQueueName(gwQueueDirOf(q, activity))
			if err != nil || n != q {
				t.Fatalf("round %d: name %q, %v", round, n, err)
			}
			entries, err := os.ReadDir(filepath.Join(dir, "queues", gwQueueDirOf(q, activity)))
			mustNoErr(t, err)
			for _, e := range entries {
				if vfs.IsTemp(e.Name()) {
					t.Fatalf("round %d: temporary file %s left", round, e.Name())
				}
			}
		}
	}
}

// TestGWQueueNamePowerLoss: at every sync point of making a queue with a
// long name, creating an execution in it and a checkpoint, a power loss (both models)
// leaves no message in the queue directory without its complete name
// file, and a process that opens the directory afterwards uses the queue.
func TestGWQueueNamePowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := plStrictMem(t)
	clk := clock.NewManual(plStart)
	opts := plOptions(mem, Durable, clk, "A")
	p, err := Open(plDir, opts)
	mustNoErr(t, err)
	var images []*vfs.MemFS
	var mu sync.Mutex // a checkpoint syncs from several goroutines
	mem.OnSync(func(int) {
		a, b := mem.CrashClone(), mem.CrashCloneWriteback()
		mu.Lock()
		defer mu.Unlock()
		images = append(images, a, b)
	})
	mustNoErr(t, p.CreateWorkflow(ctx, WorkflowRef{"pl", "e1"}, WorkflowStart{Queue: gwLongWF}, gwEv("start", "WorkflowExecutionStarted", 0)))
	mustNoErr(t, p.checkpointOnce(ctx, true, true)) // syncs the applied message
	mem.OnSync(nil)
	p.Close()
	if len(images) == 0 {
		t.Fatal("no sync point")
	}
	qdir := filepath.Join(plDir, "queues", gwWorkflowQueue(gwLongWF))
	named, withMsgs := 0, 0
	for i, img := range images {
		entries, err := img.ReadDirNames(qdir)
		if err != nil && !vfs.IsNotExist(err) {
			t.Fatal(err)
		}
		msgs := 0
		for _, n := range entries {
			if name, ok := strings.CutSuffix(n, ".json"); ok && validMessageName(name) {
				msgs++
			}
		}
		if msgs > 0 {
			withMsgs++
		}
		data, rerr := img.ReadFile(filepath.Join(qdir, gwQueueNameFile))
		var rec gwQueueNameRec
		if rerr == nil {
			named++
			if err := json.Unmarshal(data, &rec); err != nil || rec.Queue != gwLongWF {
				t.Fatalf("image %d: a torn or wrong name file %q (%v)", i, data, err)
			}
		} else if msgs > 0 {
			t.Fatalf("image %d: %d message(s) in %s without its name file (%v)", i, msgs, qdir, rerr)
		}
		q, err := Open(plDir, plOptions(img, Durable, clk, "B"))
		if err != nil {
			t.Fatalf("image %d: open: %v", i, err)
		}
		if _, err := q.WorkflowStats(ctx); err != nil {
			t.Fatalf("image %d: stats: %v", i, err)
		}
		if _, err := q.WorkflowExecutionInfo(ctx, WorkflowRef{"pl", "e1"}); err == nil {
			task, err := q.FetchWorkflowTask(ctx, []string{gwLongWF}, "w", time.Minute, 0)
			if err != nil || task == nil || task.NewEvents[0].ID != "start" {
				t.Fatalf("image %d: the created execution's task: %+v %v", i, task, err)
			}
		} else if err := q.PrepareWorkflowQueues([]string{gwLongWF}, false); err != nil {
			t.Fatalf("image %d: prepare: %v", i, err)
		}
		q.Close()
	}
	if named == 0 || named == len(images) || withMsgs == 0 {
		t.Fatalf("%d images, %d with the name file, %d with a message: the sync points were not covered", len(images), named, withMsgs)
	}
	t.Logf("%d images, %d with the name file, %d with a message", len(images), named, withMsgs)
}
