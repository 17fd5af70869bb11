-- SQLite: INTEGER is INTEGER, BOOLEAN is INTEGER; api_tokens is made again
-- to widen its kind check.
-- Sign-ins and owners (issue 27): a browser's sign-in is a key of kind
-- 'session' with an idle timeout; sessions and tasks belong to an
-- organisation and a person (owner_id; '' for the organisation's, as an
-- automation's), private to them and the organisation's admins unless
-- shared. What a single-user install had becomes the first owner's; a
-- task an automation run started, and its session, the organisation's.

-- +goose Up
CREATE TABLE api_tokens_next (
    id           TEXT NOT NULL PRIMARY KEY,
    name         TEXT NOT NULL DEFAULT '',
    kind         TEXT NOT NULL CHECK (kind IN ('user', 'service', 'host', 'session')),
    host_id      TEXT NOT NULL DEFAULT '',
    prefix       TEXT NOT NULL DEFAULT '',
    hash         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL DEFAULT 0,
    revoked_at   INTEGER NOT NULL DEFAULT 0,
    org_id       TEXT NOT NULL DEFAULT '',
    user_id      TEXT NOT NULL DEFAULT '',
    role         TEXT NOT NULL DEFAULT '',
    expires_at   INTEGER NOT NULL DEFAULT 0,
    idle_seconds INTEGER NOT NULL DEFAULT 0
);
INSERT INTO api_tokens_next (id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at, org_id, user_id, role, expires_at)
    SELECT id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at, org_id, user_id, role, expires_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_next RENAME TO api_tokens;
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_host ON api_tokens (host_id) WHERE host_id <> '';
CREATE INDEX api_tokens_org ON api_tokens (org_id, created_at);

ALTER TABLE sessions ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN owner_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN owner_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET org_id = 'org-first', owner_id = 'user-first-owner';
UPDATE tasks SET org_id = 'org-first', owner_id = 'user-first-owner' WHERE run_id = '';
UPDATE tasks SET org_id = 'org-first', shared = 1 WHERE run_id <> '';
UPDATE sessions SET owner_id = '', shared = 1 WHERE id IN (SELECT session_id FROM tasks WHERE run_id <> '' AND session_id <> '');
CREATE INDEX sessions_org ON sessions (org_id, id);
CREATE INDEX tasks_org ON tasks (org_id, created_at, id);

-- +goose Down
DROP INDEX tasks_org;
DROP INDEX sessions_org;
ALTER TABLE tasks DROP COLUMN shared;
ALTER TABLE tasks DROP COLUMN owner_id;
ALTER TABLE tasks DROP COLUMN org_id;
ALTER TABLE sessions DROP COLUMN shared;
ALTER TABLE sessions DROP COLUMN owner_id;
ALTER TABLE sessions DROP COLUMN org_id;
DELETE FROM api_tokens WHERE kind = 'session';
CREATE TABLE api_tokens_next (
    id           TEXT NOT NULL PRIMARY KEY,
    name         TEXT NOT NULL DEFAULT '',
    kind         TEXT NOT NULL CHECK (kind IN ('user', 'service', 'host')),
    host_id      TEXT NOT NULL DEFAULT '',
    prefix       TEXT NOT NULL DEFAULT '',
    hash         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL DEFAULT 0,
    revoked_at   INTEGER NOT NULL DEFAULT 0,
    org_id       TEXT NOT NULL DEFAULT '',
    user_id      TEXT NOT NULL DEFAULT '',
    role         TEXT NOT NULL DEFAULT '',
    expires_at   INTEGER NOT NULL DEFAULT 0
);
INSERT INTO api_tokens_next (id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at, org_id, user_id, role, expires_at)
    SELECT id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at, org_id, user_id, role, expires_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_next RENAME TO api_tokens;
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_host ON api_tokens (host_id) WHERE host_id <> '';
CREATE INDEX api_tokens_org ON api_tokens (org_id, created_at);
