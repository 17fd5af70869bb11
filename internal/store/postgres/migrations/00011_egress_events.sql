-- Egress log (issue 14): every DNS query and connection of a session's
-- guest with the host's verdict, kept per session (the newest 10,000 by
-- default: older rows are deleted in the append's transaction). Seqs are
-- per session and gap-free in arrival order (sessions.egress_seq, bumped
-- under the session's row lock); reads page by seq either way.

-- +goose Up
ALTER TABLE sessions ADD COLUMN egress_seq BIGINT NOT NULL DEFAULT 0;
CREATE TABLE egress_events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    at         BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    host       TEXT NOT NULL DEFAULT '',
    port       INTEGER NOT NULL DEFAULT 0,
    verdict    TEXT NOT NULL DEFAULT '',
    bytes_up   BIGINT NOT NULL DEFAULT 0,
    bytes_down BIGINT NOT NULL DEFAULT 0,
    reason     TEXT NOT NULL DEFAULT '',
    dropped    BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- +goose Down
DROP TABLE egress_events;
ALTER TABLE sessions DROP COLUMN egress_seq;
