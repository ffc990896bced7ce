package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durofs/durofs/fsqueue"
)

// TestBadMessageNeverBlocksAQueue: a queued message whose payload is not a
// work item, at the head of either queue, fails at most the one fetch that
// meets it (the worker queue's permanently, as contract §2.9 asks), is moved
// to quarantine/ with a .reason file, and the messages behind it are served
// (SECURITY.md). Before, an undecodable worker item was rolled back and met
// first by every later fetch: the worker queue was blocked for good.
func TestBadMessageNeverBlocksAQueue(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		queue string
		good  func(p *FSProvider) error
		fetch func(p *FSProvider) (found bool, err error)
	}{
		{"orchestrator",
			func(p *FSProvider) error { return p.EnqueueForOrchestrator(ctx, startItem("good"), 0) },
			func(p *FSProvider) (bool, error) {
				it, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
				return it != nil && it.Item.Instance == "good", err
			}},
		{"worker",
			func(p *FSProvider) error {
				return p.EnqueueForWorker(ctx, ActivityExecute{Instance: "good", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"})
			},
			func(p *FSProvider) (bool, error) {
				it, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, DefaultOnlyTags())
				return it != nil, err
			}},
	} {
		t.Run(c.queue, func(t *testing.T) {
			dir := t.TempDir()
			p := openT(t, dir, Options{SweepInterval: -1})
			q := p.orchQ
			if c.queue == "worker" {
				q = p.workQ
			}
			var err error
			bad := fsqueue.Message{Attrs: map[string]string{attrInstance: "bad", attrKey: instanceKey("bad")}, Payload: []byte(`{"Bogus":{}}`)}
			bad.Name, err = q.Enqueue(bad)
			mustNoErr(t, err)
			mustNoErr(t, c.good(p))
			var found bool
			fails := 0
			for i := 0; i < 3 && !found; i++ {
				found, err = c.fetch(p)
				if err != nil {
					fails++
					if IsRetryable(err) || !errors.Is(err, ErrCorrupt) {
						t.Fatalf("fetch error = %v, want a permanent ErrCorrupt", err)
					}
				}
			}
			if !found || fails > 1 {
				t.Fatalf("the message behind the bad one: found %v after %d failed fetches", found, fails)
			}
			reason, err := os.ReadFile(filepath.Join(dir, "quarantine", c.queue+"-"+bad.Name+".json.reason"))
			if err != nil || !strings.Contains(string(reason), "undecodable work item") {
				t.Fatalf("quarantine reason = %q, %v", reason, err)
			}
			if _, err := os.Stat(filepath.Join(q.Dir(), bad.Name+".json")); !os.IsNotExist(err) {
				t.Fatalf("the bad message is still queued: %v", err)
			}
		})
	}
}
