-- SQLite: BIGINT is INTEGER; length() of a BLOB counts bytes.
-- Per-task quotas (issue 13): a task counts the bytes of its events (type
-- and payload, as IngestTaskEvents and AppendTaskEvents write them) next to
-- their number (event_seq), and records the quotas it had its one note of
-- (comma-separated kinds). Events are read a page of some types at a time.

-- +goose Up
ALTER TABLE tasks ADD COLUMN event_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN quota_noted TEXT NOT NULL DEFAULT '';
UPDATE tasks SET event_bytes = (SELECT COALESCE(SUM(length(CAST(e.type AS BLOB)) + COALESCE(length(CAST(e.payload AS BLOB)), 0)), 0)
    FROM task_events e WHERE e.task_id = tasks.id);
CREATE INDEX task_events_type ON task_events (task_id, type, seq);

-- +goose Down
DROP INDEX task_events_type;
ALTER TABLE tasks DROP COLUMN quota_noted;
ALTER TABLE tasks DROP COLUMN event_bytes;
