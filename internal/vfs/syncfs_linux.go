package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// syncFS calls syncfs(2) on the file system holding dir. Since Linux 5.8
// syncfs reports writeback errors of that file system (errseq), which is
// what makes it usable as a commit barrier - but only errors that happened
// after the descriptor was opened. So the descriptor of each directory is
// opened once and kept for the life of the process: a writeback error at
// any time after the first barrier is reported by the next one.
func syncFS(dir string) error {
	fd, err := barrierFD(dir)
	if err != nil {
		return err
	}
	for {
		err = unix.Syncfs(fd)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "syncfs", Path: dir, Err: err}
	}
	return nil
}

var barrierFDs sync.Map // cleaned dir → *os.File, never closed

func barrierFD(dir string) (int, error) {
	dir = filepath.Clean(dir)
	if f, ok := barrierFDs.Load(dir); ok {
		return int(f.(*os.File).Fd()), nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return -1, err
	}
	if prev, loaded := barrierFDs.LoadOrStore(dir, f); loaded {
		f.Close()
		f = prev.(*os.File)
	}
	return int(f.Fd()), nil
}

// bootOnce reads the boot id, and refuses kernels older than 5.8, whose
// syncfs(2) does not report writeback errors (a barrier that cannot fail
// proves nothing).
var bootOnce = sync.OnceValues(func() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	if !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 8) {
		return "", ErrNoBarrier
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", ErrNoBarrier
	}
	return id, nil
})

func bootID() (string, error) { return bootOnce() }

// kernelAtLeast reports whether a kernel release string ("6.18.44-fc")
// is at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
