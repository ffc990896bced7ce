//go:build linux

package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyWatch watches one directory with a non-blocking inotify instance.
// No goroutine: Drain reads what the kernel queued since the last call. The
// descriptor is registered with the Go runtime's poller (through f), so that
// Wait can park until the kernel queues an event.
type inotifyWatch struct {
	mu  sync.Mutex
	fd  int // -1 once closed
	f   *os.File
	raw syscall.RawConn
	buf []byte
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
	// A non-blocking descriptor given to os.NewFile joins the runtime's
	// poller (edge-triggered: each event the kernel queues is one edge).
	f := os.NewFile(uintptr(fd), "inotify:"+dir)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("vfs: inotify %s: %w", dir, err)
	}
	return &inotifyWatch{fd: fd, f: f, raw: raw, buf: make([]byte, 64<<10)}, nil
}

// Wait returns at once if events are queued (FIONREAD, TIOCINQ in x/sys:
// bytes to read), else parks until the poller reports the descriptor
// readable. It reads nothing (Drain does). The check comes after the
// runtime reset the descriptor's readiness (RawConn.Read), so an event
// queued before it is seen by the check and one queued after it by the
// poller: none is missed. A Wait woken for events someone else drained
// first returns anyway: the caller's Drain finds none.
func (w *inotifyWatch) Wait() error {
	var ierr error
	err := w.raw.Read(func(fd uintptr) bool {
		var n int
		n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
		return ierr != nil || n > 0 // false: park until readable, then check again
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("vfs: wait on inotify: %w", err)
	}
	return nil
}

func (w *inotifyWatch) Drain() ([]DirEvent, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil, false, errors.New("vfs: watch closed")
	}
	var out []DirEvent
	overflow := false
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				return out, overflow, nil
			}
			return out, true, fmt.Errorf("vfs: read inotify: %w", err)
		}
		if n <= 0 {
			return out, overflow, nil
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			nameStart := off + unix.SizeofInotifyEvent
			nameEnd := nameStart + int(ev.Len)
			if nameEnd > n {
				return out, true, nil
			}
			name := string(bytes.TrimRight(w.buf[nameStart:nameEnd], "\x00"))
			off = nameEnd
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0, ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
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

func (w *inotifyWatch) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	w.fd = -1
	return w.f.Close() // also wakes a Wait, which then fails
}
