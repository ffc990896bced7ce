// Package racereport prints the summary line of a multi-process race test
// (lease, fsqueue) and, when DUROFS_RACE_REPORT names a file, appends it
// there too: `make test` runs the suite without -v, which hides what a
// passing test prints, and shows the round counts from that file instead
// of running the race tests a second time.
package racereport

import (
	"fmt"
	"os"
)

// Env names the file the summary lines are appended to.
const Env = "DUROFS_RACE_REPORT"

// Printf prints one summary line (a newline is added) to stdout and
// appends it to the file named by Env, if set. A line is one write with
// O_APPEND, so the lines of test binaries running side by side do not
// interleave.
func Printf(format string, args ...any) error {
	line := fmt.Sprintf(format, args...) + "\n"
	fmt.Print(line)
	path := os.Getenv(Env)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("race report: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("race report: %w", err)
	}
	return f.Close()
}
