package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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
}

// RecoveryStats returns this provider's recovery counters.
func (p *FSProvider) RecoveryStats() RecoveryStats {
	return RecoveryStats{
		CommitsRedone: p.stats.redone.Load(), ApplyDeferred: p.stats.applyDeferred.Load(),
		WorkAcksFinished: p.stats.acksFinished.Load(), Sweeps: p.stats.sweeps.Load(),
		TornTailsRepaired: p.stats.tornTails.Load(), TempFilesSwept: p.stats.tempsSwept.Load(),
		StagedOrphansRemoved: p.stats.stagedSwept.Load(),
	}
}

// Recover finishes every commit left pending by a dead process: orchestration
// acks (commits/), work-item acks (acked claims), and removes stale temporary
// files. It costs O(pending work), not O(instances): commit records live in
// one directory that is empty when nothing is pending. Open calls it; the
// background sweep calls it periodically because a finished instance may
// never be fetched again.
func (p *FSProvider) Recover(ctx context.Context) error {
	return p.recoverPass(ctx, 0, true)
}

// recoverPass is one recovery pass. The background sweep passes a minimum
// record age and wait=false: a record younger than that most likely belongs
// to a live commit that its writer is applying right now, and waiting on its
// flock would only make concurrent fetches skip the instance. Open passes 0
// and true: everything pending is finished before the provider serves.
func (p *FSProvider) recoverPass(ctx context.Context, minAge time.Duration, wait bool) error {
	p.stats.sweeps.Add(1)
	dir := filepath.Join(p.dir, "commits")
	entries, err := p.fs.ReadDirNames(dir)
	if err != nil {
		return fmt.Errorf("list commits: %w", err)
	}
	for _, n := range entries {
		if vfs.IsTemp(n) {
			continue
		}
		key, ok := strings.CutSuffix(n, ".json")
		if !ok {
			continue
		}
		if minAge > 0 {
			fi, err := p.fs.Lstat(filepath.Join(dir, n))
			if err != nil || time.Since(fi.ModTime()) < minAge {
				continue // gone already, or probably being applied by its writer
			}
		}
		if strings.HasPrefix(key, groupPrefix) {
			if err := p.recoverDeleteGroup(ctx, key); err != nil {
				return fmt.Errorf("finish deletion %s: %w", key, err)
			}
			continue
		}
		var g *lease.Guard
		if wait {
			g, err = p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
		} else {
			var ok bool
			g, ok, err = p.leases.TryLock(p.lockPath(key), p.leasePath(key))
			if err == nil && !ok {
				continue // its holder redoes it before anything else
			}
		}
		if err != nil {
			return fmt.Errorf("lock %s: %w", key, err)
		}
		err = p.redoPending(ctx, g, key)
		g.Unlock()
		if err != nil {
			return fmt.Errorf("redo commit of %s: %w", key, err)
		}
	}
	done, err := p.finishAckedClaims(ctx)
	p.stats.acksFinished.Add(int64(done))
	if err != nil {
		return fmt.Errorf("finish work acks: %w", err)
	}
	if err := p.sweepStaged(ctx, 10*time.Second); err != nil {
		return fmt.Errorf("sweep staged messages: %w", err)
	}
	return p.sweepTemps(time.Minute)
}

// sweepStaged removes staged messages whose commit never happened: their
// writer died after staging and before its commit point. A staged file
// names its source: the instance whose ack staged it (attrs "src" = its key)
// or "w:<worker item>" for a work ack's completion. The decision is taken
// under the source's lock - the instance flock, or the worker item's claim
// lock - which the writer holds from staging until its commit point, so a
// live commit is never mistaken for an orphan: under that lock, a staged file
// is live exactly when a pending commit names it.
func (p *FSProvider) sweepStaged(ctx context.Context, minAge time.Duration) error {
	for _, q := range []*fsqueue.Queue{p.orchQ, p.workQ} {
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
				// Left partial by a crash while it was written: nothing
				// names it (a commit record is written only after its
				// staged files are complete), so it is an orphan.
				if err := p.removeStaged(q, sf.Name); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				continue // published or removed meanwhile
			}
			src := m.Attrs[attrSource]
			if item, ok := strings.CutPrefix(src, "w:"); ok {
				err = p.workQ.WithClaim(ctx, item, func(g *fsqueue.ClaimGuard) error {
					c, exists, err := g.Read()
					if errors.Is(err, fsqueue.ErrCorrupt) {
						exists = false // unreadable: a volatile claim, never an acked one
					} else if err != nil {
						return err
					}
					var data workAckData
					if exists && c.State == claimStateAcked {
						_ = json.Unmarshal(c.Data, &data)
					}
					if data.Completion == sf.Name {
						return nil // committed: finishAckedClaims publishes it
					}
					return p.removeStaged(q, sf.Name)
				})
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
			g, ok, err := p.leases.TryLock(p.lockPath(src), p.leasePath(src))
			if err != nil {
				return err
			}
			if !ok {
				continue // its instance is busy; next sweep
			}
			err = func() error {
				defer g.Unlock()
				var rec commitRecord
				exists, err := p.readJSON(p.commitPath(src), &rec)
				if err != nil && !errors.Is(err, ErrCorrupt) {
					return err
				}
				if exists && slices.ContainsFunc(rec.Publish, func(r queueRef) bool { return r.Name == sf.Name }) {
					return p.redoPending(ctx, g, src) // committed: publish it now
				}
				return p.removeStaged(q, sf.Name)
			}()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *FSProvider) removeStaged(q *fsqueue.Queue, name string) error {
	if err := q.Unstage(name); err != nil {
		return err
	}
	p.stats.stagedSwept.Add(1)
	return q.SyncDir()
}

// sweepTemps removes temporary files older than age left by killed writers.
func (p *FSProvider) sweepTemps(age time.Duration) error {
	ctx := context.Background()
	for _, q := range []*fsqueue.Queue{p.orchQ, p.workQ} {
		st, err := q.Sweep(ctx, age)
		if err != nil {
			return err
		}
		p.stats.tempsSwept.Add(int64(st.TempRemoved))
	}
	for _, dir := range []string{filepath.Join(p.dir, "commits"), p.tmpDir} {
		if err := p.sweepTempDir(dir, age); err != nil {
			return err
		}
	}
	return nil
}

// spareSweepAge is how long another process's spare file (fs_spares.go)
// must have been left untouched - neither written nor moved, by its mtime
// and ctime (a removed message retired as a spare keeps its old mtime) -
// before a sweeper removes it: its process is most likely gone. Removing a spare that is still in use is safe (the
// replace writing it notices and takes a new one), merely wasteful.
const spareSweepAge = 10 * time.Minute

// sweepNow is the real time the temp sweep judges file times by (a test
// moves it: a file's ctime cannot be set back).
var sweepNow = time.Now

// sweepTempDir removes temporary files older than age from one directory,
// and spares of other processes untouched for spareSweepAge.
func (p *FSProvider) sweepTempDir(dir string, age time.Duration) error {
	entries, err := p.fs.ReadDirNames(dir)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, n := range entries {
		minAge, spare := age, false
		switch {
		case vfs.IsTemp(n):
		case vfs.IsSpare(n) && !p.spares.Owns(n):
			minAge, spare = max(age, spareSweepAge), true
		default:
			continue
		}
		path := filepath.Join(dir, n)
		fi, err := p.fs.Lstat(path)
		if err != nil {
			continue
		}
		touched := fi.ModTime() // a temporary file is written once, then renamed away
		if spare {
			touched = latest(touched, vfs.ChangeTime(fi))
		}
		if sweepNow().Sub(touched) > minAge {
			if p.fs.Remove(path) == nil {
				p.stats.tempsSwept.Add(1)
			}
		}
	}
	return nil
}

func (p *FSProvider) sweepLoop(interval time.Duration) {
	defer p.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), interval*4)
			if err := p.recoverPass(ctx, 2*time.Second, false); err != nil {
				p.log.Warn("durofs: background recovery", "err", err)
			}
			cancel()
		}
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

func decodeKey(key string) (string, error) { return names.Decode(key) }

// latest returns the later of two times.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
