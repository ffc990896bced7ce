package history

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/durofs/durofs/internal/vfs"
)

// Mark is a position in a log as a reader saw it: the length of the valid
// prefix it read, how many records that prefix holds, and the CRC-32C of
// the prefix's bytes, by which [Log.ReadAfter] checks that the log still
// begins with the same bytes. The zero Mark is the empty prefix.
type Mark struct {
	// Size is the byte length of the prefix (a Scan's ValidSize).
	Size int64
	// Records is the number of records in the prefix.
	Records int
	// Sum is the CRC-32C (Castagnoli) of the prefix.
	Sum uint32
}

// ErrMoved is returned by [Log.ReadAfter] when the log no longer begins with
// the mark's prefix: it is shorter than the mark, or its first Size bytes
// differ from those the mark was taken of (the file was cut, emptied,
// replaced, rewritten or removed). The caller reads the log afresh.
var ErrMoved = errors.New("history: the log no longer starts with the marked prefix")

// ReadAfter returns the valid records after m, and the mark after them. It
// reads the file whole but parses only what follows the prefix, after
// checking the prefix's CRC-32C against m: a reader that keeps what it
// decoded from the prefix (the provider's history cache) then decodes only
// the records appended since. A log that no longer begins with m's prefix
// yields [ErrMoved]; a complete line after it that is not a valid record
// yields the records before it and a *CorruptError (with its offset and
// line number in the whole file, as [Log.Read] reports it). A torn tail is
// skipped, as by Read. ReadAfter(Mark{}) reads the whole log and marks it.
// Like Read it needs no lock.
func (l *Log) ReadAfter(m Mark) (Scan, Mark, error) {
	data, err := l.fsys.ReadFile(l.path)
	if err != nil {
		if vfs.IsNotExist(err) {
			if m.Size > 0 {
				return Scan{}, m, ErrMoved
			}
			return Scan{}, m, nil
		}
		return Scan{}, m, fmt.Errorf("history: read %s: %w", l.path, err)
	}
	if m.Size < 0 || int64(len(data)) < m.Size || crc32.Checksum(data[:m.Size], castagnoli) != m.Sum {
		return Scan{}, m, ErrMoved
	}
	s, cerr := parse(data[m.Size:])
	s.ValidSize += m.Size
	if cerr != nil {
		cerr.Path = l.path
		cerr.Offset += m.Size
		cerr.Line += m.Records
		return s, m, cerr
	}
	next := Mark{Size: s.ValidSize, Records: m.Records + len(s.Records),
		Sum: crc32.Update(m.Sum, castagnoli, data[m.Size:s.ValidSize])}
	return s, next, nil
}
