// Command durofs is the durofs command-line tool.
//
// Usage:
//
//	durofs <command> [flags]
//
// Commands:
//
//	demo    run a mixed workload on several worker processes sharing one
//	        directory, SIGKILL one of them midway, and verify the result
//
// Run "durofs <command> -h" for a command's flags. Exit status: 0 on
// success, 1 on failure (a violated invariant, a timeout, an I/O error),
// 2 on a usage error.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "demo":
		return demoCmd(args[1:], stdout, stderr)
	case "worker":
		// Hidden: the worker process the demo starts.
		return workerCmd(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "durofs: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `durofs - a duroxide provider on plain files

Usage:

	durofs <command> [flags]

Commands:

	demo    run a mixed workload (chains, fan-out, timers, sub-orchestrations,
	        external events, continue-as-new, cancellation, failures) on
	        several worker processes sharing one directory, SIGKILL a worker
	        midway, and verify every instance and every history

Run "durofs <command> -h" for a command's flags.
`)
}
