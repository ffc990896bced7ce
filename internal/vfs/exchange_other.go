//go:build !linux

package vfs

// Exchange implements [Exchanger]: not available on this system.
func (OS) Exchange(a, b string) error { return ErrNoExchange }

// Exchange implements [Exchanger]: not available on this system.
func (n *noFollowFS) Exchange(a, b string) error { return ErrNoExchange }
