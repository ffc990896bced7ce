package oracle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// Replay rebuilds a Builder from a supervisor's log of worker lines: one
// line per report, "<incarnation> <JSON line>", in the order they were read,
// with the supervisor's own gone and raise lines. It is how a kept run is
// checked again offline.
func Replay(r io.Reader, maxInFlight int) (*Builder, error) {
	b := NewBuilder(maxInFlight)
	br := bufio.NewReaderSize(r, 1<<16)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if perr := b.replayLine(line[:len(line)-1]); perr != nil {
				return nil, fmt.Errorf("oracle: replay line %d: %w", n, perr)
			}
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("oracle: replay: %w", err)
		}
	}
}

func (b *Builder) replayLine(line []byte) error {
	idText, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return fmt.Errorf("no incarnation prefix")
	}
	worker, err := strconv.Atoi(string(idText))
	if err != nil {
		return fmt.Errorf("incarnation %q: %w", idText, err)
	}
	if !bytes.HasPrefix(rest, []byte("{")) {
		return nil // not a report
	}
	var l Line
	if err := json.Unmarshal(rest, &l); err != nil {
		return err
	}
	switch l.Type {
	case TypeGone:
		b.WorkerGone(worker, l.Killed)
	case TypeRaise:
		b.Raised(l.Instance)
	default:
		_ = b.Add(worker, l) // malformed lines are kept as anomalies, as live
	}
	return nil
}
