package sqliteref

// schemaVersion is stored in PRAGMA user_version.
const schemaVersion = 1

// schema creates the tables and indexes (idempotent). See the package
// documentation for what each table holds.
const schema = `
CREATE TABLE IF NOT EXISTS instances (
	instance_id           TEXT PRIMARY KEY,
	orchestration_name    TEXT NOT NULL,
	orchestration_version TEXT,
	current_execution_id  INTEGER NOT NULL DEFAULT 1,
	parent_instance_id    TEXT,
	custom_status         TEXT,
	custom_status_version INTEGER NOT NULL DEFAULT 0,
	created_at            INTEGER NOT NULL,
	updated_at            INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_instances_parent ON instances(parent_instance_id);

CREATE TABLE IF NOT EXISTS executions (
	instance_id  TEXT NOT NULL,
	execution_id INTEGER NOT NULL,
	status       TEXT NOT NULL DEFAULT 'Running',
	output       TEXT,
	pinned_major INTEGER,
	pinned_minor INTEGER,
	pinned_patch INTEGER,
	started_at   INTEGER NOT NULL,
	completed_at INTEGER,
	PRIMARY KEY (instance_id, execution_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS history (
	instance_id  TEXT NOT NULL,
	execution_id INTEGER NOT NULL,
	event_id     INTEGER NOT NULL,
	event_type   TEXT NOT NULL,
	event_data   TEXT NOT NULL,
	PRIMARY KEY (instance_id, execution_id, event_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS orchestrator_queue (
	id            INTEGER PRIMARY KEY,
	instance_id   TEXT NOT NULL,
	work_item     TEXT NOT NULL,
	visible_at    INTEGER NOT NULL,
	lock_token    TEXT,
	attempt_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_orch_visible  ON orchestrator_queue(visible_at);
CREATE INDEX IF NOT EXISTS idx_orch_instance ON orchestrator_queue(instance_id, visible_at);
CREATE INDEX IF NOT EXISTS idx_orch_token    ON orchestrator_queue(lock_token);

CREATE TABLE IF NOT EXISTS instance_locks (
	instance_id  TEXT PRIMARY KEY,
	lock_token   TEXT NOT NULL,
	locked_until INTEGER NOT NULL,
	locked_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_locks_token ON instance_locks(lock_token);

CREATE TABLE IF NOT EXISTS worker_queue (
	id            INTEGER PRIMARY KEY,
	work_item     TEXT NOT NULL,
	visible_at    INTEGER NOT NULL,
	lock_token    TEXT,
	locked_until  INTEGER,
	attempt_count INTEGER NOT NULL DEFAULT 0,
	instance_id   TEXT NOT NULL,
	execution_id  INTEGER NOT NULL,
	activity_id   INTEGER NOT NULL,
	session_id    TEXT,
	tag           TEXT
);
CREATE INDEX IF NOT EXISTS idx_work_visible  ON worker_queue(visible_at);
CREATE INDEX IF NOT EXISTS idx_work_token    ON worker_queue(lock_token);
CREATE INDEX IF NOT EXISTS idx_work_identity ON worker_queue(instance_id, execution_id, activity_id);
CREATE INDEX IF NOT EXISTS idx_work_session  ON worker_queue(session_id);

CREATE TABLE IF NOT EXISTS sessions (
	session_id       TEXT PRIMARY KEY,
	worker_id        TEXT NOT NULL,
	locked_until     INTEGER NOT NULL,
	last_activity_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_sessions_worker ON sessions(worker_id);
`
