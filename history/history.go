package history

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/durofs/durofs/internal/vfs"
)

// Scan is the result of reading a log.
type Scan struct {
	// Records are the complete, valid records in file order.
	Records []Record
	// ValidSize is the byte length of the prefix holding Records. When Read
	// returns a *CorruptError it is the offset of the corrupt line.
	ValidSize int64
	// TornBytes is the length of the torn tail after ValidSize: the bytes
	// after the last '\n' (an incomplete final line, a zero-filled region, or
	// both). It is 0 if there is none, and 0 when Read reports corruption.
	TornBytes int64
}

// CorruptError reports a complete line that fails its CRC or the record
// format, or a log file that cannot be used at all (a symbolic link the FS
// refuses to follow, or not a regular file: Line 1, Offset 0, Err wrapping
// vfs.ErrSymlink or vfs.ErrNotRegular).
// errors.Is(err, ErrCorrupt) is true for it. The data is never truncated
// automatically; an operator has to look at it.
type CorruptError struct {
	Path   string // the log file
	Offset int64  // byte offset of the start of the bad line
	Line   int    // 1-based line number of the bad line
	Reason string // what is wrong with it
	Err    error  // the underlying error, if any (nil for a bad line)
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("history: %s: line %d (offset %d): %v: %s", e.Path, e.Line, e.Offset, ErrCorrupt, e.Reason)
}

// Unwrap returns ErrCorrupt (so errors.Is(err, ErrCorrupt) holds) and the
// underlying error, if any.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

// TruncatedError reports a log with fewer valid records than were committed
// to it (ReadCommitted). errors.Is(err, ErrTruncated) and errors.Is(err,
// ErrCorrupt) are true for it. Like a corrupt line, it is never repaired
// automatically: the missing records were acknowledged to someone.
type TruncatedError struct {
	Path      string // the log file
	Records   int    // valid records in the file
	Committed int    // records committed to it
	// TornBytes is the length of the torn tail after the valid records: the
	// start of a lost committed record, if not 0.
	TornBytes int64
}

// Error implements error.
func (e *TruncatedError) Error() string {
	return fmt.Sprintf("history: %s: %v: %d record(s) committed, %d in the file", e.Path, ErrTruncated, e.Committed, e.Records)
}

// Unwrap returns ErrTruncated and ErrCorrupt.
func (e *TruncatedError) Unwrap() []error { return []error{ErrTruncated, ErrCorrupt} }

// Log is one append-only log file. It holds no open file and no cached state:
// every method reads the file afresh, so Logs for one path may live in many
// processes.
//
// A Log is not safe for concurrent appends by itself. Callers must serialize
// Append, AppendAt and Repair on a path (across goroutines and processes) with
// a lock, such as the instance lock. Read and Stat need no lock: run
// concurrently with an append they see a torn tail, which is not an error.
type Log struct {
	fsys vfs.FS
	path string
}

// Open returns the Log stored at path in fsys. It does no I/O; the file and
// its parent directories may not exist yet (Append creates them).
func Open(fsys vfs.FS, path string) *Log {
	return &Log{fsys: fsys, path: path}
}

// Path returns the log's file path.
func (l *Log) Path() string { return l.path }

// Read returns the log's valid records. A missing file is an empty log. A
// torn tail (the bytes after the last '\n') is reported in TornBytes and is
// not an error. A complete line that is not a valid record yields the records
// before it and a *CorruptError.
func (l *Log) Read() (Scan, error) {
	s, _, err := l.scan()
	return s, err
}

// ReadCommitted is Read for a caller that knows how many records were
// committed to the log: a count it keeps itself, which never covers a
// record before the record is in the file (or restored to it by the
// caller's recovery before any read). A log with fewer valid records lost
// committed ones - it was cut, emptied, removed or replaced - and yields the
// records it has and a *TruncatedError. A torn tail is then part of a lost
// record, not an append cut by a crash; with at least committed records it
// is the usual torn tail, not an error.
func (l *Log) ReadCommitted(committed int) (Scan, error) {
	s, err := l.Read()
	if err == nil && len(s.Records) < committed {
		err = &TruncatedError{Path: l.path, Records: len(s.Records), Committed: committed, TornBytes: s.TornBytes}
	}
	return s, err
}

// Stat returns the number of valid records and their byte length
// (Scan.ValidSize; a torn tail is not counted). It reads the whole file. On
// corruption it returns the counts of the records before the bad line and the
// *CorruptError.
func (l *Log) Stat() (records int, size int64, err error) {
	s, err := l.Read()
	return len(s.Records), s.ValidSize, err
}

// Repair truncates a torn tail, if there is one, and fsyncs the file. It
// returns the number of bytes removed. On a corrupt log it returns the
// *CorruptError and changes nothing. Callers must hold the append lock: a
// Repair concurrent with an append would cut the append's data.
func (l *Log) Repair() (truncated int64, err error) {
	s, exists, err := l.scan()
	if err != nil {
		return 0, err
	}
	if err := l.apply(s, exists, nil, false); err != nil {
		return 0, err
	}
	return s.TornBytes, nil
}

// Append appends recs after the current end of the log, after truncating a
// torn tail. It fails with ErrDuplicateID, writing nothing, if an id repeats
// within recs or is already in the log; with ErrInvalid if a payload holds
// '\n'; with a *CorruptError if the log is corrupt. The records are written
// with one write call and then fsynced. A missing file is created, with its
// parent directories, and its directory is fsynced; so it is when the file
// exists but holds no valid record yet (its creator may have died before
// fsyncing the directory). An empty recs is a no-op.
//
// On an I/O error (including an fsync error, which is never retried) the file
// holds the old records followed by an unknown prefix of recs and perhaps a
// torn tail. Do not retry blindly; redo with AppendAt, or Read to see what
// is there.
func (l *Log) Append(recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	seen := make(map[uint64]struct{}, len(recs))
	for _, r := range recs {
		if _, dup := seen[r.ID]; dup {
			return fmt.Errorf("history: append to %s: id %d twice in batch: %w", l.path, r.ID, ErrDuplicateID)
		}
		seen[r.ID] = struct{}{}
	}
	buf, err := encodeAll(recs)
	if err != nil {
		return err
	}
	s, exists, err := l.scan()
	if err != nil {
		return err
	}
	for _, r := range s.Records {
		if _, dup := seen[r.ID]; dup {
			return fmt.Errorf("history: append to %s: id %d already in log: %w", l.path, r.ID, ErrDuplicateID)
		}
	}
	return l.apply(s, exists, buf, false)
}

// AppendAt appends recs so that recs[i] becomes record base+i, idempotently:
// it is the redo of a committed append and may run any number of times, also
// after a crash in the middle of an earlier run.
//
// Let n be the number of valid records after truncating a torn tail. AppendAt
// requires base <= n <= base+len(recs) and records [base, n) to equal
// recs[:n-base] (ID, Epoch and Payload); otherwise it fails with ErrConflict
// and writes nothing. It then appends recs[n-base:] with one write and an
// fsync, and returns how many it appended. It does not check ids for
// duplicates: the caller validated them before committing.
//
// With recs empty and n == base it writes and fsyncs nothing (beyond
// truncating a torn tail). When some of recs were already there (n > base),
// they may have been written by a process that died before its fsync and so
// exist only in the page cache; AppendAt then fsyncs the file and its
// directory even if it appends nothing, so that a successful return means
// recs are durable.
func (l *Log) AppendAt(base int, recs []Record) (appended int, err error) {
	return l.appendAt(Mark{}, base, recs)
}

// appendAt is AppendAt reading the log from the trusted mark from on
// (from.Records <= base; the zero Mark reads it whole).
func (l *Log) appendAt(from Mark, base int, recs []Record) (appended int, err error) {
	if base < 0 {
		return 0, fmt.Errorf("history: append to %s at %d: negative base: %w", l.path, base, ErrInvalid)
	}
	for _, r := range recs {
		if err := checkRecord(r); err != nil {
			return 0, err
		}
	}
	s, exists, err := l.scanAfter(from)
	if err != nil {
		return 0, err
	}
	have := s.Records // records from.Records, from.Records+1, ...
	n := from.Records + len(have)
	if n < base || n > base+len(recs) {
		return 0, fmt.Errorf("history: append %d records to %s at %d: log has %d records: %w",
			len(recs), l.path, base, n, ErrConflict)
	}
	for i := base; i < n; i++ {
		if r := have[i-from.Records]; !r.equal(recs[i-base]) {
			return 0, fmt.Errorf("history: append to %s at %d: record %d (id %d) differs from the one in the log (id %d): %w",
				l.path, base, i, recs[i-base].ID, r.ID, ErrConflict)
		}
	}
	missing := recs[n-base:]
	buf, err := encodeAll(missing)
	if err != nil {
		return 0, err
	}
	if err := l.apply(s, exists, buf, n > base); err != nil {
		return 0, err
	}
	return len(missing), nil
}

// RewriteAt writes recs as records base, base+1, ... whatever the file
// holds from record base on: it truncates the file just after record base-1
// and appends recs with one write (then fsyncs through the FS). It is the
// replay of a committed append after a sync failure or a power loss, when
// what the page cache shows cannot be trusted to be on disk: the bytes are
// written again rather than compared. Records from base on are dropped, so
// a replay must rewrite every later append too (the write-ahead log replays
// them in order). It fails with ErrConflict if the log has fewer than base
// valid records, and with a *CorruptError if one of the first base is corrupt.
func (l *Log) RewriteAt(base int, recs []Record) error {
	if base < 0 {
		return fmt.Errorf("history: rewrite %s at %d: negative base: %w", l.path, base, ErrInvalid)
	}
	for _, r := range recs {
		if err := checkRecord(r); err != nil {
			return err
		}
	}
	s, exists, err := l.scan()
	var ce *CorruptError
	if err != nil && !(errors.As(err, &ce) && len(s.Records) >= base) {
		return err
	}
	if len(s.Records) < base {
		return fmt.Errorf("history: rewrite %d records of %s at %d: log has %d records: %w",
			len(recs), l.path, base, len(s.Records), ErrConflict)
	}
	buf, err := encodeAll(recs)
	if err != nil {
		return err
	}
	if !exists {
		if _, err := l.makeParents(); err != nil {
			return err
		}
	}
	// The byte offset of record base: records are whole lines.
	off := int64(0)
	for _, r := range s.Records[:base] {
		off += int64(encodedLen(r))
	}
	f, err := l.fsys.OpenFile(l.path, os.O_WRONLY|os.O_CREATE, vfs.FilePerm)
	if err != nil {
		return fmt.Errorf("history: open %s: %w", l.path, err)
	}
	defer f.Close()
	return l.writeAt(f, off, buf)
}

// writeAt truncates f, the log file open for writing, at off, writes buf
// there with one write, and fsyncs f.
func (l *Log) writeAt(f vfs.File, off int64, buf []byte) error {
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("history: rewrite %s: truncate at %d: %w", l.path, off, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("history: rewrite %s: %w", l.path, err)
	}
	if n, err := f.Write(buf); err != nil || n < len(buf) {
		return fmt.Errorf("history: rewrite %s: wrote %d of %d bytes: %w", l.path, n, len(buf), errors.Join(err, io.ErrShortWrite))
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("history: sync %s: %w", l.path, err)
	}
	return nil
}

// scan reads and parses the file. exists is false if it is missing.
func (l *Log) scan() (s Scan, exists bool, err error) {
	data, err := l.fsys.ReadFile(l.path)
	if err != nil {
		if vfs.IsNotExist(err) {
			return Scan{}, false, nil
		}
		return Scan{}, vfs.IsPlanted(err), l.readError(err)
	}
	s, cerr := parse(data)
	if cerr != nil {
		cerr.Path = l.path
		return s, true, cerr
	}
	return s, true, nil
}

// parse splits data into records. Records alias data.
func parse(data []byte) (Scan, *CorruptError) {
	end := bytes.LastIndexByte(data, '\n') + 1 // data[:end] is the complete lines
	recs := make([]Record, 0, bytes.Count(data[:end], []byte{'\n'}))
	off := 0
	for off < end {
		nl := off + bytes.IndexByte(data[off:end], '\n')
		r, reason := decode(data[off:nl:nl])
		if reason != "" {
			return Scan{Records: recs, ValidSize: int64(off)},
				&CorruptError{Offset: int64(off), Line: len(recs) + 1, Reason: reason}
		}
		recs = append(recs, r)
		off = nl + 1
	}
	return Scan{Records: recs, ValidSize: int64(end), TornBytes: int64(len(data) - end)}, nil
}

// apply moves the file from the scanned state s to its valid prefix followed
// by buf: truncate a torn tail (then fsync), append buf with one write (then
// fsync). syncExisting asks for an fsync of the file and its directory even
// if nothing is written (AppendAt found some of its records already there).
func (l *Log) apply(s Scan, exists bool, buf []byte, syncExisting bool) (err error) {
	torn := s.TornBytes > 0
	if !torn && len(buf) == 0 && !syncExisting {
		return nil
	}
	var dirs []string // directories whose entries must be made durable
	switch {
	case !exists:
		// Only reached with data to write: a missing file has no tail and no
		// records.
		if dirs, err = l.makeParents(); err != nil {
			return err
		}
	case syncExisting, s.ValidSize == 0 && len(buf) > 0:
		// The records found may be in the page cache only, or the file
		// holds no record yet: whoever created it may have died before
		// fsyncing the directory, so its entry may not be durable.
		dirs = []string{filepath.Dir(l.path)}
	}
	flag := os.O_WRONLY | os.O_APPEND
	if len(buf) > 0 {
		flag |= os.O_CREATE
	}
	f, err := l.fsys.OpenFile(l.path, flag, vfs.FilePerm)
	if err != nil {
		return fmt.Errorf("history: open %s: %w", l.path, err)
	}
	defer func() {
		// After an error the fd is dropped, never reused (fsync errors are
		// fatal); a close error then adds nothing.
		cerr := f.Close()
		if err == nil && cerr != nil {
			err = fmt.Errorf("history: close %s: %w", l.path, cerr)
		}
	}()
	// Best-effort guard against unserialized writers: the file must still be
	// what scan read, or the duplicate and position checks are stale and the
	// truncation could cut someone else's data.
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("history: stat %s: %w", l.path, err)
	}
	if want := s.ValidSize + s.TornBytes; fi.Size() != want {
		return fmt.Errorf("history: %s: size changed from %d to %d while appending (appends not serialized?): %w",
			l.path, want, fi.Size(), ErrConflict)
	}
	if torn {
		if err := f.Truncate(s.ValidSize); err != nil {
			return fmt.Errorf("history: truncate torn tail of %s at %d: %w", l.path, s.ValidSize, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("history: sync %s after truncate: %w", l.path, err)
		}
	}
	if len(buf) > 0 {
		n, err := f.Write(buf)
		if err == nil && n < len(buf) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return fmt.Errorf("history: append to %s: wrote %d of %d bytes: %w", l.path, n, len(buf), err)
		}
	}
	if len(buf) > 0 || syncExisting {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("history: sync %s: %w", l.path, err)
		}
	}
	for _, d := range dirs {
		if err := l.fsys.SyncDir(d); err != nil {
			return fmt.Errorf("history: sync dir %s of %s: %w", d, l.path, err)
		}
	}
	return nil
}

// makeParents creates the missing parent directories of the log and returns
// the directories whose entries change when the log file is created: its
// parent, and the parent of each directory created here.
func (l *Log) makeParents() ([]string, error) {
	dir := filepath.Dir(l.path)
	dirs := []string{dir}
	d := dir
	for {
		_, err := l.fsys.Stat(d)
		if err == nil {
			break
		}
		if !vfs.IsNotExist(err) {
			return nil, fmt.Errorf("history: stat %s: %w", d, err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		dirs = append(dirs, parent)
		d = parent
	}
	if len(dirs) > 1 {
		if err := l.fsys.MkdirAll(dir, vfs.DirPerm); err != nil {
			return nil, fmt.Errorf("history: create directory %s: %w", dir, err)
		}
	}
	return dirs, nil
}
