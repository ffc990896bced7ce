package provider

// Fsck of the go-workflows queues (fs_gw.go): queues/gw-workflow-<q> hold
// pending events, queues/gw-activity-<q> activity tasks and their claims.
// The checks are those of the orchestrator and worker queues (fsck.go),
// under the same locks: a message is parsed (and quarantined if it cannot
// be used), a staged message is judged under the lock of the commit that
// staged it (its source instance's flock, or for an activity completion,
// "gwa:<dir>/<item>", the task's claim lock), and a claim under its lock
// (orphan claims removed, a committed completion finished).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
)

// errGWRebuild: rebuildInstance refuses a go-workflows instance.
var errGWRebuild = errors.New("a go-workflows instance: its executions' ids, queues, states and metadata are in no history")

// scanGWQueues checks every go-workflows queue. A queue whose configuration
// cannot be used is a FsckFormat finding (its claims cannot be locked as
// its writers lock them) and is skipped; so is a hashed queue directory
// whose name file is missing or invalid (gwQueueNameFile).
func (r *fsckRun) scanGWQueues(ctx context.Context) error {
	if err := r.checkGWQueueNames(); err != nil {
		return err
	}
	for _, activity := range []bool{false, true} {
		dirs, err := r.p.gwQueueDirs(activity)
		if err != nil {
			return fmt.Errorf("durofs fsck: list %s: %w", filepath.Join(r.p.dir, "queues"), err)
		}
		for _, dir := range dirs {
			q, err := r.p.gwQueue(dir)
			if err != nil {
				f := r.add(FsckFormat, SeverityError, filepath.Join(r.p.dir, "queues", dir, "fsqueue.json"), "go-workflows queue %s cannot be opened: %v", dir, err)
				f.Action = "not repairable: processes of another queue version would not respect this build's claim locks"
				continue
			}
			if err := r.scanQueue(ctx, dir, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkGWQueueNames reports the hashed queue directories whose name file is
// missing or does not name their queue. Without messages it is what a
// process killed (or a power loss) between making the directory and its
// name file leaves, or one making it now: harmless, the next open of the
// queue by name writes the file. With messages (the file was removed or
// replaced since) they are not delivered until an open of the queue by
// name writes the file (a missing one).
func (r *fsckRun) checkGWQueueNames() error {
	unnamed, err := r.p.gwUnnamedQueueDirs()
	if err != nil {
		return fmt.Errorf("durofs fsck: list %s: %w", filepath.Join(r.p.dir, "queues"), err)
	}
	for _, dir := range slices.Sorted(maps.Keys(unnamed)) {
		qdir := filepath.Join(r.p.dir, "queues", dir)
		entries, err := r.p.fs.ReadDirNames(qdir)
		if err != nil {
			r.ioError(qdir, err)
			continue
		}
		msgs := 0
		for _, n := range entries {
			name, ok := strings.CutSuffix(strings.TrimPrefix(n, ".staged-"), ".json")
			if ok && validMessageName(name) {
				msgs++
			}
		}
		path := filepath.Join(qdir, gwQueueNameFile)
		if msgs == 0 {
			f := r.add(FsckFormat, SeverityWarning, path, "go-workflows queue directory %s has no valid name file and no messages (left by a crash between making it and naming it, or being made now): %v", dir, unnamed[dir])
			f.Action = "not changed: harmless (listings and sweeps skip it); the next open of its queue by name writes the file"
			continue
		}
		f := r.add(FsckFormat, SeverityError, path, "go-workflows queue directory %s holds %d message(s) but no valid name file: %v", dir, msgs, unnamed[dir])
		f.Action = "not repaired: its messages are not delivered until the queue is opened by name (go-workflows worker or client), which writes a missing file; a file naming another queue must be removed by hand first"
	}
	return nil
}

// claimedQueue reports whether claims lock the messages of queue qname:
// the worker queue and the go-workflows activity queues.
func claimedQueue(qname string) bool {
	activity, gw := gwQueueKind(qname)
	return qname == "worker" || (gw && activity)
}

// parseQueued parses a published message of queue qname: the instance key
// it belongs to and what the unknown-instance check needs.
func parseQueued(q *fsqueue.Queue, qname string, data []byte, name string) (string, fsckMsg, error) {
	if activity, gw := gwQueueKind(qname); gw {
		return parseGWMessage(q, activity, data, name, qname)
	}
	m, w, err := parseMessage(q, data, name)
	if err != nil {
		return "", fsckMsg{}, err
	}
	key := m.Attrs[attrKey]
	if key == "" {
		key = instanceKey(TargetInstance(w))
	}
	return key, fsckMsg{queue: qname, name: name, kind: w.Kind(), instance: TargetInstance(w), enqueuedAtMs: m.EnqueuedAtMs}, nil
}

// parseGWMessage checks a go-workflows message: its name, a JSON payload
// and the attributes the engine routes by (gwEventMessage,
// gwActivityMessage).
func parseGWMessage(q *fsqueue.Queue, activity bool, data []byte, name, qname string) (string, fsckMsg, error) {
	m, err := q.Decode(name, data)
	if err != nil {
		return "", fsckMsg{}, err
	}
	if len(m.Payload) == 0 || !json.Valid(m.Payload) {
		return "", fsckMsg{}, errors.New("its payload is not JSON")
	}
	need := []string{attrKey, attrInstance, attrExec, attrEventID}
	if activity {
		need = append(need, attrWFQueue)
	}
	for _, a := range need {
		if m.Attrs[a] == "" {
			return "", fsckMsg{}, fmt.Errorf("attribute %q is missing", a)
		}
	}
	if m.Attrs[attrKey] != instanceKey(m.Attrs[attrInstance]) {
		return "", fsckMsg{}, fmt.Errorf("attribute %q is %q, not instance %q's key", attrKey, m.Attrs[attrKey], m.Attrs[attrInstance])
	}
	kind := m.Attrs[attrType]
	if activity {
		kind = gwActivityKind
		if act, ok := gwQueueKind(m.Attrs[attrWFQueue]); !ok || act {
			return "", fsckMsg{}, fmt.Errorf("attribute %q is %q, not a workflow queue", attrWFQueue, m.Attrs[attrWFQueue])
		}
	}
	return m.Attrs[attrKey], fsckMsg{queue: qname, name: name, kind: kind, instance: m.Attrs[attrInstance], enqueuedAtMs: m.EnqueuedAtMs}, nil
}

// recordPublishes reports whether rec publishes the message name (a "gw"
// record publishes in its parts).
func recordPublishes(rec *commitRecord, name string) bool {
	named := func(q queueRef) bool { return q.Name == name }
	if slices.ContainsFunc(rec.Publish, named) {
		return true
	}
	if rec.GW != nil {
		for _, pt := range rec.GW.Parts {
			if slices.ContainsFunc(pt.Publish, named) {
				return true
			}
		}
	}
	return false
}

// checkGWActStaged judges a staged completion of activity task rest
// ("<dir>/<item>") under the task's claim lock: the completion its claim
// marks is pending (its redo publishes it, or removes it if its record is
// not in the log); any other is an orphan.
func (r *fsckRun) checkGWActStaged(ctx context.Context, rest, name string, orphan func(detail string) error) error {
	adir, item, _ := strings.Cut(rest, "/")
	aq, err := r.p.gwQueue(adir)
	if err != nil || !validMessageName(item) {
		return orphan(fmt.Sprintf("by a completion of an unknown activity task %q", rest))
	}
	err = aq.WithClaim(ctx, item, func(g *fsqueue.ClaimGuard) error {
		c, exists, err := g.Read()
		if err != nil {
			return nil // an unparseable claim is reported by its own check
		}
		var d gwActAckData
		if exists && c.State == claimStateAcked {
			_ = json.Unmarshal(c.Data, &d)
		}
		if d.Completion == name {
			return nil // a pending completion publishes it
		}
		return orphan(fmt.Sprintf("by a completion of activity task %s that never committed", rest))
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		r.ioError(filepath.Join(aq.Dir(), "claims", item+".json"), err)
	}
	return nil
}

// checkGWActClaim reports an acked claim of an activity task (a completion
// committed or committing, not finished) and with repair finishes it.
func (r *fsckRun) checkGWActClaim(q *fsqueue.Queue, g *fsqueue.ClaimGuard, path string, c fsqueue.Claim) {
	var d gwActAckData
	_ = json.Unmarshal(c.Data, &d)
	f := r.add(FsckPendingCommit, SeverityWarning, path, "go-workflows activity task completion marked (claim state %q) but not finished", c.State)
	if d.Completion != "" {
		f.Detail += "; result " + d.Completion + " to publish to " + d.CompletionQueue
	}
	f.Action = "fsck --repair (or any durofs process's recovery) finishes it"
	if r.repair {
		r.fixed(f, r.p.gwRedoAct(q, g), "finished: applied if its record is in the log, else the claim is put back")
	}
}

// gwDescribeCommit describes a pending "gw" or "gw_act" record.
func gwDescribeCommit(rec *commitRecord) string {
	var pc PendingCommitInfo
	gwPendingInfo(&pc, rec, "")
	if rec.Kind == kindGWAct {
		return fmt.Sprintf("completion of go-workflows activity task %s not finished", rec.Item)
	}
	return fmt.Sprintf("go-workflows %s of %d instance(s) committed at %s not finished: %d event(s) to append, %d message(s) to publish, %d to delete",
		pc.Op, len(pc.Keys), fmtMs(rec.CommittedMs), pc.Events, pc.Publish, pc.Delete)
}

// gwHistories reports whether an execution's history holds go-workflows
// events ("workflow.<type>"): the instance is a go-workflows instance.
func gwHistories(execs []*fsckExec) bool {
	for _, e := range execs {
		for _, ev := range e.events {
			if u, ok := ev.Kind.(UnknownEvent); ok && strings.HasPrefix(u.TypeName, "workflow.") {
				return true
			}
		}
	}
	return false
}

// gwHasMessages reports whether a go-workflows queue holds a message of
// instance key (an instance created but not yet run has no history that
// tells it is a go-workflows instance).
func (r *fsckRun) gwHasMessages(key string) bool {
	msgs, err := r.p.gwInstanceMessages(key)
	return err != nil || len(msgs) > 0
}

// gwMovedOut reports whether execution id of key is a go-workflows
// execution that instance.json does not list: its state.json holds its
// only record.
func (r *fsckRun) gwMovedOut(key string, id uint64) bool {
	f, err := r.p.readGWInstance(key)
	return err == nil && f != nil && f.GW != nil && f.Executions.Has(id) && f.listed(id) == nil
}

// gwExecutionFile is the state.json of go-workflows execution id of key,
// as its instance.json records it (nil: not a go-workflows execution
// instance.json lists, or instance.json is unreadable).
func (r *fsckRun) gwExecutionFile(key string, id uint64) *executionFile {
	f, err := r.p.readGWInstance(key)
	if err != nil || f == nil || f.GW == nil {
		return nil
	}
	for i := range f.GW.Executions {
		if e := &f.GW.Executions[i]; e.N == id {
			ef := execFileOf(e, false)
			return &ef
		}
	}
	return nil
}

// writeInstanceSummary rewrites instance.json of key with the summary want,
// keeping a go-workflows instance's record of its executions.
func (r *fsckRun) writeInstanceSummary(key string, want *instanceFile) error {
	path := r.p.instFilePath(key)
	f, err := r.p.readGWInstance(key)
	if err != nil || f == nil || f.GW == nil {
		return r.writeJSONFile(path, want)
	}
	return r.writeJSONFile(path, &gwInstanceFile{instanceFile: *want, GW: f.GW})
}

// checkGWIndex checks a go-workflows instance's executions that
// instance.json does not list (format 8, fs_gw.go): each must have its
// record in its state.json and a by-id entry naming it (a lookup by id
// would not find it: repaired by writing the entry from the record); an
// entry naming no such execution is left over (lookups check an entry
// against the record, so it is harmless: repaired by removing it).
func (r *fsckRun) checkGWIndex(key string, execs []*fsckExec) {
	if r.replayDue {
		return // the replay rewrites them
	}
	f, err := r.p.readGWInstance(key)
	if err != nil || f == nil || f.GW == nil {
		return
	}
	want := map[string]gwIDEntry{} // by entry name
	for _, e := range execs {
		if !f.Executions.Has(e.id) || f.listed(e.id) != nil || e.state == nil {
			continue
		}
		sp := r.p.execStatePath(key, e.id)
		if e.state.GW == nil || e.state.GW.N != e.id {
			x := r.add(FsckCounterDrift, SeverityError, sp, "go-workflows execution %d is not listed in instance.json and its state.json has no record of it (id, queue, state): it cannot be looked up or listed", e.id)
			x.Action = "not repairable: the record is in no other file"
			continue
		}
		ent := gwIDEntry{ID: e.state.GW.ID, N: e.id}
		want[names.Encode(ent.ID)] = ent
		var got gwIDEntry
		path := r.p.gwIDPath(key, ent.ID)
		ok, err := r.p.readJSON(path, &got)
		if ok && err == nil && got == ent {
			continue
		}
		detail := "missing"
		if err != nil {
			detail = err.Error()
		} else if ok {
			detail = fmt.Sprintf("it names execution %d (id %q)", got.N, got.ID)
		}
		x := r.add(FsckCounterDrift, SeverityError, path, "by-id entry of go-workflows execution %q (%d): %s", ent.ID, e.id, detail)
		x.Action = "fsck --repair writes it from the execution's state.json"
		if r.repair {
			err := r.p.fs.MkdirAll(r.p.gwIDDir(key), vfs.DirPerm)
			if err == nil {
				err = r.p.writeJSONApply(path, ent)
			}
			if err == nil {
				err = r.p.syncPaths(map[string]bool{path: true}, map[string]bool{r.p.gwIDDir(key): true})
			}
			r.fixed(x, err, "rewritten")
		}
	}
	entries, err := r.p.fs.ReadDirNames(r.p.gwIDDir(key))
	if err != nil {
		if !vfs.IsNotExist(err) {
			r.ioError(r.p.gwIDDir(key), err)
		}
		return
	}
	for _, name := range entries {
		if _, ok := want[name]; ok || vfs.IsTemp(name) {
			continue
		}
		path := filepath.Join(r.p.gwIDDir(key), name)
		x := r.add(FsckCounterDrift, SeverityWarning, path, "by-id entry names no go-workflows execution that instance.json does not list (lookups ignore it)")
		x.Action = "fsck --repair removes it"
		if r.repair {
			err := r.p.fs.Remove(path)
			if err == nil {
				err = r.p.syncPaths(nil, map[string]bool{r.p.gwIDDir(key): true})
			}
			r.fixed(x, err, "removed")
		}
	}
}
