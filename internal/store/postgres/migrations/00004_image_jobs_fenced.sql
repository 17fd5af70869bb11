-- Fenced image jobs and registry credentials: a job is claimed with a lease
-- and an epoch like a session op, so a replica whose runner died hands it
-- to another and the old runner's writes are refused. Images record the id
-- of their base snapshot; registry credentials are kept sealed.

-- +goose Up
ALTER TABLE images ADD COLUMN base_id TEXT NOT NULL DEFAULT '';

ALTER TABLE image_jobs ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE image_jobs ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
-- Stage name -> milliseconds. JSON, not JSONB, like every other JSON column:
-- the bytes read back are the bytes written, in both dialects.
ALTER TABLE image_jobs ADD COLUMN stages JSON;
ALTER TABLE image_jobs ADD COLUMN digest TEXT NOT NULL DEFAULT '';
-- ListClaimableJobs scans only active jobs, oldest first.
CREATE INDEX image_jobs_active ON image_jobs (created_at, id) WHERE state IN ('pending', 'materializing', 'capturing');

-- images.credential_id names a row here. There is no foreign key: SQLite
-- cannot add one to an existing column without rebuilding images, and a
-- credential is deleted (DeleteCredential) without touching the images
-- that named it; a pull with a missing credential fails at pull time.
CREATE TABLE registry_credentials (
    id         TEXT PRIMARY KEY,
    registry   TEXT NOT NULL,
    username   TEXT NOT NULL DEFAULT '',
    sealed     BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE registry_credentials;
DROP INDEX image_jobs_active;
ALTER TABLE image_jobs DROP COLUMN digest;
ALTER TABLE image_jobs DROP COLUMN stages;
ALTER TABLE image_jobs DROP COLUMN lease_until;
ALTER TABLE image_jobs DROP COLUMN epoch;
ALTER TABLE images DROP COLUMN base_id;
