-- SQLite: INTEGER is INTEGER, BOOLEAN is INTEGER; api_tokens is made again
-- to widen its kind check.
-- People, roles and organisations (issue 27): organisations, users (a
-- fleet operator is a deployment-level grant: hosts, not any
-- organisation's data), members (a user's role in an organisation) and the
-- audit log. API keys gain an organisation, a user (a personal key's
-- owner, a service key's maker), a role no greater than their maker's and
-- an optional expiry. A single-user install's data becomes the first
-- organisation's, and its user keys the first owner's, who is also the
-- fleet operator (the admin who had every grant keeps them).

-- +goose Up
CREATE TABLE orgs (
    id         TEXT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX orgs_name ON orgs (name);

CREATE TABLE users (
    id             TEXT NOT NULL PRIMARY KEY,
    email          TEXT NOT NULL DEFAULT '',
    name           TEXT NOT NULL DEFAULT '',
    fleet_operator INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL
);
CREATE UNIQUE INDEX users_email ON users (email) WHERE email <> '';

CREATE TABLE members (
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX members_user ON members (user_id);

CREATE TABLE audit_events (
    id          TEXT NOT NULL PRIMARY KEY,
    org_id      TEXT NOT NULL DEFAULT '',
    actor_kind  TEXT NOT NULL,
    actor_id    TEXT NOT NULL DEFAULT '',
    actor_name  TEXT NOT NULL DEFAULT '',
    key_id      TEXT NOT NULL DEFAULT '',
    action      TEXT NOT NULL,
    target_kind TEXT NOT NULL DEFAULT '',
    target_id   TEXT NOT NULL DEFAULT '',
    status      INTEGER NOT NULL DEFAULT 0,
    remote      TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL
);
CREATE INDEX audit_events_org ON audit_events (org_id, created_at, id);

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
INSERT INTO api_tokens_next (id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at) SELECT id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_next RENAME TO api_tokens;
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_host ON api_tokens (host_id) WHERE host_id <> '';
CREATE INDEX api_tokens_org ON api_tokens (org_id, created_at);

INSERT INTO orgs (id, name, created_at)
    VALUES ('org-first', 'default', CAST(strftime('%s', 'now') AS INTEGER) * 1000000);
INSERT INTO users (id, email, name, fleet_operator, created_at)
    VALUES ('user-first-owner', '', 'owner', 1, CAST(strftime('%s', 'now') AS INTEGER) * 1000000);
INSERT INTO members (org_id, user_id, role, created_at)
    VALUES ('org-first', 'user-first-owner', 'owner', CAST(strftime('%s', 'now') AS INTEGER) * 1000000);
UPDATE api_tokens SET org_id = 'org-first', user_id = 'user-first-owner', role = 'owner' WHERE kind = 'user';

-- +goose Down
DELETE FROM api_tokens WHERE kind = 'service';
CREATE TABLE api_tokens_next (
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
INSERT INTO api_tokens_next (id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at) SELECT id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_next RENAME TO api_tokens;
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_host ON api_tokens (host_id) WHERE host_id <> '';
DROP TABLE audit_events;
DROP TABLE members;
DROP TABLE users;
DROP TABLE orgs;
