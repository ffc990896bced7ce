package provider

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strconv"
)

// execIDs is the set of an instance's execution ids that have a record
// (instanceFile.Executions), kept as ascending runs of consecutive ids.
//
// Every ack rewrites instance.json whole and puts it in its log record, so
// the file must not grow with the executions an instance has run: an
// orchestration that continues as new forever would otherwise make every
// ack write its whole past (format 6 listed every id: 7.7 KB per ack at
// execution 1,500, and past about 800 executions the file outgrew the page
// it is written in place in). Executions are created in order and a prune
// removes the oldest, so the ids are one run in practice: [[1,1500]].
//
// In JSON it is a list of ascending, disjoint runs, a number for a single
// id and [first,last] for a longer run: [[1,1499],1501]. A plain list of
// ids (format 6 and before, which log records may still hold) reads as
// the same set.
type execIDs struct {
	runs []execRun
}

// execRun is the ids first..last, inclusive.
type execRun struct{ first, last uint64 }

// execIDsOf returns the set of ids (in any order, repeats allowed).
func execIDsOf(ids ...uint64) execIDs {
	var s execIDs
	for _, id := range ids {
		s.Add(id)
	}
	return s
}

// Len returns the number of ids.
func (s execIDs) Len() uint64 {
	var n uint64
	for _, r := range s.runs {
		n += r.last - r.first + 1
	}
	return n
}

// find returns the index of the first run whose last id is >= id.
func (s execIDs) find(id uint64) int {
	return sort.Search(len(s.runs), func(i int) bool { return s.runs[i].last >= id })
}

// Has reports whether id is in the set.
func (s execIDs) Has(id uint64) bool {
	i := s.find(id)
	return i < len(s.runs) && s.runs[i].first <= id
}

// Add adds id (0 is not an execution id and is ignored). It never changes
// the runs of a copy of s: instanceFile values are copied and changed (nf
// := *inf), so Add works on a new slice.
func (s *execIDs) Add(id uint64) {
	if id == 0 || s.Has(id) {
		return
	}
	s.runs = slices.Clone(s.runs)
	i := s.find(id) // not in the set: runs[i-1].last < id < runs[i].first
	joinsPrev := i > 0 && s.runs[i-1].last+1 == id
	joinsNext := i < len(s.runs) && s.runs[i].first == id+1
	switch {
	case joinsPrev && joinsNext:
		s.runs[i-1].last = s.runs[i].last
		s.runs = append(s.runs[:i], s.runs[i+1:]...)
	case joinsPrev:
		s.runs[i-1].last = id
	case joinsNext:
		s.runs[i].first = id
	default:
		s.runs = append(s.runs, execRun{})
		copy(s.runs[i+1:], s.runs[i:])
		s.runs[i] = execRun{id, id}
	}
}

// All yields the ids in ascending order.
func (s execIDs) All() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for _, r := range s.runs {
			for id := r.first; ; id++ {
				if !yield(id) {
					return
				}
				if id == r.last {
					break
				}
			}
		}
	}
}

// Remove removes id (absent: nothing changes). Like Add, it never changes
// the runs of a copy of s.
func (s *execIDs) Remove(id uint64) {
	if !s.Has(id) {
		return
	}
	s.runs = slices.Clone(s.runs)
	i := s.find(id)
	r := s.runs[i]
	switch {
	case r.first == id && r.last == id:
		s.runs = append(s.runs[:i], s.runs[i+1:]...)
	case r.first == id:
		s.runs[i].first = id + 1
	case r.last == id:
		s.runs[i].last = id - 1
	default:
		s.runs[i].last = id - 1
		s.runs = slices.Insert(s.runs, i+1, execRun{id + 1, r.last})
	}
}

// Slice returns the ids in ascending order.
func (s execIDs) Slice() []uint64 {
	var out []uint64
	for id := range s.All() {
		out = append(out, id)
	}
	return out
}

// Last returns the largest id, or 0 if the set is empty.
func (s execIDs) Last() uint64 {
	if len(s.runs) == 0 {
		return 0
	}
	return s.runs[len(s.runs)-1].last
}

// String formats the set as its JSON.
func (s execIDs) String() string {
	b, _ := s.MarshalJSON()
	return string(b)
}

// MarshalJSON implements json.Marshaler: the runs (see execIDs).
func (s execIDs) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	for i, r := range s.runs {
		if i > 0 {
			b = append(b, ',')
		}
		if r.first == r.last {
			b = strconv.AppendUint(b, r.first, 10)
			continue
		}
		b = append(b, '[')
		b = strconv.AppendUint(b, r.first, 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, r.last, 10)
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

// UnmarshalJSON implements json.Unmarshaler: runs, or a plain list of ids
// (format 6 and before), or null (no execution).
func (s *execIDs) UnmarshalJSON(data []byte) error {
	s.runs = nil
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return fmt.Errorf("executions: %w", err)
	}
	for _, it := range items {
		var id uint64
		if err := json.Unmarshal(it, &id); err == nil {
			if id == 0 {
				return fmt.Errorf("executions: execution id 0")
			}
			s.runs = append(s.runs, execRun{id, id})
			continue
		}
		var r []uint64
		if err := json.Unmarshal(it, &r); err != nil {
			return fmt.Errorf("executions: %s is neither an id nor a run [first,last]: %w", it, err)
		}
		if len(r) != 2 || r[0] == 0 || r[0] > r[1] {
			return fmt.Errorf("executions: invalid run %s", it)
		}
		s.runs = append(s.runs, execRun{r[0], r[1]})
	}
	s.normalize()
	return nil
}

// normalize sorts the runs and merges those that overlap or touch (as
// written they are ascending and disjoint already; a plain list of ids is
// one run per id).
func (s *execIDs) normalize() {
	slices.SortFunc(s.runs, func(a, b execRun) int { return cmp.Compare(a.first, b.first) })
	out := s.runs[:0]
	for _, r := range s.runs {
		if n := len(out); n > 0 && r.first <= out[n-1].last+1 {
			out[n-1].last = max(out[n-1].last, r.last)
			continue
		}
		out = append(out, r)
	}
	s.runs = out
}
