//go:build unix

package sharedsync

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// platform holds the shared file's descriptor and mapping.
type platform struct {
	fd  int
	mem []byte
}

func (p *platform) lock() error {
	for {
		err := unix.Flock(p.fd, unix.LOCK_EX)
		if err != unix.EINTR {
			if err != nil {
				return fmt.Errorf("sharedsync: flock: %w", err)
			}
			return nil
		}
	}
}

func (p *platform) unlock() { _ = unix.Flock(p.fd, unix.LOCK_UN) }

func (p *platform) close() error {
	if p.mem == nil {
		return nil
	}
	err := unix.Munmap(p.mem)
	if cerr := unix.Close(p.fd); err == nil {
		err = cerr
	}
	p.mem = nil
	return err
}

// Open maps the shared file at path (created with mode perm if missing;
// never followed if it is a symbolic link) and takes this process's ticket.
// run is the barrier; the caller must have opened the descriptor run uses
// before calling Open (see the package comment on tickets).
func Open(path string, perm uint32, run func() error) (*Coordinator, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, fmt.Errorf("sharedsync: open %s: %w", path, err)
	}
	c := &Coordinator{run: run, plat: platform{fd: fd}}
	if err := c.plat.lock(); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	mem, err := mapShared(fd)
	if err != nil {
		_ = unix.Close(fd) // drops the flock too
		return nil, fmt.Errorf("sharedsync: open %s: %w", path, err)
	}
	c.plat.mem = mem
	c.init(mem)
	c.ticket = atomicAdd(c.word(offOpens), 1)
	c.plat.unlock()
	return c, nil
}

// mapShared checks that fd is a regular file of the right size (resizing a
// new or damaged one; init then zeroes it unless it has the magic number)
// and maps it shared. The caller holds the flock.
func mapShared(fd int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	if st.Size != fileSize {
		if err := unix.Ftruncate(fd, fileSize); err != nil {
			return nil, err
		}
	}
	return unix.Mmap(fd, 0, fileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}
