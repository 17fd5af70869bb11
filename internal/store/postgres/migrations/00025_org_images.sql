-- Images belong to an organisation (issue 27): its admins enable,
-- refresh and disable them, its members start sessions from them, and
-- names are unique among one organisation's live images. A single-user
-- install's become the first organisation's.

-- +goose Up
ALTER TABLE images ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
UPDATE images SET org_id = 'org-first';
DROP INDEX images_name_live;
CREATE UNIQUE INDEX images_name_live ON images (org_id, name) WHERE state <> 'disabled';

-- +goose Down
DROP INDEX images_name_live;
CREATE UNIQUE INDEX images_name_live ON images (name) WHERE state <> 'disabled';
ALTER TABLE images DROP COLUMN org_id;
