//go:build linux

package harness

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// selfPeakRSSKiB is this process's peak resident set size in KiB (VmHWM of
// /proc/self/status), 0 if unknown.
//
// Not ru_maxrss from wait4: Go starts children with vfork semantics
// (CLONE_VM), and Linux carries the shared address space's high-water mark
// into the child's ru_maxrss at exec, so every child would report at least
// the parent's RSS (a /bin/true started by a 200 MB process reports 200 MB).
// VmHWM belongs to the child's own address space, created at exec.
func selfPeakRSSKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}

// childProcAttr has the kernel kill a child when the harness dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
