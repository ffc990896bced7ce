package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/durofs/durofs/provider"
)

// dirEnv names the environment variable that gives --dir its default.
const dirEnv = "DUROFS_DIR"

// cli is the common part of the operator subcommands: a flag set with
// --dir and --json, positional arguments anywhere among the flags, and the
// exit-code conventions (0 ok, 1 failure, 2 usage).
type cli struct {
	name   string // "durofs ls"
	fs     *flag.FlagSet
	dir    string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// newCLI returns a subcommand's flag set with --dir and --json. synopsis is
// the usage line after "Usage: ", about the paragraph after it.
func newCLI(name, synopsis, about string, stdout, stderr io.Writer) *cli {
	c := &cli{name: name, stdout: stdout, stderr: stderr}
	c.fs = newFlagSet(name, fmt.Sprintf("Usage: %s\n\n%s\n\nFlags (before or after the arguments; --dir and --json also before the command):\n",
		synopsis, strings.TrimSpace(about)), stderr)
	c.fs.StringVar(&c.dir, "dir", "", "the durofs directory `D` (default: $"+dirEnv+")")
	c.fs.BoolVar(&c.json, "json", false, "print JSON for scripts instead of a table")
	return c
}

// newFlagSet returns a flag set that reports to stderr and whose -h prints
// usage (its text up to "Flags:") and the flags as printFlags spells them.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		printFlags(fs)
	}
	return fs
}

// parseFlags parses args into fs. When ok is false the command must return
// code: exitOK after -h, exitUsage after a bad flag (already reported).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return exitOK, true
}

// parse parses args, allowing flags after positional arguments, resolves
// --dir, and checks that there are between minPos and maxPos positional
// arguments (maxPos < 0: no limit). When ok is false the command must
// return code.
func (c *cli) parse(args []string, minPos, maxPos int) (pos []string, code int, ok bool) {
	for {
		if code, ok := parseFlags(c.fs, args); !ok {
			return nil, code, false
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if c.dir == "" {
		c.dir = os.Getenv(dirEnv)
	}
	if c.dir == "" {
		return nil, c.usageErr("--dir is required (or set %s)", dirEnv), false
	}
	switch {
	case len(pos) < minPos:
		return nil, c.usageErr("missing argument (see durofs help %s)", strings.TrimPrefix(c.name, "durofs ")), false
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, c.usageErr("unexpected argument %q", pos[maxPos]), false
	}
	if fi, err := os.Stat(c.dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%s: no such directory", c.dir)
		}
		return nil, c.fail(err), false
	} else if !fi.IsDir() {
		return nil, c.fail(fmt.Errorf("%s is not a directory", c.dir)), false
	}
	return pos, exitOK, true
}

// usageErr prints a usage problem and returns exitUsage.
func (c *cli) usageErr(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.name, fmt.Sprintf(format, args...))
	return exitUsage
}

// fail prints err and returns exitFailure.
func (c *cli) fail(err error) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.name, errText(err))
	return exitFailure
}

// errText is err's message for a person: without the library's own
// "durofs: " or "durofs fsck: " prefix (the command prints its name) and
// without the contract's operation name ("instance_detail: ").
func errText(err error) string {
	s := err.Error()
	var pe *provider.ProviderError
	if errors.As(err, &pe) && pe.Op != "" {
		s = strings.Replace(s, pe.Op+": ", "", 1)
	}
	for _, prefix := range []string{"durofs fsck: ", "durofs: "} {
		s = strings.TrimPrefix(s, prefix)
	}
	return s
}

// printFlags prints fs's flags as flag.PrintDefaults does, but spelled
// as the README and the usage lines spell them: --name.
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch f.DefValue {
		case "", "0", "false", "0s":
		default:
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, line)
	})
}

// logger logs the provider's warnings to stderr.
func (c *cli) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// context is cancelled by SIGINT or SIGTERM.
func (c *cli) context() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// openRead opens the directory for inspection (no recovery, nothing written).
func (c *cli) openRead() (*provider.FSProvider, error) {
	return provider.OpenReadOnly(c.dir, provider.Options{Logger: c.logger()})
}

// openWrite opens the directory as a provider (recovery included, no
// background sweep), for the commands that change it.
func (c *cli) openWrite() (*provider.FSProvider, error) {
	if _, err := os.Stat(c.dir + string(os.PathSeparator) + "FORMAT"); err != nil {
		return nil, fmt.Errorf("%s: %w (no FORMAT file)", c.dir, provider.ErrNotDurofsDir)
	}
	return provider.Open(c.dir, provider.Options{Logger: c.logger(), SweepInterval: -1})
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// table returns a tab-separated table writer on stdout (Flush it).
func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
}

// fmtTime formats Unix milliseconds as UTC RFC 3339 ("-" for 0).
func fmtTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// fmtTimePtr is fmtTime for an optional time.
func fmtTimePtr(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return fmtTime(*ms)
}

// fmtRel says how far ms is from now: "in 4m0s" or "3s ago".
func fmtRel(ms int64, now time.Time) string {
	if ms == 0 {
		return "-"
	}
	d := time.UnixMilli(ms).Sub(now)
	if d >= 0 {
		return "in " + roundDur(d).String()
	}
	return roundDur(-d).String() + " ago"
}

// roundDur rounds a duration for display.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Second:
		return d.Round(time.Second)
	default:
		return d.Round(time.Millisecond)
	}
}

// short truncates s to n runes for a table cell, and keeps it on one line.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// orDash returns s, or "-" if it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtBytes formats a size in bytes.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
