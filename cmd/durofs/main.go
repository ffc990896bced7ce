// Command durofs is the durofs command-line tool.
//
// Usage:
//
//	durofs <command> [flags]
//
// Commands:
//
//	demo     run a mixed workload on several worker processes sharing one
//	         directory, SIGKILL one of them midway, and verify the result
//	ls       list instances              show     one instance in detail
//	history  one execution's events      queues   queue depths and timers
//	leases   leases, claims, sessions    stats    metrics and disk usage
//	fsck     check (and --repair) a directory
//	delete   delete an instance tree     prune    delete old executions
//	drain    delete messages for instances never started
//
// The operator commands take --dir (default $DUROFS_DIR) and --json. Run
// "durofs <command> -h" for a command's flags. Exit status: 0 on success,
// 1 on failure (a violated invariant, a timeout, an I/O error, fsck
// findings left), 2 on a usage error.
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
	case "ls":
		return lsCmd(args[1:], stdout, stderr)
	case "show":
		return showCmd(args[1:], stdout, stderr)
	case "history":
		return historyCmd(args[1:], stdout, stderr)
	case "queues":
		return queuesCmd(args[1:], stdout, stderr)
	case "leases":
		return leasesCmd(args[1:], stdout, stderr)
	case "stats":
		return statsCmd(args[1:], stdout, stderr)
	case "fsck":
		return fsckCmd(args[1:], stdout, stderr)
	case "delete":
		return deleteCmd(args[1:], stdout, stderr)
	case "prune":
		return pruneCmd(args[1:], stdout, stderr)
	case "drain":
		return drainCmd(args[1:], stdout, stderr)
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

	demo     run a mixed workload (chains, fan-out, timers, sub-orchestrations,
	         external events, continue-as-new, cancellation, failures) on
	         several worker processes sharing one directory, SIGKILL a worker
	         midway, and verify every instance and every history

Inspecting a directory (read-only, safe on a live directory):

	ls       list instances: name, version, status, execution, times [--status S]
	show     one instance: record, executions, custom status, parent and
	         children, lease, pending commit, queued messages
	history  one execution's events [--execution N]
	queues   queue depths, oldest ready message, timers, staged, claims
	leases   instance leases, work-item claims and sessions [--all]
	stats    system metrics, queue depths, disk usage

Maintaining it:

	fsck     check consistency; --repair fixes what is safe to fix and
	         moves what it takes away to <dir>/quarantine/
	delete   delete an instance and its sub-orchestrations [--force]
	prune    delete old executions of an instance or --all
	         [--keep-last N] [--completed-before T]
	drain    delete the messages queued for instances never started
	         [<instance>...] [--older-than D]

The inspection and maintenance commands take --dir (default $DUROFS_DIR)
and --json (machine-readable output). Run "durofs <command> -h" for a
command's flags. Exit status: 0 ok, 1 failure (fsck: problems remain),
2 usage error.
`)
}
