package vfs

import "os"

// Datasyncer is implemented by files that can flush their data without the
// metadata that is not needed to read it back (fdatasync(2)).
type Datasyncer interface {
	Datasync() error
}

// Datasync flushes f's data (fdatasync(2) on Linux; fsync elsewhere and for
// files that cannot do better). Like Sync, an error is final: the kernel may
// have marked the failed pages clean (see the write-ahead log's poisoning).
func Datasync(f File) error {
	switch d := f.(type) {
	case Datasyncer:
		return d.Datasync()
	case *os.File:
		return datasync(d)
	}
	return f.Sync()
}

// Datasync implements Datasyncer: nothing to flush in ProcessCrashSafe mode.
func (noSyncFile) Datasync() error { return nil }

// Datasync implements Datasyncer; it counts as a file sync.
func (f countingFile) Datasync() error {
	f.c.fileSyncs.Add(1)
	return Datasync(f.File)
}
