-- SQLite: JSON is TEXT, BIGINT is INTEGER, BOOLEAN is INTEGER 0/1.
-- Idle-to-zero: committed snapshots, the durable outbox, the host drain flag,
-- idempotency keys that a failed or superseded op gives back, and an index
-- for the per-host session scans of heartbeats.

-- +goose Up
-- Admin intent, kept across reconnects and loss; state follows it while connected.
ALTER TABLE hosts ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
UPDATE hosts SET draining = 1 WHERE state = 'draining';

ALTER TABLE sessions ADD COLUMN head_snapshot_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN last_activity INTEGER NOT NULL DEFAULT 0;
-- Last outbox seq handed out (like event_seq), so outbox seqs stay gap-free.
ALTER TABLE sessions ADD COLUMN outbox_seq INTEGER NOT NULL DEFAULT 0;
-- Set when the session's create op failed or was superseded: its idempotency
-- key may then create a new session.
ALTER TABLE sessions ADD COLUMN key_released INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET last_activity = created_at;

DROP INDEX sessions_idempotency_key;
CREATE UNIQUE INDEX sessions_idempotency_key_live ON sessions (idempotency_key)
    WHERE idempotency_key <> '' AND NOT key_released;
-- ListSessions{HostID, States} (heartbeat reconciliation) reads only the
-- host's sessions in those states, not every session it ever ran. State
-- leads: Postgres then uses both columns even in a generic (cached) plan;
-- with host_id first a generic plan filters the host's sessions by state.
CREATE INDEX sessions_state_host ON sessions (state, host_id, id);

-- A failed or superseded op no longer holds its key: a retry inserts a new op.
DROP INDEX session_ops_idempotency_key;
CREATE UNIQUE INDEX session_ops_idempotency_key_live ON session_ops (session_id, idempotency_key)
    WHERE idempotency_key <> '' AND state IN ('pending', 'running', 'succeeded');

CREATE TABLE session_snapshots (
    id         TEXT NOT NULL PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    parent_id  TEXT NOT NULL DEFAULT '',
    host_id    TEXT NOT NULL DEFAULT '',
    epoch      INTEGER NOT NULL,
    manifests  TEXT,
    facts      TEXT,
    bytes      INTEGER NOT NULL DEFAULT 0,
    uploaded   INTEGER NOT NULL DEFAULT 0,
    outbox_seq INTEGER NOT NULL DEFAULT 0,
    reason     TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);
CREATE INDEX session_snapshots_session ON session_snapshots (session_id, created_at, id);

CREATE TABLE session_outbox (
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    id              TEXT NOT NULL,
    kind            TEXT NOT NULL,
    payload         TEXT,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'durable')),
    delivered_epoch INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX session_outbox_id ON session_outbox (session_id, id);

-- +goose Down
DROP TABLE session_outbox;
DROP TABLE session_snapshots;
DROP INDEX session_ops_idempotency_key_live;
CREATE UNIQUE INDEX session_ops_idempotency_key ON session_ops (session_id, idempotency_key) WHERE idempotency_key <> '';
DROP INDEX sessions_state_host;
DROP INDEX sessions_idempotency_key_live;
CREATE UNIQUE INDEX sessions_idempotency_key ON sessions (idempotency_key) WHERE idempotency_key <> '';
ALTER TABLE sessions DROP COLUMN key_released;
ALTER TABLE sessions DROP COLUMN outbox_seq;
ALTER TABLE sessions DROP COLUMN last_activity;
ALTER TABLE sessions DROP COLUMN head_snapshot_id;
ALTER TABLE hosts DROP COLUMN draining;
