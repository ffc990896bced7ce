package harness

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Machine describes where a benchmark ran.
type Machine struct {
	// CPU is the CPU model (from /proc/cpuinfo).
	CPU string
	// Cores is the number of logical CPUs.
	Cores int
	// OS is GOOS/GOARCH and the kernel release.
	OS string
	// FSType is the file system type of the benchmark directory.
	FSType string
	// Dir is the benchmark directory.
	Dir string
	// Go is the Go version that built the harness.
	Go string
	// Revision is the durofs commit (from the build info or git), if known.
	Revision string
	// Date is when the run started.
	Date time.Time
}

// DescribeMachine describes this machine and the file system of dir.
func DescribeMachine(dir string) Machine {
	m := Machine{
		CPU:    cpuModel(),
		Cores:  runtime.NumCPU(),
		OS:     runtime.GOOS + "/" + runtime.GOARCH,
		FSType: fsType(dir),
		Dir:    dir,
		Go:     runtime.Version(),
		Date:   time.Now(),
	}
	if rel, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += ", kernel " + strings.TrimSpace(string(rel))
	}
	m.Revision = revision(dir)
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// revision is the VCS revision of the build, or git's HEAD in dir.
func revision(dir string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if len(rev) >= 12 {
			return rev[:12] + dirty
		}
	}
	cmd := exec.Command("git", "rev-parse", "--short=12", "HEAD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	rev := string(bytes.TrimSpace(out))
	cmd = exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	cmd.Dir = dir
	if st, err := cmd.Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev
}
