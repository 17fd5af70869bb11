-- Integrations (issue 16): Slack, GitHub and Linear, each configured once:
-- its settings as JSON and its credentials sealed (id is the kind).
-- integration_deliveries remembers each delivery a service sent (Slack's
-- event_id, GitHub's X-GitHub-Delivery), so a retry is done once.
-- chat_threads maps a chat thread to the task it carries, and is what its
-- relay holds by lease while it posts the task's turns back.

-- +goose Up
CREATE TABLE integrations (
    id         TEXT NOT NULL PRIMARY KEY,
    config     TEXT NOT NULL,
    sealed     BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE integration_deliveries (
    source      TEXT NOT NULL,
    id          TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (source, id)
);
CREATE INDEX integration_deliveries_received ON integration_deliveries (received_at);

CREATE TABLE chat_threads (
    kind        TEXT NOT NULL,
    channel     TEXT NOT NULL,
    thread      TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    run_id      TEXT NOT NULL DEFAULT '',
    turn_seq    BIGINT NOT NULL DEFAULT 0,
    message     TEXT NOT NULL DEFAULT '',
    relayed_seq BIGINT NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until BIGINT NOT NULL DEFAULT 0,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (kind, channel, thread)
);
CREATE INDEX chat_threads_task ON chat_threads (task_id);
CREATE INDEX chat_threads_lease ON chat_threads (lease_until);

-- +goose Down
DROP TABLE chat_threads;
DROP TABLE integration_deliveries;
DROP TABLE integrations;
