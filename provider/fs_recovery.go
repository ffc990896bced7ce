package provider

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/durofs/durofs/internal/names"
	"github.com/durofs/durofs/internal/vfs"
)

var errorsIs = errors.Is

// recoveryStats counts recovery work, for the crash suite and operators.
type recoveryStats struct {
	redone        atomic.Int64 // commit records applied by someone other than their writer
	applyDeferred atomic.Int64 // commits whose apply failed after the commit point
	acksFinished  atomic.Int64 // work acks finished by recovery
	sweeps        atomic.Int64
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
}

// RecoveryStats returns this provider's recovery counters.
func (p *FSProvider) RecoveryStats() RecoveryStats {
	return RecoveryStats{
		CommitsRedone: p.stats.redone.Load(), ApplyDeferred: p.stats.applyDeferred.Load(),
		WorkAcksFinished: p.stats.acksFinished.Load(), Sweeps: p.stats.sweeps.Load(),
	}
}

// Recover finishes every commit left pending by a dead process: orchestration
// acks (commits/), work-item acks (acked claims), and removes stale temporary
// files. It costs O(pending work), not O(instances): commit records live in
// one directory that is empty when nothing is pending. Open calls it; the
// background sweep calls it periodically because a finished instance may
// never be fetched again.
func (p *FSProvider) Recover(ctx context.Context) error {
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
		if strings.HasPrefix(key, groupPrefix) {
			if err := p.recoverDeleteGroup(ctx, key); err != nil {
				return fmt.Errorf("finish deletion %s: %w", key, err)
			}
			continue
		}
		g, err := p.leases.Lock(ctx, p.lockPath(key), p.leasePath(key))
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
	return p.sweepTemps(time.Minute)
}

// sweepTemps removes temporary files older than age left by killed writers.
func (p *FSProvider) sweepTemps(age time.Duration) error {
	ctx := context.Background()
	if _, err := p.orchQ.Sweep(ctx, age); err != nil {
		return err
	}
	if _, err := p.workQ.Sweep(ctx, age); err != nil {
		return err
	}
	dir := filepath.Join(p.dir, "commits")
	entries, err := p.fs.ReadDirNames(dir)
	if err != nil {
		return err
	}
	for _, n := range entries {
		if !vfs.IsTemp(n) {
			continue
		}
		path := filepath.Join(dir, n)
		if fi, err := p.fs.Lstat(path); err == nil && time.Since(fi.ModTime()) > age {
			_ = p.fs.Remove(path)
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
			if err := p.Recover(ctx); err != nil {
				p.log.Warn("durofs: background recovery", "err", err)
			}
			cancel()
		}
	}
}

// quarantine stores data under quarantine/<name> with a <name>.reason file.
func (p *FSProvider) quarantine(name, reason string, data []byte) error {
	dir := filepath.Join(p.dir, "quarantine")
	if err := vfs.WriteFile(p.fs, filepath.Join(dir, name), data); err != nil {
		return err
	}
	return vfs.WriteFile(p.fs, filepath.Join(dir, name+".reason"), []byte(reason+"\n"))
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
