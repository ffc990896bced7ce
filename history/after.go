package history

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/durofs/durofs/internal/vfs"
)

// Mark is a position in a log as a reader saw it: the length of the valid
// prefix it read, how many records that prefix holds, and a copy of its last
// complete line. [Log.ReadAfter] uses the line to check that the log still
// begins with the same bytes before it reads only what follows.
type Mark struct {
	// Size is the byte length of the prefix (a Scan's ValidSize).
	Size int64
	// Records is the number of records in the prefix.
	Records int
	// Last is the prefix's last line, '\n' included (empty when the prefix
	// is empty).
	Last []byte
}

// MarkOf returns the mark just after the records of s (a Scan a read
// returned, not one cut short by corruption). Its last line is re-encoded
// from the last record: the encoding is canonical, so it is the line's
// bytes in the file.
func MarkOf(s Scan) Mark {
	m := Mark{Size: s.ValidSize, Records: len(s.Records)}
	if n := len(s.Records); n > 0 {
		line, err := EncodeRecord(s.Records[n-1])
		if err == nil {
			m.Last = line
		} // else m is invalid, and ReadAfter says so
	}
	return m
}

// ErrMoved is returned by [Log.ReadAfter] when the log no longer begins with
// the mark's prefix: it is shorter than the mark, or the bytes where the
// mark's last line was differ (the file was cut, emptied, replaced or
// rewritten). The caller reads the log whole.
var ErrMoved = errors.New("history: the log no longer starts with the marked prefix")

// ReadAfter returns the valid records after m, and the mark after them, by
// reading only the file's bytes from m's last line on. A log that no longer
// begins with m's prefix yields [ErrMoved]; a complete line after it that is
// not a valid record yields the records before it and a *CorruptError (as
// [Log.Read] would report it, with its offset and line number in the whole
// file). A torn tail is skipped, as by Read. Like Read it needs no lock.
//
// The check is the mark's last line, byte for byte, at its offset: every
// line carries its record's id, epoch and a CRC, so a log rewritten with
// other records cannot match it there. What it cannot see is a change to
// lines before the last one that keeps the file as long and the last line
// in place (bit rot, a hand edit): a caller that read the log whole before
// keeps what it read then.
func (l *Log) ReadAfter(m Mark) (Scan, Mark, error) {
	if m.Size < int64(len(m.Last)) || (m.Size > 0 && len(m.Last) == 0) {
		return Scan{}, m, fmt.Errorf("history: read %s: invalid mark", l.path)
	}
	f, err := l.fsys.OpenFile(l.path, os.O_RDONLY, 0)
	if err != nil {
		if vfs.IsNotExist(err) && m.Size > 0 {
			return Scan{}, m, ErrMoved
		}
		if vfs.IsNotExist(err) {
			return Scan{}, m, nil
		}
		return Scan{}, m, fmt.Errorf("history: read %s: %w", l.path, err)
	}
	defer f.Close()
	from := m.Size - int64(len(m.Last))
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return Scan{}, m, fmt.Errorf("history: read %s: %w", l.path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return Scan{}, m, fmt.Errorf("history: read %s: %w", l.path, err)
	}
	if !bytes.HasPrefix(data, m.Last) {
		return Scan{}, m, ErrMoved
	}
	tail := data[len(m.Last):]
	s, cerr := parse(tail)
	if cerr != nil {
		cerr.Path = l.path
		cerr.Offset += m.Size
		cerr.Line += m.Records
		return Scan{Records: s.Records, ValidSize: m.Size + s.ValidSize}, m, cerr
	}
	next := m
	if len(s.Records) > 0 {
		next = MarkOf(s)
		next.Size += m.Size
		next.Records += m.Records
	}
	s.ValidSize += m.Size
	return s, next, nil
}
