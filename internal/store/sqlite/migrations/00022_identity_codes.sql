-- Links a person makes between their engrams account and an
-- integration's (issue 27): a short-lived, single-use code, stored
-- hashed, that the person then says to the integration ("@engrams link
-- CODE" in Slack); the account that says it is mapped to them.

-- +goose Up
CREATE TABLE identity_codes (
    hash       TEXT NOT NULL PRIMARY KEY,
    org_id     TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX identity_codes_expiry ON identity_codes (expires_at);

-- +goose Down
DROP TABLE identity_codes;
