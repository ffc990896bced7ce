//go:build unix

package vfs

import (
	"errors"
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
