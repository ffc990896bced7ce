package invariants

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/durofs/durofs/fsqueue"
	"github.com/durofs/durofs/provider"
)

// Backlog is the work still pending in a directory: what must reach zero
// before the directory is quiescent (timers not yet due aside).
type Backlog struct {
	// PendingMarks counts instance leases that mark a commit pending and
	// worker claims in state "acked" (a work ack not applied in full).
	// They are counted only when nothing else is pending (reading every
	// lease costs more than listing the queues).
	PendingMarks int
	// Orchestrator counts orchestrator messages other than timers not yet
	// due; Worker counts work items.
	Orchestrator, Worker int
}

// Empty reports whether nothing is pending.
func (b Backlog) Empty() bool { return b == Backlog{} }

// String describes the backlog.
func (b Backlog) String() string {
	return fmt.Sprintf("%d pending marks, %d orchestrator messages, %d work items", b.PendingMarks, b.Orchestrator, b.Worker)
}

// PendingWork measures dir's backlog at now. It may run while processes use
// the directory (files that vanish while it looks are skipped), so a drain
// can wait for it to reach zero.
func PendingWork(dir string, now time.Time) (Backlog, error) {
	var b Backlog
	count := func(sub string, each func(name string)) error {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("invariants: %w", err)
		}
		for _, e := range entries {
			each(e.Name())
		}
		return nil
	}
	if err := count(filepath.Join("queues", "worker"), func(n string) {
		if m, ok := strings.CutSuffix(n, ".json"); ok && fsqueue.ValidName(m) {
			b.Worker++
		}
	}); err != nil {
		return b, err
	}
	nowMs := now.UnixMilli()
	qdir := filepath.Join(dir, "queues", "orchestrator")
	err := count(filepath.Join("queues", "orchestrator"), func(n string) {
		m, ok := strings.CutSuffix(n, ".json")
		if !ok || !fsqueue.ValidName(m) {
			return
		}
		var msg queueMessage
		if exists, err := readJSON(filepath.Join(qdir, n), &msg); !exists && err == nil {
			return // consumed meanwhile
		} else if err == nil {
			if item, err := provider.UnmarshalWorkItem(msg.Payload); err == nil {
				if _, timer := item.(provider.TimerFired); timer && msg.VisibleAtMs > nowMs {
					return
				}
			}
		}
		b.Orchestrator++
	})
	if err != nil || !b.Empty() {
		return b, err
	}
	b.PendingMarks, err = pendingMarks(dir)
	return b, err
}

// pendingMarks counts leases with a pending mark and acked claims.
func pendingMarks(dir string) (int, error) {
	n := 0
	leases, err := filepath.Glob(filepath.Join(dir, "instances", "*", "lease.json"))
	if err != nil {
		return 0, err
	}
	for _, path := range leases {
		var l struct {
			Data struct {
				Pending json.RawMessage `json:"pending"`
			} `json:"data"`
		}
		if _, err := readJSON(path, &l); err == nil && len(l.Data.Pending) > 0 && string(l.Data.Pending) != "null" {
			n++
		}
	}
	claims, err := filepath.Glob(filepath.Join(dir, "queues", "worker", "claims", "*.json"))
	if err != nil {
		return 0, err
	}
	for _, path := range claims {
		var c struct {
			State string `json:"state"`
		}
		if _, err := readJSON(path, &c); err == nil && c.State != "" {
			n++
		}
	}
	return n, nil
}
