package provider

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

func TestSweepStaged(t *testing.T) {
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	createInstance(t, p, "committed")
	createInstance(t, p, "aborted")
	stage := func(src string) string {
		t.Helper()
		m, err := p.orchMessage(ExternalRaised{Instance: "committed", Name: "e", Data: src}, p.nowMs(), p.nowMs(), src)
		mustNoErr(t, err)
		m = named(p.orchQ, m)
		mustNoErr(t, p.orchQ.Stage(m))
		return m.Name
	}
	orphanInst := stage(instanceKey("aborted"))        // its writer died before the commit point
	orphanWork := stage("w:" + p.workQ.NewName(0, "")) // a work ack that never committed
	orphanNone := stage("")                            // no source at all
	live := stage(instanceKey("committed"))            // named by a logged record its lease marks pending
	// A staged file cut short by a crash while it was written under its
	// staged name (an ack stages in place, unsynced: fsqueue.StageData):
	// its writer died before its commit point, so it is an orphan too.
	full, err := p.orchMessage(ExternalRaised{Instance: "committed", Name: "e", Data: "x"}, p.nowMs(), p.nowMs(), instanceKey("committed"))
	mustNoErr(t, err)
	full = named(p.orchQ, full)
	torn := named(p.orchQ, full).Name
	mustNoErr(t, p.orchQ.StageDeferred(full))
	whole, err := p.fs.ReadFile(filepath.Join(p.dir, "queues", "orchestrator", ".staged-"+full.Name+".json"))
	mustNoErr(t, err)
	mustNoErr(t, p.orchQ.Unstage(full.Name))
	mustNoErr(t, writeFileForTest(p, filepath.Join(p.dir, "queues", "orchestrator", ".staged-"+torn+".json"), whole[:len(whole)/2]))
	liveData, err := p.fs.ReadFile(filepath.Join(p.orchQ.Dir(), ".staged-"+live+".json"))
	mustNoErr(t, err)
	logCommit(t, p, &commitRecord{Instance: "committed", Key: instanceKey("committed"), ExecutionID: 1,
		Publish: []queueRef{{Queue: "orchestrator", Name: live, Data: liveData}}})

	mustNoErr(t, p.sweepStaged(ctx, 0))

	staged, err := p.orchQ.Staged()
	mustNoErr(t, err)
	if len(staged) != 0 {
		t.Errorf("staged files left after the sweep: %v", staged)
	}
	for _, n := range []string{orphanInst, orphanWork, orphanNone, torn} {
		if _, err := p.orchQ.Get(n); err == nil {
			t.Errorf("orphan %s was published", n)
		}
	}
	if _, err := p.orchQ.Get(live); err != nil {
		t.Errorf("the committed staged message was not published: %v", err)
	}
	// The sweep redoes the pending commit first, under the instance's
	// lock: that publishes live (a rename), so it is not an orphan and is
	// not counted as one. The other four are.
	if got := p.RecoveryStats().StagedOrphansRemoved; got != 4 {
		t.Errorf("StagedOrphansRemoved = %d, want 4 (live was published, not removed)", got)
	}
	if pcs, err := p.PendingCommits(ctx); err != nil || len(pcs) != 0 {
		t.Errorf("pending commits after the sweep: %+v, %v", pcs, err)
	}
	// A staged file younger than minAge is left alone.
	young := stage(instanceKey("aborted"))
	mustNoErr(t, p.sweepStaged(ctx, time.Hour))
	if s, _ := p.orchQ.Staged(); len(s) != 1 || s[0].Name != young {
		t.Errorf("young staged file swept: %v", s)
	}
	_ = fsqueue.StagedFile{}
}
