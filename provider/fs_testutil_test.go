package provider

import (
	"context"
	"testing"
	"time"

	"github.com/durofs/durofs/lease"
)

func openT(t testing.TB, dir string, opts Options) *FSProvider {
	t.Helper()
	p, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func mustNoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func started(inst string) Event {
	return Event{EventID: 1, InstanceID: inst, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.26",
		Kind: OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"}}
}

func md(name, version string) ExecutionMetadata {
	return ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version}
}

// logCommit commits rec for its instance (marks the lease, appends to the
// log, syncs) and does not apply it: the state a writer killed right after
// its commit point leaves.
func logCommit(t *testing.T, p *FSProvider, rec *commitRecord) {
	t.Helper()
	g, err := p.leases.Lock(context.Background(), p.lockPath(rec.Key), p.leasePath(rec.Key))
	mustNoErr(t, err)
	defer g.Unlock()
	mustNoErr(t, p.commitLocked([]*lease.Guard{g}, rec))
}
