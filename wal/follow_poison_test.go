package wal

import (
	"context"
	"errors"
	"testing"
)

// A frame made durable by the fdatasync a roll does (follow) is
// acknowledged only after the poison check, like every other sync of the
// process's own (package doc: "every process checks for it after each of
// its own syncs and before acknowledging anything"). Here another process
// poisoned the log before a's Sync was even called: a must not acknowledge.
func TestFollowSyncChecksPoison(t *testing.T) {
	fsys := newMem(t)
	a, b, c := openT(t, fsys, 4096), openT(t, fsys, 4096), openT(t, fsys, 4096)
	_, aEnd, err := a.Append(payload(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	// c fills segment 1 (no sync) so that the tail moves to segment 2.
	for i := 0; c.End().Segment() == 1; i++ {
		if _, _, err := c.Append(payload(2, i)); err != nil {
			t.Fatal(err)
		}
	}
	_ = b.Poison(errors.New("b's checkpoint fsync failed"))
	// a's next append follows the tail to segment 2, syncing segment 1 on
	// the way.
	if _, _, err := a.Append(payload(0, 1)); err != nil && !errors.Is(err, ErrPoisoned) {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background(), aEnd); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("a.Sync after another process wrote %s: %v, want ErrPoisoned", poisonName, err)
	}
}
