-- Profiles and secrets belong to an organisation (issue 27): names are
-- unique within one, and nothing of one is visible from another. A
-- profile's grants say which members may use it (JSON: [{"kind":
-- "everyone"|"user"|"group", "subject": ...}]); a member's groups are
-- what group grants name. A single-user install's profiles and secrets
-- become the first organisation's, and its profiles stay usable by every
-- member; engrams's own sealed values (the gateway key, the broker CA)
-- belong to no organisation.

-- +goose Up
ALTER TABLE profiles ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
ALTER TABLE profiles ADD COLUMN grants TEXT NOT NULL DEFAULT '[]';
UPDATE profiles SET org_id = 'org-first', grants = '[{"kind":"everyone"}]';
DROP INDEX profiles_name_live;
CREATE UNIQUE INDEX profiles_name_live ON profiles (org_id, name) WHERE deleted_at IS NULL;

ALTER TABLE secrets ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
UPDATE secrets SET org_id = 'org-first' WHERE kind NOT IN ('gateway_key', 'broker_ca');
DROP INDEX secrets_name_live;
CREATE UNIQUE INDEX secrets_name_live ON secrets (org_id, name) WHERE deleted_at IS NULL;

ALTER TABLE members ADD COLUMN group_names TEXT NOT NULL DEFAULT '[]';

-- +goose Down
DROP INDEX secrets_name_live;
CREATE UNIQUE INDEX secrets_name_live ON secrets (name) WHERE deleted_at IS NULL;
ALTER TABLE secrets DROP COLUMN org_id;
DROP INDEX profiles_name_live;
CREATE UNIQUE INDEX profiles_name_live ON profiles (name) WHERE deleted_at IS NULL;
ALTER TABLE profiles DROP COLUMN grants;
ALTER TABLE profiles DROP COLUMN org_id;
ALTER TABLE members DROP COLUMN group_names;
