package goworkflows_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"

	"github.com/durofs/durofs/goworkflows"
)

// Greet is a workflow: go-workflows replays it from its history, which
// durofs keeps, so it survives a crash of the process that runs it.
func Greet(ctx workflow.Context, name string) (string, error) {
	return workflow.ExecuteActivity[string](ctx, workflow.DefaultActivityOptions, Hello, name).Get(ctx)
}

// Hello is an activity: where a workflow does its I/O.
func Hello(ctx context.Context, name string) (string, error) {
	return "hello, " + name, nil
}

func Example() {
	// Every workflow, task and history lives in this directory; any number
	// of processes on this host may open it at once. (A real program keeps
	// one directory, say /var/lib/myapp/workflows.)
	dir, err := os.MkdirTemp("", "durofs-greet-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, err := goworkflows.Open(dir, goworkflows.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := worker.New(b, nil) // runs workflows and activities
	if err := w.RegisterWorkflow(Greet); err != nil {
		log.Fatal(err)
	}
	if err := w.RegisterActivity(Hello); err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}

	c := client.New(b) // starts workflows and waits for their results
	wf, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "greet-1"}, Greet, "durofs")
	if err != nil {
		log.Fatal(err)
	}
	greeting, err := client.GetWorkflowResult[string](ctx, c, wf, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(greeting)

	cancel()
	if err := w.WaitForCompletion(); err != nil {
		log.Fatal(err)
	}
	// Output: hello, durofs
}
