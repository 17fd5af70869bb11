-- Who did it (issue 27): a person's accounts in Slack, GitHub and Linear
-- (identities), mapped by a verified email both sides give or by a link
-- the person makes; an automation run records the person whose mention,
-- pull request or issue started it (actor_id; '' for none: a schedule, a
-- signed webhook).

-- +goose Up
CREATE TABLE identities (
    org_id      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    external_id TEXT NOT NULL,
    user_id     TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    how         TEXT NOT NULL CHECK (how IN ('email', 'link')),
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (org_id, kind, external_id)
);
CREATE INDEX identities_user ON identities (user_id);
ALTER TABLE automation_runs ADD COLUMN actor_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE automation_runs DROP COLUMN actor_id;
DROP TABLE identities;
