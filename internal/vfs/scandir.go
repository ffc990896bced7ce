package vfs

import "os"

// DirScanner is implemented by file systems that can list a directory a
// block at a time (the OS, NoFollow, MemFS, and the wrappers of this
// package), so that a caller indexing a directory of a million entries never
// holds the whole listing (ReadDirNames materialises one string per entry).
// Callers use [ScanDir], which falls back to ReadDirNames.
type DirScanner interface {
	// ScanDir calls fn with the name of every entry of the directory dir
	// (never "." or ".."), in no particular order. name is valid only during
	// the call: it may point into a buffer reused for the next entry. An
	// error from fn stops the scan and is returned as is.
	ScanDir(dir string, fn func(name []byte) error) error
}

// ScanDir lists dir through fsys's DirScanner if it has one, else through
// ReadDirNames (which a wrapper that injects faults into listings
// overrides: a wrapper embedding the FS interface does not get the inner
// FS's ScanDir, so its own ReadDirNames is what is called).
func ScanDir(fsys FS, dir string, fn func(name []byte) error) error {
	if s, ok := fsys.(DirScanner); ok {
		return s.ScanDir(dir, fn)
	}
	names, err := fsys.ReadDirNames(dir)
	if err != nil {
		return err
	}
	return scanNames(names, fn)
}

// scanNames calls fn with each of names.
func scanNames(names []string, fn func(name []byte) error) error {
	var buf []byte
	for _, n := range names {
		buf = append(buf[:0], n...)
		if err := fn(buf); err != nil {
			return err
		}
	}
	return nil
}

// ScanDir implements DirScanner.
func (OS) ScanDir(dir string, fn func(name []byte) error) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return scanDirFile(f, fn)
}

// ScanDir implements DirScanner. The names are sorted (MemFS lists in name
// order) and the "readdir" fault of [MemFS.InjectError] applies.
func (m *MemFS) ScanDir(dir string, fn func(name []byte) error) error {
	names, err := m.ReadDirNames(dir)
	if err != nil {
		return err
	}
	return scanNames(names, fn)
}

// ScanDir forwards to the wrapped FS.
func (n noSyncFS) ScanDir(dir string, fn func(name []byte) error) error {
	return ScanDir(n.FS, dir, fn)
}

// ScanDir forwards to the wrapped FS (and counts a listing).
func (c *CountingFS) ScanDir(dir string, fn func(name []byte) error) error {
	c.listings.Add(1)
	return ScanDir(c.FS, dir, fn)
}
