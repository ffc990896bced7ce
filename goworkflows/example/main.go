// Command example runs go-workflows workflows on a durofs directory: a
// worker and a client in one process. Run it twice at once on the same
// directory and the two processes share the work - each runs activities of
// the other's workflows:
//
//	go run ./example -dir /tmp/wf -n 20 & go run ./example -dir /tmp/wf -n 20; wait
//
// Each process starts n workflows (ids <its pid>-<i>), waits for their
// results, and says how many activities it ran for its own workflows and
// for the other process's. The directory can be inspected meanwhile and
// afterwards with the durofs command (durofs ls --dir /tmp/wf).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"

	"github.com/durofs/durofs/goworkflows"
)

// Greet is the workflow: an activity, a timer, and a second activity.
func Greet(ctx workflow.Context, name string) (string, error) {
	h, err := workflow.ExecuteActivity[string](ctx, workflow.DefaultActivityOptions, Hello, name).Get(ctx)
	if err != nil {
		return "", err
	}
	if _, err := workflow.ScheduleTimer(ctx, 100*time.Millisecond).Get(ctx); err != nil {
		return "", err
	}
	return workflow.ExecuteActivity[string](ctx, workflow.DefaultActivityOptions, Shout, h).Get(ctx)
}

var mine, theirs atomic.Int64

// prefix names this process's workflows.
var prefix = fmt.Sprint(os.Getpid())

func count(name string) {
	if strings.HasPrefix(name, prefix+"-") {
		mine.Add(1)
	} else {
		theirs.Add(1)
	}
}

// Hello is an activity.
func Hello(ctx context.Context, name string) (string, error) {
	count(name)
	time.Sleep(20 * time.Millisecond) // some work
	return "hello " + name, nil
}

// Shout is an activity.
func Shout(ctx context.Context, s string) (string, error) {
	count(strings.TrimPrefix(s, "hello "))
	return strings.ToUpper(s) + "!", nil
}

func main() {
	dir := flag.String("dir", "wf-data", "the durofs directory (shared by every process)")
	n := flag.Int("n", 10, "workflows to start")
	flag.Parse()

	b, err := goworkflows.Open(*dir, goworkflows.Options{}, backend.WithWorkerName("example-"+prefix))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx, stop := context.WithCancel(context.Background())
	w := worker.New(b, nil)
	if err := w.RegisterWorkflow(Greet); err != nil {
		log.Fatal(err)
	}
	for _, a := range []any{Hello, Shout} {
		if err := w.RegisterActivity(a); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}

	c := client.New(b)
	var started []*workflow.Instance
	for i := range *n {
		inst, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: fmt.Sprintf("%s-%d", prefix, i)}, Greet, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			log.Fatal(err)
		}
		started = append(started, inst)
	}
	for _, inst := range started {
		r, err := client.GetWorkflowResult[string](ctx, c, inst, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s\n", inst.InstanceID, r)
	}
	// Stay a moment for the other process's work.
	time.Sleep(time.Second)
	stop()
	if err := w.WaitForCompletion(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("process %s: %d workflows done; it ran %d activities of its own workflows and %d of other processes'\n",
		prefix, len(started), mine.Load(), theirs.Load())
}
