//go:build crashtest

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Enabled reports whether failpoints are compiled in (the crashtest build
// tag). It is true in this build.
const Enabled = true

// Environment variables read by Hit in crashtest builds.
const (
	// EnvFailpoint selects the crash point: "name" or "name:nth".
	EnvFailpoint = "DUROFS_FAILPOINT"
	// EnvList names a file to which every hit name is appended.
	EnvList = "DUROFS_FAILPOINT_LIST"
	// EnvStop arms stops (Unix): a comma-separated list of name prefixes
	// ("" matches every name). After the process receives SIGUSR2, the
	// first hit within a second of a matching name stops the process with
	// SIGSTOP (right there: whatever locks it holds stay held), having
	// appended "stop <name>" to the file EnvStopLog names. The stall test
	// uses it to stop a worker inside its commits.
	EnvStop = "DUROFS_FAILPOINT_STOP"
	// EnvStopLog names the file of EnvStop's reports.
	EnvStopLog = "DUROFS_FAILPOINT_STOP_LOG"
)

var (
	// stopPrefixes, stopLog and stopUntil implement EnvStop: stopUntil is
	// the deadline (Unix ns) of an armed stop, 0 if none is armed.
	stopPrefixes []string
	stopLog      *os.File
	stopUntil    atomic.Int64

	setupOnce sync.Once
	target    string // "" = no crash point armed
	targetNth int
	list      *os.File

	mu     sync.Mutex
	counts = map[string]int{}
)

func setup() {
	if spec := os.Getenv(EnvFailpoint); spec != "" {
		name, nth, err := parse(spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "failpoint: %s=%q: %v\n", EnvFailpoint, spec, err)
			os.Exit(2)
		}
		target, targetNth = name, nth
	}
	if prefixes, ok := os.LookupEnv(EnvStop); ok {
		stopPrefixes = strings.Split(prefixes, ",")
		if path := os.Getenv(EnvStopLog); path != "" {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				fmt.Fprintf(os.Stderr, "failpoint: %s: %v\n", EnvStopLog, err)
				os.Exit(2)
			}
			stopLog = f
		}
		armStops()
	}
	if path := os.Getenv(EnvList); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "failpoint: %s: %v\n", EnvList, err)
			os.Exit(2)
		}
		list = f
	}
}

// maybeStop stops the process if a stop is armed and name matches.
func maybeStop(name string) {
	until := stopUntil.Load()
	if until == 0 || time.Now().UnixNano() > until {
		return
	}
	match := false
	for _, p := range stopPrefixes {
		if strings.HasPrefix(name, p) {
			match = true
			break
		}
	}
	if !match || !stopUntil.CompareAndSwap(until, 0) {
		return
	}
	if stopLog != nil {
		_, _ = stopLog.WriteString("stop " + name + "\n")
	}
	stopSelf()
}

// parse splits "name" or "name:nth".
func parse(spec string) (name string, nth int, err error) {
	name, n, found := strings.Cut(spec, ":")
	if name == "" {
		return "", 0, fmt.Errorf("empty failpoint name")
	}
	if !found {
		return name, 1, nil
	}
	nth, err = strconv.Atoi(n)
	if err != nil || nth < 1 {
		return "", 0, fmt.Errorf("nth must be a positive integer, not %q", n)
	}
	return name, nth, nil
}

// Hit marks the crash point name: it records the hit if DUROFS_FAILPOINT_LIST
// is set, and kills the process with SIGKILL if this is the armed point's
// nth hit.
func Hit(name string) {
	setupOnce.Do(setup)
	if stopPrefixes != nil {
		maybeStop(name)
	}
	if target == "" && list == nil {
		return
	}
	mu.Lock()
	counts[name]++
	n := counts[name]
	if list != nil {
		// One unbuffered O_APPEND write per hit: it is in the file before a
		// kill below, and lines of concurrent writers never interleave.
		_, _ = list.WriteString(name + "\n")
	}
	if name == target && n == targetNth {
		kill() // never returns; the lock dies with the process
	}
	mu.Unlock()
}
