//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/durofs/durofs/conformance/workload"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/invariants"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// checkMain is the "check" subcommand: it runs the invariant checker again
// on a kept working directory, rebuilding the oracle from oracle.jsonl and
// the started instances from specs.jsonl. With --verify it also opens the
// directory (which runs recovery: it may change the directory) to run
// workload.Verify.
func checkMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "working `directory` of a kept run (required)")
	dispatchers := fs.Int("dispatchers", 2, "dispatcher loops per worker in that run (bounds in-flight acks per kill)")
	verify := fs.Bool("verify", false, "also open the directory (recovery!) and run workload.Verify")
	details := fs.Int("details", 30, "violations to print in detail")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "chaos check: --dir is required")
		return exitUsage
	}
	rep, err := recheck(*dir, *dispatchers, *verify)
	if err != nil {
		fmt.Fprintf(stderr, "chaos check: %v\n", err)
		return exitFailure
	}
	f := rep.Figures
	fmt.Fprintf(stdout, "checked %d instances (%d of %d specs as expected, +%d sub-orchestrations), %d executions, %d events, %d OK acks\n",
		f.Instances, f.SpecsOK, f.Specs, f.Children, f.Executions, f.Events, f.AcksOK)
	rep.Write(stdout, *details)
	if !rep.OK() {
		return exitFailure
	}
	return exitOK
}

// recheck checks work/data against work/oracle.jsonl and work/specs.jsonl.
func recheck(work string, dispatchers int, verify bool) (*invariants.Report, error) {
	olog, err := os.Open(filepath.Join(work, "oracle.jsonl"))
	if err != nil {
		return nil, err
	}
	defer olog.Close()
	b, err := oracle.Replay(olog, dispatchers)
	if err != nil {
		return nil, err
	}
	specs, err := readSpecs(filepath.Join(work, "specs.jsonl"))
	if err != nil {
		return nil, err
	}
	in := invariants.Input{Oracle: b.Oracle(), Specs: specs}
	if in.Deleted, in.MaybeDeleted, err = readDeletions(filepath.Join(work, "deletions.jsonl")); err != nil {
		return nil, err
	}
	data := filepath.Join(work, "data")
	if verify {
		p, err := provider.Open(data, provider.Options{SweepInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, err
		}
		defer p.Close()
		in.Provider = p
	}
	return invariants.Check(context.Background(), data, in)
}

// deletionRecord is one line of deletions.jsonl: a DeleteInstance call of
// the driver.
type deletionRecord struct {
	Instance string `json:"instance"`
	Forced   bool   `json:"forced"`
	OK       bool   `json:"ok"`
	Err      string `json:"err,omitempty"`
	// StartUs and EndUs bound the call (µs since the epoch), to place it
	// among the workers' reports (oracle.jsonl) when a check fails.
	StartUs int64 `json:"start_us"`
	EndUs   int64 `json:"end_us"`
}

// readDeletions reads deletions.jsonl (absent: none) into the instances
// deleted and those whose every deletion failed.
func readDeletions(path string) (deleted, maybe []string, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	ok, failed := map[string]bool{}, map[string]bool{}
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var r deletionRecord
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if r.OK {
			ok[r.Instance] = true
		} else {
			failed[r.Instance] = true
		}
	}
	deleted, maybe = splitDeletions(ok, failed)
	return deleted, maybe, nil
}

// readSpecs reads one workload.Spec per line.
func readSpecs(path string) ([]workload.Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var specs []workload.Spec
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s workload.Spec
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		specs = append(specs, s)
	}
	return specs, sc.Err()
}
