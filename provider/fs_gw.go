package provider

// Workflow instances: the go-workflows execution model on the durofs engine.
//
// go-workflows (github.com/cschleiden/go-workflows) keeps, per workflow
// instance, executions named by (instance id, execution id) strings, a queue
// name per execution, "pending events" that wake an execution (some of them
// future events: timers), a history of executed events numbered by sequence
// id, and activity tasks in named queues. The operations in fs_gw*.go give
// that model durofs's guarantees: every change that must be all-or-nothing is
// ONE write-ahead log record (fs_wal.go), of kind "gw" (changes keyed by
// instance, each part marked in its instance's lease and applied under its
// flock) or "gw_act" (an activity completion, marked in the activity's claim).
// This file holds the storage format and the apply and replay of "gw"
// records; fs_gw_task.go the operations on instances and workflow tasks,
// fs_gw_activity.go activity tasks, fs_gw_admin.go removal, stats and
// listings. The module github.com/durofs/durofs/goworkflows adapts them to
// go-workflows' backend.Backend; its doc.go describes the mapping.
//
// Storage (one instance directory per instance id, as for orchestrations):
//
//	instances/<key>/lock, lease.json    the flock target and the lease: a workflow task is a lease (token,
//	                                    fence, expiry; Data.batch = the pending-event messages it fetched);
//	                                    a released lease whose owner and expiry are still set is the
//	                                    "sticky" preference of the worker that completed the last task
//	instances/<key>/instance.json       instanceFile (so durofs ls/show read it; its executions runs
//	                                    and total_events are kept by every commit) plus "gw": the
//	                                    instance's latest execution (the active one, if any: id,
//	                                    number, queue, state, parent, metadata, times, last sequence
//	                                    id, event count) and the next execution number
//	instances/<key>/executions/<n>/history.jsonl   executed events, one record each: record id = sequence
//	                                    id, epoch = fence, payload = {duroxide's common event fields,
//	                                    "type":"workflow.<EventType>", "event": <the go-workflows event>}
//	instances/<key>/executions/<n>/state.json      executionFile (status, times, event count) and, once
//	                                    instance.json no longer lists the execution, its record ("gw")
//	instances/<key>/executions/by-id/<id>          {"id","n"}: the number of execution <id>
//	                                    (names.Encode), for every execution instance.json no longer lists
//
// Every commit rewrites instance.json whole and logs it whole, so it must not
// grow with the executions an instance has run (a workflow that continues as
// new forever has thousands): a commit that leaves an execution that is not
// the latest in "gw" moves it out, in the same record, writing its record
// into its state.json and its by-id entry. Only the latest execution is ever
// active (a new execution gets the next number, and none is created while
// one is active), so a task, a fetch, a signal and a continue-as-new read
// instance.json alone; lookups of an older execution by id read its by-id
// entry and its state.json, and listings read every state.json. Format 7
// listed every execution in instance.json: such a file is read as it is, and
// the first commit that rewrites it moves the others out (format 8).
//	queues/gw-workflow-<q>/<name>.json  pending events of executions whose queue is q (names.Encode(q)),
//	                                    visible_at = the event's VisibleAt (timers) or its enqueue time
//	queues/gw-activity-<q>/<name>.json  activity tasks of queue q; claims/ are their peek-locks
//	queues/gw-*-~<sha256>/gw-queue.json {"queue": q}: the name of a queue whose encoding is longer than
//	                                    names.MaxLen, so that its directory is named by its hash
//	                                    (gwQueueNameFile)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/failpoint"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

const (
	kindGW    = "gw"
	kindGWAct = "gw_act"
)

// Errors of the workflow operations. They are permanent.
var (
	// ErrWorkflowExists: the instance already has an active execution.
	ErrWorkflowExists = errors.New("durofs: workflow instance already exists")
	// ErrWorkflowNotFound: no such instance (or execution, or active execution).
	ErrWorkflowNotFound = errors.New("durofs: workflow instance not found")
	// ErrWorkflowNotFinished: the execution is still active.
	ErrWorkflowNotFinished = errors.New("durofs: workflow instance is not finished")
	// ErrWorkflowTaskLost: the task's lock is no longer held by its token
	// (completed already, or taken over after it expired).
	ErrWorkflowTaskLost = errors.New("durofs: workflow task lock is not held")
)

// WorkflowState is the state of one execution. The values are go-workflows'
// core.WorkflowInstanceState.
type WorkflowState int

const (
	WorkflowActive         WorkflowState = 0
	WorkflowContinuedAsNew WorkflowState = 1
	WorkflowFinished       WorkflowState = 2
)

// WorkflowRef names one execution of a workflow instance.
type WorkflowRef struct {
	InstanceID  string `json:"instance_id"`
	ExecutionID string `json:"execution_id"`
}

// WorkflowParent is the execution (and its event) that started a sub-workflow.
type WorkflowParent struct {
	InstanceID  string `json:"instance_id"`
	ExecutionID string `json:"execution_id"`
	EventID     int64  `json:"event_id"`
}

// WorkflowEvent is one event, opaque to durofs except for the fields it
// routes, orders and inspects by. Data is the complete event as the caller
// encodes it (go-workflows: its history.Event JSON), stored verbatim.
type WorkflowEvent struct {
	ID              string
	Type            string // a name for inspection (durofs history shows "workflow.<Type>")
	SequenceID      int64  // history position (executed events); 0 for pending ones
	ScheduleEventID int64
	TimestampMs     int64
	VisibleAtMs     int64 // > 0: a future event (timer), delivered at that time
	Data            json.RawMessage
}

// WorkflowStart describes a new execution.
type WorkflowStart struct {
	Queue    string
	Name     string
	Parent   *WorkflowParent
	Metadata json.RawMessage
}

// WorkflowExecution is one execution as stored.
type WorkflowExecution struct {
	WorkflowRef
	Number         uint64 // its directory executions/<n>
	Queue          string
	Name           string
	Parent         *WorkflowParent
	Metadata       json.RawMessage
	State          WorkflowState
	Failed         bool
	CreatedAt      time.Time
	CompletedAt    *time.Time
	LastSequenceID int64
	Events         int
}

// gwInstanceFile is instance.json of an instance with workflow executions:
// the orchestration instance file (read by durofs ls/show and the admin
// API) plus the executions.
type gwInstanceFile struct {
	instanceFile
	GW *gwInstance `json:"gw,omitempty"`
}

type gwInstance struct {
	// Next is the number the next execution's directory gets.
	Next uint64 `json:"next"`
	// Executions are the records of the instance's latest execution (the
	// only one that can be active); the records of the others are in their
	// state.json (executionFile.GW). Format 7 listed every execution here.
	Executions []gwExec `json:"executions"`
}

// gwExec is one execution's record (in instance.json while it is the
// latest, and in its state.json).
type gwExec struct {
	ID          string          `json:"id"`
	N           uint64          `json:"n"`
	Queue       string          `json:"queue"`
	Name        string          `json:"name,omitempty"`
	State       WorkflowState   `json:"state"`
	Failed      bool            `json:"failed,omitempty"`
	Parent      *WorkflowParent `json:"parent,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	CreatedNs   int64           `json:"created_ns"`
	CompletedNs *int64          `json:"completed_ns,omitempty"`
	LastSeq     int64           `json:"last_seq"`
	Events      int             `json:"events"`
	// HistoryBytes is the size of the execution's history file, kept by
	// every commit that appends to it (0 with events: not known, as in
	// directories written before it existed). A commit gives it to the
	// apply as the offset to append at (gwPart.HistoryOffset).
	HistoryBytes int64 `json:"history_bytes,omitempty"`
}

func (e *gwExec) public(instance string) WorkflowExecution {
	w := WorkflowExecution{
		WorkflowRef: WorkflowRef{InstanceID: instance, ExecutionID: e.ID}, Number: e.N, Queue: e.Queue, Name: e.Name,
		Parent: e.Parent, Metadata: e.Metadata, State: e.State, Failed: e.Failed,
		CreatedAt: time.Unix(0, e.CreatedNs), LastSequenceID: e.LastSeq, Events: e.Events,
	}
	if e.CompletedNs != nil {
		t := time.Unix(0, *e.CompletedNs)
		w.CompletedAt = &t
	}
	return w
}

func (f *gwInstanceFile) exec(id string) *gwExec {
	if f == nil || f.GW == nil {
		return nil
	}
	for i := range f.GW.Executions {
		if f.GW.Executions[i].ID == id {
			return &f.GW.Executions[i]
		}
	}
	return nil
}

func (f *gwInstanceFile) active() *gwExec {
	if f == nil || f.GW == nil {
		return nil
	}
	for i := range f.GW.Executions {
		if f.GW.Executions[i].State == WorkflowActive {
			return &f.GW.Executions[i]
		}
	}
	return nil
}

// clone returns a deep enough copy to modify.
func (f *gwInstanceFile) clone() *gwInstanceFile {
	c := *f
	if f.Record != nil {
		r := *f.Record
		c.Record = &r
	}
	if f.GW != nil {
		g := *f.GW
		g.Executions = slices.Clone(f.GW.Executions)
		c.GW = &g
	}
	return &c
}

// listed returns the record of execution number n if instance.json lists it.
func (f *gwInstanceFile) listed(n uint64) *gwExec {
	if f == nil || f.GW == nil {
		return nil
	}
	for i := range f.GW.Executions {
		if f.GW.Executions[i].N == n {
			return &f.GW.Executions[i]
		}
	}
	return nil
}

// summarize sets the orchestration summary fields from the latest
// execution. The executions runs and total_events are kept by the changes
// themselves (gwNewExec, a task's events, gwRemoveFrom): the records of
// most executions are not at hand.
func (f *gwInstanceFile) summarize(nowMs int64) {
	f.UpdatedAtMs = nowMs
	var cur *gwExec
	for i := range f.GW.Executions {
		if e := &f.GW.Executions[i]; cur == nil || e.N > cur.N {
			cur = e
		}
	}
	if cur == nil {
		return
	}
	f.CurrentExecutionID = cur.N
	f.Status = gwStatus(cur)
	f.CompletedAtMs = nil
	if cur.CompletedNs != nil {
		ms := *cur.CompletedNs / 1e6
		f.CompletedAtMs = &ms
	}
	if f.Record == nil {
		f.Record = &instanceRecord{CreatedAtMs: nowMs}
	}
	f.Record.OrchestrationName = cur.Name
	f.Record.UpdatedAtMs = nowMs
	f.Record.ParentInstanceID = nil
	if cur.Parent != nil {
		p := cur.Parent.InstanceID
		f.Record.ParentInstanceID = &p
	}
}

func gwStatus(e *gwExec) string {
	switch e.State {
	case WorkflowActive:
		return "Running"
	case WorkflowContinuedAsNew:
		return "ContinuedAsNew"
	}
	if e.Failed {
		return "Failed"
	}
	return "Completed"
}

// execFileOf is the execution's state.json (read by durofs show), with
// its record if withRecord: that of an execution instance.json no longer
// lists. The listed execution's record is in instance.json alone, so a task
// logs it once (a second copy in state.json cost the 4-process go-workflows
// tree about 10 %, BENCHMARKS.md "Session of 2026-11-30").
func execFileOf(e *gwExec, withRecord bool) executionFile {
	ef := executionFile{ExecutionID: e.N, Status: gwStatus(e), StartedAtMs: e.CreatedNs / 1e6, EventCount: uint64(e.Events)}
	if e.CompletedNs != nil {
		ms := *e.CompletedNs / 1e6
		ef.CompletedAtMs = &ms
	}
	if withRecord {
		r := *e
		ef.GW = &r
	}
	return ef
}

func (p *FSProvider) readGWInstance(key string) (*gwInstanceFile, error) {
	var f gwInstanceFile
	ok, err := p.readJSON(p.instFilePath(key), &f)
	if err != nil || !ok {
		return nil, err
	}
	if f.GW != nil {
		// A listed execution is an execution (so it is in a file that
		// kept the runs from the list, format 7, or a damaged one).
		for _, e := range f.GW.Executions {
			f.Executions.Add(e.N)
		}
	}
	return &f, nil
}

// gwIDEntry is executions/by-id/<names.Encode(id)>: the number of an
// execution instance.json does not list. The id is kept too (a long id's
// name is its hash).
type gwIDEntry struct {
	ID string `json:"id"`
	N  uint64 `json:"n"`
}

func (p *FSProvider) gwIDDir(key string) string {
	return filepath.Join(p.instDir(key), "executions", "by-id")
}

func (p *FSProvider) gwIDPath(key, id string) string {
	return filepath.Join(p.gwIDDir(key), names.Encode(id))
}

// gwReadExecN reads the record of execution n of key from its state.json
// (nil if it has none, or no state.json).
func (p *FSProvider) gwReadExecN(key string, n uint64) (*gwExec, error) {
	ef, err := p.readExecutionFile(key, n)
	if err != nil || ef == nil || ef.GW == nil {
		return nil, err
	}
	if ef.GW.N != n {
		return nil, fmt.Errorf("%w: %s holds the record of execution %d", ErrCorrupt, p.execStatePath(key, n), ef.GW.N)
	}
	return ef.GW, nil
}

// gwFind returns execution id of instance key whose instance.json is f (nil
// if it has none): listed in f, or else found through its by-id entry. It
// reads at most two small files, whatever the number of executions.
func (p *FSProvider) gwFind(key string, f *gwInstanceFile, id string) (*gwExec, error) {
	if f == nil || f.GW == nil {
		return nil, nil
	}
	if e := f.exec(id); e != nil {
		return e, nil
	}
	var ent gwIDEntry
	ok, err := p.readJSON(p.gwIDPath(key, id), &ent)
	if err != nil || !ok {
		return nil, err
	}
	// An entry is a hint checked against the execution's own record: an
	// entry of an execution removed since (an entry outlives its execution
	// only until the same commit's apply ends) is no execution.
	if ent.ID != id || !f.Executions.Has(ent.N) || f.listed(ent.N) != nil {
		return nil, nil
	}
	e, err := p.gwReadExecN(key, ent.N)
	if err != nil || e == nil || e.ID != id {
		return nil, err
	}
	return e, nil
}

// gwAll returns the records of every execution of instance key whose
// instance.json is f, ascending by number: the listed ones and those in
// the state.json of the others (a listing: it reads one file per
// execution). An execution whose record cannot be read is left out, with a
// warning (fsck reports it).
func (p *FSProvider) gwAll(key string, f *gwInstanceFile) ([]gwExec, error) {
	if f == nil || f.GW == nil {
		return nil, nil
	}
	var out []gwExec
	for n := range f.Executions.All() {
		if e := f.listed(n); e != nil {
			out = append(out, *e)
			continue
		}
		e, err := p.gwReadExecN(key, n)
		if e == nil {
			if err == nil {
				err = errors.New("its state.json has no go-workflows record")
			}
			p.log.Warn("durofs: a go-workflows execution cannot be read", "key", key, "execution", n, "err", err)
			continue
		}
		out = append(out, *e)
	}
	return out, nil
}

// gwRecord is the workflow part of a log record (commitRecord.GW).
type gwRecord struct {
	// Op names the operation, for inspection.
	Op string `json:"op"`
	// Parts are the changes of a "gw" record, one per instance key, each
	// marked in that instance's lease and applied under its flock.
	Parts []gwPart `json:"parts,omitempty"`
	// ActQueue is the activity queue (directory name) of a "gw_act" record's
	// item; CompletionQueue the workflow queue its completion goes to.
	ActQueue string `json:"act_queue,omitempty"`
}

// gwPart is everything a "gw" record changes in one instance: replay
// rewrites all of it from the record alone.
type gwPart struct {
	Key      string `json:"key"`
	Instance string `json:"instance"`
	// LeaseToken, if the lease still holds it, is released; the lease then
	// keeps Sticky as its owner until StickyUntilMs (0: not sticky).
	LeaseToken    string `json:"lease_token,omitempty"`
	Sticky        string `json:"sticky,omitempty"`
	StickyUntilMs int64  `json:"sticky_until_ms,omitempty"`
	// History is appended to execution Exec at position HistoryBase.
	Exec        uint64 `json:"exec,omitempty"`
	Fence       uint64 `json:"fence,omitempty"`
	HistoryBase int    `json:"history_base,omitempty"`
	// HistoryOffset is the byte offset of record HistoryBase (0: not
	// known); see commitRecord.HistoryOffset.
	HistoryOffset int64    `json:"history_offset,omitempty"`
	History       [][]byte `json:"history,omitempty"`
	HistoryIDs    []uint64 `json:"history_ids,omitempty"`
	// InstanceFile is instance.json's complete new content (nil: unchanged;
	// DeleteInstanceFile: removed); States the state.json of executions.
	InstanceFile       *gwInstanceFile `json:"instance_file,omitempty"`
	DeleteInstanceFile bool            `json:"delete_instance_file,omitempty"`
	States             []gwStateWrite  `json:"states,omitempty"`
	// IDs are by-id entries written (after States, before InstanceFile:
	// the executions instance.json stops listing); RemoveIDs those removed
	// (with RemoveExecs).
	IDs       []gwIDEntry `json:"ids,omitempty"`
	RemoveIDs []string    `json:"remove_ids,omitempty"`
	// ChildOf and UnchildOf are the parents whose children index gains and
	// loses the instance: its record names a new parent (ChildOf, before
	// instance.json is written) or no longer names the old one (UnchildOf,
	// after; DeleteInstanceFile: with the instance file).
	ChildOf   *string `json:"child_of,omitempty"`
	UnchildOf *string `json:"unchild_of,omitempty"`
	// RemoveExecs are execution directories removed.
	RemoveExecs []uint64   `json:"remove_execs,omitempty"`
	Publish     []queueRef `json:"publish,omitempty"`
	Delete      []queueRef `json:"delete,omitempty"`
}

type gwStateWrite struct {
	N    uint64        `json:"n"`
	File executionFile `json:"file"`
}

// Queue directories.

const (
	gwWorkflowPrefix = "gw-workflow-"
	gwActivityPrefix = "gw-activity-"
)

// gwWorkflowQueue is the queue directory name of workflow queue q.
func gwWorkflowQueue(q string) string { return gwWorkflowPrefix + names.Encode(q) }

// gwActivityQueue is the queue directory name of activity queue q.
func gwActivityQueue(q string) string { return gwActivityPrefix + names.Encode(q) }

// gwQueueDirOf is the queue directory name of queue q.
func gwQueueDirOf(q string, activity bool) string {
	if activity {
		return gwActivityQueue(q)
	}
	return gwWorkflowQueue(q)
}

// gwQueueKind reports whether dir is the name of a go-workflows queue
// directory, and of which kind: a prefix and a valid encoding of a queue
// name (names.Valid), direct or hashed.
func gwQueueKind(dir string) (activity, ok bool) {
	enc, isWF := strings.CutPrefix(dir, gwWorkflowPrefix)
	if !isWF {
		var isAct bool
		if enc, isAct = strings.CutPrefix(dir, gwActivityPrefix); !isAct {
			return false, false
		}
		activity = true
	}
	if !names.Valid(enc) || vfs.IsTemp(dir) || strings.ContainsAny(dir, `/\`) {
		return false, false
	}
	return activity, true
}

// gwQueueHashed reports whether queue directory dir (gwQueueKind) is named
// by the hash of its queue's name: the name is in its gwQueueNameFile.
func gwQueueHashed(dir string) bool {
	return strings.HasPrefix(dir, gwWorkflowPrefix+"~") || strings.HasPrefix(dir, gwActivityPrefix+"~")
}

// gwQueueNameFile is the file of a queue directory named by a hash
// ("gw-workflow-~<sha256>", a queue whose name encodes to more than
// names.MaxLen bytes) that holds the queue's name: {"queue":"<name>"}. It
// is created exclusively and durably (vfs.CreateExclusive: written and
// synced under a temporary name, linked, the directory synced) right after
// the directory is made durable and before the queue is opened, so that
// whenever the directory holds a message its name is there, complete: a
// kill -9 or a power loss between the two leaves a directory without one
// and without messages, which the next open by name completes (processes
// that race both try the link; the loser reads the winner's). The name is
// checked against the directory's name (its hash), so a file naming
// another queue is no name. A directory whose name cannot be read is left
// out of every listing (gwQueueDirs: sweeps, stats, inspection) and
// refused by gwQueue; fsck reports it.
const gwQueueNameFile = "gw-queue.json"

type gwQueueNameRec struct {
	Queue string `json:"queue"`
}

// errGWQueueUnnamed: a hashed queue directory whose name file is missing or
// does not name its queue.
var errGWQueueUnnamed = errors.New("durofs: go-workflows queue directory has no valid name file")

// gwReadQueueName reads the name file of hashed queue directory dir and
// checks it against dir (no cache: fsck).
func (p *FSProvider) gwReadQueueName(dir string) (string, error) {
	activity, _ := gwQueueKind(dir)
	path := filepath.Join(p.dir, "queues", dir, gwQueueNameFile)
	data, err := p.fs.ReadFile(path)
	if vfs.IsNotExist(err) {
		return "", fmt.Errorf("%w: %s: missing", errGWQueueUnnamed, path)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", errGWQueueUnnamed, path, err)
	}
	var rec gwQueueNameRec
	if err := json.Unmarshal(data, &rec); err != nil {
		return "", fmt.Errorf("%w: %s: %v", errGWQueueUnnamed, path, err)
	}
	if gwQueueDirOf(rec.Queue, activity) != dir {
		return "", fmt.Errorf("%w: %s names queue %q, whose directory is %s", errGWQueueUnnamed, path, rec.Queue, gwQueueDirOf(rec.Queue, activity))
	}
	return rec.Queue, nil
}

// gwQueueName returns the name of the queue in queue directory dir
// (gwQueueKind): decoded from dir, or read from its name file if dir is a
// hash (once per process).
func (p *FSProvider) gwQueueName(dir string) (string, error) {
	if _, ok := gwQueueKind(dir); !ok {
		return "", fmt.Errorf("durofs: %q is not a workflow queue directory", dir)
	}
	if !gwQueueHashed(dir) {
		enc, isWF := strings.CutPrefix(dir, gwWorkflowPrefix)
		if !isWF {
			enc, _ = strings.CutPrefix(dir, gwActivityPrefix)
		}
		return names.Decode(enc)
	}
	p.gw.mu.Lock()
	n, ok := p.gw.names[dir]
	p.gw.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := p.gwReadQueueName(dir)
	if err != nil {
		return "", err
	}
	p.gw.mu.Lock()
	if p.gw.names == nil {
		p.gw.names = map[string]string{}
	}
	p.gw.names[dir] = n
	p.gw.mu.Unlock()
	return n, nil
}

// gwNameQueueDir makes queue directory dir of queue name (hashed) and its
// name file, durably (see gwQueueNameFile).
func (p *FSProvider) gwNameQueueDir(dir, name string) error {
	if n, err := p.gwQueueName(dir); err == nil && n == name {
		return nil
	}
	path := filepath.Join(p.dir, "queues", dir)
	if err := p.mkdirDurable(path); err != nil {
		return err
	}
	failpoint.Hit("gw.queue_after_mkdir")
	body, err := json.Marshal(gwQueueNameRec{Queue: name})
	if err != nil {
		return err
	}
	if err := vfs.CreateExclusive(p.fs, filepath.Join(path, gwQueueNameFile), body, false); err != nil && !vfs.IsExist(err) {
		return fmt.Errorf("durofs: name queue directory %s: %w", dir, err)
	}
	// Ours, or another process's (complete: it was linked once synced).
	n, err := p.gwQueueName(dir)
	if err != nil {
		return err
	}
	if n != name {
		return fmt.Errorf("%w: %s names queue %q, not %q", errGWQueueUnnamed, dir, n, name)
	}
	return nil
}

// gwEngine is the provider's state for workflow queues.
type gwEngine struct {
	mu     sync.Mutex
	queues map[string]*fsqueue.Queue
	// names are the queue names of hashed queue directories, read from
	// their name files.
	names  map[string]string
	closed bool
	// unnamedWarned are the hashed queue directories without a valid name
	// file that a listing warned of (once per process).
	unnamedWarned map[string]bool
}

// gwQueueOf opens (once per process) the queue directory of queue name,
// creating it and, for a hashed one, its name file first.
func (p *FSProvider) gwQueueOf(name string, activity bool) (string, *fsqueue.Queue, error) {
	dir := gwQueueDirOf(name, activity)
	if gwQueueHashed(dir) {
		if err := p.gwNameQueueDir(dir, name); err != nil {
			return "", nil, err
		}
	}
	q, err := p.gwQueue(dir)
	return dir, q, err
}

// gwQueue opens (once per process) the queue in queues/<dir>, creating the
// directory if needed; a hashed directory must have its name file (only
// gwQueueOf, which knows the name, makes one).
func (p *FSProvider) gwQueue(dir string) (*fsqueue.Queue, error) {
	activity, ok := gwQueueKind(dir)
	if !ok {
		return nil, fmt.Errorf("durofs: %q is not a workflow queue directory", dir)
	}
	p.gw.mu.Lock()
	if q := p.gw.queues[dir]; q != nil && !p.gw.closed {
		p.gw.mu.Unlock()
		return q, nil
	}
	p.gw.mu.Unlock()
	if gwQueueHashed(dir) {
		if _, err := p.gwQueueName(dir); err != nil {
			return nil, err
		}
	}
	p.gw.mu.Lock()
	defer p.gw.mu.Unlock()
	if p.gw.closed {
		return nil, errors.New("durofs: provider closed")
	}
	if q := p.gw.queues[dir]; q != nil {
		return q, nil
	}
	path := filepath.Join(p.dir, "queues", dir)
	if err := p.mkdirDurable(path); err != nil {
		return nil, err
	}
	side := wakeOrch
	if activity {
		side = wakeWork
	}
	q, err := fsqueue.Open(p.fs, path, p.queueOptions(side))
	if err != nil {
		return nil, err
	}
	if p.gw.queues == nil {
		p.gw.queues = map[string]*fsqueue.Queue{}
	}
	p.gw.queues[dir] = q
	return q, nil
}

// gwQueues opens the queues of go-workflows' queue names.
func (p *FSProvider) gwQueues(qnames []string, activity bool) ([]*fsqueue.Queue, error) {
	qs := make([]*fsqueue.Queue, len(qnames))
	for i, n := range qnames {
		_, q, err := p.gwQueueOf(n, activity)
		if err != nil {
			return nil, err
		}
		qs[i] = q
	}
	return qs, nil
}

// gwQueueDirs lists the workflow queue directories that exist and can be
// used: a hashed one whose name file is missing or invalid is left out,
// with a warning (once per process; fsck reports it, gwUnnamedQueueDirs).
func (p *FSProvider) gwQueueDirs(activity bool) ([]string, error) {
	all, err := p.fs.ReadDirNames(filepath.Join(p.dir, "queues"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range all {
		act, ok := gwQueueKind(d)
		if !ok || act != activity {
			continue
		}
		if gwQueueHashed(d) {
			if _, err := p.gwQueueName(d); err != nil {
				p.gw.mu.Lock()
				warn := !p.gw.unnamedWarned[d]
				if p.gw.unnamedWarned == nil {
					p.gw.unnamedWarned = map[string]bool{}
				}
				p.gw.unnamedWarned[d] = true
				p.gw.mu.Unlock()
				if warn {
					p.log.Warn("durofs: a go-workflows queue directory has no valid name file: left alone until the queue is opened by name (durofs fsck reports it)", "dir", d, "err", err)
				}
				continue
			}
		}
		out = append(out, d)
	}
	sort.Strings(out)
	return out, nil
}

// gwUnnamedQueueDirs lists the hashed queue directories whose name cannot
// be read (fsck), with the reason.
func (p *FSProvider) gwUnnamedQueueDirs() (map[string]error, error) {
	all, err := p.fs.ReadDirNames(filepath.Join(p.dir, "queues"))
	if err != nil {
		return nil, err
	}
	out := map[string]error{}
	for _, d := range all {
		if _, ok := gwQueueKind(d); !ok || !gwQueueHashed(d) {
			continue
		}
		if _, err := p.gwReadQueueName(d); err != nil {
			out[d] = err
		}
	}
	return out, nil
}

// gwEachQueue calls fn for every workflow queue directory that exists,
// workflow queues first, then activity queues, each sorted by name.
func (p *FSProvider) gwEachQueue(fn func(dir string, activity bool, q *fsqueue.Queue) error) error {
	for _, activity := range []bool{false, true} {
		dirs, err := p.gwQueueDirs(activity)
		if err != nil {
			return err
		}
		for _, dir := range dirs {
			q, err := p.gwQueue(dir)
			if err != nil {
				return err
			}
			if err := fn(dir, activity, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// gwClose closes the workflow queues (Close).
func (p *FSProvider) gwClose() error {
	p.gw.mu.Lock()
	defer p.gw.mu.Unlock()
	p.gw.closed = true
	var errs []error
	for _, q := range p.gw.queues {
		errs = append(errs, q.Close())
	}
	p.gw.queues = nil
	return errors.Join(errs...)
}

// Attributes of workflow queue messages (beside attrInstance, attrKey,
// attrExec and attrSource).
const (
	attrEventID  = "eid"
	attrType     = "type"
	attrSchedule = "seid"
	attrTimer    = "timer"
	attrWFQueue  = "wq"
)

// gwEventMessage builds the pending-event message of ev for an execution.
func (p *FSProvider) gwEventMessage(q *fsqueue.Queue, instance, execID string, ev WorkflowEvent, nowMs int64, source string) fsqueue.Message {
	attrs := map[string]string{
		attrInstance: instance, attrKey: instanceKey(instance), attrExec: execID,
		attrEventID: ev.ID, attrType: ev.Type, attrSchedule: fmt.Sprint(ev.ScheduleEventID), attrSource: source,
	}
	vis := nowMs
	if ev.VisibleAtMs > 0 {
		attrs[attrTimer] = "1"
		vis = ev.VisibleAtMs
	}
	// Named by Encode: the name carries vis and the route of attrKey.
	return fsqueue.Message{VisibleAtMs: vis, EnqueuedAtMs: nowMs, Attrs: attrs, Payload: ev.Data}
}

// eventOfMessage is the inverse of gwEventMessage.
func eventOfMessage(m fsqueue.Message) WorkflowEvent {
	ev := WorkflowEvent{ID: m.Attrs[attrEventID], Type: m.Attrs[attrType], Data: m.Payload}
	fmt.Sscan(m.Attrs[attrSchedule], &ev.ScheduleEventID)
	if m.Attrs[attrTimer] == "1" {
		ev.VisibleAtMs = m.VisibleAtMs
	}
	return ev
}

// stageRef encodes and stages m in queue dir, returning its log reference.
func (p *FSProvider) gwStage(dir string, m fsqueue.Message) (queueRef, error) {
	q, err := p.gwQueue(dir)
	if err != nil {
		return queueRef{}, err
	}
	data, err := q.Encode(&m)
	if err != nil {
		return queueRef{}, err
	}
	if err := q.StageData(m.Name, data); err != nil {
		_ = q.Unstage(m.Name)
		return queueRef{}, err
	}
	return queueRef{Queue: dir, Name: m.Name, Data: data}, nil
}

// gwUnstage removes the staged files of a commit that did not happen.
func (p *FSProvider) gwUnstage(refs []queueRef) {
	for _, r := range refs {
		if q, err := p.gwQueue(r.Queue); err == nil {
			_ = q.Unstage(r.Name)
		}
	}
}

// gwHistoryLine is the history payload of an executed event: duroxide's
// common event fields (so durofs history and the admin API read it as an
// event of an unknown type) and the event itself.
type gwHistoryLine struct {
	EventID         uint64          `json:"event_id"`
	SourceEventID   *uint64         `json:"source_event_id"`
	InstanceID      string          `json:"instance_id"`
	ExecutionID     uint64          `json:"execution_id"`
	TimestampMs     uint64          `json:"timestamp_ms"`
	DuroxideVersion string          `json:"duroxide_version"`
	Type            string          `json:"type"`
	Event           json.RawMessage `json:"event"`
}

func gwRecordID(seq int64) uint64 { return uint64(max(seq, 0)) }

func gwHistoryPayload(instance string, n uint64, ev WorkflowEvent) ([]byte, error) {
	if !json.Valid(ev.Data) {
		return nil, fmt.Errorf("event %s: data is not valid JSON", ev.ID)
	}
	return jsonMarshal(gwHistoryLine{
		EventID: gwRecordID(ev.SequenceID), InstanceID: instance, ExecutionID: n,
		TimestampMs: uint64(max(ev.TimestampMs, 0)), Type: "workflow." + ev.Type, Event: compactJSON(ev.Data),
	})
}

// gwReadHistory reads an execution's history: events with a sequence id
// after *after (all if nil). A history that lost committed events is an
// error (readCommittedHistory).
func (p *FSProvider) gwReadHistory(key string, n uint64, after *int64) ([]WorkflowEvent, error) {
	scan, err := p.readCommittedHistory(key, n)
	if errors.Is(err, history.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return nil, err
	}
	out := make([]WorkflowEvent, 0, len(scan.Records))
	for _, r := range scan.Records {
		var line gwHistoryLine
		if err := json.Unmarshal(r.Payload, &line); err != nil || len(line.Event) == 0 {
			return nil, fmt.Errorf("%w: history record %d of %s is not a workflow event", ErrCorrupt, r.ID, p.historyPath(key, n))
		}
		var head struct {
			ID  string `json:"id"`
			Seq int64  `json:"sid"`
		}
		_ = json.Unmarshal(line.Event, &head)
		if after != nil && head.Seq <= *after {
			continue
		}
		out = append(out, WorkflowEvent{ID: head.ID, Type: strings.TrimPrefix(line.Type, "workflow."), SequenceID: head.Seq,
			TimestampMs: int64(line.TimestampMs), Data: line.Event})
	}
	return out, nil
}

// gwKeys returns the instance keys a "gw" record marks.
func gwKeys(rec *commitRecord) []string {
	if rec.GW == nil {
		return nil
	}
	keys := make([]string, len(rec.GW.Parts))
	for i, pt := range rec.GW.Parts {
		keys[i] = pt.Key
	}
	return keys
}

// gwApply applies the part of a "gw" record that belongs to key, under its
// flock, unsynced and idempotently (see apply in fs_commit.go); with replay
// every byte is written again from the record.
func (p *FSProvider) gwApply(ctx context.Context, g *lease.Guard, key string, rec *commitRecord, replay bool) error {
	if rec.GW == nil {
		return fmt.Errorf("log record %s of kind %q has no workflow part", rec.CommitID, rec.Kind)
	}
	for i := range rec.GW.Parts {
		if pt := &rec.GW.Parts[i]; pt.Key == key {
			return p.gwApplyPart(ctx, g, rec.CommitID, pt, replay)
		}
	}
	return nil
}

func (p *FSProvider) gwApplyPart(ctx context.Context, g *lease.Guard, id string, pt *gwPart, replay bool) error {
	key := pt.Key
	afs := vfs.NoSync(p.fs)
	if len(pt.History) > 0 {
		if err := p.fs.MkdirAll(p.execDir(key, pt.Exec), vfs.DirPerm); err != nil {
			return fmt.Errorf("create execution dir: %w", err)
		}
		recs := make([]history.Record, len(pt.History))
		for i, raw := range pt.History {
			recs[i] = history.Record{ID: pt.HistoryIDs[i], Epoch: pt.Fence, Payload: raw}
		}
		h := history.Open(afs, p.historyPath(key, pt.Exec))
		var err error
		if replay {
			err = h.RewriteAt(pt.HistoryBase, recs)
			if errors.Is(err, history.ErrConflict) && !slices.Contains(pt.RemoveExecs, pt.Exec) {
				// The execution's history is shorter than this record's
				// base: only a later record's removal of the execution
				// can have done that (its removal reached the disk, the
				// checkpoint did not). That record is replayed next. The
				// file may also be that of a later execution of the same
				// number (the instance was removed, its directory
				// reclaimed, and the instance id created again): the
				// later removal takes it away before that execution's
				// records rewrite it.
				if _, serr := p.fs.Stat(p.historyPath(key, pt.Exec)); vfs.IsNotExist(serr) || removedLater(ctx, key, pt.Exec) {
					err = nil
				}
			}
		} else {
			err = appendHistory(h, pt.HistoryBase, pt.HistoryOffset, recs)
		}
		if err != nil {
			return fmt.Errorf("append history: %w", err)
		}
		failpoint.Hit("gwredo.after_history")
	}
	for _, s := range pt.States {
		if err := p.fs.MkdirAll(p.execDir(key, s.N), vfs.DirPerm); err != nil {
			return fmt.Errorf("create execution dir: %w", err)
		}
		if err := p.writeJSONApply(p.execStatePath(key, s.N), s.File); err != nil {
			return fmt.Errorf("write execution state: %w", err)
		}
	}
	for _, e := range pt.IDs {
		if err := p.fs.MkdirAll(p.gwIDDir(key), vfs.DirPerm); err != nil {
			return fmt.Errorf("create execution id index: %w", err)
		}
		if err := p.writeJSONApply(p.gwIDPath(key, e.ID), e); err != nil {
			return fmt.Errorf("write execution id entry: %w", err)
		}
	}
	failpoint.Hit("gwredo.after_states")
	if pt.ChildOf != nil {
		if err := p.addChild(*pt.ChildOf, key); err != nil {
			return err
		}
	}
	if pt.InstanceFile != nil {
		if err := p.fs.MkdirAll(p.instDir(key), vfs.DirPerm); err != nil {
			return fmt.Errorf("create instance dir: %w", err)
		}
		if err := p.writeJSONApply(p.instFilePath(key), pt.InstanceFile); err != nil {
			return fmt.Errorf("write instance: %w", err)
		}
	}
	if pt.DeleteInstanceFile {
		if err := p.fs.Remove(p.instFilePath(key)); err != nil && !vfs.IsNotExist(err) {
			return fmt.Errorf("remove instance file: %w", err)
		}
	}
	if pt.UnchildOf != nil {
		if err := p.removeChild(*pt.UnchildOf, key); err != nil {
			return err
		}
	}
	for _, id := range pt.RemoveIDs {
		if err := p.fs.Remove(p.gwIDPath(key, id)); err != nil && !vfs.IsNotExist(err) {
			return fmt.Errorf("remove execution id entry: %w", err)
		}
	}
	for _, n := range pt.RemoveExecs {
		if err := p.fs.RemoveAll(p.execDir(key, n)); err != nil {
			return fmt.Errorf("remove execution %d: %w", n, err)
		}
	}
	if pt.DeleteInstanceFile {
		if err := p.rmdirIfEmpty(p.gwIDDir(key)); err != nil {
			return fmt.Errorf("remove execution id index: %w", err)
		}
	}
	failpoint.Hit("gwredo.after_files")
	if err := p.gwPublish(pt.Publish, replay); err != nil {
		return err
	}
	if err := p.gwDelete(ctx, pt.Delete); err != nil {
		return err
	}
	failpoint.Hit("gwredo.before_release")
	if pt.DeleteInstanceFile {
		// The instance's last execution is gone: so is the instance
		// (fs_reclaim.go), unless later commits a replay queued wait.
		return p.gwReclaim(g, id, key)
	}
	return gwRelease(g, id, pt)
}

// gwReclaim is the last step of a part that removes the instance's last
// execution: the directory is reclaimed, lease first (which clears the
// mark); or, if a replay queued later commits of the instance behind this
// one, the lease keeps their marks only.
func (p *FSProvider) gwReclaim(g *lease.Guard, id, key string) error {
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return fmt.Errorf("read lease: %w", err)
	}
	if st := decodeOrchState(cur); advanceMark(&st, id) && st.Pending != nil {
		return g.Write(lease.Lease{Fence: cur.Fence, Data: orchState{Pending: st.Pending, Queued: st.Queued}.encode()})
	}
	return p.reclaimInstance(g, key)
}

// gwPublish publishes staged messages (a replay writes them from the record).
func (p *FSProvider) gwPublish(refs []queueRef, replay bool) error {
	for _, r := range refs {
		q, err := p.gwQueue(r.Queue)
		if err != nil {
			return err
		}
		if replay {
			err = q.Restore(r.Name, r.Data)
		} else {
			_, err = q.Publish(r.Name)
		}
		if err != nil {
			return fmt.Errorf("publish %s/%s: %w", r.Queue, r.Name, err)
		}
		failpoint.Hit("gwredo.after_publish")
	}
	return nil
}

// gwDelete deletes messages (an activity task under its own lock).
func (p *FSProvider) gwDelete(ctx context.Context, refs []queueRef) error {
	for _, r := range refs {
		if err := p.gwDeleteOne(ctx, r); err != nil {
			return fmt.Errorf("delete %s/%s: %w", r.Queue, r.Name, err)
		}
	}
	return nil
}

// gwDeleteOne deletes one message of a workflow queue, and an activity
// task's claim with it under the task's lock (a worker holding the
// task then fails to complete it). ENOENT means done.
func (p *FSProvider) gwDeleteOne(ctx context.Context, r queueRef) error {
	q, err := p.gwQueue(r.Queue)
	if err != nil {
		return err
	}
	if strings.HasPrefix(r.Queue, gwActivityPrefix) {
		return deleteClaimed(ctx, q, r.Name)
	}
	return q.Delete(r.Name)
}

// gwRelease is a part's last write: it clears the mark and, if the lease
// still holds the part's token, releases it (keeping the sticky owner).
func gwRelease(g *lease.Guard, id string, pt *gwPart) error {
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return fmt.Errorf("read lease: %w", err)
	}
	st := decodeOrchState(cur)
	changed := advanceMark(&st, id)
	if pt.LeaseToken != "" && cur.Token == pt.LeaseToken {
		st.Batch = nil
		for _, r := range pt.Delete {
			delete(st.Attempts, r.Name)
		}
		cur.Token, cur.Owner, cur.ExpiresAtMs = "", "", 0
		if pt.StickyUntilMs > 0 {
			cur.Owner, cur.ExpiresAtMs = pt.Sticky, pt.StickyUntilMs
		}
		changed = true
	}
	if !changed {
		return nil
	}
	cur.Data = st.encode()
	return g.Write(cur)
}

// gwTouched adds the files and directories a workflow record changes; false
// if rec is not one.
func (p *FSProvider) gwTouched(rec *commitRecord, files, dirs map[string]bool) bool {
	qdir := func(q string) string { return filepath.Join(p.dir, "queues", q) }
	refs := func(pub, del []queueRef) {
		for _, r := range pub {
			files[filepath.Join(qdir(r.Queue), r.Name+".json")] = true
			dirs[qdir(r.Queue)] = true
		}
		for _, r := range del {
			dirs[qdir(r.Queue)] = true
			dirs[filepath.Join(qdir(r.Queue), "claims")] = true
		}
	}
	switch rec.Kind {
	case kindGW:
		if rec.GW == nil {
			return true
		}
		for _, pt := range rec.GW.Parts {
			dirs[filepath.Join(p.dir, "instances")] = true
			dirs[p.instDir(pt.Key)] = true
			dirs[filepath.Join(p.instDir(pt.Key), "executions")] = true
			if len(pt.History) > 0 {
				files[p.historyPath(pt.Key, pt.Exec)] = true
				dirs[p.execDir(pt.Key, pt.Exec)] = true
			}
			for _, s := range pt.States {
				files[p.execStatePath(pt.Key, s.N)] = true
				dirs[p.execDir(pt.Key, s.N)] = true
			}
			for _, e := range pt.IDs {
				files[p.gwIDPath(pt.Key, e.ID)] = true
			}
			if len(pt.IDs) > 0 || len(pt.RemoveIDs) > 0 {
				dirs[p.gwIDDir(pt.Key)] = true
			}
			if pt.InstanceFile != nil {
				files[p.instFilePath(pt.Key)] = true
			}
			for _, parent := range []*string{pt.ChildOf, pt.UnchildOf} {
				if parent != nil {
					dirs[filepath.Join(p.dir, "children")] = true
					dirs[p.childrenDir(*parent)] = true
				}
			}
			if pt.ChildOf != nil {
				files[filepath.Join(p.childrenDir(*pt.ChildOf), pt.Key)] = true
			}
			refs(pt.Publish, pt.Delete)
		}
		return true
	case kindGWAct:
		refs(rec.Publish, rec.Delete)
		return true
	}
	return false
}
