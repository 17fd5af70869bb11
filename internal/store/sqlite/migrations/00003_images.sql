-- SQLite: JSON is TEXT, BIGINT is INTEGER.
-- Images (issue 5): OCI images enabled into a base snapshot, and the jobs
-- that enable or refresh them.

-- +goose Up
CREATE TABLE images (
    id            TEXT NOT NULL PRIMARY KEY,
    name          TEXT NOT NULL,
    ref           TEXT NOT NULL,
    digest        TEXT NOT NULL DEFAULT '',
    state         TEXT NOT NULL CHECK (state IN ('ready', 'disabled')),
    config        TEXT,
    credential_id TEXT,
    manifests     TEXT,
    facts         TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
-- A disabled image keeps its row; its name is free again.
CREATE UNIQUE INDEX images_name_live ON images (name) WHERE state <> 'disabled';

CREATE TABLE image_jobs (
    id          TEXT NOT NULL PRIMARY KEY,
    image_id    TEXT NOT NULL REFERENCES images (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('enable', 'refresh')),
    state       TEXT NOT NULL CHECK (state IN ('pending', 'materializing', 'capturing', 'ready', 'failed')),
    stage       TEXT NOT NULL DEFAULT '',
    bytes_done  INTEGER NOT NULL DEFAULT 0,
    bytes_total INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT NOT NULL DEFAULT '',
    output_tail TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
-- At most one active job per image.
CREATE UNIQUE INDEX image_jobs_one_active ON image_jobs (image_id) WHERE state IN ('pending', 'materializing', 'capturing');
CREATE INDEX image_jobs_image ON image_jobs (image_id, created_at, id);

-- +goose Down
DROP TABLE image_jobs;
DROP TABLE images;
