-- Tasks ingest the events their sessions' guests produce (issue 6): each
-- task session keeps the guest seq of the last event taken from it, and a
-- task is found by its current session.

-- +goose Up
ALTER TABLE task_sessions ADD COLUMN guest_cursor BIGINT NOT NULL DEFAULT 0;
CREATE INDEX tasks_session ON tasks (session_id);

-- +goose Down
DROP INDEX tasks_session;
ALTER TABLE task_sessions DROP COLUMN guest_cursor;
