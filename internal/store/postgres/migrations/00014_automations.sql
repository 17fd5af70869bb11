-- Automations (issue 16). An automation's definitions are versions; a run
-- pins the version it started on. dedup_key makes one run per delivery (a
-- webhook's delivery id, a schedule's occurrence) per automation. Steps are
-- the record of each block a run executed; a block run again after a crash
-- keeps its seq and counts another attempt. hook_secrets holds each webhook
-- trigger's sealed signing secret. automation_executors are the replicas
-- running automation workflows, by heartbeat, so a live one takes over the
-- runs of one that died.

-- +goose Up
CREATE TABLE automations (
    id           TEXT NOT NULL PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE,
    enabled      BOOLEAN NOT NULL DEFAULT FALSE,
    version      BIGINT NOT NULL,
    trigger_kind TEXT NOT NULL,
    hook_slug    TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE UNIQUE INDEX automations_hook_slug ON automations (hook_slug);
CREATE INDEX automations_trigger ON automations (trigger_kind, enabled);

CREATE TABLE automation_versions (
    automation_id TEXT NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    version       BIGINT NOT NULL,
    definition    TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (automation_id, version)
);

CREATE TABLE hook_secrets (
    id         TEXT NOT NULL PRIMARY KEY REFERENCES automations (id) ON DELETE CASCADE,
    sealed     BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE automation_runs (
    id              TEXT NOT NULL PRIMARY KEY,
    automation_id   TEXT NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    version         BIGINT NOT NULL,
    state           TEXT NOT NULL,
    trigger_kind    TEXT NOT NULL,
    dedup_key       TEXT,
    concurrency_key TEXT NOT NULL DEFAULT '',
    trigger_payload TEXT,
    inputs          TEXT,
    error           TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    started_at      BIGINT NOT NULL DEFAULT 0,
    ended_at        BIGINT NOT NULL DEFAULT 0,
    updated_at      BIGINT NOT NULL
);
CREATE UNIQUE INDEX automation_runs_dedup ON automation_runs (automation_id, dedup_key);
CREATE INDEX automation_runs_list ON automation_runs (automation_id, id);
CREATE INDEX automation_runs_key ON automation_runs (automation_id, concurrency_key, state);
CREATE INDEX automation_runs_state ON automation_runs (state, created_at);

CREATE TABLE automation_steps (
    run_id     TEXT NOT NULL REFERENCES automation_runs (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    block_id   TEXT NOT NULL,
    kind       TEXT NOT NULL,
    path       TEXT NOT NULL,
    state      TEXT NOT NULL,
    attempt    BIGINT NOT NULL,
    input      TEXT,
    output     TEXT NOT NULL DEFAULT '',
    error      TEXT NOT NULL DEFAULT '',
    started_at BIGINT NOT NULL,
    ended_at   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE automation_executors (
    id           TEXT NOT NULL PRIMARY KEY,
    heartbeat_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE automation_executors;
DROP TABLE automation_steps;
DROP TABLE automation_runs;
DROP TABLE hook_secrets;
DROP TABLE automation_versions;
DROP TABLE automations;
