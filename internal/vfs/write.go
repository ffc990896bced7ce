package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// TempPrefix starts the name of every temporary file durofs writes. Scanners
// skip names with this prefix and sweepers remove old ones.
const TempPrefix = ".tmp-"

// IsTemp reports whether a directory entry is a durofs temporary file.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// tempName returns a fresh temporary path in the directory of target.
func tempName(target string) string {
	return filepath.Join(filepath.Dir(target), TempPrefix+filepath.Base(target)+"-"+uuid.NewString())
}

// writeSynced creates a new file with data and fsyncs it.
// After a crash the file may be missing, empty or partial; it has a temporary
// name, so nobody reads it and a sweeper removes it.
func writeSynced(fsys FS, path string, data []byte) error {
	return writeSyncedFlag(fsys, path, data, os.O_EXCL)
}

// writeSyncedFlag is writeSynced opening path with os.O_WRONLY|os.O_CREATE
// and flag (os.O_EXCL: a new file; os.O_TRUNC: the file reused).
func writeSyncedFlag(fsys FS, path string, data []byte, flag int) error {
	f, err := fsys.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, FilePerm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	// An fsync error is fatal to this write: the page cache may already have
	// dropped the data (fsyncgate), so we never retry, we fail.
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteNew creates path, which must not exist, with data, fsynced through
// fsys (not at all with [NoSync]); the directory is not synced. On failure
// it removes what it created.
//
// Crash analysis: unlike [WriteFile] the file has its final name while it
// is written, so a kill -9 or a power loss can leave it partial. Use it only
// for files nobody reads until something written after it (and made durable
// no earlier than it) names it - a staged message before the log record
// that publishes it - so that a partial file is an orphan for the sweeper.
func WriteNew(fsys FS, path string, data []byte) error {
	if err := writeSynced(fsys, path, data); err != nil {
		if !errors.Is(err, os.ErrExist) {
			_ = fsys.Remove(path)
		}
		return fmt.Errorf("vfs: write %s: %w", path, err)
	}
	return nil
}

// WriteFile atomically replaces path with data: write a temporary file, fsync
// it, rename it over path, fsync the directory.
//
// Crash analysis: before the rename, path still holds its old content (the
// temporary file is garbage a sweeper removes). After the rename and before the
// directory fsync, a kill -9 leaves the new content (the rename is done in the
// kernel); a power loss may leave either the old or the new content, never a
// mix, because the new file's data was fsynced before it got its name. After
// the directory fsync, the new content is durable.
func WriteFile(fsys FS, path string, data []byte) error {
	return replace(fsys, tempName(path), path, data, true)
}

// replace writes data to tmp (fsynced), renames it to path and, if
// syncDir, fsyncs path's directory. On failure before the rename the
// temporary file is removed.
func replace(fsys FS, tmp, path string, data []byte, syncDir bool) error {
	if err := writeSynced(fsys, tmp, data); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("vfs: write %s: %w", path, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("vfs: write %s: %w", path, err)
	}
	if !syncDir {
		return nil
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("vfs: write %s: sync dir: %w", path, err)
	}
	return nil
}

// WriteFileVia is WriteFile with the temporary file created in tmpDir (on
// the same file system) instead of beside path, then renamed across
// directories. A writer killed before its rename leaves garbage only in
// tmpDir, which one sweeper can clean without visiting every directory that
// files are written to. Only path's directory is fsynced: if the temporary
// entry reappears in tmpDir after a power loss it is garbage there too. An
// empty tmpDir means WriteFile.
func WriteFileVia(fsys FS, tmpDir, path string, data []byte) error {
	if tmpDir == "" {
		return WriteFile(fsys, path, data)
	}
	return replace(fsys, filepath.Join(tmpDir, TempPrefix+filepath.Base(path)+"-"+uuid.NewString()), path, data, true)
}

// OwnedTemp is the one temporary name [WriteFileOwned] uses for path.
func OwnedTemp(path string) string {
	return filepath.Join(filepath.Dir(path), TempPrefix+filepath.Base(path))
}

// WriteFileOwned replaces path with data through one fixed temporary file
// beside it ([OwnedTemp]), for a caller that is path's only writer while it
// writes (it holds a lock that every writer of path takes). The file is
// written and fsynced through fsys (not at all with [NoSync]); the
// directory is not synced. The rename stays within one directory, so it
// takes neither the file system's rename mutex, which every rename across
// directories serialises on (Linux's s_vfs_rename_mutex), nor the lock of a
// temporary directory every writer shares: measured, it is what lets several
// processes replace files at once (BENCHMARKS.md, 2026-11-27 evening).
//
// Crash analysis: a writer killed before its rename leaves the temporary
// file, never path partially written. The temporary file is opened with
// O_TRUNC, not O_EXCL, so the next write of path - the owner's redo of the
// same change, or any later one - truncates and reuses it, and the rename
// takes it away: at most one such file per path, and none once path has
// been written again.
func WriteFileOwned(fsys FS, path string, data []byte) error {
	tmp := OwnedTemp(path)
	err := writeSyncedFlag(fsys, tmp, data, os.O_TRUNC)
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("vfs: write %s: %w", path, err)
	}
	return nil
}

// WriteFileNoDirSync is WriteFile without the final directory fsync, for
// callers that batch one SyncDir over several entries of one directory.
func WriteFileNoDirSync(fsys FS, path string, data []byte) error {
	return replace(fsys, tempName(path), path, data, false)
}

// ErrExist is returned by CreateExclusive when the name is taken.
var ErrExist = os.ErrExist

// CreateExclusive publishes a complete file at path only if path does not
// exist: write a temporary file, fsync it, link(2) it to path (EEXIST means
// someone else holds the name), unlink the temporary name, and fsync the
// directory unless noDirSync.
//
// Crash analysis: the file never appears under its final name partially
// written (it is fsynced before the link). A crash between link and unlink
// leaves a temporary hard link that a sweeper removes; the published file is
// unaffected.
func CreateExclusive(fsys FS, path string, data []byte, noDirSync bool) error {
	tmp := tempName(path)
	if err := writeSynced(fsys, tmp, data); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("vfs: create %s: %w", path, err)
	}
	lerr := fsys.Link(tmp, path)
	_ = fsys.Remove(tmp)
	if lerr != nil {
		if errors.Is(lerr, os.ErrExist) {
			return fmt.Errorf("vfs: create %s: %w", path, ErrExist)
		}
		return fmt.Errorf("vfs: create %s: %w", path, lerr)
	}
	if noDirSync {
		return nil
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("vfs: create %s: sync dir: %w", path, err)
	}
	return nil
}

// InPlaceBlock is the size unit of files written in place: a new or outgrown
// file is padded to a multiple of it, so that later versions fit.
const InPlaceBlock = 512

// maxInPlace bounds the files [Overwrite] writes in place: one page, so that
// a kill -9 cannot tear the write (the kernel checks for a fatal signal
// between the pages of a write, never inside one). A larger file is
// replaced (TestOverwrite, "larger than a page").
var maxInPlace = int64(os.Getpagesize())

// Overwrite writes data over the existing regular file at path in place, at
// offset 0 in one write, padded with spaces to the file's size, if the file
// is at least as large as data and at most one page: no new inode, no
// rename, no freed blocks. done is false if it did not try - no such file, a
// symbolic link (never written through), a file too small or larger than a
// page -
// and then the caller replaces the file, padded with [Pad] to a multiple of
// [InPlaceBlock]. If then is not nil it runs after the write; if it fails,
// the write is undone. On a failed or short write, or a failed then, it
// writes the old content back, best effort, and fails.
//
// Use it only for files whose every writer and every deciding reader holds
// one lock, and whose content is JSON (trailing spaces are insignificant): a
// reader without the lock can read a torn mix of two versions. A kill -9 does
// not tear it: it writes one page at most, and a fatal signal is checked
// between pages. A power loss can, as it can lose an unsynced replace - such files must be
// volatile, redone or ignored when unparseable after a power loss.
func Overwrite(fsys FS, path string, data []byte, then func() error) (done bool, err error) {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if IsNotExist(err) || errors.Is(err, ErrSymlink) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("vfs: write %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return true, fmt.Errorf("vfs: write %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() < int64(len(data)) || fi.Size() > maxInPlace {
		return false, nil
	}
	old := make([]byte, fi.Size())
	if _, err := f.ReadAt(old, 0); err != nil {
		return true, fmt.Errorf("vfs: write %s: %w", path, err)
	}
	n, err := f.Write(Pad(data, len(old)))
	if err == nil && n != len(old) {
		err = io.ErrShortWrite
	}
	if err == nil && then != nil {
		err = then()
	}
	if err == nil {
		return true, nil
	}
	if _, serr := f.Seek(0, io.SeekStart); serr == nil {
		_, _ = f.Write(old)
	}
	return true, fmt.Errorf("vfs: write %s: %w", path, err)
}

// Pad returns data followed by spaces up to size bytes, in a new slice
// (data itself if it is not shorter).
func Pad(data []byte, size int) []byte {
	if len(data) >= size {
		return data
	}
	out := make([]byte, size)
	copy(out, data)
	copy(out[len(data):], bytes.Repeat([]byte{' '}, size-len(data)))
	return out
}

// PadBlock pads data with spaces to a multiple of [InPlaceBlock].
func PadBlock(data []byte) []byte {
	return Pad(data, (len(data)+InPlaceBlock-1)/InPlaceBlock*InPlaceBlock)
}
