-- Agents at work (issue 6): harness bundles, sealed secrets for model
-- providers and git, admin-curated profiles, and tasks with the sessions
-- they used and their durable conversation.

-- +goose Up
-- Rows are never changed: a new bundle is a new version.
CREATE TABLE harnesses (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    version    TEXT NOT NULL,
    descriptor JSON,
    manifest   JSON,
    digest     TEXT NOT NULL,
    builtin    BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    UNIQUE (name, version)
);

-- Sealed by the coordinator (the row id as associated data) before they
-- reach the store. A deleted secret keeps its row, without its sealed
-- bytes; its name is free again.
CREATE TABLE secrets (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    sealed     BYTEA NOT NULL,
    meta       JSON,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE UNIQUE INDEX secrets_name_live ON secrets (name) WHERE deleted_at IS NULL;

-- version is bumped by every edit (optimistic concurrency; tasks record it).
CREATE TABLE profiles (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    spec       JSON,
    version    INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE UNIQUE INDEX profiles_name_live ON profiles (name) WHERE deleted_at IS NULL;

-- event_seq is the last task event's seq (like sessions.event_seq): bumping
-- it locks the row, so concurrent appenders get gap-free seqs.
CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    profile_id      TEXT NOT NULL REFERENCES profiles (id),
    profile_version INTEGER NOT NULL,
    receipt         JSON,
    title           TEXT NOT NULL DEFAULT '',
    state           TEXT NOT NULL CHECK (state IN ('starting', 'running', 'idle', 'stopped', 'failed')),
    session_id      TEXT NOT NULL DEFAULT '',
    event_seq       BIGINT NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX tasks_created ON tasks (created_at, id);
CREATE INDEX tasks_profile ON tasks (profile_id, created_at, id);

-- session_id names a session row; no foreign key, so a task may record a
-- session before or after the session's own row is written.
CREATE TABLE task_sessions (
    task_id    TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    session_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE task_events (
    task_id    TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    type       TEXT NOT NULL,
    payload    JSON,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- +goose Down
DROP TABLE task_events;
DROP TABLE task_sessions;
DROP TABLE tasks;
DROP TABLE profiles;
DROP TABLE secrets;
DROP TABLE harnesses;
