package provider

import (
	"context"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/vfs"
)

// CorruptHistoryForTest makes every stored event of instance undecodable:
// each record keeps its frame (id, epoch, valid CRC) but its payload becomes
// the text NOT_VALID_JSON{{{, as the SQLite reference's hook does to its rows.
func CorruptHistoryForTest(p *FSProvider, instance string) error {
	key := instanceKey(instance)
	execs, err := p.listExecutions(key)
	if err != nil {
		return err
	}
	for _, e := range execs {
		log := history.Open(p.fs, p.historyPath(key, e))
		scan, err := log.Read()
		if err != nil {
			return err
		}
		var out []byte
		for _, r := range scan.Records {
			line, err := history.EncodeRecord(history.Record{ID: r.ID, Epoch: r.Epoch, Payload: []byte("NOT_VALID_JSON{{{")})
			if err != nil {
				return err
			}
			out = append(out, line...)
		}
		if err := vfs.WriteFile(p.fs, log.Path(), out); err != nil {
			return err
		}
	}
	return nil
}

// MaxAttemptCountForTest returns the largest attempt count over the
// instance's orchestrator messages, locked or not.
func MaxAttemptCountForTest(p *FSProvider, instance string) (uint32, error) {
	key := instanceKey(instance)
	l, _, err := p.leases.Inspect(context.Background(), p.lockPath(key), p.leasePath(key))
	if err != nil {
		return 0, err
	}
	st := decodeOrchState(l)
	entries, err := allQueued(p.orchQ)
	if err != nil {
		return 0, err
	}
	var m uint32
	for _, e := range entries {
		if e.Attrs[attrKey] == key {
			m = max(m, st.Attempts[e.Name])
		}
	}
	return m, nil
}

func writeFileForTest(p *FSProvider, path string, data []byte) error {
	return vfs.WriteFile(p.fs, path, data)
}
