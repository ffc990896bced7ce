// Command durofs is the durofs command-line tool.
//
// Usage:
//
//	durofs [--dir D] [--json] <command> [arguments] [flags]
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
//	version  print the version           help     help on a command
//
// The operator commands take --dir (default $DUROFS_DIR) and --json, before
// or after the command. Run "durofs help <command>" for a command's flags.
// Exit status: 0 on success, 1 on failure (a violated invariant, a timeout,
// an I/O error, fsck findings left), 2 on a usage error.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// command is a subcommand: it parses its own flags from args.
type command func(args []string, stdout, stderr io.Writer) int

// commands are the subcommands by name ("worker" is the demo's hidden
// worker process).
var commands = map[string]command{
	"demo":    demoCmd,
	"ls":      lsCmd,
	"show":    showCmd,
	"history": historyCmd,
	"queues":  queuesCmd,
	"leases":  leasesCmd,
	"stats":   statsCmd,
	"fsck":    fsckCmd,
	"delete":  deleteCmd,
	"prune":   pruneCmd,
	"drain":   drainCmd,
	"version": versionCmd,
	"worker":  workerCmd,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code. Global flags
// (--dir, --json) may come before the command: they are handed to it as if
// they followed it.
func run(args []string, stdout, stderr io.Writer) int {
	global, args, code, ok := globalFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return helpCmd(rest, stdout, stderr)
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "durofs: unknown command %q (see durofs help)\n", name)
		return exitUsage
	}
	return cmd(append(global, rest...), stdout, stderr)
}

// globalFlags splits the flags before the command off args. -h and
// --version are answered here (ok false, with the exit code).
func globalFlags(args []string, stdout, stderr io.Writer) (global, rest []string, code int, ok bool) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && len(args[0]) > 1 {
		a := args[0]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "h", "help":
			usage(stdout)
			return nil, nil, exitOK, false
		case "version":
			return nil, nil, versionCmd(nil, stdout, stderr), false
		case "json":
			global, args = append(global, a), args[1:]
		case "dir":
			if hasValue {
				global, args = append(global, a), args[1:]
				continue
			}
			if len(args) < 2 {
				fmt.Fprintln(stderr, "durofs: --dir needs a directory")
				return nil, nil, exitUsage, false
			}
			global, args = append(global, a, args[1]), args[2:]
		default:
			if a == "--" {
				return global, args[1:], exitOK, true
			}
			fmt.Fprintf(stderr, "durofs: unknown flag %s before the command (the global flags are --dir and --json; see durofs help)\n", a)
			return nil, nil, exitUsage, false
		}
	}
	return global, args, exitOK, true
}

// helpCmd is "durofs help [command]": the usage, or a command's help (its
// -h) on stdout.
func helpCmd(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintln(stderr, "durofs help: give one command")
		return exitUsage
	}
	cmd, ok := commands[args[0]]
	if !ok || args[0] == "worker" {
		fmt.Fprintf(stderr, "durofs help: unknown command %q (see durofs help)\n", args[0])
		return exitUsage
	}
	return cmd([]string{"-h"}, stdout, stdout)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `durofs - durable orchestrations stored as plain files in one directory

Usage:

	durofs [--dir D] [--json] <command> [arguments] [flags]

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

Other:

	version  print durofs's version, on-disk format and duroxide contract version
	help     "durofs help <command>" prints a command's flags

The inspection and maintenance commands take --dir (default $DUROFS_DIR)
and --json (machine-readable output), before or after the command:
"durofs --dir D ls" and "durofs ls --dir D" are the same. Exit status:
0 ok, 1 failure (fsck: problems remain), 2 usage error.
`)
}
