//go:build linux

package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyWatch watches one directory with a non-blocking inotify instance.
// No goroutine: Drain reads what the kernel queued since the last call. The
// descriptor is not given to the Go runtime's poller: registered there
// (edge-triggered), every event the kernel queues - one per file created,
// renamed or removed in the directory, by any process - would wake the
// runtime's netpoll whether or not anyone waits. Wait blocks its thread in
// poll(2) instead, only while a caller waits.
type inotifyWatch struct {
	mu  sync.Mutex
	fd  int // -1 once closed
	buf []byte
	// gone: the kernel reported the directory removed or moved away
	// (IN_DELETE_SELF, IN_MOVE_SELF, IN_IGNORED); every Drain fails from then on.
	gone bool
	// efd is an eventfd that Close writes to wake the Waits (created by
	// the first Wait; -1 before). waits counts the Waits in poll(2): Close
	// closes the descriptors only once they have returned, so that no
	// poll(2) ever watches a descriptor number reused by another file.
	efd      int
	waits    int
	waitDone *sync.Cond
}

func watchDir(dir string, contents bool) (DirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vfs: inotify_init1: %w", err)
	}
	var mask uint32 = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	if contents {
		// A write or truncation of an entry, queued by the kernel before
		// the write(2) or truncate(2) returns.
		mask |= unix.IN_MODIFY
	}
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vfs: inotify_add_watch %s: %w", dir, err)
	}
	w := &inotifyWatch{fd: fd, efd: -1, buf: make([]byte, 64<<10)}
	w.waitDone = sync.NewCond(&w.mu)
	return w, nil
}

// errWatchClosed: Wait on a closed watch.
var errWatchClosed = errors.New("vfs: watch closed")

// Wait returns once events are queued - at once if some are (poll(2) is
// level-triggered: an event queued before the call is seen, none is
// missed) - and fails once the watch is closed. It reads nothing (Drain
// does); a Wait woken for events someone else drained first returns
// anyway: the caller's Drain finds none. Its goroutine's thread blocks in
// the system call meanwhile.
func (w *inotifyWatch) Wait() error {
	w.mu.Lock()
	if w.fd < 0 {
		w.mu.Unlock()
		return errWatchClosed
	}
	if w.efd < 0 {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			w.mu.Unlock()
			return fmt.Errorf("vfs: wait on inotify: eventfd: %w", err)
		}
		w.efd = efd
	}
	fd, efd := w.fd, w.efd
	w.waits++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waits--
		w.waitDone.Broadcast()
		w.mu.Unlock()
	}()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(efd), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, -1)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("vfs: wait on inotify: %w", err)
		case fds[1].Revents != 0:
			return errWatchClosed
		case fds[0].Revents&unix.POLLIN != 0:
			return nil
		case fds[0].Revents != 0:
			return fmt.Errorf("vfs: wait on inotify: poll revents %#x", fds[0].Revents)
		}
	}
}

func (w *inotifyWatch) Drain() ([]DirEvent, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil, false, errors.New("vfs: watch closed")
	}
	if w.gone {
		return nil, true, fmt.Errorf("vfs: inotify: %w", ErrWatchGone)
	}
	var out []DirEvent
	overflow := false
	// done is the answer once the kernel's queue is read: a watch whose
	// directory went away reports nothing more, ever (see ErrWatchGone).
	done := func() ([]DirEvent, bool, error) {
		if w.gone {
			return out, true, fmt.Errorf("vfs: inotify: %w", ErrWatchGone)
		}
		return out, overflow, nil
	}
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				return done()
			}
			return out, true, fmt.Errorf("vfs: read inotify: %w", err)
		}
		if n <= 0 {
			return done()
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			nameStart := off + unix.SizeofInotifyEvent
			nameEnd := nameStart + int(ev.Len)
			if nameEnd > n {
				overflow = true
				return done()
			}
			name := string(bytes.TrimRight(w.buf[nameStart:nameEnd], "\x00"))
			off = nameEnd
			switch {
			case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
				// The directory was removed or moved away: the path may
				// name another directory now, which this watch never
				// reports on (after a move it reports on the old one).
				w.gone = true
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				overflow = true
			case name == "":
			case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
				out = append(out, DirEvent{Name: name, Added: true})
			case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
				out = append(out, DirEvent{Name: name, Added: false})
			case ev.Mask&unix.IN_MODIFY != 0:
				out = append(out, DirEvent{Name: name, Changed: true})
			}
		}
	}
}

// Close closes the watch. A Wait in progress returns an error: Close wakes
// it through the eventfd and closes the descriptors once it has returned.
func (w *inotifyWatch) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	fd := w.fd
	w.fd = -1
	if w.efd >= 0 {
		var one [8]byte
		one[0] = 1 // eventfd counters are host-endian; any nonzero value wakes
		if w.waits > 0 {
			if _, err := unix.Write(w.efd, one[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
				err = fmt.Errorf("vfs: close inotify watch: wake its waits: %w", err)
				for w.waits > 0 { // cannot wake them: they return on the next event
					w.waitDone.Wait()
				}
				unix.Close(w.efd)
				unix.Close(fd)
				return err
			}
		}
		for w.waits > 0 {
			w.waitDone.Wait()
		}
		unix.Close(w.efd)
		w.efd = -1
	}
	return unix.Close(fd)
}
