package history

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestReadCommitted: a log with fewer valid records than were committed to
// it is a *TruncatedError (ErrTruncated and ErrCorrupt), whatever is left
// of the lost records; with at least that many it reads as Read does, torn
// tail included.
func TestReadCommitted(t *testing.T) {
	three := encode(t, recs(1, 2, 3)...)
	two := encode(t, recs(1, 2)...)
	cases := []struct {
		name      string
		data      []byte // nil: no file
		committed int
		wantErr   error // nil, ErrTruncated or ErrCorrupt (a corrupt line)
		records   int
		torn      int64
	}{
		{name: "all committed records", data: three, committed: 3, records: 3},
		{name: "more records than committed", data: three, committed: 2, records: 3},
		{name: "torn tail after the committed records", data: append(append([]byte{}, three...), "0badc0de 4 1 {"...), committed: 3, records: 3, torn: 14},
		{name: "no file, nothing committed", committed: 0},
		{name: "last record cut at its line start", data: two, committed: 3, wantErr: ErrTruncated, records: 2},
		{name: "last record cut inside", data: three[:len(three)-20], committed: 3, wantErr: ErrTruncated, records: 2, torn: int64(len(three) - 20 - len(two))},
		{name: "emptied", data: []byte{}, committed: 3, wantErr: ErrTruncated},
		{name: "no file", committed: 1, wantErr: ErrTruncated},
		{name: "a corrupt line comes first", data: append(append([]byte{}, two...), "00000000 3 0 x\n"...), committed: 5, wantErr: ErrCorrupt, records: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.jsonl")
			if c.data != nil {
				writeFile(t, path, c.data)
			}
			s, err := Open(osFS, path).ReadCommitted(c.committed)
			if len(s.Records) != c.records {
				t.Errorf("%d records, want %d", len(s.Records), c.records)
			}
			var te *TruncatedError
			switch c.wantErr {
			case nil:
				if err != nil || s.TornBytes != c.torn {
					t.Errorf("err %v, torn %d; want nil, %d", err, s.TornBytes, c.torn)
				}
			case ErrTruncated:
				if !errors.As(err, &te) || !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("err %v, want a *TruncatedError", err)
				}
				if te.Records != c.records || te.Committed != c.committed || te.TornBytes != c.torn || te.Path != path {
					t.Errorf("%+v, want %d records of %d committed, %d torn bytes", te, c.records, c.committed, c.torn)
				}
			default:
				var ce *CorruptError
				if !errors.As(err, &ce) || errors.Is(err, ErrTruncated) {
					t.Errorf("err %v, want a *CorruptError", err)
				}
			}
		})
	}
}
