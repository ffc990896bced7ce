package provider

// Read-only inspection helpers for operators (the durofs CLI). They read the
// files of a live directory without taking any lock where the file in
// question is only ever replaced atomically (instance.json, state.json,
// lease files, claims, commit records) or is immutable (queue messages), so
// every read sees one complete version that may be stale by the time it
// returns. Nothing here decides a change.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
	"github.com/durofs/durofs/wal"
)

// ErrNotDurofsDir is returned by OpenReadOnly and Fsck for a directory that
// has no durofs FORMAT file, and by Open for one that has none but is not
// empty either.
var ErrNotDurofsDir = errors.New("not a durofs directory")

// OpenReadOnly opens an existing durofs directory for inspection. Unlike
// Open it runs no recovery (a pending commit stays visible), starts no
// background sweep and creates no directory, FORMAT or queue configuration
// file (it fails if one is missing); it fails with
// ErrNotDurofsDir if dir has no FORMAT file and with ErrUnsupportedFS if the
// format version is not this build's. The returned provider's read methods
// (Admin listings, Read, and the inspection methods of this file) work
// normally; its write methods must not be called.
func OpenReadOnly(dir string, opts Options) (*FSProvider, error) {
	return openUnrecovered(dir, opts)
}

// openUnrecovered builds a provider on an existing directory without
// recovery and without a sweeper (OpenReadOnly and Fsck).
func openUnrecovered(dir string, opts Options) (*FSProvider, error) {
	if err := opts.checkModes(); err != nil {
		return nil, fmt.Errorf("durofs: open %s: %w", dir, err)
	}
	base := baseFS(dir, opts)
	if _, err := readFormat(base, dir); err != nil {
		return nil, err
	}
	for _, q := range []string{"orchestrator", "worker"} {
		// fsqueue.Open would create a missing configuration: refuse instead.
		cfg := filepath.Join(dir, "queues", q, "fsqueue.json")
		if _, err := base.Stat(cfg); err != nil {
			return nil, fmt.Errorf("durofs: open %s: queue configuration %s: %w", dir, cfg, err)
		}
	}
	p := newFSProvider(dir, opts, "inspect")
	l, err := wal.OpenReadOnly(base, filepath.Join(dir, "wal"), wal.Options{SegmentSize: opts.SegmentSize, Logger: p.log, BootID: bootID(opts)})
	if err != nil {
		return nil, fmt.Errorf("durofs: open %s: %w", dir, err)
	}
	p.wal = l
	if err := p.openQueues(); err != nil {
		return nil, err
	}
	return p, nil
}

// readFormat reads and checks <dir>/FORMAT.
func readFormat(fsys vfs.FS, dir string) (formatFile, error) {
	path := filepath.Join(dir, "FORMAT")
	data, err := fsys.ReadFile(path)
	if vfs.IsNotExist(err) {
		return formatFile{}, fmt.Errorf("durofs: %s: %w (no FORMAT file)", dir, ErrNotDurofsDir)
	}
	if err != nil {
		return formatFile{}, fmt.Errorf("durofs: read %s: %w", path, err)
	}
	if err := checkFormat(data, path); err != nil {
		return formatFile{}, fmt.Errorf("durofs: %s: %w", dir, err)
	}
	var f formatFile
	_ = jsonUnmarshal(data, &f)
	return f, nil
}

// InstanceSummary is one instance as listed by Instances: the summary kept
// in its instance.json.
type InstanceSummary struct {
	// Instance is the instance id; Key is its directory name.
	Instance string `json:"instance"`
	Key      string `json:"key"`
	// Name and Version come from the instance record ("" without one).
	Name    string `json:"name"`
	Version string `json:"version"`
	// HasRecord is false for an instance whose acks never carried a name
	// and version (Admin does not list those).
	HasRecord bool `json:"has_record"`
	// Status is the current execution's status.
	Status           string  `json:"status"`
	CurrentExecution uint64  `json:"current_execution"`
	Executions       int     `json:"executions"`
	TotalEvents      uint64  `json:"total_events"`
	Parent           *string `json:"parent,omitempty"`
	// Times are milliseconds since the Unix epoch (0: unknown).
	CreatedAtMs   int64  `json:"created_at_ms"`
	UpdatedAtMs   int64  `json:"updated_at_ms"`
	CompletedAtMs *int64 `json:"completed_at_ms,omitempty"`
}

// StatusPending is the status Instances gives an instance that was started
// (its StartOrchestration is queued) but has no turn acked yet, so no
// instance.json. It is not a duroxide status: Admin does not list such
// instances.
const StatusPending = "Pending"

// Instances lists every instance that has an instance.json, and every
// pending one (StatusPending: a queued start, nothing acked yet), newest
// first; optionally only those whose current status is status ("" for
// all). Unreadable instance files are skipped with a logged warning.
func (p *FSProvider) Instances(ctx context.Context, status string) ([]InstanceSummary, error) {
	all, err := p.scanInstances()
	if err != nil {
		return nil, fmt.Errorf("durofs: list instances in %s: %w", p.dir, err)
	}
	out := make([]InstanceSummary, 0, len(all))
	for _, s := range all {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := s.f
		if status != "" && f.Status != status {
			continue
		}
		out = append(out, summaryOf(s.key, f))
	}
	if status == "" || status == StatusPending {
		pending, err := p.pendingStarts()
		if err != nil {
			return nil, fmt.Errorf("durofs: list instances in %s: %w", p.dir, err)
		}
		out = append(out, pending...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].CreatedAtMs != out[j].CreatedAtMs {
			return out[i].CreatedAtMs > out[j].CreatedAtMs
		}
		return out[i].Instance < out[j].Instance
	})
	return out, nil
}

// pendingStarts returns the instances that have a queued StartOrchestration
// and no instance.json, from their oldest queued start (its enqueue time is
// their creation time).
func (p *FSProvider) pendingStarts() ([]InstanceSummary, error) {
	seen := map[string]bool{}
	var out []InstanceSummary
	err := eachQueued(p.orchQ, func(h queued) error { // oldest first
		key := h.Attrs[attrKey]
		if h.Attrs[attrKind] != (StartOrchestration{}).Kind() || seen[key] {
			return nil
		}
		seen[key] = true
		if _, err := p.fs.Stat(p.instFilePath(key)); err == nil {
			return nil // acked: listed from its instance.json
		} else if !vfs.IsNotExist(err) {
			return err
		}
		m, err := p.orchQ.Get(h.Name)
		if errors.Is(err, fsqueue.ErrNotFound) {
			return nil // consumed meanwhile
		}
		s := InstanceSummary{Instance: h.Attrs[attrInstance], Key: key, Status: StatusPending,
			CreatedAtMs: h.EnqueuedAtMs, UpdatedAtMs: h.EnqueuedAtMs}
		if w, werr := UnmarshalWorkItem(m.Payload); err == nil && werr == nil {
			if so, ok := w.(StartOrchestration); ok {
				s.Name, s.Version, s.Parent = so.Orchestration, derefOr(so.Version, ""), so.ParentInstance
			}
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

func summaryOf(key string, f *instanceFile) InstanceSummary {
	s := InstanceSummary{
		Instance: f.Instance, Key: key, Status: f.Status, CurrentExecution: f.CurrentExecutionID,
		Executions: int(f.Executions.Len()), TotalEvents: f.TotalEvents, UpdatedAtMs: f.UpdatedAtMs,
		CompletedAtMs: f.CompletedAtMs,
	}
	if r := f.Record; r != nil {
		s.HasRecord = true
		s.Name, s.Version = r.OrchestrationName, derefOr(r.OrchestrationVersion, "")
		s.Parent = r.ParentInstanceID
		s.CreatedAtMs = r.CreatedAtMs
	}
	return s
}

// ExecutionDetail is one execution of an instance: its state.json and what
// its history file actually holds.
type ExecutionDetail struct {
	ExecutionID uint64 `json:"execution_id"`
	// HasState is false when the execution directory has no state.json
	// (history appended without an ack); the state fields are then empty.
	HasState      bool    `json:"has_state"`
	Status        string  `json:"status"`
	Output        *string `json:"output,omitempty"`
	Pinned        *string `json:"pinned_duroxide_version,omitempty"`
	StartedAtMs   int64   `json:"started_at_ms"`
	CompletedAtMs *int64  `json:"completed_at_ms,omitempty"`
	// EventCount is state.json's counter; HistoryRecords the valid records
	// actually in history.jsonl.
	EventCount     uint64 `json:"event_count"`
	HistoryRecords int    `json:"history_records"`
	// TornBytes is the length of a torn tail (0 normally).
	TornBytes int64 `json:"torn_bytes,omitempty"`
	// Problem describes an unreadable state.json, a corrupt history, or a
	// history missing committed events (fewer records than EventCount).
	Problem string `json:"problem,omitempty"`
}

// PendingCommitInfo describes a write-ahead log record whose commit point
// passed but whose apply has not finished: a lease or claim still marks it
// (normally seen only for an instant, or after a crash until the next
// recovery).
type PendingCommitInfo struct {
	// LSN is the record's position in the log ("segment:offset"); ID its
	// commit id; Key the instance key (or work item) whose mark names it.
	LSN string `json:"lsn"`
	ID  string `json:"id"`
	Key string `json:"key"`
	// Kind is "ack" (also appends), "prune", "delete", "work_ack", or for
	// go-workflows "gw" (Op says which operation) or "gw_act" (an activity
	// task's completion).
	Kind          string `json:"kind"`
	Op            string `json:"op,omitempty"`
	Instance      string `json:"instance,omitempty"`
	ExecutionID   uint64 `json:"execution_id,omitempty"`
	Fence         uint64 `json:"fence,omitempty"`
	CommittedAtMs int64  `json:"committed_at_ms,omitempty"`
	Events        int    `json:"events"`
	Publish       int    `json:"publish"`
	Delete        int    `json:"delete"`
	// Keys are the instances of a deletion or of a "gw" record.
	Keys []string `json:"keys,omitempty"`
}

// QueuedMessage is a message header of a queue: its queue ("orchestrator"
// or "worker"), name, work item kind, target instance and times (ms since
// the Unix epoch).
type QueuedMessage struct {
	Queue        string `json:"queue"`
	Name         string `json:"name"`
	Kind         string `json:"kind"`
	Instance     string `json:"instance"`
	VisibleAtMs  int64  `json:"visible_at_ms"`
	EnqueuedAtMs int64  `json:"enqueued_at_ms"`
}

// InstanceDetail is everything known about one instance (durofs show).
type InstanceDetail struct {
	// InstanceSummary holds the instance.json summary (zero but Instance
	// and Key without one).
	InstanceSummary
	// Dir is the instance's directory.
	Dir string `json:"dir"`
	// HasInstanceFile is false for an instance that has a directory (a
	// lease, messages, history appended without an ack) but no instance.json.
	HasInstanceFile bool `json:"has_instance_file"`
	// LastFence is the fence of the last committed turn.
	LastFence uint64 `json:"last_fence"`
	// CustomStatus and CustomStatusVersion are the instance record's
	// custom status (GetCustomStatus).
	CustomStatus        *string `json:"custom_status,omitempty"`
	CustomStatusVersion uint64  `json:"custom_status_version"`
	// Children are the instances whose record names this one as parent.
	Children         []string          `json:"children"`
	ExecutionDetails []ExecutionDetail `json:"execution_details"`
	// Lease is the instance lease (nil: no lease file).
	Lease *LeaseInfo `json:"lease,omitempty"`
	// PendingCommit is the instance's commit record, if one is pending.
	PendingCommit *PendingCommitInfo `json:"pending_commit,omitempty"`
	// Messages are the queued orchestrator messages and worker items of
	// the instance, and its go-workflows pending events and activity tasks.
	Messages []QueuedMessage `json:"messages"`
	// Workflow are the go-workflows executions of the instance (from
	// instance.json; nil for an orchestration instance).
	Workflow []WorkflowExecutionSummary `json:"workflow_executions,omitempty"`
	// Problem says why instance.json could not be read (the other fields
	// are still filled in).
	Problem string `json:"problem,omitempty"`
}

// InstanceDetail returns the instance's metadata, executions, lease, pending
// commit and queued messages (a started instance no turn was acked for yet
// has only its queued start). An instance with none of these (never
// started, or deleted: a deletion leaves the lock file and a released lease)
// is a *ProviderError wrapping ErrNotFound.
func (p *FSProvider) InstanceDetail(ctx context.Context, instance string) (InstanceDetail, error) {
	const op = "instance_detail"
	key := instanceKey(instance)
	d := InstanceDetail{InstanceSummary: InstanceSummary{Instance: instance, Key: key}, Dir: p.instDir(key),
		Children: []string{}, ExecutionDetails: []ExecutionDetail{}, Messages: []QueuedMessage{}}
	hasDir, err := p.instDirExists(key)
	if err != nil {
		return d, Retryablef(op, err, "stat %s: %v", d.Dir, err)
	}
	f, err := p.readInstanceFile(key)
	switch {
	case errors.Is(err, ErrCorrupt):
		d.Problem = err.Error()
	case err != nil:
		return d, Retryablef(op, err, "%v", err)
	}
	if f != nil {
		d.HasInstanceFile = true
		d.InstanceSummary = summaryOf(key, f)
		d.LastFence = f.LastFence
		if f.Record != nil {
			d.CustomStatus, d.CustomStatusVersion = f.Record.CustomStatus, f.Record.CustomStatusVersion
		}
	}
	d.Instance, d.Key = instance, key
	ids, err := p.listExecutions(key)
	if err != nil {
		return d, Retryablef(op, err, "list executions of %s: %v", instance, err)
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return d, err
		}
		d.ExecutionDetails = append(d.ExecutionDetails, p.executionDetail(key, id))
	}
	kids, err := p.childrenOf(instance)
	if err != nil {
		return d, Retryablef(op, err, "%v", err)
	}
	for _, c := range kids {
		d.Children = append(d.Children, c.f.Instance)
	}
	if hasDir { // (no lock file to inspect otherwise: looking would create it)
		if li, ok := p.instanceLease(ctx, key, instance); ok {
			d.Lease = &li
		}
		if cur, _, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key)); err == nil {
			if st := decodeOrchState(cur); st.Pending != nil {
				if lr, err := p.findRecord(key, st.Pending); err == nil && lr != nil {
					pc := pendingInfo(*lr, key)
					d.PendingCommit = &pc
				}
			}
		}
	}
	for _, q := range []struct {
		name string
		q    *fsqueue.Queue
	}{{"orchestrator", p.orchQ}, {"worker", p.workQ}} {
		msgs, err := queuedFor(q.q, key)
		if err != nil {
			return d, Retryablef(op, err, "list %s queue: %v", q.name, err)
		}
		for _, m := range msgs {
			d.Messages = append(d.Messages, queuedMessage(q.name, m))
		}
	}
	gw, err := p.gwInstanceMessages(key)
	if err != nil {
		return d, Retryablef(op, err, "list go-workflows queues: %v", err)
	}
	d.Messages = append(d.Messages, gw...)
	if d.Workflow, err = p.gwExecutionSummaries(key); err != nil {
		d.Problem = strings.TrimPrefix(d.Problem+"; "+err.Error(), "; ")
	}
	if !d.HasInstanceFile && d.Problem == "" && len(d.ExecutionDetails) == 0 && len(d.Messages) == 0 && d.Workflow == nil &&
		d.PendingCommit == nil && (d.Lease == nil || d.Lease.State == LeaseFree) {
		// No directory and no message, or what a deletion leaves (the lock
		// file, a released lease).
		return d, Permanentf(op, ErrNotFound, "Instance %s not found", instance)
	}
	return d, nil
}

func queuedMessage(queue string, m queued) QueuedMessage {
	kind := m.Attrs[attrKind]
	if kind == "" && queue == "worker" {
		kind = "ActivityExecute"
	}
	return QueuedMessage{Queue: queue, Name: m.Name, Kind: kind, Instance: m.Attrs[attrInstance], VisibleAtMs: m.VisibleAtMs, EnqueuedAtMs: m.EnqueuedAtMs}
}

// executionDetail reads one execution's state.json and history.
func (p *FSProvider) executionDetail(key string, id uint64) ExecutionDetail {
	ed := ExecutionDetail{ExecutionID: id}
	var problems []string
	ef, err := p.readExecutionFile(key, id)
	switch {
	case err != nil:
		problems = append(problems, err.Error())
	case ef != nil:
		ed.HasState = true
		ed.Status, ed.Output, ed.Pinned = ef.Status, ef.Output, ef.Pinned
		ed.StartedAtMs, ed.CompletedAtMs, ed.EventCount = ef.StartedAtMs, ef.CompletedAtMs, ef.EventCount
	}
	scan, err := history.Open(p.fs, p.historyPath(key, id)).Read()
	ed.HistoryRecords, ed.TornBytes = len(scan.Records), scan.TornBytes
	if err != nil {
		problems = append(problems, err.Error())
	} else if m := missingCommitted(p.historyPath(key, id), len(scan.Records), ef); m != "" {
		problems = append(problems, m)
	}
	ed.Problem = strings.Join(problems, "; ")
	return ed
}

// missingCommitted describes a history at path holding records records
// while its state.json, ef (read before the history), counts more as
// committed: committed events are missing, and the history is not the
// whole execution (design.md §6, invariant 3). "" if none is missing.
func missingCommitted(path string, records int, ef *executionFile) string {
	if ef == nil || uint64(records) >= ef.EventCount {
		return ""
	}
	return fmt.Sprintf("%s holds %d record(s) but %d were committed (state.json event_count): committed events are missing; durofs fsck tells whether the write-ahead log still holds them (fsck --repair then restores them) or they are lost (history_loss)",
		path, records, ef.EventCount)
}

// pendingInfo describes a logged record for PendingCommits.
func pendingInfo(lr loggedRecord, key string) PendingCommitInfo {
	rec := lr.rec
	pc := PendingCommitInfo{LSN: lr.lsn.String(), ID: rec.CommitID, Key: key, Kind: rec.Kind,
		Instance: rec.Instance, ExecutionID: rec.ExecutionID, Fence: rec.Fence, CommittedAtMs: rec.CommittedMs,
		Events: len(rec.History), Publish: len(rec.Publish), Delete: len(rec.Delete)}
	switch rec.Kind {
	case "":
		pc.Kind = "ack"
	case kindPrune:
		pc.Events = len(rec.PruneExecutions)
	case kindDelete:
		for _, m := range rec.Members {
			pc.Keys = append(pc.Keys, m.Key)
			pc.Delete += len(m.Delete)
		}
	case kindGW, kindGWAct:
		gwPendingInfo(&pc, rec, key)
	}
	return pc
}

// PendingCommits lists the records of the write-ahead log (since its last
// checkpoint) that a lease or claim still marks pending: committed, not yet
// (fully) applied. Read without locks: a commit being applied right now may
// be listed.
func (p *FSProvider) PendingCommits(ctx context.Context) ([]PendingCommitInfo, error) {
	recs, _, _, err := p.scanLog()
	if err != nil {
		return nil, fmt.Errorf("durofs: read the write-ahead log: %w", err)
	}
	var out []PendingCommitInfo
	for _, lr := range recs {
		if lr.rec.Kind == kindWorkAck || lr.rec.Kind == kindGWAct {
			q := p.workQ
			if lr.rec.Kind == kindGWAct {
				if q = p.gwActQueueOf(lr.rec); q == nil {
					continue
				}
			}
			if c, ok, err := q.PeekClaim(lr.rec.Item); err == nil && ok && workMark(c) == lr.rec.CommitID {
				out = append(out, pendingInfo(lr, lr.rec.Item))
			}
			continue
		}
		for _, k := range keysOf(lr.rec) {
			cur, _, err := p.leases.Inspect(ctx, p.lockPath(k), p.leasePath(k))
			if err == nil && marks(decodeOrchState(cur), lr.rec.CommitID) {
				out = append(out, pendingInfo(lr, k))
				break
			}
		}
	}
	return out, nil
}

// Lease kinds of LeaseInfo.
const (
	LeaseKindInstance = "instance"
	LeaseKindWorkItem = "work-item"
	LeaseKindSession  = "session"
)

// Lease states of LeaseInfo.
const (
	LeaseHeld    = "held"    // a holder and an expiry in the future
	LeaseExpired = "expired" // a holder whose expiry passed: free for the next taker
	LeaseFree    = "free"    // released
	LeaseAcked   = "acked"   // a work item's claim in state acked: a pending work ack
	LeaseCorrupt = "corrupt" // the file cannot be parsed
)

// LeaseInfo is one lease-like file: an instance lease (lease.json), a
// worker item's claim, or a session row.
type LeaseInfo struct {
	// Kind is LeaseKindInstance, LeaseKindWorkItem or LeaseKindSession.
	Kind string `json:"kind"`
	// Resource is the instance id, the work item's message name, or the
	// session id. Instance is the instance a work item belongs to.
	Resource string `json:"resource"`
	Instance string `json:"instance,omitempty"`
	Path     string `json:"path"`
	// State is one of the Lease* states.
	State string `json:"state"`
	// Owner names the holder ("pid@host/id" for a durofs process; a
	// session's worker owner id).
	Owner string `json:"owner,omitempty"`
	// Fence is the lease epoch (instances, sessions); Attempt counts a work
	// item's deliveries.
	Fence   uint64 `json:"fence,omitempty"`
	Attempt uint32 `json:"attempt,omitempty"`
	// Batch counts the orchestrator messages locked by an instance lease.
	Batch        int   `json:"batch,omitempty"`
	AcquiredAtMs int64 `json:"acquired_at_ms,omitempty"`
	ExpiresAtMs  int64 `json:"expires_at_ms,omitempty"`
	// Problem says why a corrupt file cannot be parsed.
	Problem string `json:"problem,omitempty"`
}

func leaseState(l lease.Lease, nowMs int64) string {
	switch {
	case l.Token == "":
		return LeaseFree
	case l.HeldAt(nowMs):
		return LeaseHeld
	default:
		return LeaseExpired
	}
}

// instanceLease reads an instance's lease.json (ok false: none).
func (p *FSProvider) instanceLease(ctx context.Context, key, instance string) (LeaseInfo, bool) {
	li := LeaseInfo{Kind: LeaseKindInstance, Resource: instance, Path: p.leasePath(key)}
	l, exists, err := p.leases.Inspect(ctx, p.lockPath(key), li.Path)
	if err != nil {
		if !exists && !errors.Is(err, lease.ErrCorrupt) {
			return li, false
		}
		li.State, li.Problem = LeaseCorrupt, err.Error()
		return li, true
	}
	if !exists {
		return li, false
	}
	li.State = leaseState(l, p.nowMs())
	li.Owner, li.Fence, li.AcquiredAtMs, li.ExpiresAtMs = l.Owner, l.Fence, l.AcquiredAtMs, l.ExpiresAtMs
	li.Batch = len(decodeOrchState(l).Batch)
	return li, true
}

// instanceIDOf names the instance of a key without reading instance.json:
// the decoded key, or the key itself for a hashed (undecodable) one.
func instanceIDOf(key string) string {
	if id, err := decodeKey(key); err == nil {
		return id
	}
	return key
}

// Leases lists every instance lease, work-item claim and session row, in
// that order. Free instance leases are included (State LeaseFree); callers
// filter.
func (p *FSProvider) Leases(ctx context.Context) ([]LeaseInfo, error) {
	var out []LeaseInfo
	keys, err := p.fs.ReadDirNames(filepath.Join(p.dir, "instances"))
	if err != nil {
		return nil, fmt.Errorf("durofs: list instances in %s: %w", p.dir, err)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if vfs.IsTemp(k) {
			continue
		}
		if li, ok := p.instanceLease(ctx, k, instanceIDOf(k)); ok {
			out = append(out, li)
		}
	}
	nowMs := p.nowMs()
	claims, err := p.workQ.Claims()
	if err != nil {
		return nil, fmt.Errorf("durofs: %w", err)
	}
	for _, n := range claims {
		li := LeaseInfo{Kind: LeaseKindWorkItem, Resource: n, Path: filepath.Join(p.workQ.Dir(), "claims", n+".json")}
		data, err := p.fs.ReadFile(li.Path)
		if vfs.IsNotExist(err) {
			continue
		}
		if m, gerr := p.workQ.Get(n); gerr == nil {
			li.Instance = m.Attrs[attrInstance]
		}
		var c fsqueue.Claim
		if err == nil {
			err = json.Unmarshal(data, &c)
		}
		if err != nil {
			li.State, li.Problem = LeaseCorrupt, fmt.Sprintf("%s: %v", li.Path, err)
			out = append(out, li)
			continue
		}
		li.Owner, li.Attempt, li.ExpiresAtMs = c.Owner, c.Attempt, c.LockedUntilMs
		switch {
		case c.State != "":
			li.State = LeaseAcked
		case c.Token == "":
			li.State = LeaseFree
		case c.LockedUntilMs > nowMs:
			li.State = LeaseHeld
		default:
			li.State = LeaseExpired
		}
		out = append(out, li)
	}
	sdir := filepath.Join(p.dir, "sessions")
	snames, err := p.fs.ReadDirNames(sdir)
	if err != nil && !vfs.IsNotExist(err) {
		return nil, fmt.Errorf("durofs: list %s: %w", sdir, err)
	}
	sort.Strings(snames)
	for _, n := range snames {
		k, ok := strings.CutSuffix(n, ".json")
		if !ok || vfs.IsTemp(n) {
			continue
		}
		li := LeaseInfo{Kind: LeaseKindSession, Resource: instanceIDOf(k), Path: filepath.Join(sdir, n)}
		l, exists, err := p.leases.Inspect(ctx, filepath.Join(sdir, k+".lock"), li.Path)
		if err != nil && errors.Is(err, lease.ErrCorrupt) {
			li.State, li.Problem = LeaseCorrupt, err.Error()
			out = append(out, li)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("durofs: %w", err)
		}
		if !exists {
			continue
		}
		var sd sessionData
		if json.Unmarshal(l.Data, &sd) == nil && sd.SessionID != "" {
			li.Resource = sd.SessionID
		}
		li.State = leaseState(l, nowMs)
		li.Owner, li.Fence, li.AcquiredAtMs, li.ExpiresAtMs = l.Owner, l.Fence, l.AcquiredAtMs, l.ExpiresAtMs
		out = append(out, li)
	}
	return out, nil
}

// QueueStat describes one queue at one instant.
type QueueStat struct {
	// Queue is "orchestrator", "worker", or the directory name of a
	// go-workflows queue ("gw-workflow-<q>", "gw-activity-<q>").
	Queue string `json:"queue"`
	// Name is a go-workflows queue's name (empty for the orchestrator and
	// worker queues): the directory of a queue whose name encodes to more
	// than 180 bytes is named by its hash, "gw-workflow-~<sha256>".
	Name string `json:"name,omitempty"`
	// Messages counts published message files.
	Messages int `json:"messages"`
	// Ready counts messages that are visible and not locked.
	Ready int `json:"ready"`
	// Locked counts messages in the batch of a live instance lease
	// (orchestrator, gw-workflow-*) or under a live claim (worker,
	// gw-activity-*).
	Locked int `json:"locked"`
	// Delayed counts messages not yet visible (timers included).
	Delayed int `json:"delayed"`
	// Timers counts timers not yet due (TimerFired messages, go-workflows
	// future events); NextTimerAtMs is the
	// earliest one's due time (0: none).
	Timers        int   `json:"timers"`
	NextTimerAtMs int64 `json:"next_timer_at_ms,omitempty"`
	// OldestReadyEnqueuedAtMs is the enqueue time of the oldest ready
	// message (0: none).
	OldestReadyEnqueuedAtMs int64 `json:"oldest_ready_enqueued_at_ms,omitempty"`
	// Staged counts staged (written, unpublished) messages.
	Staged int `json:"staged"`
	// Claims counts claim files; Acked those of acked work items (or
	// completed activity tasks) whose cleanup is pending.
	Claims int `json:"claims"`
	Acked  int `json:"acked"`
	// Kinds counts messages per work item kind.
	Kinds map[string]int `json:"kinds"`
}

// QueueStats describes both queues, and the go-workflows queues.
type QueueStats struct {
	// AtMs is when the snapshot was taken (ms since the Unix epoch).
	AtMs         int64     `json:"at_ms"`
	Orchestrator QueueStat `json:"orchestrator"`
	Worker       QueueStat `json:"worker"`
	// Workflow are the go-workflows queues (queues/gw-*, fs_gw.go), by
	// directory name: "gw-workflow-<q>" holds the pending events of the
	// executions of workflow queue q (Locked: in the batch of a live
	// workflow task; Timers: future events), "gw-activity-<q>" the activity
	// tasks of queue q (Locked: under a live claim; Acked: a completion
	// committed and not yet applied). Kinds count event types, and
	// "ActivityTask".
	Workflow []QueueStat `json:"workflow,omitempty"`
}

// QueueStats counts the messages of both queues and of the go-workflows
// queues by state: ready, locked, delayed (with timers separately), staged,
// and claims.
func (p *FSProvider) QueueStats(ctx context.Context) (QueueStats, error) {
	nowMs := p.nowMs()
	st := QueueStats{AtMs: nowMs,
		Orchestrator: QueueStat{Queue: "orchestrator", Kinds: map[string]int{}},
		Worker:       QueueStat{Queue: "worker", Kinds: map[string]int{}}}
	err := p.leasedQueueStat(ctx, p.orchQ, &st.Orchestrator, nowMs,
		func(attrs map[string]string) string { return attrs[attrKind] },
		func(attrs map[string]string) bool { return attrs[attrKind] == "TimerFired" })
	if err != nil {
		return st, err
	}
	if err := p.claimedQueueStat(p.workQ, &st.Worker, nowMs, "ActivityExecute"); err != nil {
		return st, err
	}
	st.Workflow, err = p.gwQueueStats(ctx, nowMs)
	return st, err
}

// leasedQueueStat counts the messages of a queue whose messages an instance
// lease locks (in its batch): the orchestrator queue, a go-workflows
// workflow queue. It reads every message's header.
func (p *FSProvider) leasedQueueStat(ctx context.Context, q *fsqueue.Queue, o *QueueStat, nowMs int64, kindOf func(map[string]string) string, isTimer func(map[string]string) bool) error {
	states := map[string]orchState{} // key → queue state of a live lease (nil batch: none)
	err := eachQueued(q, func(e queued) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		key := e.Attrs[attrKey]
		ost, seen := states[key]
		if !seen {
			if l, ok, err := p.leases.Inspect(ctx, p.lockPath(key), p.leasePath(key)); err == nil && ok {
				ost = decodeOrchState(l)
				if !l.HeldAt(nowMs) {
					ost.Batch = nil
				}
			}
			states[key] = ost
		}
		o.Messages++
		o.Kinds[kindOf(e.Attrs)]++
		vis := max(e.VisibleAtMs, ost.Delayed[e.Name])
		switch {
		case slices.Contains(ost.Batch, e.Name):
			o.Locked++
		case vis > nowMs:
			o.Delayed++
			if isTimer(e.Attrs) {
				o.Timers++
				if o.NextTimerAtMs == 0 || vis < o.NextTimerAtMs {
					o.NextTimerAtMs = vis
				}
			}
		default:
			o.Ready++
			if o.OldestReadyEnqueuedAtMs == 0 || e.EnqueuedAtMs < o.OldestReadyEnqueuedAtMs {
				o.OldestReadyEnqueuedAtMs = e.EnqueuedAtMs
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("durofs: list %s queue: %w", o.Queue, err)
	}
	staged, err := q.Staged()
	if err != nil {
		return fmt.Errorf("durofs: %w", err)
	}
	o.Staged = len(staged)
	return nil
}

// claimedQueueStat counts the messages of a queue whose messages claims
// lock (peek-lock): the worker queue, a go-workflows activity queue. Every
// message is of kind kind.
func (p *FSProvider) claimedQueueStat(q *fsqueue.Queue, w *QueueStat, nowMs int64, kind string) error {
	claims := map[string]fsqueue.Claim{}
	names, err := q.Claims()
	if err != nil {
		return fmt.Errorf("durofs: %w", err)
	}
	for _, n := range names {
		// PeekClaim: a claim removed (and maybe recycled) while read counts
		// as none, a damaged one is skipped.
		c, exists, err := q.PeekClaim(n)
		if err != nil || !exists {
			continue
		}
		claims[n] = c
		w.Claims++
		if c.State != "" {
			w.Acked++
		}
	}
	err = eachQueued(q, func(e queued) error {
		w.Messages++
		w.Kinds[kind]++
		c, hasClaim := claims[e.Name]
		vis := e.VisibleAtMs
		if hasClaim && c.VisibleAtMs != 0 {
			vis = c.VisibleAtMs
		}
		switch {
		case hasClaim && (c.State != "" || (c.Token != "" && c.LockedUntilMs > nowMs)):
			w.Locked++
		case vis > nowMs:
			w.Delayed++
		default:
			w.Ready++
			if w.OldestReadyEnqueuedAtMs == 0 || e.EnqueuedAtMs < w.OldestReadyEnqueuedAtMs {
				w.OldestReadyEnqueuedAtMs = e.EnqueuedAtMs
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("durofs: list %s queue: %w", w.Queue, err)
	}
	staged, err := q.Staged()
	if err != nil {
		return fmt.Errorf("durofs: %w", err)
	}
	w.Staged = len(staged)
	return nil
}

// HistoryRecord is one record of a history file.
type HistoryRecord struct {
	EventID uint64 `json:"event_id"`
	// Fence is the fence of the turn that wrote the record.
	Fence uint64 `json:"fence"`
	// Raw is the event JSON exactly as stored.
	Raw json.RawMessage `json:"raw"`
	// Event is the decoded event (nil if Raw does not decode; see
	// DecodeError).
	Event       *Event `json:"-"`
	DecodeError string `json:"decode_error,omitempty"`
}

// HistoryDump is the content of one execution's history file.
type HistoryDump struct {
	Instance    string          `json:"instance"`
	ExecutionID uint64          `json:"execution_id"`
	Path        string          `json:"path"`
	Records     []HistoryRecord `json:"records"`
	// TornBytes is the length of a torn tail after the records.
	TornBytes int64 `json:"torn_bytes,omitempty"`
	// Corrupt describes a line that fails its CRC or the record format;
	// the records after it are not read.
	Corrupt string `json:"corrupt,omitempty"`
	// Missing says, if the history holds fewer records than its
	// state.json counts as committed, that committed events are missing
	// (durofs fsck: history_loss, or restorable from the write-ahead log):
	// the records are not the whole execution.
	Missing string `json:"missing,omitempty"`
}

// HistoryRecords reads one execution's history file record by record
// (executionID 0: the latest execution), without failing on undecodable
// events or a corrupt line: those are reported in the result. An execution
// with no directory is a *ProviderError wrapping ErrNotFound.
func (p *FSProvider) HistoryRecords(ctx context.Context, instance string, executionID uint64) (HistoryDump, error) {
	const op = "history_records"
	key := instanceKey(instance)
	if executionID == 0 {
		exec, err := p.latestExecution(key)
		if err != nil {
			return HistoryDump{}, storageErrf(op, err, "%v", err)
		}
		if exec == 0 {
			return HistoryDump{}, Permanentf(op, ErrNotFound, "Instance %s not found: it has no execution (no directory under %s)", instance, filepath.Join(p.instDir(key), "executions"))
		}
		executionID = exec
	}
	d := HistoryDump{Instance: instance, ExecutionID: executionID, Path: p.historyPath(key, executionID), Records: []HistoryRecord{}}
	if _, err := p.fs.Stat(p.execDir(key, executionID)); err != nil {
		if vfs.IsNotExist(err) {
			return d, Permanentf(op, ErrNotFound, "Execution %d of instance %s not found (no directory %s)", executionID, instance, p.execDir(key, executionID))
		}
		return d, Retryablef(op, err, "%v", err)
	}
	// state.json first: an apply writes it after the history lines it
	// counts, so a history read after it holds at least what it counts.
	ef, _ := p.readExecutionFile(key, executionID) // (an unreadable one says nothing here)
	scan, err := history.Open(p.fs, d.Path).Read()
	if err != nil {
		var ce *history.CorruptError
		if !errors.As(err, &ce) {
			return d, Retryablef(op, err, "%v", err)
		}
		d.Corrupt = ce.Error()
	} else {
		d.Missing = missingCommitted(d.Path, len(scan.Records), ef)
	}
	d.TornBytes = scan.TornBytes
	for _, r := range scan.Records {
		hr := HistoryRecord{EventID: r.ID, Fence: r.Epoch, Raw: json.RawMessage(slices.Clone(r.Payload))}
		var ev Event
		if err := json.Unmarshal(r.Payload, &ev); err != nil {
			hr.DecodeError = err.Error()
		} else {
			hr.Event = &ev
		}
		d.Records = append(d.Records, hr)
	}
	return d, nil
}

// DirUsage is the disk usage of one area of the directory.
type DirUsage struct {
	// Area is a path relative to the directory ("instances", "queues/worker", …).
	Area  string `json:"area"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}

// DiskUsage returns the number of files and their total size for each area
// of the directory: instances, queues/orchestrator, queues/worker, wal,
// unapplied, sessions, quarantine.
func (p *FSProvider) DiskUsage(ctx context.Context) ([]DirUsage, error) {
	var out []DirUsage
	for _, area := range []string{"instances", "queues/orchestrator", "queues/worker", "wal", "unapplied", "sessions", "quarantine"} {
		u := DirUsage{Area: area}
		err := p.walk(ctx, filepath.Join(p.dir, filepath.FromSlash(area)), func(path string, fi os.FileInfo) error {
			if !fi.IsDir() {
				u.Files++
				u.Bytes += fi.Size()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// walk calls fn for every entry under root (not root itself), depth first,
// through the provider's FS. A missing root or an entry that vanishes during
// the walk is skipped.
func (p *FSProvider) walk(ctx context.Context, root string, fn func(path string, fi os.FileInfo) error) error {
	names, err := p.fs.ReadDirNames(root)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("durofs: list %s: %w", root, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(root, n)
		fi, err := p.fs.Lstat(path)
		if err != nil {
			if vfs.IsNotExist(err) {
				continue
			}
			return fmt.Errorf("durofs: stat %s: %w", path, err)
		}
		if err := fn(path, fi); err != nil {
			return err
		}
		if fi.IsDir() {
			if err := p.walk(ctx, path, fn); err != nil {
				return err
			}
		}
	}
	return nil
}
