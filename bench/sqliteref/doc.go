// Package sqliteref is a SQLite implementation of durofs's provider.Provider
// (duroxide's storage contract), built as the reference that durofs's
// benchmarks compare against: it is what a user would pick instead of
// durofs, so it is written the way a straightforward, good SQLite provider
// is written, not tuned down.
//
// # Storage
//
// One SQLite database file in WAL mode with synchronous=FULL: a call that
// returned has been fsynced to the write-ahead log, so it survives a power
// loss, as a durable durofs directory does. The driver is modernc.org/sqlite
// (pure Go, no cgo).
//
// # Schema
//
// The schema follows duroxide's SQLite provider (the seed documents on its
// locking and transactions, 003 and 004, and the contract's §7):
//
//	instances          instance_id PK, orchestration_name, orchestration_version,
//	                   current_execution_id, parent_instance_id, custom_status,
//	                   custom_status_version, created_at, updated_at
//	executions         (instance_id, execution_id) PK, status, output,
//	                   pinned_major/minor/patch (NULL: no pin), started_at, completed_at
//	history            (instance_id, execution_id, event_id) PK, event_type, event_data
//	orchestrator_queue id (FIFO order), instance_id, work_item, visible_at,
//	                   lock_token (the fetch that batched it), attempt_count
//	instance_locks     instance_id PK, lock_token UNIQUE, locked_until, locked_at
//	worker_queue       id (FIFO order), work_item, visible_at, lock_token,
//	                   locked_until, attempt_count, instance_id, execution_id,
//	                   activity_id, session_id, tag
//	sessions           session_id PK, worker_id (the owner), locked_until,
//	                   last_activity_at
//
// Times are milliseconds since the Unix epoch. Work items and events are
// stored as the JSON duroxide's serde writes (provider.MarshalWorkItem,
// provider.Event.MarshalJSON); the worker queue also keeps the activity's
// identity, session and tag in columns, so cancellation, deletion, session
// affinity and tag filters are plain SQL.
//
// # Locking, as in seeds 003 and 004
//
//   - An orchestration fetch picks the oldest visible message whose instance
//     has no lock or an expired one, takes the instance lock with
//     INSERT … ON CONFLICT(instance_id) DO UPDATE … WHERE locked_until <= now
//     (acquire, or steal an expired lock, in one statement), and stamps
//     every visible message of the instance with the lock token, counting
//     the attempt. Messages that arrive later are not stamped and stay
//     queued for the next turn.
//   - An ack is one transaction: it checks that the token still holds an
//     unexpired lock, deletes the stamped messages, writes the instance and
//     execution records, appends the history (the primary key rejects a
//     duplicate event id, which rolls everything back), enqueues the worker
//     and orchestrator items, deletes cancelled activities, checks the lock
//     once more, and releases it. Any error rolls back all of it, and the
//     lock stays held.
//   - Worker items are peek-locked per message (lock_token, locked_until),
//     and a worker ack deletes the item and enqueues its completion in one
//     transaction (seed 003's "atomic worker ack").
//   - Locks expire (locked_until), so the work of a process that died is
//     taken over by whoever fetches after the expiry.
//
// Every write transaction starts with BEGIN IMMEDIATE, so it takes SQLite's
// write lock before it reads and can never fail half-way with a busy
// snapshot; the clock is read after the lock is held (duroxide issue #46).
//
// # Concurrency
//
// Several goroutines and several processes may use one database file at
// once. Within a process, writes go through one connection (SQLite admits
// one writer at a time anyway) and reads through a small pool; across
// processes SQLite's file locks arbitrate, with busy_timeout and a few
// retries of a busy transaction. A call that still finds the database busy
// fails with a retryable error.
//
// Fetches long-poll: with no work they wait up to the poll timeout,
// re-checking the database every PollInterval with a cheap read query (no
// write lock is taken until there is a candidate), and waking at once when
// this process enqueues, acks or abandons something.
//
// # Not implemented
//
// The KV store (fetch snapshots are always empty), as in durofs.
package sqliteref
