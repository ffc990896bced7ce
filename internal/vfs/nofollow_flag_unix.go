//go:build unix

package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// oNoFollow makes open(2) fail on a final symbolic link.
const oNoFollow = syscall.O_NOFOLLOW

// mapNoFollow turns the error O_NOFOLLOW gives for a final symbolic link
// (ELOOP; EMLINK on FreeBSD and NetBSD) into one wrapping ErrSymlink.
func mapNoFollow(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && (errors.Is(pe.Err, syscall.ELOOP) || errors.Is(pe.Err, syscall.EMLINK)) {
		return symlinkError(pe.Op, pe.Path, nil)
	}
	return err
}

// oNonBlock opens a file without blocking: a FIFO planted in place of a
// file must not block the open (which no ctx could end) or its reads.
const oNonBlock = syscall.O_NONBLOCK

// mapNotRegular wraps ErrNotRegular into the error of a non-blocking open
// that met a FIFO without a reader or a socket (ENXIO), or a directory
// opened for writing (EISDIR).
func mapNotRegular(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && (errors.Is(pe.Err, syscall.ENXIO) || errors.Is(pe.Err, syscall.EISDIR)) {
		return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: fmt.Errorf("%w: %w", ErrNotRegular, pe.Err)}
	}
	return err
}
