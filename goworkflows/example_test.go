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

// A workflow and its activity.
func Hello(ctx workflow.Context, name string) (string, error) {
	return workflow.ExecuteActivity[string](ctx, workflow.DefaultActivityOptions, Greeting, name).Get(ctx)
}

func Greeting(ctx context.Context, name string) (string, error) { return "hello " + name, nil }

// A worker and a client on one directory. Other processes may open the same
// directory and share the work (see ./example).
func Example() {
	dir, err := os.MkdirTemp("", "durofs-gw-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	b, err := goworkflows.Open(dir, goworkflows.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx, stop := context.WithCancel(context.Background())
	w := worker.New(b, nil)
	_ = w.RegisterWorkflow(Hello)
	_ = w.RegisterActivity(Greeting)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}

	c := client.New(b)
	inst, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "hello-1"}, Hello, "durofs")
	if err != nil {
		log.Fatal(err)
	}
	r, err := client.GetWorkflowResult[string](ctx, c, inst, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r)

	stop()
	_ = w.WaitForCompletion()
	// Output: hello durofs
}
