package history

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/durofs/durofs/internal/vfs"
)

// Mark is a position in a log as a reader saw it: the end of a prefix of
// complete records. The zero Mark is the start of the log.
type Mark struct {
	// Size is the byte length of the prefix (a Scan's ValidSize).
	Size int64
	// Records is the number of records in the prefix.
	Records int
}

// ErrMoved is returned by [Log.ReadAfter] and [Log.AppendAtMark] when the
// log is not where the mark says it is: it is missing or shorter than the
// mark, or the byte before the mark is not the end of a line. The caller
// reads the log afresh (with the zero Mark, or [Log.AppendAt]).
var ErrMoved = errors.New("history: the log does not reach the mark")

// ReadAfter returns the valid records after m, and the mark after them,
// reading only the bytes from m on: one positioned read of the file's tail,
// whatever the length of the prefix. A reader that keeps what it decoded
// from the prefix (the provider's history cache) thus pays for what was
// appended since, not for the whole history, at every turn.
//
// ReadAfter trusts m. A log is only ever appended to (a torn tail, which no
// mark covers, is cut; a replay rewrites records with the bytes they had),
// so a prefix a reader once saw stays the file's prefix for as long as the
// file is the same log. Whether it is - not removed and created anew since
// m was taken - is for the caller to know: the provider ties its marks to
// the execution's generation in state.json, read under the instance flock
// (histcache.go). ReadAfter checks what it can see without reading the
// prefix: a log shorter than m, or whose byte before m is not '\n', yields
// [ErrMoved].
//
// A complete line after m that is not a valid record yields the records
// before it and a *CorruptError (its offset and line number in the whole
// file, as [Log.Read] reports them). A torn tail is skipped, as by Read.
// ReadAfter(Mark{}) reads the whole log; a missing log is then empty. Like
// Read it needs no lock.
func (l *Log) ReadAfter(m Mark) (Scan, Mark, error) {
	s, _, err := l.scanAfter(m)
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		return Scan{}, m, err
	}
	if err != nil {
		return s, m, err
	}
	return s, Mark{Size: s.ValidSize, Records: m.Records + len(s.Records)}, nil
}

// AppendAtMark is [Log.AppendAt] for a caller that knows where record
// m.Records starts: AppendAt(m.Records, recs), reading only what follows m
// rather than the whole log, with the trust in m that [Log.ReadAfter]
// explains. A log that does not reach m yields [ErrMoved] and nothing is
// written; the caller falls back to AppendAt.
func (l *Log) AppendAtMark(m Mark, recs []Record) (appended int, err error) {
	return l.appendAt(m, m.Records, recs)
}

// scanAfter reads and parses the log after m (the whole log for the zero
// Mark). The records are those after m; ValidSize is from the start of the
// file.
func (l *Log) scanAfter(m Mark) (s Scan, exists bool, err error) {
	if m.Size < 0 || m.Records < 0 || (m.Size == 0) != (m.Records == 0) {
		return Scan{}, false, fmt.Errorf("history: %s: invalid mark %+v: %w", l.path, m, ErrInvalid)
	}
	if m.Size == 0 {
		return l.scan()
	}
	data, err := l.readAfter(m)
	if err != nil {
		return Scan{}, !errors.Is(err, ErrMoved), err
	}
	s, cerr := parse(data)
	s.ValidSize += m.Size
	if cerr != nil {
		cerr.Path = l.path
		cerr.Offset += m.Size
		cerr.Line += m.Records
		return s, true, cerr
	}
	return s, true, nil
}

// readAfter returns the file's bytes from m.Size on, after checking that
// the file reaches m and that the byte before it ends a line.
func (l *Log) readAfter(m Mark) ([]byte, error) {
	f, err := l.fsys.OpenFile(l.path, os.O_RDONLY, 0)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil, fmt.Errorf("history: %s is missing: %w", l.path, ErrMoved)
		}
		return nil, l.readError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("history: stat %s: %w", l.path, err)
	}
	if fi.Size() < m.Size {
		return nil, fmt.Errorf("history: %s holds %d bytes, the mark is at %d: %w", l.path, fi.Size(), m.Size, ErrMoved)
	}
	buf := make([]byte, fi.Size()-m.Size+1)
	n, err := f.ReadAt(buf, m.Size-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("history: read %s: %w", l.path, err)
	}
	if n == 0 || buf[0] != '\n' {
		return nil, fmt.Errorf("history: %s: no line ends at the mark (%d): %w", l.path, m.Size, ErrMoved)
	}
	return buf[1:n], nil
}

// readError maps an error reading the log file: a symbolic link planted in
// its place is never followed, nor is a FIFO or directory read, and the log
// is then unusable, as if its first line were corrupt.
func (l *Log) readError(err error) error {
	if errors.Is(err, vfs.ErrSymlink) {
		return &CorruptError{Path: l.path, Line: 1,
			Reason: "the log file is a symbolic link, which is not followed", Err: err}
	}
	if errors.Is(err, vfs.ErrNotRegular) {
		return &CorruptError{Path: l.path, Line: 1,
			Reason: "the log file is not a regular file", Err: err}
	}
	return fmt.Errorf("history: read %s: %w", l.path, err)
}
