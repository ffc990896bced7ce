package vfs

import (
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// syncFS calls syncfs(2) on the file system holding dir. Since Linux 5.8
// syncfs reports writeback errors of that file system (errseq), which is
// what makes it usable as a commit barrier.
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		err = unix.Syncfs(int(d.Fd()))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "syncfs", Path: dir, Err: err}
	}
	return nil
}

var bootOnce = sync.OnceValues(func() (string, error) {
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
