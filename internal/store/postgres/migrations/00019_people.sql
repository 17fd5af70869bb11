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
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX orgs_name ON orgs (name);

CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL DEFAULT '',
    name           TEXT NOT NULL DEFAULT '',
    fleet_operator BOOLEAN NOT NULL DEFAULT FALSE,
    created_at     BIGINT NOT NULL
);
CREATE UNIQUE INDEX users_email ON users (email) WHERE email <> '';

CREATE TABLE members (
    org_id     TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX members_user ON members (user_id);

CREATE TABLE audit_events (
    id          TEXT PRIMARY KEY,
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
    created_at  BIGINT NOT NULL
);
CREATE INDEX audit_events_org ON audit_events (org_id, created_at, id);

ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_kind_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_kind_check CHECK (kind IN ('user', 'service', 'host'));
ALTER TABLE api_tokens ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN role TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX api_tokens_org ON api_tokens (org_id, created_at);

INSERT INTO orgs (id, name, created_at)
    VALUES ('org-first', 'default', (EXTRACT(EPOCH FROM now()) * 1000000)::BIGINT);
INSERT INTO users (id, email, name, fleet_operator, created_at)
    VALUES ('user-first-owner', '', 'owner', TRUE, (EXTRACT(EPOCH FROM now()) * 1000000)::BIGINT);
INSERT INTO members (org_id, user_id, role, created_at)
    VALUES ('org-first', 'user-first-owner', 'owner', (EXTRACT(EPOCH FROM now()) * 1000000)::BIGINT);
UPDATE api_tokens SET org_id = 'org-first', user_id = 'user-first-owner', role = 'owner' WHERE kind = 'user';

-- +goose Down
DELETE FROM api_tokens WHERE kind = 'service';
DROP INDEX api_tokens_org;
ALTER TABLE api_tokens DROP COLUMN expires_at;
ALTER TABLE api_tokens DROP COLUMN role;
ALTER TABLE api_tokens DROP COLUMN user_id;
ALTER TABLE api_tokens DROP COLUMN org_id;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_kind_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_kind_check CHECK (kind IN ('user', 'host'));
DROP TABLE audit_events;
DROP TABLE members;
DROP TABLE users;
DROP TABLE orgs;
