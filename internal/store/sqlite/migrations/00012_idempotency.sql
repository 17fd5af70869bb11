-- SQLite: BIGINT is INTEGER, BYTEA is BLOB.
-- Idempotency keys (issue 15): the answer of each POST a caller sent with an
-- Idempotency-Key, per caller token, so a retry is answered again instead of
-- run again. status 0: the first request still runs. Rows older than a
-- day are deleted as keys are recorded.

-- +goose Up
CREATE TABLE idempotency_keys (
    token_id     TEXT NOT NULL,
    key          TEXT NOT NULL,
    route        TEXT NOT NULL,
    body_hash    TEXT NOT NULL,
    status       INTEGER NOT NULL DEFAULT 0,
    content_type TEXT NOT NULL DEFAULT '',
    body         BLOB,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (token_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
