package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ackThreeEvents starts inst and acks its first turn with events 1-3, then
// queues an external event, so that the next fetch has work. It returns
// the history file's path.
func ackThreeEvents(t *testing.T, p *FSProvider, inst string) string {
	t.Helper()
	ctx := context.Background()
	v := "1.0.0"
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: &v, ExecutionID: 1}, 0))
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %+v %v", it, err)
	}
	s := started(inst)
	evs := []Event{s,
		{EventID: 2, InstanceID: inst, ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "A", Input: "1"}},
		{EventID: 3, InstanceID: inst, ExecutionID: 1, TimestampMs: s.TimestampMs, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "B", Input: "2"}},
	}
	mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, evs, nil, nil, md("TestOrch", "1.0.0"), nil))
	mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: inst, Name: "go", Data: "1"}, 0))
	return p.historyPath(instanceKey(inst), 1)
}

// lineStart returns the byte offset at which record n (1-based) of a
// history file starts.
func lineStart(t *testing.T, path string, n int) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	mustNoErr(t, err)
	off := 0
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data[off:], '\n')
		if j < 0 {
			t.Fatalf("%s has fewer than %d lines", path, n)
		}
		off += j + 1
	}
	return int64(off)
}

// TestTruncatedCommittedHistory: a history holding fewer records than were
// committed to it is never served (the fetch reports a history error, Read
// fails with ErrCorrupt) and never extended (an ack or an append fails,
// writing nothing). A torn tail nobody committed, and a commit whose apply
// a dead process left unfinished, are no such loss: the fetch serves them
// (after finishing the commit) and the ack extends the history.
func TestTruncatedCommittedHistory(t *testing.T) {
	cases := []struct {
		name string
		// damage changes the history of the instance (3 committed events).
		damage func(t *testing.T, p *FSProvider, hp string)
		// lost: the fetch must report a history error; else it must serve
		// want events.
		lost bool
		want int
	}{
		{name: "20 bytes cut off (issue 18)", lost: true, damage: func(t *testing.T, p *FSProvider, hp string) {
			fi, err := os.Stat(hp)
			mustNoErr(t, err)
			mustNoErr(t, os.Truncate(hp, fi.Size()-20))
		}},
		{name: "last record cut at its line start", lost: true, damage: func(t *testing.T, p *FSProvider, hp string) {
			mustNoErr(t, os.Truncate(hp, lineStart(t, hp, 3)))
		}},
		{name: "emptied", lost: true, damage: func(t *testing.T, p *FSProvider, hp string) {
			mustNoErr(t, os.Truncate(hp, 0))
		}},
		{name: "removed", lost: true, damage: func(t *testing.T, p *FSProvider, hp string) {
			mustNoErr(t, os.Remove(hp))
		}},
		{name: "replaced by a symbolic link", lost: true, damage: func(t *testing.T, p *FSProvider, hp string) {
			other := filepath.Join(t.TempDir(), "other.jsonl")
			mustNoErr(t, os.WriteFile(other, nil, 0o600))
			mustNoErr(t, os.Remove(hp))
			mustNoErr(t, os.Symlink(other, hp))
		}},
		{
			// Another process appends event 4 after this one read the
			// history; then the file loses it again: the bytes this
			// process read are intact, but fewer than were committed.
			name: "a later record cut at its line start", lost: true,
			damage: func(t *testing.T, p *FSProvider, hp string) {
				ctx := context.Background()
				q := openT(t, p.dir, Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
				it, err := q.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil {
					t.Fatalf("other process's fetch = %+v, %v", it, err)
				}
				ev := Event{EventID: 4, InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: TimerCreated{FireAtMs: 1}}
				mustNoErr(t, q.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, md("TestOrch", "1.0.0"), nil))
				mustNoErr(t, q.Close())
				mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "a", Name: "go", Data: "2"}, 0))
				mustNoErr(t, os.Truncate(hp, lineStart(t, hp, 4)))
			},
		},
		{name: "torn tail nobody committed", want: 3, damage: func(t *testing.T, p *FSProvider, hp string) {
			f, err := os.OpenFile(hp, os.O_WRONLY|os.O_APPEND, 0)
			mustNoErr(t, err)
			_, err = f.WriteString(`0badc0de 4 1 {"event_id":4,"ty`)
			mustNoErr(t, errors.Join(err, f.Close()))
		}},
		{
			// kill -9 after the commit point: the record is in the log and
			// marked in the lease, nothing applied. state.json already
			// counting its event stands for any order in which the apply's
			// writes may land; the fetch's redo must run before the check.
			name: "committed, apply not started", want: 4,
			damage: func(t *testing.T, p *FSProvider, hp string) {
				key := instanceKey("a")
				ef, err := p.readExecutionFile(key, 1)
				mustNoErr(t, err)
				ne := *ef
				ne.EventCount = 4
				ev := Event{EventID: 4, InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: TimerCreated{FireAtMs: 1}}
				raw, err := ev.MarshalJSON()
				mustNoErr(t, err)
				logCommit(t, p, &commitRecord{Instance: "a", Key: key, ExecutionID: 1, HistoryBase: 3,
					History: [][]byte{raw}, HistoryIDs: []uint64{4}, ExecutionFile: &ne})
				mustNoErr(t, p.writeJSONApply(p.execStatePath(key, 1), &ne))
			},
		},
	}
	// Each case cold, and warm: the process read the whole history before
	// the damage, so its history cache (histcache.go) holds all 3 events
	// and must notice that the file no longer holds what it read.
	for _, warm := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/warm=%v", c.name, warm), func(t *testing.T) {
				ctx := context.Background()
				p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
				hp := ackThreeEvents(t, p, "a")
				if warm {
					if h, err := p.Read(ctx, "a"); err != nil || len(h) != 3 {
						t.Fatalf("Read before the damage = %d events, %v", len(h), err)
					}
				}
				c.damage(t, p, hp)
				before, _ := os.ReadFile(hp)

				// Read, without the instance flock, first: a shortfall it sees
				// is checked again under the flock, after the pending commit
				// is finished.
				h, err := p.Read(ctx, "a")
				if c.lost && (!errors.Is(err, ErrCorrupt) || IsRetryable(err)) {
					t.Errorf("Read = %d events, %v; want a permanent ErrCorrupt", len(h), err)
				}
				if !c.lost && (err != nil || len(h) != c.want) {
					t.Errorf("Read = %d events, %v; want %d events", len(h), err, c.want)
				}

				it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				if err != nil || it == nil {
					t.Fatalf("fetch = %+v, %v; want the item", it, err)
				}
				ev := Event{EventID: 3, InstanceID: "a", ExecutionID: 1, TimestampMs: 1, DuroxideVersion: "0.1.26", Kind: ActivityScheduled{Name: "other", Input: "x"}}
				if !c.lost {
					if it.Item.HistoryError != nil || len(it.Item.History) != c.want {
						t.Fatalf("fetch: history error %v, %d events; want %d events", it.Item.HistoryError, len(it.Item.History), c.want)
					}
					ev.EventID = uint64(c.want) + 1
					mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, md("TestOrch", "1.0.0"), nil))
					h, err := p.Read(ctx, "a")
					if err != nil || len(h) != c.want+1 {
						t.Fatalf("after the ack, Read = %d events, %v; want %d", len(h), err, c.want+1)
					}
					return
				}
				if it.Item.HistoryError == nil || len(it.Item.History) != 0 {
					t.Fatalf("fetch served %d events of a history that lost committed ones, history error %v", len(it.Item.History), it.Item.HistoryError)
				}
				if it.AttemptCount != 1 {
					t.Errorf("attempt count %d, want 1 (a history error is counted toward poison)", it.AttemptCount)
				}
				err = p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, md("TestOrch", "1.0.0"), nil)
				if !errors.Is(err, ErrCorrupt) || IsRetryable(err) {
					t.Errorf("ack of a different event 3 = %v; want a permanent ErrCorrupt", err)
				}
				if err := p.AppendWithExecution(ctx, "a", 1, []Event{ev}); !errors.Is(err, ErrCorrupt) || IsRetryable(err) {
					t.Errorf("AppendWithExecution = %v; want a permanent ErrCorrupt", err)
				}
				if after, _ := os.ReadFile(hp); !bytes.Equal(before, after) {
					t.Errorf("the damaged history was changed:\n%q\nwas\n%q", after, before)
				}
				if h, err := p.Read(ctx, "a"); !errors.Is(err, ErrCorrupt) || IsRetryable(err) {
					t.Errorf("Read = %d events, %v; want a permanent ErrCorrupt", len(h), err)
				}
				if _, err := p.ReadWithExecution(ctx, "a", 1); !errors.Is(err, ErrCorrupt) {
					t.Errorf("ReadWithExecution: %v; want ErrCorrupt", err)
				}
			})
		}
	}
}

// TestGWTruncatedHistory: the workflow engine's history read refuses a
// history that lost committed events, and serves one with a torn tail
// nobody committed.
func TestGWTruncatedHistory(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, hp string)
		lost   bool
	}{
		{name: "20 bytes cut off", lost: true, damage: func(t *testing.T, hp string) {
			fi, err := os.Stat(hp)
			mustNoErr(t, err)
			mustNoErr(t, os.Truncate(hp, fi.Size()-20))
		}},
		{name: "removed", lost: true, damage: func(t *testing.T, hp string) { mustNoErr(t, os.Remove(hp)) }},
		{name: "torn tail nobody committed", damage: func(t *testing.T, hp string) {
			f, err := os.OpenFile(hp, os.O_WRONLY|os.O_APPEND, 0)
			mustNoErr(t, err)
			_, err = f.WriteString(`0badc0de 9 1 {"event_id":9`)
			mustNoErr(t, errors.Join(err, f.Close()))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			p := openT(t, t.TempDir(), Options{SweepInterval: -1, CheckpointInterval: -1, Logger: quietLog})
			ref := WorkflowRef{"wf", "e1"}
			mustNoErr(t, p.CreateWorkflow(ctx, ref, WorkflowStart{Queue: "default", Name: "P"}, gwEv("start", "WorkflowExecutionStarted", 0)))
			task := gwFetchOf(t, p, "wf")
			mustNoErr(t, p.CompleteWorkflowTask(ctx, task, WorkflowTaskResult{State: WorkflowActive,
				Executed: []WorkflowEvent{gwEv("ts1", "WorkflowTaskStarted", 1), gwEv("start", "WorkflowExecutionStarted", 2), gwEv("t", "TimerScheduled", 3)}}))
			c.damage(t, p.historyPath(instanceKey("wf"), 1))
			h, err := p.WorkflowHistory(ctx, ref, nil)
			if c.lost && !errors.Is(err, ErrCorrupt) {
				t.Errorf("WorkflowHistory = %d events, %v; want ErrCorrupt", len(h), err)
			}
			if !c.lost && (err != nil || len(h) != 3) {
				t.Errorf("WorkflowHistory = %d events, %v; want 3", len(h), err)
			}
		})
	}
}
