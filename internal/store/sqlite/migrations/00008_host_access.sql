-- Host access (issue 13): an admin may disable a host or delete it (the row
-- stays, soft-deleted, for the sessions and snapshots naming it; its name is
-- free again), and one link at a time holds a host across every replica.

-- +goose Up
ALTER TABLE hosts ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN deleted_at INTEGER NOT NULL DEFAULT 0;
-- The link holding the host ('' when none), where it came from and when.
ALTER TABLE hosts ADD COLUMN link_id TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN link_remote TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN link_at INTEGER NOT NULL DEFAULT 0;

DROP INDEX hosts_name;
CREATE UNIQUE INDEX hosts_name ON hosts (name) WHERE deleted_at = 0;

-- +goose Down
-- Deleted hosts keep their rows under names that cannot clash.
UPDATE hosts SET name = name || '~deleted~' || id WHERE deleted_at <> 0;
DROP INDEX hosts_name;
CREATE UNIQUE INDEX hosts_name ON hosts (name);
ALTER TABLE hosts DROP COLUMN link_at;
ALTER TABLE hosts DROP COLUMN link_remote;
ALTER TABLE hosts DROP COLUMN link_id;
ALTER TABLE hosts DROP COLUMN deleted_at;
ALTER TABLE hosts DROP COLUMN disabled;
