package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func pad(n int) string { return strings.Repeat("x", n) }

func ptr[T any](v T) *T { return &v }

// only returns Limits with no limit except the one set by set.
func only(set func(l *Limits)) Limits {
	l := Limits{MaxMessageBytes: -1, MaxEventBytes: -1, MaxPayloadBytes: -1, MaxCustomStatusBytes: -1, MaxTagBytes: -1}
	set(&l)
	return l
}

func msgSize(t *testing.T, w WorkItem) int {
	t.Helper()
	b, err := MarshalWorkItem(w)
	mustNoErr(t, err)
	return len(b)
}

func eventSize(t *testing.T, e Event) int {
	t.Helper()
	b, err := e.MarshalJSON()
	mustNoErr(t, err)
	return len(b)
}

// limitSite performs one call that stores something of size n, on a fresh
// provider; check verifies that a refused call left everything as it was
// (and the lock held), then that the call succeeds without the oversize.
type limitSite struct {
	name  string
	setup func(t *testing.T, p *FSProvider) (do func(n int) error, check func(t *testing.T))
}

// dirEntries lists a directory's entries (recursively for the queue dirs),
// to prove nothing was written.
func dirState(t *testing.T, p *FSProvider) string {
	t.Helper()
	var b strings.Builder
	for _, d := range []string{"queues", "wal", "tmp", "instances"} {
		_ = filepath.WalkDir(filepath.Join(p.dir, d), func(path string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(p.dir, path)
			if filepath.Base(rel) == "lock" || strings.HasSuffix(rel, ".lock") {
				return nil // flock targets appear on first use
			}
			if rel == filepath.Join("wal", "checkpoint") {
				return nil // moved by the background checkpoint, not by calls
			}
			data, _ := os.ReadFile(path)
			b.WriteString(rel + "=" + string(data) + "\n")
			return nil
		})
	}
	return b.String()
}

func enqueueOrchSite(build func(n int) WorkItem) limitSite {
	return limitSite{"enqueue_for_orchestrator", func(t *testing.T, p *FSProvider) (func(int) error, func(*testing.T)) {
		before := dirState(t, p)
		return func(n int) error { return p.EnqueueForOrchestrator(context.Background(), build(n), 0) },
			func(t *testing.T) {
				if after := dirState(t, p); after != before {
					t.Errorf("a refused enqueue changed the directory:\n%s\nwas\n%s", after, before)
				}
			}
	}}
}

func enqueueWorkerSite(build func(n int) WorkItem) limitSite {
	return limitSite{"enqueue_for_worker", func(t *testing.T, p *FSProvider) (func(int) error, func(*testing.T)) {
		before := dirState(t, p)
		return func(n int) error { return p.EnqueueForWorker(context.Background(), build(n)) },
			func(t *testing.T) {
				if after := dirState(t, p); after != before {
					t.Errorf("a refused enqueue changed the directory:\n%s\nwas\n%s", after, before)
				}
			}
	}}
}

// ackSite acks a fetched turn with what build returns.
func ackSite(build func(n int) (delta []Event, worker, orch []WorkItem)) limitSite {
	return limitSite{"ack_orchestration_item", func(t *testing.T, p *FSProvider) (func(int) error, func(*testing.T)) {
		ctx := context.Background()
		createInstance(t, p, "lim")
		mustNoErr(t, p.EnqueueForOrchestrator(ctx, ExternalRaised{Instance: "lim", Name: "e", Data: "1"}, 0))
		it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || it == nil {
			t.Fatal(it, err)
		}
		before := dirState(t, p)
		return func(n int) error {
				d, w, o := build(n)
				return p.AckOrchestrationItem(ctx, it.LockToken, 1, d, w, o, ExecutionMetadata{}, nil)
			}, func(t *testing.T) {
				if after := dirState(t, p); after != before {
					t.Errorf("a refused ack changed the directory:\n%s\nwas\n%s", after, before)
				}
				// The lock is kept: nobody else can fetch the turn, the
				// holder can renew it and then ack within the limits.
				if again, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil); err != nil || again != nil {
					t.Errorf("fetch after a refused ack = %+v, %v; want nothing (the lock is kept)", again, err)
				}
				mustNoErr(t, p.RenewOrchestrationItemLock(ctx, it.LockToken, 30*time.Second))
				ev := started("lim")
				ev.EventID, ev.Kind = 2, ExternalEvent{Name: "e", Data: "1"}
				mustNoErr(t, p.AckOrchestrationItem(ctx, it.LockToken, 1, []Event{ev}, nil, nil, ExecutionMetadata{}, nil))
			}
	}}
}

// workAckSite acks a fetched work item with the completion build returns.
func workAckSite(build func(n int) WorkItem) limitSite {
	return limitSite{"ack_work_item", func(t *testing.T, p *FSProvider) (func(int) error, func(*testing.T)) {
		ctx := context.Background()
		mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "lim", ExecutionID: 1, ID: 1, Name: "act"}))
		w, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, TagFilter{})
		if err != nil || w == nil {
			t.Fatal(w, err)
		}
		before := dirState(t, p)
		return func(n int) error { return p.AckWorkItem(ctx, w.LockToken, build(n)) },
			func(t *testing.T) {
				if after := dirState(t, p); after != before {
					t.Errorf("a refused work ack changed the directory:\n%s\nwas\n%s", after, before)
				}
				mustNoErr(t, p.RenewWorkItemLock(ctx, w.LockToken, 30*time.Second))
				mustNoErr(t, p.AckWorkItem(ctx, w.LockToken, ActivityCompleted{Instance: "lim", ExecutionID: 1, ID: 1, Result: "ok"}))
			}
	}}
}

func appendSite(build func(n int) Event) limitSite {
	return limitSite{"append_with_execution", func(t *testing.T, p *FSProvider) (func(int) error, func(*testing.T)) {
		createInstance(t, p, "lim")
		before := dirState(t, p)
		return func(n int) error { return p.AppendWithExecution(context.Background(), "lim", 1, []Event{build(n)}) },
			func(t *testing.T) {
				if after := dirState(t, p); after != before {
					t.Errorf("a refused append changed the directory:\n%s\nwas\n%s", after, before)
				}
			}
	}}
}

func extEvent(id uint64, data string) Event {
	ev := started("lim")
	ev.EventID, ev.Kind = id, ExternalEvent{Name: "e", Data: data}
	return ev
}

// TestLimits: at each call site that stores something, a value exactly at
// a limit is stored, and one byte more is refused with a permanent error
// wrapping ErrTooLarge that names the limit, leaving the directory as it
// was and (for acks) the lock held, so the same call within the limits then
// succeeds.
func TestLimits(t *testing.T) {
	// k is larger than anything the sites store while setting up.
	const k = 512
	work := func(n int, tag *string) ActivityExecute {
		return ActivityExecute{Instance: "lim", ExecutionID: 1, ID: 2, Name: "act", Input: pad(n), Tag: tag}
	}
	cases := []struct {
		name   string
		limit  string
		limits func(t *testing.T) Limits
		site   limitSite
	}{
		{"orchestrator message payload", "MaxPayloadBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxPayloadBytes = k }) },
			enqueueOrchSite(func(n int) WorkItem { return ExternalRaised{Instance: "lim", Name: "e", Data: pad(n)} })},
		{"orchestrator message size", "MaxMessageBytes",
			func(t *testing.T) Limits {
				s := msgSize(t, ExternalRaised{Instance: "lim", Name: "e", Data: pad(k)})
				return only(func(l *Limits) { l.MaxMessageBytes = s })
			},
			enqueueOrchSite(func(n int) WorkItem { return ExternalRaised{Instance: "lim", Name: "e", Data: pad(n)} })},
		{"continue-as-new initial custom status", "MaxCustomStatusBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxCustomStatusBytes = k }) },
			enqueueOrchSite(func(n int) WorkItem {
				return ContinueAsNew{Instance: "lim", Orchestration: "O", InitialCustomStatus: ptr(pad(n))}
			})},
		{"work item tag", "MaxTagBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxTagBytes = k }) },
			enqueueWorkerSite(func(n int) WorkItem { return work(1, ptr(pad(n))) })},
		{"work item input", "MaxPayloadBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxPayloadBytes = k }) },
			enqueueWorkerSite(func(n int) WorkItem { return work(n, nil) })},
		{"work item size", "MaxMessageBytes",
			func(t *testing.T) Limits {
				s := msgSize(t, work(k, nil))
				return only(func(l *Limits) { l.MaxMessageBytes = s })
			},
			enqueueWorkerSite(func(n int) WorkItem { return work(n, nil) })},
		{"ack: event size", "MaxEventBytes",
			func(t *testing.T) Limits {
				s := eventSize(t, extEvent(2, pad(k)))
				return only(func(l *Limits) { l.MaxEventBytes = s })
			},
			ackSite(func(n int) ([]Event, []WorkItem, []WorkItem) { return []Event{extEvent(2, pad(n))}, nil, nil })},
		{"ack: event payload", "MaxPayloadBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxPayloadBytes = k }) },
			ackSite(func(n int) ([]Event, []WorkItem, []WorkItem) { return []Event{extEvent(2, pad(n))}, nil, nil })},
		{"ack: custom status", "MaxCustomStatusBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxCustomStatusBytes = k }) },
			ackSite(func(n int) ([]Event, []WorkItem, []WorkItem) {
				ev := started("lim")
				ev.EventID, ev.Kind = 2, CustomStatusUpdated{Status: ptr(pad(n))}
				return []Event{ev}, nil, nil
			})},
		{"ack: worker item tag", "MaxTagBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxTagBytes = k }) },
			ackSite(func(n int) ([]Event, []WorkItem, []WorkItem) {
				return []Event{extEvent(2, "1")}, []WorkItem{work(1, ptr(pad(n)))}, nil
			})},
		{"ack: worker item size", "MaxMessageBytes",
			func(t *testing.T) Limits {
				s := msgSize(t, work(k, nil))
				return only(func(l *Limits) { l.MaxMessageBytes = s })
			},
			ackSite(func(n int) ([]Event, []WorkItem, []WorkItem) {
				return []Event{extEvent(2, "1")}, []WorkItem{work(n, nil)}, nil
			})},
		{"ack: orchestrator item payload", "MaxPayloadBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxPayloadBytes = k }) },
			ackSite(func(n int) ([]Event, []WorkItem, []WorkItem) {
				return []Event{extEvent(2, "1")}, nil, []WorkItem{ExternalRaised{Instance: "other", Name: "e", Data: pad(n)}}
			})},
		{"work ack: completion result", "MaxPayloadBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxPayloadBytes = k }) },
			workAckSite(func(n int) WorkItem { return ActivityCompleted{Instance: "lim", ExecutionID: 1, ID: 1, Result: pad(n)} })},
		{"work ack: completion size", "MaxMessageBytes",
			func(t *testing.T) Limits {
				s := msgSize(t, ActivityCompleted{Instance: "lim", ExecutionID: 1, ID: 1, Result: pad(k)})
				return only(func(l *Limits) { l.MaxMessageBytes = s })
			},
			workAckSite(func(n int) WorkItem { return ActivityCompleted{Instance: "lim", ExecutionID: 1, ID: 1, Result: pad(n)} })},
		{"append: event payload", "MaxPayloadBytes",
			func(*testing.T) Limits { return only(func(l *Limits) { l.MaxPayloadBytes = k }) },
			appendSite(func(n int) Event { return extEvent(2, pad(n)) })},
	}
	for _, c := range cases {
		t.Run(c.site.name+"/"+c.name, func(t *testing.T) {
			limits := c.limits(t)
			t.Run("at the limit", func(t *testing.T) {
				p := openT(t, t.TempDir(), Options{SweepInterval: -1, Limits: limits})
				do, _ := c.site.setup(t, p)
				if err := do(k); err != nil {
					t.Fatalf("a value at the limit was refused: %v", err)
				}
			})
			t.Run("one byte over", func(t *testing.T) {
				p := openT(t, t.TempDir(), Options{SweepInterval: -1, Limits: limits})
				do, check := c.site.setup(t, p)
				err := do(k + 1)
				if !errors.Is(err, ErrTooLarge) || IsRetryable(err) {
					t.Fatalf("one byte over: %v, want a permanent ErrTooLarge", err)
				}
				if !strings.Contains(err.Error(), c.limit) || !strings.Contains(err.Error(), c.site.name) {
					t.Errorf("error %q does not name the call and the limit %s", err, c.limit)
				}
				check(t)
			})
		})
	}
}

// TestDefaultLimits: the zero Limits are 16 MiB for messages, events and
// payloads, 256 KiB for custom status and 256 bytes for tags; negative
// means unlimited.
func TestDefaultLimits(t *testing.T) {
	d := Limits{}.withDefaults()
	if d.MaxMessageBytes != 16<<20 || d.MaxEventBytes != 16<<20 || d.MaxPayloadBytes != 16<<20 ||
		d.MaxCustomStatusBytes != 256<<10 || d.MaxTagBytes != 256 {
		t.Fatalf("defaults = %+v", d)
	}
	ctx := context.Background()
	p := openT(t, t.TempDir(), Options{SweepInterval: -1})
	err := p.EnqueueForWorker(ctx, ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "a", Tag: ptr(pad(257))})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 257-byte tag with the default limits: %v", err)
	}
	mustNoErr(t, p.EnqueueForWorker(ctx, ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "a", Tag: ptr(pad(256))}))
	u := openT(t, t.TempDir(), Options{SweepInterval: -1, Limits: Limits{MaxTagBytes: -1}})
	mustNoErr(t, u.EnqueueForWorker(ctx, ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "a", Tag: ptr(pad(1000))}))
}
