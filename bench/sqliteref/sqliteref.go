package sqliteref

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/durofs/durofs/provider"
)

// Options configure Open. The zero value selects the defaults.
type Options struct {
	// BusyTimeout is SQLite's busy_timeout: how long a statement waits for a
	// lock another connection or process holds before failing with
	// SQLITE_BUSY (default 5 s). A busy transaction is then retried a few
	// times before the call fails with a retryable error.
	BusyTimeout time.Duration
	// PollInterval is how often a long-polling fetch re-checks the database
	// for work enqueued by other processes (default 10 ms, as durofs). Work
	// enqueued through this Provider wakes fetches at once.
	PollInterval time.Duration
	// ReadConns is the size of the read connection pool (default
	// max(4, GOMAXPROCS)). Writes always use one connection per Provider.
	ReadConns int
	// Logger receives warnings (an undecodable queue message that was
	// dropped). Nil means slog.Default().
	Logger *slog.Logger
}

const (
	defaultBusyTimeout  = 5 * time.Second
	defaultPollInterval = 10 * time.Millisecond
	// maxBusyRetries is how often a transaction that failed with
	// SQLITE_BUSY or SQLITE_LOCKED (after busy_timeout) is retried.
	maxBusyRetries = 5
)

// Provider is the SQLite provider. Create it with Open; it is safe for
// concurrent use by goroutines, and by other processes that Open the same
// database file.
type Provider struct {
	path string
	busy time.Duration // busy_timeout of its connections
	log  *slog.Logger
	poll time.Duration

	// wdb is the write pool: one connection, whose transactions begin with
	// BEGIN IMMEDIATE. rdb is the read pool.
	wdb, rdb *sql.DB
	// wst and rst cache prepared statements of wdb and rdb.
	wst, rst *stmtCache

	notifyMu sync.Mutex
	notifyCh chan struct{}

	closed   atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
}

var _ provider.Provider = (*Provider)(nil)

// Open opens (creating if needed) the SQLite database at path and creates
// the schema. Several processes may Open the same file at once. The path
// must not contain '?'.
func Open(path string, opts Options) (*Provider, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("sqliteref: open %q: the path must be non-empty and must not contain '?'", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqliteref: open %q: %w", path, err)
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = defaultBusyTimeout
	}
	opts.BusyTimeout = max(opts.BusyTimeout, time.Millisecond)
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}

	wdb, err := sql.Open("sqlite", dsn(abs, opts.BusyTimeout, true))
	if err != nil {
		return nil, fmt.Errorf("sqliteref: open %q: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	rdb, err := sql.Open("sqlite", dsn(abs, opts.BusyTimeout, false))
	if err != nil {
		_ = wdb.Close()
		return nil, fmt.Errorf("sqliteref: open %q: %w", path, err)
	}
	rdb.SetMaxOpenConns(opts.ReadConns)
	rdb.SetMaxIdleConns(opts.ReadConns)
	rdb.SetConnMaxLifetime(0)
	rdb.SetConnMaxIdleTime(0)

	p := &Provider{
		path:     abs,
		busy:     opts.BusyTimeout,
		log:      opts.Logger,
		poll:     opts.PollInterval,
		wdb:      wdb,
		rdb:      rdb,
		wst:      newStmtCache(wdb),
		rst:      newStmtCache(rdb),
		notifyCh: make(chan struct{}),
		stop:     make(chan struct{}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+4*opts.BusyTimeout)
	defer cancel()
	if err := p.initSchema(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("sqliteref: open %q: %w", path, err)
	}
	return p, nil
}

// dsn is the modernc.org/sqlite data source name: WAL, synchronous=FULL,
// busy_timeout, and, for the write pool, BEGIN IMMEDIATE transactions.
func dsn(path string, busy time.Duration, write bool) string {
	q := "?_pragma=busy_timeout(" + strconv.FormatInt(busy.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	if write {
		q += "&_txlock=immediate"
	}
	return path + q
}

// initSchema creates the tables in one write transaction (idempotent, safe
// when several processes open a new file at once).
func (p *Provider) initSchema(ctx context.Context) error {
	return p.write(ctx, "open", func(t *wtx) error {
		var v int
		if err := t.tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		if v > schemaVersion {
			return provider.Permanentf("open", provider.ErrUnsupportedFS,
				"database schema version %d is newer than this code's %d", v, schemaVersion)
		}
		if _, err := t.tx.ExecContext(ctx, schema); err != nil {
			return err
		}
		_, err := t.tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(schemaVersion))
		return err
	})
}

// Close closes the database connections. Fetches waiting for work return.
// It is safe to call more than once.
func (p *Provider) Close() error {
	p.closed.Store(true)
	p.stopOnce.Do(func() { close(p.stop) })
	p.wst.close()
	p.rst.close()
	err := errors.Join(p.wdb.Close(), p.rdb.Close())
	// database/sql closes a connection that a call was still using when
	// Close was called only once that call gives it back. Wait for them, so
	// that when Close returns the database is closed: SQLite removes the
	// -wal and -shm files with its last connection, and a caller removing
	// the directory right after Close must not race it.
	deadline := time.Now().Add(closeWait)
	for p.wdb.Stats().OpenConnections+p.rdb.Stats().OpenConnections > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// Two last connections closing at the same moment (one per pool) can
	// each see the other's lock and leave the -wal and -shm files to it
	// (TestCloseClosesTheDatabase caught it once under -race): one more
	// connection, opened and closed alone, removes them.
	if err == nil && fileExists(p.path+"-shm") {
		if db, oerr := sql.Open("sqlite", dsn(p.path, p.busy, true)); oerr == nil {
			err = errors.Join(db.Ping(), db.Close())
		}
	}
	return err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// closeWait bounds how long Close waits for connections still in use.
const closeWait = 5 * time.Second

// Path returns the absolute path of the database file.
func (p *Provider) Path() string { return p.path }

// Name implements provider.Provider.
func (p *Provider) Name() string { return "sqliteref" }

// Version implements provider.Provider.
func (p *Provider) Version() string { return "1.0.0+sqlite-" + sqliteVersion() }

var sqliteVersion = sync.OnceValue(func() string {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "unknown"
	}
	defer db.Close()
	var v string
	if err := db.QueryRow("SELECT sqlite_version()").Scan(&v); err != nil {
		return "unknown"
	}
	return v
})

// ---- notifications and long polling ----

// notify wakes this process's waiting fetches.
func (p *Provider) notify() {
	p.notifyMu.Lock()
	close(p.notifyCh)
	p.notifyCh = make(chan struct{})
	p.notifyMu.Unlock()
}

func (p *Provider) notifyChan() <-chan struct{} {
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	return p.notifyCh
}

// poll calls try until it returns an item or an error, waiting up to
// pollTimeout: woken by this process's changes, and every p.poll for other
// processes'.
func poll[T any](ctx context.Context, p *Provider, op string, pollTimeout time.Duration, try func() (*T, error)) (*T, error) {
	deadline := time.Now().Add(pollTimeout)
	for {
		if err := p.check(ctx, op); err != nil {
			return nil, err
		}
		ch := p.notifyChan()
		res, err := try()
		if res != nil || err != nil {
			return res, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(min(left, p.poll))
		select {
		case <-ch:
		case <-t.C:
		case <-p.stop:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// check fails when the provider is closed or ctx is done.
func (p *Provider) check(ctx context.Context, op string) error {
	if p.closed.Load() {
		return provider.Permanentf(op, provider.ErrClosed, "provider closed")
	}
	if err := ctx.Err(); err != nil {
		return provider.Retryablef(op, err, "%v", err)
	}
	return nil
}

// ---- transactions ----

// wtx is a write transaction (BEGIN IMMEDIATE) and the time read after it
// acquired the write lock.
type wtx struct {
	runner
	now int64
}

// write runs fn in a write transaction and commits it, or rolls it back if
// fn fails. A transaction that fails because the database is busy is
// retried (fn runs again from scratch). Errors are classified into
// provider errors.
func (p *Provider) write(ctx context.Context, op string, fn func(t *wtx) error) error {
	if err := p.check(ctx, op); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := p.writeOnce(ctx, fn)
		if err == nil {
			return nil
		}
		if isBusy(err) && attempt < maxBusyRetries && ctx.Err() == nil && !p.closed.Load() {
			// Back off with jitter so processes that collided spread out.
			d := time.Duration(5<<attempt)*time.Millisecond + rand.N(5*time.Millisecond)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		return p.classify(op, err)
	}
}

func (p *Provider) writeOnce(ctx context.Context, fn func(t *wtx) error) error {
	tx, err := p.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	t := &wtx{runner: runner{ctx: ctx, cache: p.wst, tx: tx}, now: time.Now().UnixMilli()}
	if err := fn(t); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// read runs fn in a read transaction (a consistent snapshot).
func (p *Provider) read(ctx context.Context, op string, fn func(r *runner) error) error {
	if err := p.check(ctx, op); err != nil {
		return err
	}
	tx, err := p.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return p.classify(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(&runner{ctx: ctx, cache: p.rst, tx: tx}); err != nil {
		return p.classify(op, err)
	}
	return nil
}

// reader runs single statements on the read pool, outside a transaction.
func (p *Provider) reader(ctx context.Context) *runner {
	return &runner{ctx: ctx, cache: p.rst}
}

// classify turns err into a *provider.ProviderError: provider errors pass
// through; busy/locked, context and I/O errors are retryable; constraint
// violations and corruption are permanent (duroxide's SQLite mapping, where
// anything unknown is retryable).
func (p *Provider) classify(op string, err error) error {
	var pe *provider.ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	if p.closed.Load() {
		return provider.Permanentf(op, provider.ErrClosed, "provider closed: %v", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return provider.Retryablef(op, err, "%v", err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return provider.Retryablef(op, err, "database is locked: %v", err)
		case sqlite3.SQLITE_CONSTRAINT:
			return &provider.ProviderError{Op: op, Message: err.Error(), Err: err}
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return provider.Permanentf(op, provider.ErrCorrupt, "%v", err)
		}
	}
	return provider.Retryablef(op, err, "%v", err)
}

func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

func isBusy(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

func isConstraint(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT }

// ---- statements ----

// stmtCache holds the prepared statements of one pool, by SQL text. Only
// fixed SQL texts are cached; SQL with a variable number of parameters runs
// unprepared (runner's *Raw methods).
//
// A statement is never prepared inside a transaction: preparing needs a
// connection from the pool, and the transaction holds one (the write pool's
// only one). A statement first met inside a transaction runs unprepared
// once while a background goroutine prepares it for the next calls.
type stmtCache struct {
	db      *sql.DB
	mu      sync.Mutex
	m       map[string]*sql.Stmt
	pending map[string]bool
	closed  bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}, pending: map[string]bool{}}
}

// get returns the prepared statement for query, preparing it if needed.
// It must not be called while holding a connection of the pool.
func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if s := c.cached(query); s != nil {
		return s, nil
	}
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return c.store(query, s)
}

func (c *stmtCache) cached(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// store caches s for query, unless the cache has one already (then s is
// closed and the cached one returned) or is closed (then s is closed and
// the error is sql.ErrConnDone: the provider was closed meanwhile).
func (c *stmtCache) store(query string, s *sql.Stmt) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, query)
	if c.closed {
		_ = s.Close()
		return nil, sql.ErrConnDone
	}
	if old, ok := c.m[query]; ok {
		_ = s.Close()
		return old, nil
	}
	c.m[query] = s
	return s, nil
}

// lookup returns the prepared statement for query, or nil (and starts
// preparing it in the background) if there is none yet. It is safe inside
// a transaction.
func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[query]; ok {
		return s
	}
	if !c.pending[query] && !c.closed {
		c.pending[query] = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := c.db.PrepareContext(ctx, query)
			if err != nil {
				c.mu.Lock()
				delete(c.pending, query)
				c.mu.Unlock()
				return
			}
			_, _ = c.store(query, s) // a closed cache closes s
		}()
	}
	return nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for q, s := range c.m {
		_ = s.Close()
		delete(c.m, q)
	}
}

// runner runs statements in a transaction, or on the pool when tx is nil,
// through the pool's statement cache.
type runner struct {
	ctx   context.Context
	cache *stmtCache
	tx    *sql.Tx
}

// stmt returns the statement to run query with, or nil when query must run
// unprepared (inside a transaction, before it was prepared).
func (r *runner) stmt(query string) (*sql.Stmt, error) {
	if r.tx == nil {
		return r.cache.get(r.ctx, query)
	}
	if s := r.cache.lookup(query); s != nil {
		return r.tx.StmtContext(r.ctx, s), nil
	}
	return nil, nil
}

func (r *runner) exec(query string, args ...any) (sql.Result, error) {
	s, err := r.stmt(query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return r.execRaw(query, args...)
	}
	return s.ExecContext(r.ctx, args...)
}

// execN runs query and returns the number of rows it changed.
func (r *runner) execN(query string, args ...any) (int64, error) {
	res, err := r.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r *runner) query(query string, args ...any) (*sql.Rows, error) {
	s, err := r.stmt(query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return r.queryRaw(query, args...)
	}
	return s.QueryContext(r.ctx, args...)
}

// scan runs a one-row query into dest; it returns sql.ErrNoRows when there
// is no row.
func (r *runner) scan(query string, args []any, dest ...any) error {
	s, err := r.stmt(query)
	if err != nil {
		return err
	}
	if s == nil {
		return r.tx.QueryRowContext(r.ctx, query, args...).Scan(dest...)
	}
	return s.QueryRowContext(r.ctx, args...).Scan(dest...)
}

// execRaw runs an unprepared statement (SQL with a variable shape).
func (r *runner) execRaw(query string, args ...any) (sql.Result, error) {
	if r.tx != nil {
		return r.tx.ExecContext(r.ctx, query, args...)
	}
	return r.cache.db.ExecContext(r.ctx, query, args...)
}

// queryRaw runs an unprepared query (SQL with a variable shape).
func (r *runner) queryRaw(query string, args ...any) (*sql.Rows, error) {
	if r.tx != nil {
		return r.tx.QueryContext(r.ctx, query, args...)
	}
	return r.cache.db.QueryContext(r.ctx, query, args...)
}

// collectStrings reads rows of one string each.
func collectStrings(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// placeholders returns "?,?,…" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

// ---- small helpers ----

// deref returns w with one level of pointer removed (the provider package's
// codecs accept *T for every variant T), or nil for a nil pointer.
func deref[I any](v I) (I, bool) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return v, false
	}
	if rv.Kind() == reflect.Pointer {
		var zero I
		if rv.IsNil() {
			return zero, false
		}
		out, ok := rv.Elem().Interface().(I)
		return out, ok
	}
	return v, true
}

func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}

func strPtr(ns sql.NullString) *string {
	if !ns.Valid {
		return nil
	}
	s := ns.String
	return &s
}

func durMs(d time.Duration) int64 { return max(d, 0).Milliseconds() }

func nowMs() int64 { return time.Now().UnixMilli() }
