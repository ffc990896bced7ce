//go:build !windows && !plan9 && !js && !wasip1

package vfs

import "os"

// syncDir fsyncs a directory so that entries created, renamed or removed in it
// survive a power loss (fsync(2) on the file does not cover its directory
// entry).
func syncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return serr
	}
	return cerr
}
