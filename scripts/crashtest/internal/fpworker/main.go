// Command fpworker runs the crash-suite script (internal/crashcheck/script)
// against a durofs directory. The crash-point sweep builds it with
// -tags crashtest and runs it with DUROFS_FAILPOINT set, so that it dies by
// SIGKILL at a chosen failpoint.
//
// Usage:
//
//	fpworker -dir D [-script S] [-from N] [-skew 1h] [-nosync] [-segment-size B]   run steps N.. of the script
//	fpworker -dir D -recover [-nosync] [-segment-size B]                           open (which recovers) and exit
//
// -script names the script (script.ByName): "duroxide" (the default, the
// duroxide contract) or "gw" (the go-workflows engine operations).
//
// Open replays the write-ahead log if no other process has the directory
// open, and otherwise only finishes what the log and the pending marks show
// (the crash-point sweep runs both ways: alone, and with a process holding
// the log open). Every process of a directory must use the same
// -segment-size (the sweep uses a small one, so that checkpoints trim
// segments).
//
// It prints one line per completed operation, written to stdout unbuffered
// before it continues, so the parent knows exactly what was acknowledged
// before a kill:
//
//	ok open
//	ok <step> <step name>
//	done
//
// A step that fails prints "error <step> <message>" and exits with status 3.
// With DUROFS_FAILPOINT_LIST set, it also appends "# step <n>" to that file
// before each step, so the parent can tell which step hit each failpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/durofs/durofs/internal/clock"
	"github.com/durofs/durofs/internal/crashcheck/script"
	"github.com/durofs/durofs/provider"
)

// skewed is the system clock moved forward, so that leases and claims left by
// a killed process look expired at once.
type skewed struct{ d time.Duration }

func (s skewed) Now() time.Time { return time.Now().Add(s.d) }

func main() {
	dir := flag.String("dir", "", "durofs directory")
	from := flag.Int("from", 1, "first step to run (1-based)")
	skew := flag.Duration("skew", 0, "move the clock forward by this much")
	nosync := flag.Bool("nosync", false, "ProcessCrashSafe mode (no fsync)")
	recoverOnly := flag.Bool("recover", false, "only open the directory (recovery) and exit")
	segSize := flag.Int64("segment-size", 0, "write-ahead log segment size (0: the default)")
	scriptName := flag.String("script", script.Duroxide, "the script to run: duroxide or gw")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "fpworker: -dir is required")
		os.Exit(2)
	}
	steps, err := script.ByName(*scriptName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fpworker:", err)
		os.Exit(2)
	}
	opts := provider.Options{
		SweepInterval: -1, // no background goroutine: hits are deterministic
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:         clock.Clock(clock.System{}),
	}
	if *skew != 0 {
		opts.Clock = skewed{*skew}
	}
	if *nosync {
		opts.Durability = provider.ProcessCrashSafe
	}
	opts.CheckpointInterval = -1 // checkpoints only where the script asks: hits are deterministic
	opts.SegmentSize = *segSize
	p, err := provider.Open(*dir, opts)
	if err != nil {
		fmt.Printf("error open %v\n", err)
		os.Exit(3)
	}
	if *recoverOnly {
		fmt.Println("ok recover")
		return
	}
	fmt.Println("ok open")
	var marks *os.File
	if path := os.Getenv("DUROFS_FAILPOINT_LIST"); path != "" {
		if marks, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			fmt.Printf("error open %v\n", err)
			os.Exit(3)
		}
	}
	ctx := context.Background()
	env := &script.Env{P: p}
	for i := *from; i <= len(steps); i++ {
		if marks != nil {
			fmt.Fprintf(marks, "# step %d\n", i)
		}
		if err := script.RunStep(ctx, env, steps, i); err != nil {
			fmt.Printf("error %d %v\n", i, err)
			os.Exit(3)
		}
		fmt.Printf("ok %d %s\n", i, steps[i-1].Name)
	}
	fmt.Println("done")
}
