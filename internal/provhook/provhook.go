// Package provhook sets the parts of provider.Options that are not public
// API, for this module's tests, benchmarks and tools: the file system a
// provider does all its I/O through (fault injection, fsync counting, a
// simulated power loss). Its type, vfs.FS, is internal, so programs outside
// the module can neither name nor set it.
//
// Package provider registers the setter when it is initialised (this
// package cannot import it: provider imports this one).
package provhook

import (
	"github.com/durofs/durofs/internal/vfs"
)

// setFS is the setter package provider registered.
var setFS func(opts any, fsys vfs.FS) (any, bool)

// Register installs the setter; package provider calls it from its init.
func Register(f func(opts any, fsys vfs.FS) (any, bool)) { setFS = f }

// WithFS returns opts, a provider.Options, with fsys as the file system of
// the provider it opens (nil: the OS file system). ok is false, and opts is
// returned unchanged, if opts is not a provider.Options or package provider
// is not linked in.
func WithFS[O any](opts O, fsys vfs.FS) (O, bool) {
	if setFS == nil {
		return opts, false
	}
	v, ok := setFS(opts, fsys)
	if !ok {
		return opts, false
	}
	o, ok := v.(O)
	if !ok {
		return opts, false
	}
	return o, true
}
