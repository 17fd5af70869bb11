-- SQLite: JSON is TEXT, BIGINT is INTEGER. Times are unix microseconds (0 = unset); ids are strings made by callers.

-- +goose Up
CREATE TABLE hosts (
    id               TEXT NOT NULL PRIMARY KEY,
    name             TEXT NOT NULL,
    state            TEXT NOT NULL,
    facts            TEXT,
    capacity         TEXT,
    replica_id       TEXT NOT NULL DEFAULT '',
    replica_addr     TEXT NOT NULL DEFAULT '',
    protocol_version INTEGER NOT NULL DEFAULT 0,
    last_heartbeat   INTEGER NOT NULL DEFAULT 0,
    connected_at     INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL
);
CREATE UNIQUE INDEX hosts_name ON hosts (name);
CREATE INDEX hosts_live_heartbeat ON hosts (last_heartbeat) WHERE state IN ('ready', 'draining');

CREATE TABLE sessions (
    id              TEXT NOT NULL PRIMARY KEY,
    state           TEXT NOT NULL,
    desired_state   TEXT NOT NULL,
    host_id         TEXT NOT NULL DEFAULT '',
    epoch           INTEGER NOT NULL DEFAULT 0,
    reason          TEXT NOT NULL DEFAULT '',
    spec            TEXT,
    idempotency_key TEXT NOT NULL DEFAULT '',
    event_seq       INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE UNIQUE INDEX sessions_idempotency_key ON sessions (idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX sessions_host ON sessions (host_id, id) WHERE host_id <> '';
CREATE INDEX sessions_state ON sessions (state, id);

CREATE TABLE session_ops (
    id              TEXT NOT NULL PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    kind            TEXT NOT NULL,
    state           TEXT NOT NULL,
    step            TEXT NOT NULL DEFAULT '',
    epoch           INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    claimed_by      TEXT NOT NULL DEFAULT '',
    lease_until     INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
-- At most one pending-or-running op per session.
CREATE UNIQUE INDEX session_ops_one_active ON session_ops (session_id) WHERE state IN ('pending', 'running');
CREATE UNIQUE INDEX session_ops_idempotency_key ON session_ops (session_id, idempotency_key) WHERE idempotency_key <> '';
-- ClaimOp's scan: live ops, oldest first.
CREATE INDEX session_ops_claim ON session_ops (created_at, id) WHERE state IN ('pending', 'running');
CREATE INDEX session_ops_session ON session_ops (session_id, created_at);

CREATE TABLE session_events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    data       TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE api_tokens (
    id           TEXT NOT NULL PRIMARY KEY,
    name         TEXT NOT NULL DEFAULT '',
    kind         TEXT NOT NULL CHECK (kind IN ('user', 'host')),
    host_id      TEXT NOT NULL DEFAULT '',
    prefix       TEXT NOT NULL DEFAULT '',
    hash         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL DEFAULT 0,
    revoked_at   INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_host ON api_tokens (host_id) WHERE host_id <> '';

-- +goose Down
DROP TABLE api_tokens;
DROP TABLE session_events;
DROP TABLE session_ops;
DROP TABLE sessions;
DROP TABLE hosts;
