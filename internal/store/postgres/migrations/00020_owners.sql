-- Sign-ins and owners (issue 27): a browser's sign-in is a key of kind
-- 'session' with an idle timeout; sessions and tasks belong to an
-- organisation and a person (owner_id; '' for the organisation's, as an
-- automation's), private to them and the organisation's admins unless
-- shared. What a single-user install had becomes the first owner's; a
-- task an automation run started, and its session, the organisation's.

-- +goose Up
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_kind_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_kind_check CHECK (kind IN ('user', 'service', 'host', 'session'));
ALTER TABLE api_tokens ADD COLUMN idle_seconds BIGINT NOT NULL DEFAULT 0;

ALTER TABLE sessions ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN owner_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN shared BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE tasks ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN owner_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN shared BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE sessions SET org_id = 'org-first', owner_id = 'user-first-owner';
UPDATE tasks SET org_id = 'org-first', owner_id = 'user-first-owner' WHERE run_id = '';
UPDATE tasks SET org_id = 'org-first', shared = TRUE WHERE run_id <> '';
UPDATE sessions SET owner_id = '', shared = TRUE WHERE id IN (SELECT session_id FROM tasks WHERE run_id <> '' AND session_id <> '');
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
ALTER TABLE api_tokens DROP COLUMN idle_seconds;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_kind_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_kind_check CHECK (kind IN ('user', 'service', 'host'));
