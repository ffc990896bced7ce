// Command durofs-ui serves go-workflows' diagnostics web UI (its diag
// package: the instance list, each instance's history and tree) over a
// durofs directory:
//
//	go run ./cmd/durofs-ui --dir /var/lib/app/wf [--addr 127.0.0.1:3000]
//
// It opens the directory as one more process of it (goworkflows.Open: it
// takes part in recovery like any process, and fetches no work), so it can
// run beside the workers. Stop it with Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/diag"

	"github.com/durofs/durofs/goworkflows"
)

// Handler returns the diagnostics UI and its API (/api/) for b.
func Handler(b diag.Backend) http.Handler { return diag.NewServeMux(b) }

func main() {
	dir := flag.String("dir", os.Getenv("DUROFS_DIR"), "the durofs directory (default $DUROFS_DIR)")
	addr := flag.String("addr", "127.0.0.1:3000", "the address to listen on")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "durofs-ui: --dir is required")
		os.Exit(2)
	}
	if err := run(*dir, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "durofs-ui:", err)
		os.Exit(1)
	}
}

func run(dir, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, dir, ln, func(url string) { fmt.Printf("go-workflows diagnostics for %s: %s\n", dir, url) })
}

// serve opens dir and serves the UI on ln until ctx ends; ready is called
// with the UI's URL once it is served.
func serve(ctx context.Context, dir string, ln net.Listener, ready func(url string)) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := goworkflows.Open(dir, goworkflows.Options{}, backend.WithLogger(log), backend.WithWorkerName("durofs-ui"))
	if err != nil {
		ln.Close()
		return err
	}
	defer b.Close()
	srv := &http.Server{Handler: Handler(b), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	ready("http://" + ln.Addr().String() + "/")
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
