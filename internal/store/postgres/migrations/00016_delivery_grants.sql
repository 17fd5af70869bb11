-- Postgres.
-- Every sender held to its grant (issue 25): a delivery is remembered
-- until its own expiry (each source keeps its replay window: GitHub a
-- week, others a day), a chat thread records who started it (only they
-- continue its task), and runs are counted per automation by creation
-- time for its hourly cap. Kept answers of automation saves, which held
-- hook secrets in the clear, are deleted.

-- +goose Up
ALTER TABLE integration_deliveries ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX integration_deliveries_expires ON integration_deliveries (expires_at);
ALTER TABLE chat_threads ADD COLUMN started_by TEXT NOT NULL DEFAULT '';
CREATE INDEX automation_runs_created ON automation_runs (automation_id, created_at);
-- Answers kept before showing a hook's secret in the clear: forgotten.
DELETE FROM idempotency_keys WHERE route LIKE 'POST /v1/automations%';

-- +goose Down
DROP INDEX automation_runs_created;
ALTER TABLE chat_threads DROP COLUMN started_by;
DROP INDEX integration_deliveries_expires;
ALTER TABLE integration_deliveries DROP COLUMN expires_at;
