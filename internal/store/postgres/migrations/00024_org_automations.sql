-- Automations, their runs and integrations belong to an organisation
-- (issue 27): nothing of one is visible from another, a run's tasks are
-- its organisation's, and an integration's events start only its
-- organisation's automations. Automation names and webhook slugs stay
-- unique in the deployment (a slug is a public URL). A single-user
-- install's become the first organisation's.

-- +goose Up
ALTER TABLE automations ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
UPDATE automations SET org_id = 'org-first';
CREATE INDEX automations_org ON automations (org_id, name);
ALTER TABLE automation_runs ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
UPDATE automation_runs SET org_id = 'org-first';
ALTER TABLE integrations ADD COLUMN org_id TEXT NOT NULL DEFAULT '';
UPDATE integrations SET org_id = 'org-first';

-- +goose Down
ALTER TABLE integrations DROP COLUMN org_id;
ALTER TABLE automation_runs DROP COLUMN org_id;
DROP INDEX automations_org;
ALTER TABLE automations DROP COLUMN org_id;
