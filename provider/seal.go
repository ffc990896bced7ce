package provider

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/durofs/durofs/internal/jsonseal"
	"github.com/durofs/durofs/internal/vfs"
)

// Sealed JSON files: instance.json and state.json written in place.
//
// An instance's instance.json and its current execution's state.json change
// at every turn. Replacing them (a temporary file renamed over the old one)
// costs two new inodes and frees two per turn, and on ext4 without a journal
// every file creation scans past the inodes freed in the last half minute
// (find_inode_bit, recently_deleted): at a few hundred turns per second that
// scan was the largest single CPU cost of a turn (BENCHMARKS.md, 2026-11-28).
// So, like a claim (fsqueue, "Claims written in place"), such a file is
// written in place once it exists: one write at offset 0 of the whole new
// content, padded with spaces to the file's size.
//
// Who may see what:
//
//   - Writers hold the instance's flock (an apply, a redo, a replay alone),
//     so there is one writer at a time, and every reader that decides
//     anything under the flock runs after the redo of any record a killed
//     writer left (fs_wal.go), which rewrites the file whole.
//   - A reader without the flock (admin calls, listings, a fetch's filter)
//     may read while a write copies its bytes: the kernel copies a read out
//     of the page cache without excluding a write to the same page, so it can
//     see any mix of the old and the new bytes - possibly valid JSON holding
//     values no version ever had. Hence the seal (package jsonseal): the
//     file starts with {"crc32c":"<8 hex>", - the CRC-32C of the rest of the
//     object, as if the key were absent - and readJSON checks it, reading
//     again while it does not match (a write copies a few KiB in
//     microseconds).
//   - A file is written in place only if it is sealed already and at most
//     one page (inPlaceMax) long, so both versions start with the same seal
//     prefix (a mix always carries a seal to check) and a kill -9 cannot tear
//     the write (the kernel checks for a fatal signal between the pages it
//     copies, never inside one). Anything else - a new file, an unsealed one
//     from format 4, a longer content - is replaced atomically, padded to a
//     multiple of vfs.InPlaceBlock so that later versions fit.
//   - Power loss: the file is never synced by the write; the checkpoint
//     syncs it before the log lets the record go, and recovery replays every
//     record after the checkpoint, rewriting the file whole. So a torn page
//     after a power loss is always rewritten before anyone reads it.
//
// An unsealed file (format 4 and before, or a file a user wrote) is read as
// plain JSON: such files were only ever replaced atomically.

// inPlaceMax is the largest file written in place: one page.
const inPlaceMax = 4096

// writeJSONApply writes v's JSON to path - an instance's instance.json or an
// execution's state.json - sealed and unsynced: in place when the file is
// sealed and fits (see above), else by an atomic replace. Its caller holds
// the instance's flock (an apply, a redo, a replay alone): the file's only
// writer, so the temporary file of a replace can be the fixed one beside it
// (vfs.WriteFileOwned); one that a killed writer left is taken away by the
// redo of the same record, which writes the same file again
// (TestRedoTakesAwayAKilledReplacesTemp).
func (p *FSProvider) writeJSONApply(path string, v any) error {
	body, err := jsonMarshal(v)
	if err != nil {
		return err
	}
	data := jsonseal.Seal(body)
	fsys := vfs.NoSync(p.fs)
	if done, err := overwriteSealed(fsys, path, data); done {
		return err
	}
	return vfs.WriteFileOwned(fsys, path, vfs.PadBlock(data))
}

// overwriteSealed writes data over path in place, padded with spaces to the
// file's size, if path is a sealed regular file of at most inPlaceMax bytes
// that data fits in; done is false if it did not try. A failed or short
// write puts the old bytes back (best effort) and returns the error: the
// caller's record stays in the log and is redone.
func overwriteSealed(fsys vfs.FS, path string, data []byte) (done bool, err error) {
	if len(data) > inPlaceMax {
		return false, nil
	}
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		// Missing, a planted link, unreadable: a replace settles it.
		return false, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < int64(len(data)) || fi.Size() > inPlaceMax {
		return false, nil
	}
	old := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, old); err != nil || !bytes.HasPrefix(old, []byte(jsonseal.Prefix)) {
		return false, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return true, fmt.Errorf("write %s in place: %w", path, err)
	}
	n, err := f.Write(vfs.Pad(data, len(old)))
	if err == nil && n != len(old) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if _, serr := f.Seek(0, io.SeekStart); serr == nil {
			_, _ = f.Write(old)
		}
		return true, fmt.Errorf("write %s in place: %w", path, err)
	}
	return true, nil
}

// sealRetries bounds how often readJSON reads a file again while its seal
// does not match, and sealRetrySleep is the pause between late attempts: a
// writer copies a page in microseconds, so a mismatch that outlives ~100 ms
// of attempts is damage, not a write in progress.
const (
	sealRetries    = 100
	sealRetrySleep = time.Millisecond
)
