-- SQLite: BIGINT is INTEGER.
-- Task usage (issue 26): a task sums its usage events as they are appended
-- (tokens per kind, the cost of the priced ones in micro-units of
-- cost_currency, how many were not priced, the last model named), and
-- records who started it: the automation run (run_id) or the name of the
-- API token a user started it with (started_by); '' where unknown. Tasks
-- from before count from zero: their old usage events are shown per turn
-- but not summed, as a payload written by a guest is not trusted in a
-- migration.

-- +goose Up
ALTER TABLE tasks ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN started_by TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN usage_model TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cost_currency TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN unpriced_usages INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE tasks DROP COLUMN unpriced_usages;
ALTER TABLE tasks DROP COLUMN cost_currency;
ALTER TABLE tasks DROP COLUMN cost_micros;
ALTER TABLE tasks DROP COLUMN cache_write_tokens;
ALTER TABLE tasks DROP COLUMN cache_read_tokens;
ALTER TABLE tasks DROP COLUMN output_tokens;
ALTER TABLE tasks DROP COLUMN input_tokens;
ALTER TABLE tasks DROP COLUMN usage_model;
ALTER TABLE tasks DROP COLUMN started_by;
ALTER TABLE tasks DROP COLUMN run_id;
