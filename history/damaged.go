package history

import (
	"bytes"
	"fmt"
	"os"

	"github.com/durofs/durofs/internal/vfs"
)

// Appending after a damaged line.
//
// A complete line that is not a valid record (a flipped bit, a page of the
// file that went bad) is never repaired or skipped by Read: it and every
// record after it are reported as a *CorruptError. Its bytes are still
// there, and so is the line structure around it: the '\n' that ends it.
// A caller whose contract says an append must succeed over such a line (the
// provider's poison ack: duroxide acks OrchestrationFailed over a history it
// cannot read) appends after the last complete line, counting lines rather
// than records: [Log.End] gives that position, [Log.AppendAtMark] appends
// there (it reads only what follows the mark, so a damaged line before it
// does not stop it) and [Log.RewriteAtMark] rewrites from there in a
// replay. Nothing before the position is written, so the damaged line stays
// as it is, for an operator (and every Read) to see.

// Extent is a log read through its damaged lines (Log.End).
type Extent struct {
	// End is the mark after the last complete line. End.Records counts the
	// complete lines, valid records and damaged lines alike: it is the
	// position of the next record appended, and End.Size its byte offset.
	End Mark
	// IDs are the ids of the valid records, in file order, followed by the
	// id field of each damaged line that has a well-formed one. A damaged
	// line's id is not verified (its CRC failed): it is the id the line most
	// likely had, for a caller that must not store an id twice.
	IDs []uint64
	// Damaged are the complete lines that are not valid records, in file
	// order (nil if there is none), each as Read would report it.
	Damaged []*CorruptError
	// TornBytes is the length of the torn tail after End.Size, as in Scan.
	TornBytes int64
}

// End reads the whole log, going on past complete lines that are not valid
// records (see Extent), where Read stops at the first. A missing file is an
// empty log. A log file that cannot be used at all (a symbolic link) is a
// *CorruptError, as for Read. Like Read it needs no lock.
func (l *Log) End() (Extent, error) {
	data, err := l.fsys.ReadFile(l.path)
	if err != nil {
		if vfs.IsNotExist(err) {
			return Extent{}, nil
		}
		return Extent{}, l.readError(err)
	}
	var x Extent
	var damagedIDs []uint64
	end := bytes.LastIndexByte(data, '\n') + 1
	for off := 0; off < end; {
		nl := off + bytes.IndexByte(data[off:end], '\n')
		line := data[off:nl:nl]
		if r, reason := decode(line); reason == "" {
			x.IDs = append(x.IDs, r.ID)
		} else {
			x.Damaged = append(x.Damaged, &CorruptError{Path: l.path, Offset: int64(off), Line: x.End.Records + 1, Reason: reason})
			if len(line) > crcLen+1 && line[crcLen] == ' ' {
				if id, _, reason := parseField(line[crcLen+1:], "id"); reason == "" {
					damagedIDs = append(damagedIDs, id)
				}
			}
		}
		x.End.Records++
		off = nl + 1
	}
	x.IDs = append(x.IDs, damagedIDs...)
	x.End.Size = int64(end)
	x.TornBytes = int64(len(data) - end)
	return x, nil
}

// RewriteAtMark is [Log.RewriteAt] for a caller that knows where record
// m.Records starts (a mark from [Log.End] or a Scan): it writes recs as
// records m.Records, m.Records+1, ... from byte m.Size on, whatever the
// file holds from there, and keeps the bytes before m as they are, damaged
// lines included. It checks what makes m the position it was: the file
// reaches m, a line ends just before it, and exactly m.Records lines end
// before it; otherwise it fails with ErrConflict and writes nothing. (A
// damaged line whose '\n' was lost or gained since m was taken changes the
// count, so such a mark is refused rather than trusted.) Unlike RewriteAt
// it does not check the records before m: replaying an append made after a
// damaged line must not fail on that line. The zero Mark is RewriteAt(0,
// recs).
func (l *Log) RewriteAtMark(m Mark, recs []Record) error {
	if m.Size < 0 || m.Records < 0 || (m.Size == 0) != (m.Records == 0) {
		return fmt.Errorf("history: rewrite %s: invalid mark %+v: %w", l.path, m, ErrInvalid)
	}
	if m.Size == 0 {
		return l.RewriteAt(0, recs)
	}
	buf, err := encodeAll(recs)
	if err != nil {
		return err
	}
	data, err := l.fsys.ReadFile(l.path)
	if vfs.IsNotExist(err) {
		return fmt.Errorf("history: rewrite %s at %+v: the log is missing: %w", l.path, m, ErrConflict)
	}
	if err != nil {
		return l.readError(err)
	}
	if int64(len(data)) < m.Size || data[m.Size-1] != '\n' {
		return fmt.Errorf("history: rewrite %s: %d bytes, no line ends at the mark %+v: %w", l.path, len(data), m, ErrConflict)
	}
	if n := bytes.Count(data[:m.Size], []byte{'\n'}); n != m.Records {
		return fmt.Errorf("history: rewrite %s: %d lines before the mark %+v: %w", l.path, n, m, ErrConflict)
	}
	return l.rewriteFrom(m.Size, buf)
}

// rewriteFrom truncates the existing log file at off, writes buf there with
// one write, and fsyncs it (through the FS).
func (l *Log) rewriteFrom(off int64, buf []byte) error {
	f, err := l.fsys.OpenFile(l.path, os.O_WRONLY, vfs.FilePerm)
	if err != nil {
		return fmt.Errorf("history: open %s: %w", l.path, err)
	}
	defer f.Close()
	return l.writeAt(f, off, buf)
}
