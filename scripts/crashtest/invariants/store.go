package invariants

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
	"github.com/durofs/durofs/provider"
	"github.com/durofs/durofs/scripts/crashtest/oracle"
)

// The checker reads the directory's files directly (docs/format.md),
// never through a provider, so that nothing it checks is repaired
// on the way. These mirror the provider's file formats (only the fields
// checked).

// instanceFile is instances/<key>/instance.json.
type instanceFile struct {
	Instance           string `json:"instance"`
	CurrentExecutionID uint64 `json:"current_execution_id"`
	LastFence          uint64 `json:"last_fence"`
	TotalEvents        uint64 `json:"total_events"`
	Status             string `json:"status"`
}

// stateFile is instances/<key>/executions/<n>/state.json.
type stateFile struct {
	ExecutionID uint64  `json:"execution_id"`
	Status      string  `json:"status"`
	Output      *string `json:"output"`
	EventCount  uint64  `json:"event_count"`
}

// store is the directory as read from disk.
type store struct {
	dir       string
	instances map[string]*instData // by key
	keys      []string             // sorted
}

// instData is one instance directory.
type instData struct {
	key, id  string
	file     *instanceFile
	fileErr  error
	lease    *lease.Lease
	leaseErr error
	execs    []*execData // ascending id
}

// execData is one execution directory.
type execData struct {
	id       uint64
	path     string // history.jsonl
	scan     history.Scan
	readErr  error
	events   []provider.Event // aligned with scan.Records; decodeErr[i] != nil if record i did not decode
	decErr   []error
	digests  []oracle.Digest
	byID     map[uint64]int // event id → index of its first record
	state    *stateFile
	stateErr error
}

// pendingMark returns the id of the commit the instance's lease marks
// pending (its data.pending), or "".
func (in *instData) pendingMark() string {
	if in.lease == nil || len(in.lease.Data) == 0 {
		return ""
	}
	var d struct {
		Pending *struct {
			ID string `json:"id"`
		} `json:"pending"`
	}
	if json.Unmarshal(in.lease.Data, &d) != nil || d.Pending == nil {
		return ""
	}
	return d.Pending.ID
}

// last returns the execution's last event, if it decoded.
func (e *execData) last() (provider.Event, bool) {
	n := len(e.events)
	if n == 0 || e.decErr[n-1] != nil {
		return provider.Event{}, false
	}
	return e.events[n-1], true
}

// latest returns the instance's highest execution that has events.
func (in *instData) latest() *execData {
	for i := len(in.execs) - 1; i >= 0; i-- {
		if len(in.execs[i].scan.Records) > 0 {
			return in.execs[i]
		}
	}
	return nil
}

// exec returns execution id, or nil.
func (in *instData) exec(id uint64) *execData {
	for _, e := range in.execs {
		if e.id == id {
			return e
		}
	}
	return nil
}

// readJSON reads a JSON file into v; exists is false if it is missing.
func readJSON(path string, v any) (exists bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// load reads every instance of dir.
func load(dir string) (*store, error) {
	st := &store{dir: dir, instances: map[string]*instData{}}
	root := filepath.Join(dir, "instances")
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("invariants: list %s: %w", root, err)
	}
	for _, e := range entries {
		if !e.IsDir() || vfs.IsTemp(e.Name()) {
			continue
		}
		in, err := loadInstance(filepath.Join(root, e.Name()), e.Name())
		if err != nil {
			return nil, err
		}
		st.instances[in.key] = in
		st.keys = append(st.keys, in.key)
	}
	slices.Sort(st.keys)
	return st, nil
}

func loadInstance(path, key string) (*instData, error) {
	in := &instData{key: key}
	var f instanceFile
	if ok, err := readJSON(filepath.Join(path, "instance.json"), &f); err != nil {
		in.fileErr = err
	} else if ok {
		in.file = &f
	}
	var l lease.Lease
	if ok, err := readJSON(filepath.Join(path, "lease.json"), &l); err != nil {
		in.leaseErr = err
	} else if ok {
		in.lease = &l
	}
	execRoot := filepath.Join(path, "executions")
	entries, err := os.ReadDir(execRoot)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("invariants: list %s: %w", execRoot, err)
	}
	for _, e := range entries {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || id == 0 || !e.IsDir() {
			continue
		}
		in.execs = append(in.execs, loadExec(filepath.Join(execRoot, e.Name()), id))
	}
	slices.SortFunc(in.execs, func(a, b *execData) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	// The instance id: instance.json, else the decoded key, else an event's.
	switch {
	case in.file != nil && in.file.Instance != "":
		in.id = in.file.Instance
	default:
		if id, err := names.Decode(key); err == nil {
			in.id = id
		} else {
			in.id = key
			for _, ex := range in.execs {
				if len(ex.events) > 0 && ex.decErr[0] == nil && ex.events[0].InstanceID != "" {
					in.id = ex.events[0].InstanceID
					break
				}
			}
		}
	}
	return in, nil
}

func loadExec(path string, id uint64) *execData {
	ex := &execData{id: id, path: filepath.Join(path, "history.jsonl"), byID: map[uint64]int{}}
	ex.scan, ex.readErr = history.Open(vfs.OS{}, ex.path).Read()
	ex.events = make([]provider.Event, len(ex.scan.Records))
	ex.decErr = make([]error, len(ex.scan.Records))
	ex.digests = make([]oracle.Digest, len(ex.scan.Records))
	for i, r := range ex.scan.Records {
		ex.decErr[i] = json.Unmarshal(r.Payload, &ex.events[i])
		ex.digests[i] = oracle.DigestOf(r.Payload)
		if _, dup := ex.byID[r.ID]; !dup {
			ex.byID[r.ID] = i
		}
		// Only the digest, id, epoch and decoded fields are checked: drop
		// the bytes, so a long run's directory fits in memory.
		ex.scan.Records[i].Payload = nil
		ex.events[i].Raw = nil
	}
	var s stateFile
	if ok, err := readJSON(filepath.Join(path, "state.json"), &s); err != nil {
		ex.stateErr = err
	} else if ok {
		ex.state = &s
	}
	return ex
}

// instanceByID returns the instance with id, or nil.
func (st *store) instanceByID(id string) *instData {
	return st.instances[names.Encode(id)]
}
