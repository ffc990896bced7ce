package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Exchange implements [Exchanger] with renameat2(RENAME_EXCHANGE).
func (OS) Exchange(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		return exchangeUnsupported(&os.LinkError{Op: "exchange", Old: a, New: b, Err: err})
	}
	return nil
}

// Exchange implements [Exchanger] with renameat2(RENAME_EXCHANGE) relative
// to parent descriptors resolved without following symbolic links; it swaps
// the entries themselves, never what a link points at. Without openat2 (the
// portable mode) it reports [ErrNoExchange].
func (n *noFollowFS) Exchange(a, b string) error {
	ra, ok1 := n.rel(a)
	rb, ok2 := n.rel(b)
	if !ok1 || !ok2 || n.generic() {
		return ErrNoExchange
	}
	err := n.twoAt("exchange", a, b, ra, rb, func(afd int, ab string, bfd int, bb string) error {
		return unix.Renameat2(afd, ab, bfd, bb, unix.RENAME_EXCHANGE)
	})
	if err != nil {
		return exchangeUnsupported(err)
	}
	return nil
}
