-- A snapshot records the last harness event its guest had written (issue 6),
-- so a session resumed from it after its machine was lost takes the events
-- of the new history from there. -1: unknown (taken before this migration,
-- or by a host that does not say).

-- +goose Up
ALTER TABLE session_snapshots ADD COLUMN harness_seq INTEGER NOT NULL DEFAULT -1;

-- +goose Down
ALTER TABLE session_snapshots DROP COLUMN harness_seq;
