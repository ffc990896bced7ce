package provider

// Fsck: the consistency check of a durofs directory, and its repair.
//
// Every per-resource check runs under the lock that writers of that resource
// hold, so a check beside live processes never sees a change half-done:
//
//   - an instance (commit record, lease, instance.json, executions) under its
//     instance flock. A commit record seen there is left by a dead process or
//     a failed apply, never by a live ack (which writes and applies it in one
//     flock section);
//   - a worker item's claim under the item's own lock (fsqueue.WithClaim);
//   - a staged message under the lock of the commit that staged it (its
//     instance's flock or its work item's claim lock), as the sweeper does;
//   - a deletion group after taking the flock of its first instance, which
//     its deleter holds until it returns;
//   - a session row under its session flock.
//
// Queue messages are immutable once published, and temporary files are
// judged by age (an interrupted write's file is older than MinAge).
//
// Repairs are crash-safe: each is an atomic replace (vfs.WriteFileVia), a
// rename, a truncation of bytes no reader counts, or the provider's own
// idempotent redo, each followed by the fsyncs that make it durable.
// Interrupted, a repair leaves the directory in a state the next fsck
// recognizes and finishes. A lock file is removed only by reclaiming an
// instance directory that holds nothing else, under its flock
// (fs_reclaim.go).
//
// A repair never removes what a commit acknowledged (fsck_loss.go): a
// history missing committed records is restored from the write-ahead log
// if it still holds them, else reported as FsckHistoryLoss, which no repair
// clears. Counters recording committed events are never lowered.
//
// Quarantine. Whatever a repair takes away that is not provably garbage -
// an unparseable file, a symbolic link, the bytes of a lost history record
// after its last complete line - is moved to <dir>/quarantine/, never
// deleted: each under a name made of its old path ("/" as "__") and the
// time, beside a <name>.reason manifest ("path:", "reason:", for bytes
// "offset:" and "length:", "quarantined_at:", "by:"). durofs never reads
// quarantine/ again (fsck counts its files); an operator inspects, restores
// or deletes them.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/history"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
	"github.com/durofs/durofs/wal"
)

// FsckOptions configure Fsck.
type FsckOptions struct {
	// Repair fixes what is safe to fix (see the finding kinds).
	Repair bool
	// Logger receives a line per repair. Nil means slog.Default().
	Logger *slog.Logger
	// MinAge is the age below which temporary and staged files are presumed
	// to belong to a write in progress and are not reported. Zero means one
	// minute.
	MinAge time.Duration
	// StaleAfter is the age from which messages for an unknown instance are
	// a warning rather than information. Zero means one hour.
	StaleAfter time.Duration
}

// Severities of a finding.
const (
	// SeverityError is damage or an inconsistency.
	SeverityError = "error"
	// SeverityWarning is a leftover of a crash that the provider would also
	// clean up, or something that needs an operator's decision.
	SeverityWarning = "warning"
	// SeverityInfo is a normal, transient state (an expired lease, a fresh
	// message for an instance not started yet). It never makes a directory
	// unclean.
	SeverityInfo = "info"
)

// Kinds of findings. The repair of each (with --repair) is:
const (
	// FsckFormat: FORMAT or a queue's fsqueue.json is missing, unparseable or
	// of another version. Not repaired; the check stops there. Also: a
	// go-workflows queue directory named by a hash whose name file
	// (gw-queue.json) is missing or invalid (a warning without messages);
	// not repaired, and the check goes on.
	FsckFormat = "format"
	// FsckIOError: a file could not be read. Not repaired.
	FsckIOError = "io_error"
	// FsckUnparseable: instance.json, state.json, lease.json, a session row,
	// a commit record, a queue message (or its work item payload), a staged
	// message or a claim cannot be parsed. Repaired by moving the file to
	// quarantine/ with a .reason file; instance.json and state.json are then
	// rebuilt from the histories (a go-workflows execution's state.json
	// from its instance.json). A state.json whose history is itself
	// unreadable, an instance whose id cannot be recovered, and the
	// instance.json of a go-workflows instance (its executions' ids,
	// queues and metadata are in no history) are left.
	FsckUnparseable = "unparseable"
	// FsckCorruptRecord: a complete history line fails its CRC or the record
	// format. Never repaired: it is committed data; an operator decides.
	FsckCorruptRecord = "corrupt_record"
	// FsckBadEvent: a history record with a valid CRC whose payload is not
	// an event. Never repaired.
	FsckBadEvent = "bad_event"
	// FsckTornTail: bytes after a history file's last complete line, with
	// no pending commit for the instance, after every record state.json
	// counts as committed: an append cut by a crash that was never
	// committed. Repaired by truncating them. (Bytes after the last
	// complete line of a history holding fewer records than committed are
	// part of a lost record: FsckHistoryLoss.)
	FsckTornTail = "torn_tail"
	// FsckPendingCommit: a commit record (ack, append, prune, delete intent
	// or deletion group) or an acked work-item claim whose apply did not
	// finish. Repaired by applying it (the provider's redo). Also: a
	// history missing committed records that the write-ahead log still
	// holds (repaired by appending them from the log), log records not
	// yet replayed after a reboot (repaired by replaying the log, as a
	// provider's Open does, before the check), and, while that replay is
	// due, a damaged history line whose record the log holds (the replay
	// rewrites it).
	FsckPendingCommit = "pending_commit"
	// FsckStuckCommit: a committed change that was not applied: moved out
	// of the write-ahead log into unapplied/ (parked: its apply failed), or
	// still pending in the log MinAge after its commit (its writer was
	// killed after its commit point, or its apply fails). Its instance is
	// not served until it is applied (see StuckCommits). Repaired by
	// applying it, which works at once for a killed writer's and, for one
	// whose apply fails, once the cause (an unwritable or failing file) is
	// gone; the finding's action then says what still fails.
	FsckStuckCommit = "stuck_commit"
	// FsckCounterDrift: instance.json's executions, total_events, status,
	// completed_at or current execution, or a state.json's event_count or
	// execution_id, disagree with the files; or instance.json is missing
	// while executions have a state.json. Repaired by rewriting the file
	// from the actual files. A count of committed events or executions is
	// only ever raised: one above what the files hold is FsckHistoryLoss.
	FsckCounterDrift = "counter_drift"
	// FsckTempFile: a temporary file older than MinAge (a write interrupted
	// by a crash). Repaired by removing it.
	FsckTempFile = "temp_file"
	// FsckStagedOrphan: a staged message older than MinAge that no pending
	// commit names (its writer died before its commit point). Repaired by
	// removing it.
	FsckStagedOrphan = "staged_orphan"
	// FsckOrphanClaim: a claim whose message no longer exists. Repaired by
	// removing it.
	FsckOrphanClaim = "orphan_claim"
	// FsckExpiredLease: a lease, claim or session still naming a holder
	// after its expiry (info: the next taker takes it over). Not changed.
	FsckExpiredLease = "expired_lease"
	// FsckStrayInstance: an instance directory that holds nothing of an
	// instance: only its lock file (and perhaps a lease that nobody holds
	// and that keeps no state), or nothing at all - left by a crash while
	// an instance was deleted or created, or by a build that kept the
	// directories of deleted instances. Repaired by reclaiming it under its
	// flock (fs_reclaim.go).
	FsckStrayInstance = "stray_instance"
	// FsckChildIndex: the parent -> children index (children/) disagrees
	// with the instance records: an instance whose record names a parent
	// has no entry under it, or an entry names an instance whose record
	// does not name that parent (or that does not exist). Repaired by
	// adding or removing the entry, under the child's flock.
	FsckChildIndex = "child_index"
	// FsckUnknownInstance: queued messages for an instance that has no
	// instance.json, no history, no pending commit and no queued start
	// (info while younger than StaleAfter, then a warning). Not repaired:
	// `durofs drain <instance>` (DrainOrphanMessages) removes them.
	FsckUnknownInstance = "unknown_instance"
)

// FsckFinding is one problem found by Fsck.
type FsckFinding struct {
	// Kind is one of the Fsck* kinds.
	Kind string `json:"kind"`
	// Severity is SeverityError, SeverityWarning or SeverityInfo.
	Severity string `json:"severity"`
	// Path is the file, relative to the checked directory.
	Path string `json:"path"`
	// Detail says what is wrong.
	Detail string `json:"detail"`
	// Action says what the repair did, would do, or why it does nothing.
	Action string `json:"action,omitempty"`
	// Repaired is true when the repair fixed it.
	Repaired bool `json:"repaired"`
}

// FsckChecked counts what Fsck looked at.
type FsckChecked struct {
	Instances      int `json:"instances"`
	Executions     int `json:"executions"`
	HistoryRecords int `json:"history_records"`
	Leases         int `json:"leases"`
	Commits        int `json:"commits"`
	Messages       int `json:"messages"`
	Staged         int `json:"staged"`
	Claims         int `json:"claims"`
	Sessions       int `json:"sessions"`
	TempFiles      int `json:"temp_files"`
	// Quarantined counts files already in quarantine/ (not findings).
	Quarantined int `json:"quarantined"`
}

// FsckReport is the result of Fsck.
type FsckReport struct {
	Dir      string        `json:"dir"`
	Repair   bool          `json:"repair"`
	Findings []FsckFinding `json:"findings"`
	Checked  FsckChecked   `json:"checked"`
}

// Remaining returns the findings that make the directory unclean: errors
// and warnings that were not repaired.
func (r FsckReport) Remaining() []FsckFinding {
	var out []FsckFinding
	for _, f := range r.Findings {
		if !f.Repaired && f.Severity != SeverityInfo {
			out = append(out, f)
		}
	}
	return out
}

// Clean reports whether no error or warning remains.
func (r FsckReport) Clean() bool { return len(r.Remaining()) == 0 }

// Fsck checks the durofs directory dir and, with opts.Repair, repairs what
// is safe (see the finding kinds). It may run beside live processes: every
// check and repair takes the lock the provider's writers take (see the top
// of fsck.go), so it holds an instance's flock while it reads that
// instance's histories. Without Repair it writes nothing (taking a flock
// may create a missing lock file). A directory without FORMAT is an error wrapping
// ErrNotDurofsDir; a FORMAT or queue configuration it cannot use is a
// FsckFormat finding and ends the check. With Repair, Fsck finally runs the
// provider's recovery and checks again: a finding still present is reported
// as not repaired, and new findings are added. A repair never removes a
// committed record: lost committed history stays an FsckHistoryLoss error,
// and what a repair takes away is moved to <dir>/quarantine/ with a
// manifest (see the top of fsck.go). A repair registers as a process of the
// directory, as a provider's Open does, for as long as it runs; if no other
// process has the directory open, it first does what the first process to
// open it alone does: it removes the empty staged files of dead writers
// and, if the machine booted or a sync failed since, replays the
// write-ahead log. Beside live processes it never removes an empty staged
// file (a stopped writer's, which it may still publish).
func Fsck(ctx context.Context, dir string, opts FsckOptions) (FsckReport, error) {
	return fsck(ctx, dir, opts, Options{})
}

// fsck is Fsck on the file system popts names (tests: a simulated machine).
func fsck(ctx context.Context, dir string, opts FsckOptions, popts Options) (FsckReport, error) {
	rep := FsckReport{Dir: dir, Repair: opts.Repair, Findings: []FsckFinding{}}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MinAge <= 0 {
		opts.MinAge = time.Minute
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = time.Hour
	}
	stat := os.Stat
	if popts.fs != nil {
		stat = popts.fs.Stat
	}
	fi, err := stat(dir)
	if err != nil {
		return rep, fmt.Errorf("durofs fsck: %w", err)
	}
	if !fi.IsDir() {
		return rep, fmt.Errorf("durofs fsck: %s: %w (not a directory)", dir, ErrNotDurofsDir)
	}
	if ok, err := checkLayout(dir, popts, &rep); err != nil || !ok {
		return rep, err
	}
	if opts.Repair && popts.fs == nil {
		if kind, err := networkFS(dir); err != nil {
			return rep, fmt.Errorf("durofs fsck: statfs %s: %w", dir, err)
		} else if kind != "" {
			return rep, fmt.Errorf("durofs fsck: %s is on a %s file system: %w (flock does not exclude other hosts; not repairing)", dir, kind, ErrUnsupportedFS)
		}
	}
	popts.Logger, popts.SweepInterval, popts.CheckpointInterval = opts.Logger, -1, -1
	var regErr error
	if opts.Repair {
		// Registered before the check: no process that opens the directory
		// meanwhile has it alone, so none takes fsck's writes for a dead
		// writer's leftovers (or replays beside them).
		var reg *FSProvider
		var found []FsckFinding
		reg, found, regErr = registerForRepair(dir, popts)
		if reg != nil {
			defer func() {
				if err := reg.Close(); err != nil {
					opts.Logger.Warn("durofs fsck: close", "dir", dir, "err", err)
				}
			}()
		}
		if regErr != nil {
			// Damage the check reports (a planted link in wal/, say):
			// repair as beside live processes.
			opts.Logger.Warn("durofs fsck: cannot register as a process of the directory; repairing only under writers' locks", "dir", dir, "err", regErr)
		}
		rep.Findings = append(rep.Findings, found...)
	}
	p, err := openUnrecovered(dir, popts)
	if err != nil {
		return rep, fmt.Errorf("durofs fsck: %w", err)
	}
	defer p.Close()
	if regErr != nil && p.wal.RebootedSinceUse() {
		return rep, fmt.Errorf("durofs fsck: the write-ahead log is due a replay (the machine booted since a process last opened the directory), which needs the directory opened as a process: %w", regErr)
	}

	run := newFsckRun(p, opts, opts.Repair)
	run.regErr = regErr
	if err := run.scan(ctx); err != nil {
		return rep, err
	}
	rep.Findings, rep.Checked = append(rep.Findings, run.result()...), run.checked
	if !opts.Repair {
		return rep, nil
	}
	// The provider's own recovery (a no-op unless something appeared
	// meanwhile), then a read-only check of the result.
	if err := p.Recover(ctx); err != nil {
		opts.Logger.Warn("durofs fsck: recovery after repair", "dir", dir, "err", err)
	}
	verify := newFsckRun(p, opts, false)
	if err := verify.scan(ctx); err != nil {
		return rep, err
	}
	still := map[string]bool{}
	for _, f := range verify.findings {
		still[findingKey(*f)] = true
	}
	seen := map[string]bool{}
	for i := range rep.Findings {
		f := &rep.Findings[i]
		seen[findingKey(*f)] = true
		if f.Repaired && still[findingKey(*f)] {
			f.Repaired = false
			f.Action += " (but a check afterwards still finds it)"
		}
	}
	for _, f := range verify.findings {
		if !seen[findingKey(*f)] {
			rep.Findings = append(rep.Findings, *f)
		}
	}
	return rep, nil
}

func findingKey(f FsckFinding) string { return f.Kind + "\x00" + f.Path }

// registerForRepair registers a repairing fsck as a process of the
// directory, by the provider's own Open up to its recovery (openLogged): a
// registration in wal/procs that every later Open sees until Close. If no
// other process has the directory open, it does - before any other can
// open it - what the first process to open it alone does: it removes the
// empty staged files of dead writers (a live writer may be between its
// create and its write, so only then), and replays the write-ahead log if
// that is due (the machine booted, a sync failed), so the check sees what
// was committed. It recovers nothing else: the check finds and repairs
// that. It returns findings for what it did, and a nil provider (and no
// error) when other processes have the directory open in a way this one
// may not join (a poisoned log, an older build, no free slot): fsck then
// repairs only what it can under the locks writers take, as beside any
// live process (as it does after an error). The caller closes the provider
// when the repair is over.
func registerForRepair(dir string, popts Options) (*FSProvider, []FsckFinding, error) {
	// fsck appends nothing to the log: it joins processes of either
	// durability mode, and alone sets none, so that a worker of either
	// mode may start while it runs.
	popts.anyMode = true
	reg, err := openLogged(dir, popts)
	switch {
	case errors.Is(err, wal.ErrPoisoned), errors.Is(err, wal.ErrTooManyProcesses), errors.Is(err, wal.ErrModeMismatch), errors.Is(err, ErrUnsupportedFS):
		// Only when others have it open (the check reports a poisoning).
		popts.Logger.Info("durofs fsck: other processes have the directory open and it cannot join them; repairing only under writers' locks", "dir", dir, "err", err)
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	var found []FsckFinding
	if n := reg.stats.replayed.Load(); n > 0 {
		found = append(found, FsckFinding{Kind: FsckPendingCommit, Severity: SeverityWarning, Path: "wal",
			Detail: fmt.Sprintf("the write-ahead log was due a replay (the machine booted, or a sync failed, since a durofs process last opened the directory alone): %d log record(s) since the checkpoint were not yet replayed", n),
			Action: "replayed (fsck opened the directory as the first durofs process to open it does) before the check", Repaired: true})
	}
	for _, path := range reg.emptyStaged {
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			rel = path
		}
		found = append(found, FsckFinding{Kind: FsckUnparseable, Severity: SeverityError, Path: rel,
			Detail: "empty staged message: its writer was killed between creating and writing it",
			Action: "removed (no other process had the directory open, so its writer is dead)", Repaired: true})
	}
	return reg, found, nil
}

// checkLayout checks FORMAT and the queues' fsqueue.json. ok is false when
// the check cannot go on (findings say why).
func checkLayout(dir string, popts Options, rep *FsckReport) (ok bool, err error) {
	fsys := baseFS(dir, popts)
	if _, err := readFormat(fsys, dir); err != nil {
		if errors.Is(err, ErrNotDurofsDir) {
			return false, fmt.Errorf("durofs fsck: %w", err)
		}
		f := FsckFinding{Kind: FsckFormat, Severity: SeverityError, Path: "FORMAT",
			Detail: err.Error(), Action: "not repairable: this build reads format version " + strconv.Itoa(FormatVersion) + " only"}
		if !errors.Is(err, ErrUnsupportedFS) { // FORMAT could not be read, not a format this build refuses
			f.Kind, f.Action = FsckIOError, ioAction(err)
		}
		rep.Findings = append(rep.Findings, f)
		return false, nil
	}
	ok = true
	for _, q := range []string{"orchestrator", "worker"} {
		rel := filepath.Join("queues", q, "fsqueue.json")
		data, err := fsys.ReadFile(filepath.Join(dir, rel))
		var cfg struct {
			Format    string `json:"format"`
			Version   int    `json:"version"`
			IndexAttr string `json:"index_attr"`
		}
		detail := ""
		switch {
		case err != nil:
			detail = fmt.Sprintf("cannot read the queue configuration: %v", err)
		case json.Unmarshal(data, &cfg) != nil:
			detail = "the queue configuration cannot be parsed"
		case cfg.Format != "fsqueue" || cfg.Version != queueVersion:
			detail = fmt.Sprintf("unsupported queue configuration: format %q, version %d (this build reads version %d)", cfg.Format, cfg.Version, queueVersion)
		case cfg.IndexAttr != attrKey:
			detail = fmt.Sprintf("the queue routes messages by attribute %q, not %q", cfg.IndexAttr, attrKey)
		}
		if detail != "" {
			f := FsckFinding{Kind: FsckFormat, Severity: SeverityError, Path: rel, Detail: detail,
				Action: "not repairable: processes of another queue version would not respect this build's claim locks or find its messages"}
			if err != nil && !vfs.IsNotExist(err) {
				f.Kind, f.Action = FsckIOError, ioAction(err)
			}
			rep.Findings = append(rep.Findings, f)
			ok = false
		}
	}
	return ok, nil
}

// fsckRun is one pass over the directory.
type fsckRun struct {
	p        *FSProvider
	opts     FsckOptions
	repair   bool
	log      *slog.Logger
	now      time.Time
	findings []*FsckFinding // pointers: callers complete a finding after later ones were added
	checked  FsckChecked
	// known are instance keys with an instance.json (parseable or not), an
	// execution or a pending commit; msgs are the queued messages by key.
	known map[string]bool
	msgs  map[string][]fsckMsg
	// done are the instance keys checked already (a repair may create the
	// directory of a key first seen through its commit record).
	done map[string]bool
	// logged are the log's records since its checkpoint, by the instance
	// keys they change; replayDue is set when the machine booted since a
	// process last opened the directory and the log holds records (the
	// files may lack them until the replay).
	logged    map[string][]loggedRecord
	replayDue bool
	// regErr is why a repairing fsck could not register as a process of
	// the directory (registerForRepair), if it could not.
	regErr error
}

type fsckMsg struct {
	queue, name, kind, instance string
	enqueuedAtMs                int64
}

func newFsckRun(p *FSProvider, opts FsckOptions, repair bool) *fsckRun {
	return &fsckRun{p: p, opts: opts, repair: repair, log: opts.Logger, known: map[string]bool{}, msgs: map[string][]fsckMsg{}, done: map[string]bool{}}
}

func (r *fsckRun) rel(path string) string {
	if rel, err := filepath.Rel(r.p.dir, path); err == nil {
		return rel
	}
	return path
}

// add records a finding and returns it for the caller to complete.
func (r *fsckRun) add(kind, severity, path, format string, args ...any) *FsckFinding {
	f := &FsckFinding{Kind: kind, Severity: severity, Path: r.rel(path), Detail: fmt.Sprintf(format, args...)}
	r.findings = append(r.findings, f)
	return f
}

// result returns the findings by value.
func (r *fsckRun) result() []FsckFinding {
	out := make([]FsckFinding, len(r.findings))
	for i, f := range r.findings {
		out[i] = *f
	}
	return out
}

// errVanished says the file to repair disappeared meanwhile (a live
// process consumed or quarantined it).
var errVanished = errors.New("the file disappeared meanwhile")

// fixed marks f repaired (err nil) or records why the repair failed.
func (r *fsckRun) fixed(f *FsckFinding, err error, action string) {
	if errors.Is(err, errVanished) {
		f.Repaired, f.Action = true, "none needed: the file disappeared meanwhile"
		return
	}
	if err != nil {
		f.Action = "repair failed: " + err.Error()
		r.log.Warn("durofs fsck: repair failed", "kind", f.Kind, "path", f.Path, "err", err)
		return
	}
	f.Repaired, f.Action = true, action
	r.log.Info("durofs fsck: repaired", "kind", f.Kind, "path", f.Path, "action", action)
}

func (r *fsckRun) ioError(path string, err error) {
	r.add(FsckIOError, SeverityError, path, "%v", err).Action = ioAction(err)
}

// ioAction is the Action of a finding about a file that could not be read.
func ioAction(err error) string {
	if errors.Is(err, fs.ErrPermission) {
		return "permission denied: run durofs as a user that may read and write the whole directory (its owner); not repairable by fsck"
	}
	return "not repairable by fsck"
}

func (r *fsckRun) nowMs() int64 { return r.now.UnixMilli() }

func ago(now time.Time, ms int64) string {
	return now.Sub(time.UnixMilli(ms)).Round(time.Second).String()
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// scan checks the whole directory once.
func (r *fsckRun) scan(ctx context.Context) error {
	r.now = time.Now()
	if err := r.scanSymlinks(ctx); err != nil {
		return err
	}
	if err := r.scanCommits(ctx); err != nil {
		return err
	}
	keys, err := r.p.fs.ReadDirNames(filepath.Join(r.p.dir, "instances"))
	if err != nil {
		return fmt.Errorf("durofs fsck: list %s: %w", filepath.Join(r.p.dir, "instances"), err)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if vfs.IsTemp(k) {
			continue
		}
		if fi, err := r.p.fs.Lstat(r.p.instDir(k)); err != nil || !fi.IsDir() || r.done[k] {
			continue
		}
		if err := r.checkInstance(ctx, k); err != nil {
			return err
		}
	}
	if err := r.scanChildren(ctx); err != nil {
		return err
	}
	for _, q := range []struct {
		name string
		q    *fsqueue.Queue
	}{{"orchestrator", r.p.orchQ}, {"worker", r.p.workQ}} {
		if err := r.scanQueue(ctx, q.name, q.q); err != nil {
			return err
		}
	}
	if err := r.scanGWQueues(ctx); err != nil {
		return err
	}
	r.checkUnknownInstances()
	if err := r.scanSessions(ctx); err != nil {
		return err
	}
	return r.scanTemps(ctx)
}

// ---------------------------------------------------------------------------
// Commit records

// scanCommits checks that the write-ahead log reads back since its
// checkpoint and is not poisoned; records still marked pending are checked
// with their instances (and work acks with their claims).
func (r *fsckRun) scanCommits(ctx context.Context) error {
	path := filepath.Join(r.p.dir, "wal")
	recs, _, _, err := r.p.scanLog()
	if err != nil {
		f := r.add(FsckUnparseable, SeverityError, path, "write-ahead log cannot be read: %v", err)
		f.Action = "not repairable by fsck: keep a copy of wal/ and report it"
		return nil
	}
	r.checked.Commits += len(recs)
	r.logged = map[string][]loggedRecord{}
	for _, lr := range recs {
		for _, k := range keysOf(lr.rec) {
			r.logged[k] = append(r.logged[k], lr)
		}
	}
	if r.p.wal.RebootedSinceUse() && len(recs) > 0 {
		// Fsck --repair replays first (Fsck): this is a check only.
		r.replayDue = true
		f := r.add(FsckPendingCommit, SeverityWarning, path, "the machine booted since a durofs process last opened the directory: the first to open it alone replays the %d log record(s) since the checkpoint, and until then the files may lack what they hold", len(recs))
		f.Action = "fsck --repair (or any durofs process opening the directory) replays them"
	}
	if err := r.p.wal.CheckShared(); err != nil {
		f := r.add(FsckPendingCommit, SeverityError, path, "%v", err)
		f.Action = "close every process using the directory; the first to reopen it alone replays the log"
	}
	return nil
}

func describeCommit(rec *commitRecord) string {
	switch rec.Kind {
	case kindPrune:
		return fmt.Sprintf("prune of executions %v of %q not finished", rec.PruneExecutions, rec.Instance)
	case kindDelete:
		return fmt.Sprintf("deletion of %d instance(s) not finished", len(rec.Members))
	case kindWorkAck:
		return fmt.Sprintf("ack of work item %s not finished", rec.Item)
	case kindGW, kindGWAct:
		return gwDescribeCommit(rec)
	}
	return fmt.Sprintf("ack of %q execution %d (fence %d) committed at %s not finished: %d event(s) to append, %d message(s) to publish, %d to delete",
		rec.Instance, rec.ExecutionID, rec.Fence, fmtMs(rec.CommittedMs), len(rec.History), len(rec.Publish), len(rec.Delete))
}

// ---------------------------------------------------------------------------
// Instances

// fsckExec is what one execution directory holds.
type fsckExec struct {
	id          uint64
	recs        []history.Record
	events      []Event
	histOK      bool // the history file reads without corruption
	eventsOK    bool // and every payload decodes
	lost        bool // the history lost committed records (FsckHistoryLoss)
	state       *executionFile
	stateExists bool // state.json exists (parseable or not)
}

// checkInstance checks one instance under its flock.
func (r *fsckRun) checkInstance(ctx context.Context, key string) error {
	p := r.p
	r.done[key] = true
	if _, err := p.fs.Lstat(p.instDir(key)); vfs.IsNotExist(err) && !r.repair {
		// Only a commit record: report it without creating the directory
		// that locking would create.
		r.checkCommitRecord(ctx, nil, key)
		return nil
	}
	g, _, err := p.lockExisting(ctx, key, true)
	if errors.Is(err, lease.ErrGone) {
		names, lerr := p.fs.ReadDirNames(p.instDir(key))
		switch {
		case vfs.IsNotExist(lerr):
			if !r.repair {
				return nil // reclaimed meanwhile
			}
		case lerr == nil && len(names) == 0:
			f := r.add(FsckStrayInstance, SeverityWarning, p.instDir(key), "empty instance directory (a crash while an instance was deleted or created)")
			f.Action = "fsck --repair removes it"
			if r.repair {
				r.fixed(f, p.rmdirIfEmpty(p.instDir(key)), "removed")
			}
			return nil
		}
		// Files without a lock file, or a commit record to finish: lock it
		// (creating the lock file) and check it as any other.
		g, err = p.lockInstance(ctx, key)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.ioError(p.lockPath(key), err)
		return nil
	}
	defer g.Unlock()
	r.checked.Instances++
	pending := r.checkCommitRecord(ctx, g, key)
	if pending {
		r.known[key] = true
	}

	// The lease.
	nowMs := r.nowMs()
	l, exists, err := g.Read()
	switch {
	case errors.Is(err, lease.ErrCorrupt):
		f := r.add(FsckUnparseable, SeverityError, p.leasePath(key), "instance lease cannot be parsed: %s", cause(err, p.leasePath(key)))
		f.Action = "fsck --repair moves it to quarantine/ (the next fetch starts a fresh lease)"
		if r.repair {
			dest, err := r.quarantineFile(p.leasePath(key), fmt.Sprintf("unparseable instance lease: %v", err))
			r.fixed(f, err, "moved to "+dest+"; the next fetch starts a fresh lease")
		}
	case err != nil:
		r.ioError(p.leasePath(key), err)
	case exists:
		r.checked.Leases++
		if l.Token != "" && !l.HeldAt(nowMs) {
			r.add(FsckExpiredLease, SeverityInfo, p.leasePath(key), "lease of %q (fence %d) expired at %s, %s ago; the next fetch takes it over",
				l.Owner, l.Fence, fmtMs(l.ExpiresAtMs), ago(r.now, l.ExpiresAtMs))
		}
	}

	// instance.json.
	ipath := p.instFilePath(key)
	inf, ierr := p.readInstanceFile(key)
	var corruptInst *FsckFinding
	switch {
	case errors.Is(ierr, ErrCorrupt):
		corruptInst = r.add(FsckUnparseable, SeverityError, ipath, "instance file cannot be parsed: %s", cause(ierr, ipath))
		corruptInst.Action = "fsck --repair moves it to quarantine/ and rebuilds it from the executions"
		r.known[key] = true
	case ierr != nil:
		r.ioError(ipath, ierr)
		return nil
	case inf != nil:
		r.known[key] = true
	}

	// Executions.
	ids, err := p.listExecutions(key)
	if err != nil {
		r.ioError(filepath.Join(p.instDir(key), "executions"), err)
		return nil
	}
	execs := make([]*fsckExec, 0, len(ids))
	for _, id := range ids {
		r.known[key] = true
		execs = append(execs, r.checkExecution(key, id, pending, inf))
	}
	if pending {
		return nil // the redo rewrites the counters; check them afterwards
	}
	if inf == nil && ierr == nil && len(ids) == 0 && !g.Reclaimed() {
		if empty, err := p.emptyInstance(g, key); err != nil {
			r.ioError(p.instDir(key), err)
		} else if empty {
			f := r.add(FsckStrayInstance, SeverityWarning, p.instDir(key), "instance directory holds nothing of an instance (a lock file%s): left by a crash while it was deleted, or by a build that kept deleted instances' directories",
				map[bool]string{true: " and a free lease", false: ""}[exists])
			f.Action = "fsck --repair reclaims it"
			if r.repair {
				r.fixed(f, p.reclaimInstance(g, key), "reclaimed")
			}
			return nil
		}
	}
	if inf != nil && inf.Record != nil && inf.Record.ParentInstanceID != nil {
		r.checkChildEntry(key, *inf.Record.ParentInstanceID)
	}

	// instance.json against the executions.
	lost := slices.ContainsFunc(execs, func(e *fsckExec) bool { return e.lost })
	switch {
	case corruptInst != nil:
		nf, err := r.rebuildInstance(key, execs, l.Fence)
		if err != nil {
			corruptInst.Action = "not repairable: cannot rebuild it: " + err.Error()
			break
		}
		if r.repair {
			dest, err := r.quarantineFile(ipath, fmt.Sprintf("unparseable instance file: %v", ierr))
			if err == nil {
				err = r.writeJSONFile(ipath, nf)
			}
			r.fixed(corruptInst, err, "moved to "+dest+" and rebuilt from the executions")
		}
	case inf == nil:
		var withState []uint64
		for _, e := range execs {
			if e.stateExists {
				withState = append(withState, e.id)
			}
		}
		if len(withState) == 0 {
			break
		}
		f := r.add(FsckCounterDrift, SeverityError, ipath, "instance.json is missing but execution(s) %v have a state.json", withState)
		f.Action = "fsck --repair rebuilds it from the executions"
		nf, err := r.rebuildInstance(key, execs, l.Fence)
		if err != nil {
			f.Action = "not repairable: cannot rebuild it: " + err.Error()
			break
		}
		if r.repair {
			r.fixed(f, r.writeJSONFile(ipath, nf), "rebuilt from the executions")
		}
	default:
		lost = r.checkInstanceLoss(key, inf, execs) || lost
		r.checkCounters(key, inf, execs, lost)
		r.checkGWIndex(key, execs)
	}
	return nil
}

// checkCommitRecord checks the commit an instance's lease marks pending (g
// nil: unlocked report only) and reports whether one is still pending
// afterwards.
func (r *fsckRun) checkCommitRecord(ctx context.Context, g *lease.Guard, key string) (pending bool) {
	var cur lease.Lease
	var err error
	if g != nil {
		cur, _, err = g.Read()
	} else {
		cur, _, err = r.p.leases.Inspect(ctx, r.p.lockPath(key), r.p.leasePath(key))
	}
	if err != nil {
		return false // an unreadable lease is reported by its own check
	}
	st := decodeOrchState(cur)
	if st.Pending == nil {
		return false
	}
	path := r.p.leasePath(key)
	lr, err := r.p.findRecord(key, st.Pending)
	if err != nil {
		r.ioError(filepath.Join(r.p.dir, "wal"), err)
		return true
	}
	if lr == nil {
		f := r.add(FsckPendingCommit, SeverityWarning, path, "marks commit %s pending, which is not in the log (its writer died before committing)", st.Pending.ID)
		f.Action = "fsck --repair (or the next fetch) clears the mark"
		if r.repair && g != nil {
			r.fixed(f, r.p.redoPending(ctx, g, key), "mark cleared")
		}
		return false
	}
	var f *FsckFinding
	// (A record without a commit time is not judged by its age.)
	if age := r.now.Sub(time.UnixMilli(lr.rec.CommittedMs)); lr.parked || (lr.rec.CommittedMs > 0 && age >= r.opts.MinAge) {
		// A parked record's apply failed (a checkpoint parks only those);
		// one still in the log may be a killed writer's that nothing has
		// tried to apply since.
		where, why := "still in the write-ahead log", "not applied yet (its writer was killed after committing it, or its apply fails)"
		action := "fsck --repair applies it (as do the next fetch of the instance and every checkpoint); if its apply fails, fix what it fails on (durofs processes log the error; fsck --repair shows it)"
		if lr.parked {
			where, why = "moved out of the write-ahead log to "+r.rel(r.p.parkedPath(key, lr.lsn, lr.rec.CommitID)), "its apply failed"
			action = "fix what its apply fails on (durofs processes log the error; fsck --repair tries it and shows it); every checkpoint retries it"
		}
		f = r.add(FsckStuckCommit, SeverityError, path, "instance %q: %s %s after its commit (%s): %s, and the instance is not served until it is applied",
			instanceOf(key, lr.rec), describeCommit(lr.rec), age.Round(time.Second), where, why)
		f.Action = action
	} else {
		f = r.add(FsckPendingCommit, SeverityWarning, path, "%s", describeCommit(lr.rec))
		f.Action = "fsck --repair (or any durofs process's recovery) applies it"
	}
	if r.repair && g != nil {
		r.fixed(f, r.p.redoPending(ctx, g, key), "applied")
		return !f.Repaired
	}
	return true
}

// checkExecution checks one execution's history and state.json (inf, if
// not nil, is the instance's parsed instance.json).
func (r *fsckRun) checkExecution(key string, id uint64, pending bool, inf *instanceFile) *fsckExec {
	p := r.p
	r.checked.Executions++
	e := &fsckExec{id: id}
	hp := p.historyPath(key, id)
	// state.json first: an apply writes it after the history lines it
	// counts.
	sp := p.execStatePath(key, id)
	ef, serr := p.readExecutionFile(key, id)
	log := history.Open(p.fs, hp)
	scan, err := log.Read()
	var ce *history.CorruptError
	switch {
	case errors.As(err, &ce) && errors.Is(err, vfs.ErrSymlink):
		// A link in place of the history: the symlink finding reports
		// it (a repair moves it away); here it holds no record.
		e.histOK = true
	case errors.As(err, &ce) && r.replayRewrites(key, id, len(scan.Records)):
		// Until the replay the files may hold anything where the applies
		// of the log's records wrote; the replay rewrites it.
		r.add(FsckPendingCommit, SeverityWarning, hp, "line %d (offset %d): %s; %d valid record(s) before it; the write-ahead log holds its record, which the replay due rewrites",
			ce.Line, ce.Offset, ce.Reason, len(scan.Records)).Action =
			"fsck --repair (or the first durofs process to open the directory alone) replays the log, which rewrites the line from its record"
	case errors.As(err, &ce):
		r.add(FsckCorruptRecord, SeverityError, hp, "line %d (offset %d): %s; %d valid record(s) before it, nothing after it can be read",
			ce.Line, ce.Offset, ce.Reason, len(scan.Records)).Action =
			"not repairable: the line is committed history; look at it (durofs history) and restore it from a backup, or delete the instance"
	case err != nil:
		r.ioError(hp, err)
	default:
		e.histOK = true
	}
	short := e.histOK && !pending && serr == nil && ef != nil && uint64(len(scan.Records)) < ef.EventCount
	if short {
		scan = r.checkShortHistory(e, key, hp, scan, int(min(ef.EventCount, uint64(math.MaxInt32))))
	}
	e.recs = scan.Records
	r.checked.HistoryRecords += len(scan.Records)
	if e.histOK && scan.TornBytes > 0 && !pending && !short {
		f := r.add(FsckTornTail, SeverityWarning, hp, "%d byte(s) after the last complete record%s: an append cut by a crash, never committed", scan.TornBytes, beyondCommitted(ef))
		f.Action = "fsck --repair truncates them"
		if r.repair {
			n, err := log.Repair()
			r.fixed(f, err, fmt.Sprintf("truncated %d byte(s)", n))
		}
	}
	e.eventsOK = e.histOK
	bad := 0
	var badEvent *FsckFinding
	for i, rec := range e.recs {
		var ev Event
		if err := json.Unmarshal(rec.Payload, &ev); err != nil {
			if bad == 0 {
				badEvent = r.add(FsckBadEvent, SeverityError, hp, "record %d (event id %d) has a valid CRC but is not an event: %v", i+1, rec.ID, err)
				badEvent.Action = "not repairable: the record was written this way"
			}
			bad++
			e.eventsOK = false
			continue
		}
		e.events = append(e.events, ev)
	}
	if badEvent != nil && bad > 1 {
		badEvent.Detail += fmt.Sprintf(" (%d such records)", bad)
	}

	err = serr
	switch {
	case errors.Is(err, ErrCorrupt):
		e.stateExists = true
		f := r.add(FsckUnparseable, SeverityError, sp, "execution state cannot be parsed: %s", cause(err, sp))
		f.Action = "fsck --repair moves it to quarantine/ and rebuilds it from the history"
		if !e.eventsOK {
			f.Action = "not repairable: the history it would be rebuilt from is unreadable"
			break
		}
		if r.gwMovedOut(key, id) {
			f.Action = "not repairable: it holds the only record of a go-workflows execution that instance.json no longer lists (id, queue, metadata, state)"
			break
		}
		if r.repair && !pending {
			nf := r.gwExecutionFile(key, id)
			if nf == nil {
				nf = rebuildExecution(id, e.recs, e.events, r.nowMs())
			}
			if inf != nil && inf.CurrentExecutionID == id && inf.Status == nf.Status && inf.CompletedAtMs != nil {
				// instance.json keeps a copy of the current execution's
				// completion time, exact where the events' are not.
				c := *inf.CompletedAtMs
				nf.CompletedAtMs = &c
			}
			dest, qerr := r.quarantineFile(sp, fmt.Sprintf("unparseable execution state: %v", err))
			if qerr == nil {
				qerr = r.writeJSONFile(sp, nf)
			}
			r.fixed(f, qerr, fmt.Sprintf("moved to %s and rebuilt from the history (status %s, %d events)", dest, nf.Status, nf.EventCount))
			if qerr == nil {
				e.state = nf
			}
		}
	case err != nil:
		e.stateExists = true
		r.ioError(sp, err)
	case ef != nil:
		e.stateExists, e.state = true, ef
		if pending || !e.histOK || r.replayDue {
			break // the redo or the replay rewrites it
		}
		var diffs []string
		// Never lowered: a history shorter than the count lost committed
		// records or is restored from the log (checkShortHistory).
		if ef.EventCount < uint64(len(e.recs)) {
			diffs = append(diffs, fmt.Sprintf("event_count is %d but history.jsonl holds %d records", ef.EventCount, len(e.recs)))
		}
		if ef.ExecutionID != id {
			diffs = append(diffs, fmt.Sprintf("execution_id is %d in directory %d", ef.ExecutionID, id))
		}
		if len(diffs) == 0 {
			break
		}
		f := r.add(FsckCounterDrift, SeverityError, sp, "%s", strings.Join(diffs, "; "))
		f.Action = "fsck --repair rewrites it from the history"
		if r.repair {
			nf := *ef
			nf.EventCount, nf.ExecutionID = uint64(len(e.recs)), id
			err := r.writeJSONFile(sp, &nf)
			r.fixed(f, err, "rewritten")
			if err == nil {
				e.state = &nf
			}
		}
	}
	return e
}

// replayRewrites reports whether a replay is due and the log holds the
// append of record i (from 0) of execution exec of key: the replay writes
// that record again, whatever the file holds in its place.
func (r *fsckRun) replayRewrites(key string, exec uint64, i int) bool {
	if !r.replayDue {
		return false
	}
	for _, s := range r.loggedHistory(key, exec) {
		if s.base <= i && i < s.base+len(s.recs) {
			return true
		}
	}
	return false
}

// beyondCommitted says, if state.json is known, that a torn tail follows
// every committed record.
func beyondCommitted(ef *executionFile) string {
	if ef == nil {
		return ""
	}
	return fmt.Sprintf(", beyond the %d committed record(s)", ef.EventCount)
}

// committedLen is how many records an execution's history holds or, if
// more, its state.json counts as committed (a shortfall is restored from
// the log or reported as loss, never counted away).
func committedLen(e *fsckExec) uint64 {
	n := uint64(len(e.recs))
	if e.state != nil {
		n = max(n, e.state.EventCount)
	}
	return n
}

// checkCounters compares instance.json's summary with the executions
// (counting what they committed: committedLen). With lost (the instance
// lost committed history), executions and total_events are only ever
// raised: what they say was committed stays.
func (r *fsckRun) checkCounters(key string, inf *instanceFile, execs []*fsckExec, lost bool) {
	if r.replayDue {
		return // the replay rewrites them
	}
	want := *inf
	var total uint64
	allOK := true
	want.Executions = execIDs{}
	byID := map[uint64]*fsckExec{}
	for _, e := range execs {
		byID[e.id] = e
		if e.stateExists {
			want.Executions.Add(e.id)
		}
		total += committedLen(e)
		allOK = allOK && e.histOK
	}
	if lost {
		for id := range inf.Executions.All() {
			want.Executions.Add(id)
		}
		total = max(total, inf.TotalEvents)
	}
	var diffs []string
	if !slices.Equal(inf.Executions.Slice(), want.Executions.Slice()) {
		diffs = append(diffs, fmt.Sprintf("executions is %v but %v have a state.json", inf.Executions.Slice(), want.Executions.Slice()))
	} else {
		want.Executions = inf.Executions
	}
	if last := want.Executions.Last(); last > 0 && inf.CurrentExecutionID < last {
		want.CurrentExecutionID = last
		diffs = append(diffs, fmt.Sprintf("current_execution_id is %d but execution %d has a state.json", inf.CurrentExecutionID, want.CurrentExecutionID))
	}
	if allOK && inf.TotalEvents != total {
		want.TotalEvents = total
		diffs = append(diffs, fmt.Sprintf("total_events is %d but the executions hold (or committed) %d records", inf.TotalEvents, total))
	}
	// sub_orchestrations counts what was ever scheduled (a prune does not
	// lower it): only fewer than the histories hold is wrong, and then a
	// deletion would miss the children not started yet.
	var subs uint64
	for _, e := range execs {
		subs += countSubOrchestrations(e.events)
	}
	if inf.SubOrchestrations < subs {
		want.SubOrchestrations = subs
		diffs = append(diffs, fmt.Sprintf("sub_orchestrations is %d but the histories schedule %d (a deletion would miss children not started yet)", inf.SubOrchestrations, subs))
	}
	if cur := byID[want.CurrentExecutionID]; cur != nil && cur.state != nil {
		if inf.Status != cur.state.Status {
			want.Status = cur.state.Status
			diffs = append(diffs, fmt.Sprintf("status is %q but execution %d's state.json says %q", inf.Status, cur.id, cur.state.Status))
		}
		if !equalPtr(inf.CompletedAtMs, cur.state.CompletedAtMs) {
			want.CompletedAtMs = cur.state.CompletedAtMs
			diffs = append(diffs, fmt.Sprintf("completed_at_ms is %s but execution %d's state.json says %s", ptrStr(inf.CompletedAtMs), cur.id, ptrStr(cur.state.CompletedAtMs)))
		}
	}
	if len(diffs) == 0 {
		return
	}
	path := r.p.instFilePath(key)
	f := r.add(FsckCounterDrift, SeverityError, path, "%s", strings.Join(diffs, "; "))
	f.Action = "fsck --repair rewrites the counters from the files"
	if r.repair {
		r.fixed(f, r.writeInstanceSummary(key, &want), "rewritten")
	}
}

// cause is err's message without the path and sentinel prefixes the
// readers put in front (the finding names the file already).
func cause(err error, path string) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, path+": "); i >= 0 {
		msg = msg[i+len(path)+2:]
	}
	return strings.TrimPrefix(msg, ErrCorrupt.Error()+": ")
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func ptrStr(v *int64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatInt(*v, 10)
}

// rebuildExecution reconstructs an execution's state.json from its history.
func rebuildExecution(id uint64, recs []history.Record, events []Event, nowMs int64) *executionFile {
	ef := &executionFile{ExecutionID: id, Status: "Running", EventCount: uint64(len(recs))}
	for _, ev := range events {
		ts := int64(ev.TimestampMs)
		var out string
		terminal := ""
		switch k := ev.Kind.(type) {
		case OrchestrationStarted:
			if ef.StartedAtMs == 0 {
				ef.StartedAtMs = ts
			}
			if v, err := ParseSemVer(ev.DuroxideVersion); err == nil && ef.Pinned == nil {
				s := v.String()
				ef.Pinned = &s
			}
		case OrchestrationCompleted:
			terminal, out = "Completed", k.Output
		case OrchestrationFailed:
			terminal = "Failed"
			if k.Details != nil {
				out = k.Details.DisplayMessage()
			}
		case OrchestrationContinuedAsNew:
			terminal, out = "ContinuedAsNew", k.Input
		}
		if terminal != "" {
			o, c := out, ts
			ef.Status, ef.Output, ef.CompletedAtMs = terminal, &o, &c
		}
	}
	if ef.StartedAtMs == 0 {
		ef.StartedAtMs = nowMs
	}
	return ef
}

// rebuildInstance reconstructs instance.json from the executions: the id
// from the key or the events, the record from the OrchestrationStarted
// events (name and version of the latest, parent of the first), custom
// status from the last CustomStatusUpdated (its version is the number of
// such events, at least the number of acks that carried one unless
// executions were pruned), counters from the files, and a last fence no
// lower than any record's or the lease's.
func (r *fsckRun) rebuildInstance(key string, execs []*fsckExec, leaseFence uint64) (*instanceFile, error) {
	id, err := decodeKey(key)
	for _, e := range execs {
		if e.lost {
			return nil, fmt.Errorf("the history of execution %d lost committed events", e.id)
		}
		if !e.eventsOK {
			return nil, fmt.Errorf("the history of execution %d is unreadable", e.id)
		}
		if err != nil && len(e.events) > 0 && e.events[0].InstanceID != "" {
			id, err = e.events[0].InstanceID, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the instance id of hashed key %s is in no event", key)
	}
	if gwHistories(execs) || r.gwHasMessages(key) {
		return nil, errGWRebuild
	}
	nf := &instanceFile{Instance: id, LastFence: leaseFence}
	var first, latest *OrchestrationStarted
	var custom *string
	var customN uint64
	var created, updated int64
	for _, e := range execs {
		if e.stateExists && e.state != nil {
			nf.Executions.Add(e.id)
			if s := e.state.StartedAtMs; s > 0 && (created == 0 || s < created) {
				created = s
			}
			updated = max(updated, e.state.StartedAtMs)
			if e.state.CompletedAtMs != nil {
				updated = max(updated, *e.state.CompletedAtMs)
			}
		}
		nf.TotalEvents += uint64(len(e.recs))
		for _, rec := range e.recs {
			nf.LastFence = max(nf.LastFence, rec.Epoch)
		}
		for _, ev := range e.events {
			updated = max(updated, int64(ev.TimestampMs))
			switch k := ev.Kind.(type) {
			case OrchestrationStarted:
				s := k
				if first == nil {
					first = &s
				}
				latest = &s
				if created == 0 {
					created = int64(ev.TimestampMs)
				}
			case CustomStatusUpdated:
				custom, customN = k.Status, customN+1
			case SubOrchestrationScheduled:
				nf.SubOrchestrations++
			}
		}
		nf.CurrentExecutionID = max(nf.CurrentExecutionID, e.id)
	}
	if last := nf.Executions.Last(); last > 0 {
		nf.CurrentExecutionID = last
	}
	for _, e := range execs {
		if e.id == nf.CurrentExecutionID && e.state != nil {
			nf.Status, nf.CompletedAtMs = e.state.Status, e.state.CompletedAtMs
		}
	}
	if updated == 0 {
		updated = r.nowMs()
	}
	nf.UpdatedAtMs = updated
	if latest != nil {
		v := latest.Version
		nf.Record = &instanceRecord{
			OrchestrationName: latest.Name, OrchestrationVersion: &v, ParentInstanceID: first.ParentInstance,
			CustomStatus: custom, CustomStatusVersion: customN, CreatedAtMs: created, UpdatedAtMs: updated,
		}
	}
	return nf, nil
}

// writeJSONFile atomically replaces path with v (temp file, fsync, rename,
// directory fsync).
func (r *fsckRun) writeJSONFile(path string, v any) error {
	data, err := jsonMarshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return r.p.writeFile(path, data)
}

// quarantineFile moves path into quarantine/ beside a .reason file (its
// manifest) and returns the new path relative to the directory. The reason
// is written first, so a crash leaves at worst a .reason file without its
// file (and the original in place, to be quarantined again).
func (r *fsckRun) quarantineFile(path, reason string) (string, error) {
	p := r.p
	dest, rel, err := r.quarantineDest(path)
	if err != nil {
		return "", err
	}
	if err := p.writeFile(dest+".reason", r.manifest(path, reason)); err != nil {
		return "", err
	}
	if err := p.fs.Rename(path, dest); err != nil {
		_ = p.fs.Remove(dest + ".reason")
		if vfs.IsNotExist(err) {
			return "", errVanished
		}
		return "", fmt.Errorf("move %s to %s: %w", path, dest, err)
	}
	if err := p.fs.SyncDir(filepath.Dir(dest)); err != nil {
		return "", fmt.Errorf("sync %s: %w", filepath.Dir(dest), err)
	}
	if err := p.fs.SyncDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("sync %s: %w", filepath.Dir(path), err)
	}
	return rel, nil
}

// quarantineName is a new file name in quarantine/ for the file at rel
// (relative to the directory): its path with "/" as "__" (shortened by a
// hash if long), and the time.
func quarantineName(rel string) string {
	base := strings.ReplaceAll(filepath.ToSlash(rel), "/", "__")
	if len(base) > 160 {
		sum := sha256.Sum256([]byte(base))
		base = base[:100] + "~" + hex.EncodeToString(sum[:8])
	}
	return base + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
}

// ---------------------------------------------------------------------------
// Queues

// scanQueue checks a queue's messages, staged messages and claims.
func (r *fsckRun) scanQueue(ctx context.Context, qname string, q *fsqueue.Queue) error {
	dir := q.Dir()
	names, err := r.p.fs.ReadDirNames(dir)
	if err != nil {
		return fmt.Errorf("durofs fsck: list %s: %w", dir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if rest, ok := strings.CutPrefix(n, ".staged-"); ok {
			if name, ok := strings.CutSuffix(rest, ".json"); ok && validMessageName(name) {
				if err := r.checkStaged(ctx, qname, q, name); err != nil {
					return err
				}
			}
			continue
		}
		name, ok := strings.CutSuffix(n, ".json")
		if !ok || !validMessageName(name) {
			continue
		}
		r.checkMessage(ctx, qname, q, name)
	}
	claims, err := q.Claims()
	if err != nil {
		return fmt.Errorf("durofs fsck: %w", err)
	}
	for _, name := range claims {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.checkClaim(ctx, qname, q, name)
	}
	return nil
}

// validMessageName reports whether s is a message name
// (<ULID>.<visible>.<route>: fsqueue, name.go).
func validMessageName(s string) bool { return fsqueue.ValidName(s) }

// parseMessage parses a message file of q and its work item; a body that
// does not match its name (name field, visibility time, route) is refused.
func parseMessage(q *fsqueue.Queue, data []byte, name string) (fsqueue.Message, WorkItem, error) {
	m, err := q.Decode(name, data)
	if err != nil {
		return m, nil, err
	}
	w, err := UnmarshalWorkItem(m.Payload)
	if err != nil {
		return m, nil, fmt.Errorf("payload is not a work item: %w", err)
	}
	return m, w, nil
}

// gone reports whether path no longer exists, checked after reading a
// queue file: a removed message's or claim's name never comes back, but its
// file may be recycled for another (fsqueue.Recycler), so bytes read from a
// file whose name is gone may be another file's.
func (r *fsckRun) gone(path string) bool {
	_, err := r.p.fs.Lstat(path)
	return vfs.IsNotExist(err)
}

// checkMessage parses one published message.
func (r *fsckRun) checkMessage(ctx context.Context, qname string, q *fsqueue.Queue, name string) {
	path := filepath.Join(q.Dir(), name+".json")
	data, err := r.p.fs.ReadFile(path)
	if vfs.IsNotExist(err) || (err == nil && r.gone(path)) {
		return // consumed meanwhile (and maybe recycled: the bytes may be another file's)
	}
	if err != nil {
		r.ioError(path, err)
		return
	}
	r.checked.Messages++
	key, msg, err := parseQueued(q, qname, data, name)
	if err == nil {
		r.msgs[key] = append(r.msgs[key], msg)
		return
	}
	f := r.add(FsckUnparseable, SeverityError, path, "%s message cannot be used: %v", qname, err)
	f.Action = "fsck --repair moves it to quarantine/"
	if !r.repair {
		return
	}
	reason := fmt.Sprintf("unusable %s message: %v", qname, err)
	if !claimedQueue(qname) {
		// Never in a batch (a fetch skips a message it cannot read), and
		// only an instance's commit deletes orchestrator messages: nobody
		// else touches it.
		dest, err := r.quarantineFile(path, reason)
		r.fixed(f, err, "moved to "+dest)
		return
	}
	var dest string
	err = q.WithClaim(ctx, name, func(*fsqueue.ClaimGuard) error {
		var err error
		if dest, err = r.quarantineFile(path, reason); err != nil {
			return err
		}
		if err := q.DeleteClaim(name); err != nil {
			return err
		}
		return q.SyncClaimsDir()
	})
	r.fixed(f, err, "moved to "+dest)
}

// stagedNamedByCommit reports whether a record of the log since its
// checkpoint publishes the staged message name (read without locks: used
// only to keep a damaged staged file, never to remove one).
func (r *fsckRun) stagedNamedByCommit(name string) bool {
	recs, _, _, err := r.p.scanLog()
	if err != nil {
		return true // cannot tell: keep it
	}
	for _, lr := range recs {
		if recordPublishes(lr.rec, name) {
			return true
		}
	}
	return false
}

// checkStaged checks one staged message: one older than MinAge is an orphan
// unless a pending commit names it, decided under the lock its writer held
// (as Recover's sweep does).
func (r *fsckRun) checkStaged(ctx context.Context, qname string, q *fsqueue.Queue, name string) error {
	p := r.p
	path := filepath.Join(q.Dir(), ".staged-"+name+".json")
	fi, err := p.fs.Lstat(path)
	if err != nil {
		return nil // published or removed meanwhile
	}
	r.checked.Staged++
	age := r.now.Sub(fi.ModTime())
	if age < r.opts.MinAge {
		return nil
	}
	m, err := q.ReadStaged(name)
	if errors.Is(err, fsqueue.ErrNotFound) {
		return nil
	}
	if err != nil {
		f := r.add(FsckUnparseable, SeverityError, path, "staged message cannot be parsed: %v", err)
		f.Action = "fsck --repair moves it to quarantine/ unless a pending commit names it"
		if r.stagedNamedByCommit(name) {
			f.Action = "not repairable: a pending commit names it and will publish it"
		} else if fi.Size() == 0 {
			// A writer stopped between its create and its write leaves an
			// empty staged file; it resumes, commits and publishes it by
			// rename (see tornStaged). Those of dead writers are removed
			// by a process that has the directory alone, before any
			// other can open it (registerForRepair, openLog): one seen
			// here belongs to a process that had it open or opened it
			// since.
			f.Detail = "empty staged message: a writer was stopped or killed between creating and writing it"
			f.Action = "fsck --repair removes it if no other process has the directory open (as does the first process to open it alone); beside live processes it stays, as it may be a stopped writer's, which writes and publishes it when it resumes"
			switch {
			case r.repair && r.regErr != nil:
				f.Action = fmt.Sprintf("not repairable: fsck could not register as a process of the directory to learn whether others use it (%v), and it may be a stopped writer's, which writes and publishes it when it resumes", r.regErr)
			case r.repair:
				f.Action = "not repairable while other processes use the directory: it may be a stopped writer's, which writes and publishes it when it resumes (the first process to open the directory alone removes it)"
			}
		} else if r.repair {
			dest, err := r.quarantineFile(path, fmt.Sprintf("unparseable staged message: %v", err))
			r.fixed(f, err, "moved to "+dest)
		}
		return nil
	}
	orphan := func(detail string) error {
		f := r.add(FsckStagedOrphan, SeverityWarning, path, "staged %s message %s old %s", qname, age.Round(time.Second), detail)
		f.Action = "fsck --repair (or any durofs process's recovery) removes it"
		if r.repair {
			r.fixed(f, p.removeStaged(q, name), "removed")
		}
		return nil
	}
	src := m.Attrs[attrSource]
	if rest, ok := strings.CutPrefix(src, "gwa:"); ok {
		return r.checkGWActStaged(ctx, rest, name, orphan)
	}
	if item, ok := strings.CutPrefix(src, "w:"); ok {
		err := p.workQ.WithClaim(ctx, item, func(g *fsqueue.ClaimGuard) error {
			c, exists, err := g.Read()
			if err != nil {
				return nil // an unparseable claim is reported by its own check
			}
			var data workAckData
			if exists && c.State == claimStateAcked {
				_ = json.Unmarshal(c.Data, &data)
			}
			if data.Completion == name {
				return nil // a pending work ack publishes it
			}
			return orphan(fmt.Sprintf("by an ack of work item %s that never committed", item))
		})
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.ioError(path, err)
		}
		return nil
	}
	if src == "" {
		return orphan("that names no source commit")
	}
	g, _, err := p.lockExisting(ctx, src, true)
	if errors.Is(err, lease.ErrGone) {
		return orphan(fmt.Sprintf("by an ack of %s that never committed", instanceIDOf(src)))
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.ioError(p.lockPath(src), err)
		return nil
	}
	defer g.Unlock()
	cur, _, err := g.Read()
	if err != nil && !errors.Is(err, lease.ErrCorrupt) {
		return nil // an unreadable lease is reported with its instance
	}
	if st := decodeOrchState(cur); st.Pending != nil {
		lr, err := p.findRecord(src, st.Pending)
		if err != nil || (lr != nil && recordPublishes(lr.rec, name)) {
			return nil // committed: the redo publishes it
		}
	}
	return orphan(fmt.Sprintf("by an ack of %s that never committed", instanceIDOf(src)))
}

// checkClaim checks one claim under its message's lock (none if the message
// is gone: the claim is then inert).
func (r *fsckRun) checkClaim(ctx context.Context, qname string, q *fsqueue.Queue, name string) {
	path := filepath.Join(q.Dir(), "claims", name+".json")
	err := q.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
		data, err := r.p.fs.ReadFile(path)
		if vfs.IsNotExist(err) || (err == nil && r.gone(path)) {
			return nil // removed meanwhile (and maybe recycled, see checkMessage)
		}
		if err != nil {
			r.ioError(path, err)
			return nil
		}
		r.checked.Claims++
		var c fsqueue.Claim
		err = json.Unmarshal(data, &c)
		if tokenOf, ok := fsqueue.NameFromToken(c.Token); err == nil && c.Token != "" && (!ok || tokenOf != name) {
			// A claim holding another message's token is not this
			// item's claim.
			err = fmt.Errorf("it holds the token %q of another message", c.Token)
		}
		if err != nil {
			f := r.add(FsckUnparseable, SeverityError, path, "claim cannot be parsed: %v", err)
			f.Action = "fsck --repair moves it to quarantine/ (the item, if still queued, is delivered again)"
			if r.repair {
				dest, err := r.quarantineFile(path, fmt.Sprintf("unparseable claim: %v", err))
				r.fixed(f, err, "moved to "+dest+"; the item, if still queued, is delivered again")
			}
			return nil
		}
		msgExists, err := g.MessageExists()
		if err != nil {
			r.ioError(path, err)
			return nil
		}
		_, serr := r.p.fs.Lstat(filepath.Join(q.Dir(), ".staged-"+name+".json"))
		switch {
		case c.State != "" && qname != "worker" && claimedQueue(qname):
			r.checkGWActClaim(q, g, path, c)
		case c.State != "" && qname == "worker":
			var data workAckData
			_ = json.Unmarshal(c.Data, &data)
			f := r.add(FsckPendingCommit, SeverityWarning, path, "work item ack committed (claim state %q) but not finished", c.State)
			if data.Completion != "" {
				f.Detail += "; completion " + data.Completion + " to publish"
			}
			f.Action = "fsck --repair (or any durofs process's recovery) finishes it"
			if r.repair {
				r.fixed(f, r.p.redoWorkAck(g), "finished: applied if its record is in the log, else the claim is put back")
			}
		case !msgExists && vfs.IsNotExist(serr):
			f := r.add(FsckOrphanClaim, SeverityWarning, path, "claim of a %s message that no longer exists", qname)
			f.Action = "fsck --repair (or any durofs process's sweep) removes it"
			if r.repair {
				err := q.DeleteClaim(name)
				if err == nil {
					err = q.SyncClaimsDir()
				}
				r.fixed(f, err, "removed")
			}
		case c.Token != "" && c.LockedUntilMs <= r.nowMs():
			r.add(FsckExpiredLease, SeverityInfo, path, "claim of %q (attempt %d) expired at %s, %s ago; the next fetch delivers the item again",
				c.Owner, c.Attempt, fmtMs(c.LockedUntilMs), ago(r.now, c.LockedUntilMs))
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		r.ioError(path, err)
	}
}

// checkUnknownInstances reports queued messages of instances that do not
// exist and are not about to.
func (r *fsckRun) checkUnknownInstances() {
	keys := make([]string, 0, len(r.msgs))
	for k := range r.msgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if r.known[k] {
			continue
		}
		msgs := r.msgs[k]
		if slices.ContainsFunc(msgs, func(m fsckMsg) bool { return m.kind == "StartOrchestration" || m.kind == "ContinueAsNew" }) {
			continue
		}
		// Created since the instance pass?
		if _, err := r.p.fs.Lstat(r.p.instFilePath(k)); err == nil {
			continue
		}
		if ids, err := r.p.listExecutions(k); err == nil && len(ids) > 0 {
			continue
		}
		oldest := msgs[0].enqueuedAtMs
		kinds := map[string]int{}
		for _, m := range msgs {
			oldest = min(oldest, m.enqueuedAtMs)
			kinds[m.queue+" "+m.kind]++
		}
		var parts []string
		for kk, n := range kinds {
			parts = append(parts, fmt.Sprintf("%d %s", n, kk))
		}
		sort.Strings(parts)
		sev := SeverityInfo
		if r.now.Sub(time.UnixMilli(oldest)) >= r.opts.StaleAfter {
			sev = SeverityWarning
		}
		m0 := msgs[0]
		f := r.add(FsckUnknownInstance, sev, filepath.Join(r.p.dir, "queues", m0.queue, m0.name+".json"),
			"message(s) for instance %q, which has no instance.json, no history and no queued start: %s; oldest enqueued %s ago",
			m0.instance, strings.Join(parts, ", "), ago(r.now, oldest))
		f.Action = fmt.Sprintf("not repaired by fsck; if the instance will never start: durofs drain %s", shellQuote(m0.instance))
	}
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ---------------------------------------------------------------------------
// Sessions, temporary files

func (r *fsckRun) scanSessions(ctx context.Context) error {
	dir := filepath.Join(r.p.dir, "sessions")
	names, err := r.p.fs.ReadDirNames(dir)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("durofs fsck: list %s: %w", dir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		k, ok := strings.CutSuffix(n, ".json")
		if !ok || vfs.IsTemp(n) {
			continue
		}
		path := filepath.Join(dir, n)
		g, err := r.p.leases.Lock(ctx, filepath.Join(dir, k+".lock"), path)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.ioError(path, err)
			continue
		}
		l, exists, err := g.Read()
		switch {
		case errors.Is(err, lease.ErrCorrupt):
			f := r.add(FsckUnparseable, SeverityError, path, "session row cannot be parsed: %s", cause(err, path))
			f.Action = "fsck --repair moves it to quarantine/ (the session is free again)"
			if r.repair {
				dest, err := r.quarantineFile(path, fmt.Sprintf("unparseable session row: %v", err))
				r.fixed(f, err, "moved to "+dest+"; the session is free again")
			}
		case err != nil:
			r.ioError(path, err)
		case exists:
			r.checked.Sessions++
			if l.Token != "" && !l.HeldAt(r.nowMs()) {
				var sd sessionData
				_ = json.Unmarshal(l.Data, &sd)
				r.add(FsckExpiredLease, SeverityInfo, path, "session %q of owner %q expired at %s, %s ago; cleanup_orphaned_sessions removes it once no work item references it",
					sd.SessionID, l.Owner, fmtMs(l.ExpiresAtMs), ago(r.now, l.ExpiresAtMs))
			}
		}
		g.Unlock()
	}
	return nil
}

// scanTemps reports temporary files older than MinAge anywhere in the
// directory, and counts quarantined files.
func (r *fsckRun) scanTemps(ctx context.Context) error {
	qdir := filepath.Join(r.p.dir, "quarantine")
	return r.p.walk(ctx, r.p.dir, func(path string, fi os.FileInfo) error {
		if fi.IsDir() {
			return nil
		}
		if filepath.Dir(path) == qdir && !vfs.IsTemp(fi.Name()) && !strings.HasSuffix(fi.Name(), ".reason") {
			r.checked.Quarantined++
		}
		if !vfs.IsTemp(fi.Name()) {
			return nil
		}
		r.checked.TempFiles++
		age := r.now.Sub(fi.ModTime())
		if age < r.opts.MinAge {
			return nil
		}
		f := r.add(FsckTempFile, SeverityWarning, path, "temporary file of an interrupted write, %s old", age.Round(time.Second))
		f.Action = "fsck --repair removes it"
		if r.repair {
			err := r.p.fs.Remove(path)
			if vfs.IsNotExist(err) {
				err = nil
			}
			if err == nil {
				err = r.p.fs.SyncDir(filepath.Dir(path))
			}
			r.fixed(f, err, "removed")
		}
		return nil
	})
}
