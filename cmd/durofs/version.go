package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/durofs/durofs/provider"
)

// versionInfo is what durofs version prints.
type versionInfo struct {
	Version         string `json:"version"`
	FormatVersion   int    `json:"format_version"`
	DuroxideVersion string `json:"duroxide_version"`
	// Commit is the VCS revision the binary was built from, if known.
	Commit string `json:"commit,omitempty"`
	Go     string `json:"go"`
}

// versionCmd is "durofs version".
func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("durofs version", `Usage: durofs version [--json]

Prints durofs's version, the on-disk format version it reads and writes,
the duroxide version whose provider contract it implements, and the commit
and Go version it was built with.

Flags:
`, stderr)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "durofs version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	v := versionInfo{Version: provider.Version, FormatVersion: provider.FormatVersion,
		DuroxideVersion: provider.DuroxideVersion, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			fmt.Fprintf(stderr, "durofs version: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "durofs %s (on-disk format %d, duroxide provider contract %s", v.Version, v.FormatVersion, v.DuroxideVersion)
	if v.Commit != "" {
		fmt.Fprintf(stdout, ", commit %.12s", v.Commit)
	}
	fmt.Fprintf(stdout, ", %s)\n", v.Go)
	return exitOK
}
