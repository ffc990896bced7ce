package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/jsonseal"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
)

// On-disk layout of one instance (see docs/format.md):
//
//	instances/<key>/lock                         flock target, removed last when the instance is (fs_reclaim.go)
//	instances/<key>/lease.json                   the instance lease (lease package) + orchestrator queue state
//	instances/<key>/instance.json                instanceFile: current execution, fence, instance record
//	instances/<key>/deleting                     empty: a deletion listing worker items may be pending (fs_deleting.go)
//	instances/<key>/executions/<n>/history.jsonl history package log, one event per record
//	instances/<key>/executions/<n>/state.json    executionFile: status, output, pin, timestamps
//	children/<parent key>/<key>                  empty: the instance's record names that parent (fs_reclaim.go)
//
// <key> is names.Encode(instance id).

func (p *FSProvider) instDir(key string) string { return filepath.Join(p.dir, "instances", key) }
func (p *FSProvider) lockPath(key string) string {
	return filepath.Join(p.instDir(key), "lock")
}
func (p *FSProvider) leasePath(key string) string {
	return filepath.Join(p.instDir(key), "lease.json")
}
func (p *FSProvider) deletingPath(key string) string {
	return filepath.Join(p.instDir(key), "deleting")
}
func (p *FSProvider) instFilePath(key string) string {
	return filepath.Join(p.instDir(key), "instance.json")
}
func (p *FSProvider) execDir(key string, exec uint64) string {
	return filepath.Join(p.instDir(key), "executions", strconv.FormatUint(exec, 10))
}
func (p *FSProvider) historyPath(key string, exec uint64) string {
	return filepath.Join(p.execDir(key, exec), "history.jsonl")
}
func (p *FSProvider) execStatePath(key string, exec uint64) string {
	return filepath.Join(p.execDir(key, exec), "state.json")
}

// instanceKey is the directory name of an instance.
func instanceKey(instance string) string { return names.Encode(instance) }

// instanceFile is instances/<key>/instance.json. It exists once any turn of
// the instance was acked. Record is the duroxide "instance record", which the
// SQLite reference creates only when an ack's metadata carries both name and
// version; without it, the instance is not listed and has no info.
type instanceFile struct {
	Instance           string `json:"instance"`
	CurrentExecutionID uint64 `json:"current_execution_id"`
	// LastFence is the fence of the last committed turn. The next lease holder
	// gets a larger fence even if lease.json reverted after a power loss.
	LastFence   uint64          `json:"last_fence"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	Record      *instanceRecord `json:"record"`
	// Summary counters, kept by every commit so that admin listings and
	// metrics never read history files (fsck can rebuild them).
	Executions    execIDs `json:"executions"`      // execution ids with a record (runs, execids.go)
	TotalEvents   uint64  `json:"total_events"`    // history records over all executions
	Status        string  `json:"status"`          // current execution's status
	CompletedAtMs *int64  `json:"completed_at_ms"` // current execution's completed_at
	// SubOrchestrations counts the SubOrchestrationScheduled events ever
	// committed to its histories (a prune does not lower it). A deletion
	// reads the histories of an instance for the children it scheduled
	// that have not started yet (unstartedChildren, fs_admin.go) only when
	// it is not 0. Files written before it was kept say 0; fsck --repair
	// counts them.
	SubOrchestrations uint64 `json:"sub_orchestrations,omitempty"`
}

// instanceRecord is the instance record (name, version, parent, custom status).
type instanceRecord struct {
	OrchestrationName    string  `json:"orchestration_name"`
	OrchestrationVersion *string `json:"orchestration_version"`
	ParentInstanceID     *string `json:"parent_instance_id"`
	CustomStatus         *string `json:"custom_status"`
	CustomStatusVersion  uint64  `json:"custom_status_version"`
	CreatedAtMs          int64   `json:"created_at_ms"`
	UpdatedAtMs          int64   `json:"updated_at_ms"`
}

// executionFile is executions/<n>/state.json: the execution record.
type executionFile struct {
	ExecutionID   uint64  `json:"execution_id"`
	Status        string  `json:"status"`
	Output        *string `json:"output"`
	Pinned        *string `json:"pinned_duroxide_version"`
	StartedAtMs   int64   `json:"started_at_ms"`
	CompletedAtMs *int64  `json:"completed_at_ms"`
	EventCount    uint64  `json:"event_count"`
	// Generation names the execution's history file as one log: a random
	// id an ack gives the execution when it first writes its state.json,
	// kept by every later one. A history is only ever appended to (or
	// rewritten with the bytes it had) while its execution keeps its
	// generation: it is removed only with its state.json, and a new one
	// comes with a new state.json, so with a new generation. A process
	// that read a history may therefore keep its records keyed on the
	// generation and read only what was appended since (histcache.go).
	// Empty in directories written before it existed and in go-workflows
	// executions: their histories are read whole.
	Generation string `json:"generation,omitempty"`
	// GW is a go-workflows execution's record (fs_gw.go): every commit
	// that writes the state.json of one keeps it current. It is the only
	// record of an execution that instance.json no longer lists (format 8:
	// instance.json lists only the latest execution).
	GW *gwExec `json:"gw,omitempty"`
}

func jsonMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// readJSON reads a JSON file; exists is false if it is missing. A sealed
// file (seal.go) is read again while its seal does not match - a write in
// place was copying its bytes - and is corrupt if it never does.
func (p *FSProvider) readJSON(path string, v any) (exists bool, err error) {
	for attempt := 0; ; attempt++ {
		data, err := p.fs.ReadFile(path)
		if vfs.IsNotExist(err) {
			return false, nil
		}
		if vfs.IsPlanted(err) {
			// A planted link (or FIFO, directory) is never read through:
			// the file is unusable, as if unparseable (symlinks.go).
			return true, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if err != nil {
			return false, err
		}
		body, _, serr := jsonseal.Unseal(data)
		if serr != nil {
			if attempt < sealRetries {
				if attempt >= 3 {
					time.Sleep(sealRetrySleep)
				}
				continue
			}
			return true, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, serr)
		}
		if err := jsonUnmarshal(body, v); err != nil {
			return true, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
		}
		return true, nil
	}
}

// storageErrf is the ProviderError for a failure to read an instance's
// stored files (readJSON and its callers): permanent when cause is
// ErrCorrupt - a file that failed its seal or does not decode reads the
// same on every retry, and contract §4 classifies corruption ("invalid
// format") as permanent - and retryable otherwise (an I/O error, which may
// pass).
func storageErrf(op string, cause error, format string, args ...any) *ProviderError {
	if errors.Is(cause, ErrCorrupt) {
		return Permanentf(op, cause, format, args...)
	}
	return Retryablef(op, cause, format, args...)
}

func (p *FSProvider) readInstanceFile(key string) (*instanceFile, error) {
	var f instanceFile
	ok, err := p.readJSON(p.instFilePath(key), &f)
	if err != nil || !ok {
		return nil, err
	}
	return &f, nil
}

func (p *FSProvider) readExecutionFile(key string, exec uint64) (*executionFile, error) {
	var f executionFile
	ok, err := p.readJSON(p.execStatePath(key, exec), &f)
	if err != nil || !ok {
		return nil, err
	}
	return &f, nil
}

// listExecutions returns the execution ids with a directory, ascending.
func (p *FSProvider) listExecutions(key string) ([]uint64, error) {
	names, err := p.fs.ReadDirNames(filepath.Join(p.instDir(key), "executions"))
	if vfs.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, n := range names {
		if id, err := strconv.ParseUint(n, 10, 64); err == nil && id > 0 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// latestExecution is the instance's current execution: the one its
// instance.json names (contract §2.4 step 4.1, §2.15: the execution
// records'), or, without one, the highest execution directory; 0 if the
// instance has none. An execution directory above the current one holds
// only what AppendWithExecution put there (a test and debugging path that,
// as in the SQLite reference, creates no execution record): it is read by
// ReadWithExecution, never taken for the current execution.
func (p *FSProvider) latestExecution(key string) (uint64, error) {
	f, err := p.readInstanceFile(key)
	if err != nil {
		return 0, err
	}
	if f != nil && f.CurrentExecutionID > 0 {
		return f.CurrentExecutionID, nil
	}
	ids, err := p.listExecutions(key)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return ids[len(ids)-1], nil
}

// Lock tokens. An orchestration token is "o1.<lease token>.<instance key>"
// and a work-item token is "w1.<fsqueue claim token>"; both carry what is
// needed to find the lock without an index.
//
// Tokens come back from callers, so they are untrusted: before a token
// operation touches the disk, its token must have exactly the shape durofs
// issues (a canonical UUID, a key that names.Encode can produce, a claim
// token fsqueue.NameFromToken accepts). Anything else fails permanently with
// ErrInvalidLockToken: a forged key could otherwise name a path the file
// system rejects with a retryable-looking error (a NUL byte: EINVAL; over
// 255 bytes: ENAMETOOLONG), or a new directory that the lock would create.
const (
	orchTokenPrefix = "o1."
	workTokenPrefix = "w1."
)

func orchToken(key, leaseToken string) string { return orchTokenPrefix + leaseToken + "." + key }

// parseOrchToken splits an orchestration token; ok is false unless the lease
// token is a canonical (lower-case, hyphenated), non-nil UUID, as
// lease.Store issues them, and the key is a valid names encoding.
func parseOrchToken(tok string) (key, leaseToken string, ok bool) {
	rest, found := strings.CutPrefix(tok, orchTokenPrefix)
	if !found || len(rest) < 38 || rest[36] != '.' {
		return "", "", false
	}
	leaseToken, key = rest[:36], rest[37:]
	if !canonicalUUID(leaseToken) || !names.Valid(key) {
		return "", "", false
	}
	return key, leaseToken, true
}

func canonicalUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u != uuid.Nil && u.String() == s
}

// orchTokenInstance parses an orchestration token and checks that its
// instance directory exists, before any lock is taken: taking the instance
// lock creates instances/<key>/lock, which a forged token for a key that
// names no instance must not leave behind. A token that fails either check
// gives a permanent ErrInvalidLockToken with message msg. Instance
// directories are never removed, so a token that passes names a directory
// that stays.
func (p *FSProvider) orchTokenInstance(op, tok, msg string) (key, leaseToken string, err error) {
	key, leaseToken, ok := parseOrchToken(tok)
	if !ok {
		return "", "", Permanentf(op, ErrInvalidLockToken, "%s", msg)
	}
	if _, err := p.fs.Stat(p.instDir(key)); err != nil {
		if vfs.IsNotExist(err) {
			return "", "", Permanentf(op, ErrInvalidLockToken, "%s", msg)
		}
		return "", "", Retryablef(op, err, "stat instance: %v", err)
	}
	return key, leaseToken, nil
}

func workToken(claimToken string) string { return workTokenPrefix + claimToken }

// parseWorkToken returns a work-item token's claim token; ok is false unless
// it is one fsqueue issues (a message name, ".", a canonical,
// non-nil UUID).
func parseWorkToken(tok string) (string, bool) {
	ct, ok := strings.CutPrefix(tok, workTokenPrefix)
	if !ok {
		return "", false
	}
	if _, ok := fsqueue.NameFromToken(ct); !ok {
		return "", false
	}
	return ct, true
}
