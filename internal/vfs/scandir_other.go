//go:build !linux

package vfs

import (
	"errors"
	"io"
	"os"
)

// scanDirFile lists an open directory a chunk of names at a time.
func scanDirFile(f *os.File, fn func(name []byte) error) error { return scanDirNames(f, fn) }

// scanDirChunk is how many names the portable scanner reads at once.
const scanDirChunk = 256

// scanDirNames is the portable scanner of an open directory: Readdirnames a
// chunk at a time (one string per entry, but never the whole listing).
func scanDirNames(f *os.File, fn func(name []byte) error) error {
	for {
		names, err := f.Readdirnames(scanDirChunk)
		if serr := scanNames(names, fn); serr != nil {
			return serr
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
