package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/stretchr/testify/require"

	"github.com/durofs/durofs/goworkflows"
)

func Shipment(ctx workflow.Context, order string) (string, error) {
	return workflow.ExecuteActivity[string](ctx, workflow.DefaultActivityOptions, Pack, order).Get(ctx)
}

func Pack(ctx context.Context, order string) (string, error) { return "packed " + order, nil }

// chromium finds the Chromium of the Debian packages (apt-get install
// chromium). Without it the test is skipped, except in CI (CI set), whose
// run installs it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// pageText waits until the page's text contains every one of wants and
// returns the text.
func pageText(ctx context.Context, wants ...string) (string, error) {
	conds := []string{"document.body"}
	for _, w := range wants {
		conds = append(conds, "document.body.innerText.includes("+jsString(w)+")")
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](strings.Join(conds, " && "), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
		return text, fmt.Errorf("waiting for %q: %w", wants, err)
	}
	return chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
}

func jsString(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// TestUIInBrowser: durofs-ui serves go-workflows' diagnostics UI over a
// durofs directory; a headless Chromium renders its instance list and one
// instance's history.
func TestUIInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser := chromium(t)
	dir := t.TempDir()

	// A directory with two finished workflows.
	b, err := goworkflows.Open(dir, goworkflows.Options{PollTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	w := worker.New(b, nil)
	require.NoError(t, w.RegisterWorkflow(Shipment))
	require.NoError(t, w.RegisterActivity(Pack))
	require.NoError(t, w.Start(wctx))
	c := client.New(b)
	var insts []*workflow.Instance
	for _, order := range []string{"order-17", "order-42"} {
		inst, err := c.CreateWorkflowInstance(wctx, client.WorkflowInstanceOptions{InstanceID: order}, Shipment, order)
		require.NoError(t, err)
		r, err := client.GetWorkflowResult[string](wctx, c, inst, 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, "packed "+order, r)
		insts = append(insts, inst)
	}
	stopWorker()
	require.NoError(t, w.WaitForCompletion())
	require.NoError(t, b.Close())

	// The UI, as durofs-ui serves it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	urls := make(chan string, 1)
	go func() { served <- serve(sctx, dir, ln, func(url string) { urls <- url }) }()
	var url string
	select {
	case url = <-urls:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	defer func() {
		stopServer()
		require.NoError(t, <-served)
	}()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()

	// The instance list.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(url)))
	list, err := pageText(bctx, "order-17", "order-42", insts[1].ExecutionID)
	require.NoError(t, err, "instance list:\n%s", list)
	t.Logf("instance list:\n%s", list)

	// One instance's page: its history.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(url+"#/"+insts[0].InstanceID+"/"+insts[0].ExecutionID)))
	page, err := pageText(bctx, "WorkflowExecutionStarted", "ActivityScheduled", "ActivityCompleted", "WorkflowExecutionFinished")
	require.NoError(t, err, "instance page:\n%s", page)
	t.Logf("instance page:\n%s", page)
	require.Contains(t, page, "order-17")
}
