// Package route is the route hash of queue message names
// (fsqueue.RouteOf): the first 64 bits of the SHA-256 of a value. It is a
// package of its own so that this module's tests can replace it, to make
// routes collide (two instance keys sharing a route happens by chance about
// once in 2^64 pairs; readers must not be fooled by it, and tests show
// they are not).
package route

import (
	"crypto/sha256"
	"encoding/binary"
	"sync/atomic"
)

// override, when set, replaces the hash (SetForTest).
var override atomic.Pointer[func(string) uint64]

// Of returns the route of value: 0 for "", else the first 64 bits (big
// endian) of its SHA-256.
func Of(value string) uint64 {
	if value == "" {
		return 0
	}
	if f := override.Load(); f != nil {
		return (*f)(value)
	}
	sum := sha256.Sum256([]byte(value))
	return binary.BigEndian.Uint64(sum[:8])
}

// SetForTest replaces the hash of non-empty values with f until undo is
// called. Every process sharing a queue must use the same hash: only tests
// that run in one process may call it.
func SetForTest(f func(string) uint64) (undo func()) {
	override.Store(&f)
	return func() { override.Store(nil) }
}
