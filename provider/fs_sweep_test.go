package provider

import (
	"context"
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
		mustNoErr(t, p.orchQ.Stage(m))
		return m.Name
	}
	orphanInst := stage(instanceKey("aborted"))   // its writer died before the commit point
	orphanWork := stage("w:" + p.workQ.NewName()) // a work ack that never committed
	orphanNone := stage("")                       // no source at all
	live := stage(instanceKey("committed"))       // named by a pending commit record
	rec := commitRecord{Format: commitFormat, Instance: "committed", Key: instanceKey("committed"), ExecutionID: 1,
		Publish: []queueRef{{"orchestrator", live}}}
	data, _ := jsonMarshal(rec)
	mustNoErr(t, writeFileForTest(p, p.commitPath(instanceKey("committed")), data))

	mustNoErr(t, p.sweepStaged(ctx, 0))

	staged, err := p.orchQ.Staged()
	mustNoErr(t, err)
	if len(staged) != 0 {
		t.Errorf("staged files left after the sweep: %v", staged)
	}
	for _, n := range []string{orphanInst, orphanWork, orphanNone} {
		if _, err := p.orchQ.Get(n); err == nil {
			t.Errorf("orphan %s was published", n)
		}
	}
	if _, err := p.orchQ.Get(live); err != nil {
		t.Errorf("the committed staged message was not published: %v", err)
	}
	if got := p.RecoveryStats().StagedOrphansRemoved; got != 3 {
		t.Errorf("StagedOrphansRemoved = %d, want 3", got)
	}
	// A staged file younger than minAge is left alone.
	young := stage(instanceKey("aborted"))
	mustNoErr(t, p.sweepStaged(ctx, time.Hour))
	if s, _ := p.orchQ.Staged(); len(s) != 1 || s[0].Name != young {
		t.Errorf("young staged file swept: %v", s)
	}
	_ = fsqueue.StagedFile{}
}
