package sqliteref

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestPragmas checks that every connection of both pools runs in WAL mode
// with synchronous=FULL and the busy timeout, and that write transactions
// begin IMMEDIATE (they hold the write lock from their first statement).
func TestPragmas(t *testing.T) {
	p, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for name, pool := range map[string]*sql.DB{"write": p.wdb, "read": p.rdb} {
		var mode string
		var sync, busy int
		if err := pool.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || sync != 2 || busy != int(defaultBusyTimeout.Milliseconds()) {
			t.Errorf("%s pool: journal_mode=%s synchronous=%d busy_timeout=%d; want wal, 2 (FULL), %d",
				name, mode, sync, busy, defaultBusyTimeout.Milliseconds())
		}
	}

	// A write transaction holds the write lock at once: a second
	// connection cannot begin one while it is open.
	other, err := Open(p.Path(), Options{BusyTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := p.wdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if tx2, err := other.wdb.BeginTx(ctx, nil); err == nil {
		_ = tx2.Rollback()
		t.Error("a second BEGIN IMMEDIATE succeeded while a write transaction was open")
	} else if !isBusy(err) {
		t.Errorf("second BEGIN IMMEDIATE: %v, want SQLITE_BUSY", err)
	}
}
