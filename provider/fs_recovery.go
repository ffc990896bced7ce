package provider

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/lease"
)

var errorsIs = errors.Is

// recoveryStats counts recovery work, for the crash suite and operators.
type recoveryStats struct {
	redone        atomic.Int64 // commit records applied by someone other than their writer
	applyDeferred atomic.Int64 // commits whose apply failed after the commit point
	acksFinished  atomic.Int64 // work acks finished by recovery
	sweeps        atomic.Int64
	tornTails     atomic.Int64 // torn history tails truncated by a redo
	tempsSwept    atomic.Int64 // temporary files of killed writers removed
	stagedSwept   atomic.Int64 // staged messages of commits that never happened, removed
	replayed      atomic.Int64 // log records replayed by a process that had the directory alone
	applyFailures atomic.Int64 // failed applies of committed records (fs_stuck.go)
	stuckSkips    atomic.Int64 // fetches that passed over an instance whose commit cannot be applied
	parked        atomic.Int64 // records moved out of the log into unapplied/

	checkpoints, checkpointSyncs atomic.Int64 // LogStats
}

// RecoveryStats are counters of recovery work done by this provider.
type RecoveryStats struct {
	// CommitsRedone counts commit records found pending and applied.
	CommitsRedone int64
	// ApplyDeferred counts commits whose apply failed after the commit point
	// and was left to recovery.
	ApplyDeferred int64
	// WorkAcksFinished counts work-item acks finished by recovery.
	WorkAcksFinished int64
	// Sweeps counts recovery passes.
	Sweeps int64
	// TornTailsRepaired counts torn history tails truncated by a redo.
	TornTailsRepaired int64
	// TempFilesSwept counts temporary files of killed writers removed.
	TempFilesSwept int64
	// StagedOrphansRemoved counts staged messages whose commit never
	// happened (the writer died before its commit point), removed.
	StagedOrphansRemoved int64
	// RecordsReplayed counts write-ahead log records replayed at Open by a
	// process that had the directory alone.
	RecordsReplayed int64
	// ApplyFailures counts failed applies of committed records (the commit
	// is kept and retried; see StuckCommits). StuckSkips counts the times a
	// fetch passed over an instance because its commit cannot be applied.
	// CommitsParked counts such records moved out of the write-ahead log so
	// that the checkpoint could pass them.
	ApplyFailures, StuckSkips, CommitsParked int64
}

// RecoveryStats returns this provider's recovery counters.
func (p *FSProvider) RecoveryStats() RecoveryStats {
	return RecoveryStats{
		CommitsRedone: p.stats.redone.Load(), ApplyDeferred: p.stats.applyDeferred.Load(),
		WorkAcksFinished: p.stats.acksFinished.Load(), Sweeps: p.stats.sweeps.Load(),
		TornTailsRepaired: p.stats.tornTails.Load(), TempFilesSwept: p.stats.tempsSwept.Load(),
		RecordsReplayed:      p.stats.replayed.Load(),
		StagedOrphansRemoved: p.stats.stagedSwept.Load(),
		ApplyFailures:        p.stats.applyFailures.Load(), StuckSkips: p.stats.stuckSkips.Load(),
		CommitsParked: p.stats.parked.Load(),
	}
}

// Recover finishes every commit a dead process left unapplied: it visits
// every record of the write-ahead log since the last checkpoint (so its cost
// is proportional to recent work, not to the number of instances), redoes
// those still marked pending, finishes work acks whose writer died, and
// removes staged orphans and stale temporary files. Open calls it; the
// background sweep calls it periodically. The log's records are visited
// under wal/checkpoint.lock: if another process holds it for longer than
// checkpointTimeout (it is at the same work, or it is stopped), Recover
// leaves them to it, to the fetches (each finishes its instance's pending
// commit before serving it) and to the later sweeps, and goes on with the
// rest; no process can hold an Open up by holding that lock.
func (p *FSProvider) Recover(ctx context.Context) error {
	return p.recoverPass(ctx, 0, true)
}

// recoverPass is one recovery pass. The background sweep passes a minimum
// age for staged files: a younger one most likely belongs to a commit its
// writer is making right now. With wait (Recover) it waits for a checkpoint
// another process (or goroutine) is running to finish, then checks every
// record itself, and looks for staged and temporary files in every queue
// directory; without (the background sweep) it skips the records then, and
// looks only in the queues this process keeps an index of (sweepsDir).
func (p *FSProvider) recoverPass(ctx context.Context, stagedAge time.Duration, wait bool) error {
	p.stats.sweeps.Add(1)
	if err := p.checkpointOnce(ctx, false, wait); err != nil {
		return fmt.Errorf("finish logged commits: %w", err)
	}
	done, err := p.finishAckedClaims(ctx)
	p.stats.acksFinished.Add(int64(done))
	if err != nil {
		return fmt.Errorf("finish work acks: %w", err)
	}
	all := wait
	var qs []*fsqueue.Queue
	for _, q := range []*fsqueue.Queue{p.orchQ, p.workQ} {
		if sweepsDir(q, all) {
			qs = append(qs, q)
		}
	}
	if err := p.sweepStagedOf(ctx, max(stagedAge, 10*time.Second), qs); err != nil {
		return fmt.Errorf("sweep staged messages: %w", err)
	}
	if err := p.gwSweep(ctx, max(stagedAge, 10*time.Second), time.Minute, all); err != nil {
		return fmt.Errorf("sweep workflow queues: %w", err)
	}
	return p.sweepTemps(time.Minute, all)
}

// sweepsDir reports whether a recovery pass looks for staged and temporary
// files in q's directory: with all (Recover, at Open) always, else (the
// background sweep) only if this process keeps q's index (it fetches from
// q: fsqueue.Queue.Indexed). There the index, kept current by the
// directory watch, names them at a cost proportional to the changes since
// the last look; in a process that does not fetch from q (an enqueuing
// client) they would cost a listing of every queued message every
// SweepInterval. A dead process's leftovers in q are removed by the
// background sweep of any process that fetches from q, within
// SweepInterval once they are old enough (10 s staged, a minute
// temporary), or by the next Open; a queue that no process consumes keeps
// them until one does, at a cost of disk space only: a staged file that a
// logged commit names is published by the log's redo, not by this sweep.
// The claims/ side (temporary files, orphan claims) is swept in every
// pass, at a cost of the messages in flight (fsqueue.Queue.SweepClaims).
func sweepsDir(q *fsqueue.Queue, all bool) bool { return all || q.Indexed() }

// sweepStaged removes staged messages whose commit never happened: their
// writer died after staging and before its commit point. A staged file
// names its source: the instance whose ack staged it (attrs "src" = its key)
// or "w:<worker item>" for a work ack's completion. The decision is taken
// under the source's lock - the instance flock, or the worker item's claim
// lock - which the writer holds from staging until its apply: under it, a
// pending mark is finished first (publishing what its record names), and
// whatever staged file is left belongs to no commit.
func (p *FSProvider) sweepStaged(ctx context.Context, minAge time.Duration) error {
	return p.sweepStagedOf(ctx, minAge, []*fsqueue.Queue{p.orchQ, p.workQ})
}

// sweepStagedOf is sweepStaged of the queues qs (of orchQ and workQ).
func (p *FSProvider) sweepStagedOf(ctx context.Context, minAge time.Duration, qs []*fsqueue.Queue) error {
	for _, q := range qs {
		staged, err := q.Staged()
		if err != nil {
			return err
		}
		for _, sf := range staged {
			if time.Since(sf.ModTime) < minAge {
				continue
			}
			m, err := q.ReadStaged(sf.Name)
			if errors.Is(err, fsqueue.ErrCorrupt) {
				if !p.tornStaged(q, sf.Name, minAge) {
					continue // maybe a live writer's, between its create and its write
				}
				// Left partial by a crash while it was written: its record,
				// if any, carries its bytes; the file itself is garbage.
				m = fsqueue.Message{}
			} else if err != nil {
				continue // published or removed meanwhile
			}
			src := m.Attrs[attrSource]
			if item, ok := strings.CutPrefix(src, "w:"); ok {
				// Its writer holds the item's lock from staging to apply: a
				// writer stopped there (SIGSTOP) must not hold up the pass,
				// nor Open's recovery. Busy: the file is decided next pass.
				wctx, cancel := context.WithTimeout(ctx, claimBusyWait)
				err = p.workQ.WithClaim(wctx, item, func(g *fsqueue.ClaimGuard) error {
					if err := p.redoWorkAck(g); err != nil {
						return err
					}
					return p.removeStaged(q, sf.Name)
				})
				cancel()
				if claimLockBusy(ctx, err) {
					continue // its writer is at it: it may still commit this file
				}
				if isStuck(err) {
					continue // its work ack cannot be applied yet: it may publish this file
				}
				if err != nil {
					return err
				}
				continue
			}
			if src == "" {
				if err := p.removeStaged(q, sf.Name); err != nil {
					return err
				}
				continue
			}
			g, ok, err := p.lockExisting(ctx, src, false)
			if errors.Is(err, lease.ErrGone) {
				// No instance, no commit of it to publish this file.
				if err := p.removeStaged(q, sf.Name); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				p.warnUnusable(src, instanceIDOf(src), err)
				continue // one instance that cannot be locked must not stop the pass
			}
			if !ok {
				continue // its instance is busy; next sweep
			}
			err = p.redoPending(ctx, g, src)
			if err == nil {
				err = p.removeStaged(q, sf.Name)
			}
			g.Unlock()
			if isStuck(err) {
				continue // its commit cannot be applied yet: it may publish this file
			}
			if err != nil && p.wal.Err() == nil && !errors.Is(err, ctx.Err()) {
				p.warnUnusable(src, instanceIDOf(src), err)
				continue // this instance's files fail: decided on the next pass
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// tornStaged reports whether q's staged file name, which does not parse
// (read after the caller listed it), was left partial by a writer that
// died, so that it can be removed without its writer's lock (which its
// unreadable source does not name). A staged file is written in place
// (vfs.WriteNew): created, then written with one write. A writer stopped
// (SIGSTOP) between the two leaves an empty file for as long as it is
// stopped, then resumes, writes, commits and publishes it by rename: an
// empty file is never removed here (a dead writer's is left to fsck
// --repair). A write updates the file's time before its bytes land, so a
// partial read of a write in progress finds the file younger than minAge.
// What is left - non-empty, unparseable, unwritten for minAge - is a
// writer's that died in the middle of its write (or a power loss's).
func (p *FSProvider) tornStaged(q *fsqueue.Queue, name string, minAge time.Duration) bool {
	fi, err := p.fs.Lstat(filepath.Join(q.Dir(), ".staged-"+name+".json"))
	return err == nil && fi.Size() > 0 && time.Since(fi.ModTime()) >= minAge
}

// removeEmptyStaged removes the empty staged files of every queue and
// returns their paths (those removed before an error too). Only a process
// that has the log alone (before Ready) calls it: no writer is alive then,
// so none is between its create and its write.
func (p *FSProvider) removeEmptyStaged() ([]string, error) {
	qs := []*fsqueue.Queue{p.orchQ, p.workQ}
	err := p.gwEachQueue(func(_ string, _ bool, q *fsqueue.Queue) error {
		qs = append(qs, q)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, q := range qs {
		staged, err := q.Staged()
		if err != nil {
			return removed, err
		}
		for _, sf := range staged {
			path := filepath.Join(q.Dir(), ".staged-"+sf.Name+".json")
			fi, err := p.fs.Lstat(path)
			if err == nil && fi.Size() == 0 {
				if err := p.removeStaged(q, sf.Name); err != nil {
					return removed, err
				}
				removed = append(removed, path)
			}
		}
	}
	return removed, nil
}

// claimLockBusy reports whether err is a bounded wait for a claim lock
// that ran out while ctx (the caller's) is still live: the lock's holder is
// in a section on the item (or stopped in one), and the caller goes on
// without it.
func claimLockBusy(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}

// removeStaged removes an orphan staged file and counts it. One that is
// gone is not counted: the redo that runs first under the source's lock
// publishes the staged files its record names (renames them away), and
// those were never orphans.
func (p *FSProvider) removeStaged(q *fsqueue.Queue, name string) error {
	if _, err := p.fs.Lstat(filepath.Join(q.Dir(), ".staged-"+name+".json")); vfs.IsNotExist(err) {
		return nil
	}
	if err := q.Unstage(name); err != nil {
		return err
	}
	p.stats.stagedSwept.Add(1)
	return nil
}

// sweepTemps removes temporary files older than age left by killed writers
// (and orphan claims): in every queue directory with all, else in those
// this process keeps the index of (sweepsDir), and in every claims/.
func (p *FSProvider) sweepTemps(age time.Duration, all bool) error {
	ctx := context.Background()
	for _, q := range []*fsqueue.Queue{p.orchQ, p.workQ} {
		sweep := q.SweepClaims
		if sweepsDir(q, all) {
			sweep = q.Sweep
		}
		st, err := sweep(ctx, age)
		if err != nil {
			return err
		}
		p.stats.tempsSwept.Add(int64(st.TempRemoved))
	}
	return p.sweepTempDir(p.tmpDir, age)
}

// sweepNow is the real time the temp sweep judges file times by.
var sweepNow = time.Now

// sweepTempDir removes temporary files older than age from one directory.
func (p *FSProvider) sweepTempDir(dir string, age time.Duration) error {
	entries, err := p.fs.ReadDirNames(dir)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, n := range entries {
		if !vfs.IsTemp(n) {
			continue
		}
		path := filepath.Join(dir, n)
		fi, err := p.fs.Lstat(path)
		if err != nil {
			continue
		}
		if sweepNow().Sub(fi.ModTime()) > age {
			if p.fs.Remove(path) == nil {
				p.stats.tempsSwept.Add(1)
			}
		}
	}
	return nil
}

// sweepRound is one round of the background sweep (every interval).
func (p *FSProvider) sweepRound(interval time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), interval*4)
	defer cancel()
	if err := p.recoverPass(ctx, 2*time.Second, false); err != nil {
		p.log.Warn("durofs: background recovery", "err", err)
	}
}

// quarantine stores data under quarantine/<name> with a <name>.reason file.
func (p *FSProvider) quarantine(name, reason string, data []byte) error {
	dir := filepath.Join(p.dir, "quarantine")
	if err := p.writeFile(filepath.Join(dir, name), data); err != nil {
		return err
	}
	return p.writeFile(filepath.Join(dir, name+".reason"), []byte(reason+"\n"))
}

// quarantineOrch moves an orchestrator message that cannot be used aside.
func (p *FSProvider) quarantineOrch(name, reason string) {
	m, err := p.orchQ.Get(name)
	if err == nil {
		data, _ := jsonMarshal(m)
		err = p.quarantine("orchestrator-"+name+".json", reason, data)
	}
	if err == nil {
		err = p.orchQ.Delete(name)
	}
	if err == nil {
		err = p.orchQ.SyncDir()
	}
	p.log.Warn("durofs: quarantined orchestrator message", "message", name, "reason", reason, "err", err)
}

// quarantineWork moves a worker item whose payload is not a work item aside,
// under the item's own lock (its claim, which the caller holds, is dropped
// with it). If the move fails, the claim is rolled back instead and the
// item stays queued (fsck reports it; --repair moves it).
func (p *FSProvider) quarantineWork(ctx context.Context, name, token, reason string) {
	err := p.workQ.WithClaim(ctx, name, func(g *fsqueue.ClaimGuard) error {
		m, err := p.workQ.Get(name)
		if err != nil {
			return err
		}
		data, err := jsonMarshal(m)
		if err != nil {
			return err
		}
		if err := p.quarantine("worker-"+name+".json", reason, data); err != nil {
			return err
		}
		if err := p.workQ.DeleteMessage(name); err != nil {
			return err
		}
		if err := p.workQ.SyncDir(); err != nil {
			return err
		}
		return g.Remove()
	})
	if err != nil {
		_ = p.workQ.Abandon(ctx, token, 0, true)
		p.log.Error("durofs: could not quarantine an undecodable work item; it stays queued", "item", name, "reason", reason, "err", err)
		return
	}
	p.log.Warn("durofs: quarantined worker item", "item", name, "reason", reason)
}

func decodeKey(key string) (string, error) { return names.Decode(key) }
