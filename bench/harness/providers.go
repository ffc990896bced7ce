package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/durofs/durofs/bench/sqliteref"
	"github.com/durofs/durofs/internal/provhook"
	"github.com/durofs/durofs/internal/vfs"
	"github.com/durofs/durofs/provider"
)

// sqliteFile is the SQLite reference's database file inside a run's directory.
const sqliteFile = "ref.db"

// openOptions select how a provider is opened.
type openOptions struct {
	// noSync opens durofs in ProcessCrashSafe mode (set-up only; the
	// SQLite reference has no such mode and ignores it).
	noSync bool
	// fs is durofs's file system hook (fsync counting).
	fs vfs.FS
	// sweepOff disables durofs's background sweep; bgOff its background
	// checkpoints and promotions of recycled files (the caller runs them).
	sweepOff, bgOff bool
	// log receives the provider's warnings (default: stderr, warnings only).
	log *slog.Logger
}

// closer is a provider that can be closed.
type closer interface {
	provider.Provider
	io.Closer
}

// warnLogger logs warnings and errors to w, except durofs's warning that
// the directory's ext4 has no journal: the report says so once, and every
// child process's Open would repeat it.
func warnLogger(w io.Writer) *slog.Logger {
	return slog.New(dropJournalWarning{slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})})
}

// journalWarning starts the message of durofs's Open warning about ext4
// without a journal (provider/fsinfo.go).
const journalWarning = "durofs: the directory is on ext4 without a journal"

// dropJournalWarning is a slog.Handler that drops that warning.
type dropJournalWarning struct{ slog.Handler }

// Handle implements slog.Handler.
func (h dropJournalWarning) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, journalWarning) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h dropJournalWarning) WithAttrs(as []slog.Attr) slog.Handler {
	return dropJournalWarning{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h dropJournalWarning) WithGroup(name string) slog.Handler {
	return dropJournalWarning{h.Handler.WithGroup(name)}
}

// openProvider opens the named provider on a run directory: durofs uses dir
// itself, the SQLite reference the file ref.db inside it.
func openProvider(name, dir string, o openOptions) (closer, error) {
	if o.log == nil {
		o.log = warnLogger(os.Stderr)
	}
	switch name {
	case ProviderDurofs:
		opts := provider.Options{Logger: o.log}
		if o.fs != nil {
			var ok bool
			if opts, ok = provhook.WithFS(opts, o.fs); !ok {
				return nil, fmt.Errorf("open durofs %s: cannot set its file system", dir)
			}
		}
		if o.noSync {
			opts.Durability = provider.ProcessCrashSafe
		}
		if o.sweepOff {
			opts.SweepInterval = -1
		}
		if o.bgOff {
			opts.CheckpointInterval = -1
		}
		p, err := provider.Open(dir, opts)
		if err != nil {
			return nil, fmt.Errorf("open durofs %s: %w", dir, err)
		}
		return p, nil
	case ProviderSQLite:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		p, err := sqliteref.Open(filepath.Join(dir, sqliteFile), sqliteref.Options{Logger: o.log})
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", dir, err)
		}
		return p, nil
	default:
		return nil, fmt.Errorf("unknown provider %q", name)
	}
}

// admin returns p's management capability or nil.
func admin(p provider.Provider) provider.Admin {
	if a, ok := p.Admin(); ok {
		return a
	}
	return nil
}
