-- SQLite: BIGINT is INTEGER.
-- Deleting a harness (issue 15) keeps its row, with deleted_at set: sessions
-- and snapshots made with it still name its bundle by id (and its chunks stay
-- referenced), while it is no longer listed or resolved by name. Putting
-- the same bundle again brings it back.

-- +goose Up
ALTER TABLE harnesses ADD COLUMN deleted_at INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE harnesses DROP COLUMN deleted_at;
