package domain

import (
	"encoding/json"
	"time"
)

// Harness is a registered harness bundle (issue 6): an agent such as Claude
// Code or Codex packed into a content-addressed read-only image that hosts
// attach at a fixed mount point. (Name, Version) is unique.
type Harness struct {
	ID         string
	Name       string
	Version    string
	Descriptor json.RawMessage // entrypoint, models and modes, credentials, hosts; opaque here
	Manifest   json.RawMessage // chunk manifest of the bundle image; opaque here
	Digest     string          // content digest of the bundle image
	Builtin    bool            // built by engrams (claude-code, codex, shell), not added by an admin
	CreatedAt  time.Time
	DeletedAt  time.Time // zero while it is live
}

// Secret is a credential other than a registry login: a model provider API
// key ("anthropic_api_key", "openai_api_key"), a git HTTPS login
// ("git_https"), ... Sealed is sealed by the caller (package secret, with the
// id as associated data); the store never sees it in clear. Meta holds the
// non-secret facts (base_url, username, host).
type Secret struct {
	ID        SecretID
	Org       OrgID // "" for engrams's own (the gateway key, the broker CA)
	Kind      string
	Name      string // unique among the organisation's secrets not deleted
	Sealed    []byte // nil once deleted
	Meta      json.RawMessage
	CreatedAt time.Time
	DeletedAt time.Time // zero while live
}

// Profile is an admin-curated recipe for tasks: image, harness, model and
// mode, repositories, env, egress, credentials, skills and apps, all in Spec.
// Its name is unique among its organisation's profiles not deleted.
// Version starts at 1 and is bumped by every UpdateProfile (of its spec or
// its grants), so a task records which edit it started from. Grants say
// which members may use it (see Grantee.MayUse).
type Profile struct {
	ID        ProfileID
	Org       OrgID
	Name      string
	Spec      json.RawMessage // opaque here
	Grants    []Grant
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
	DeletedAt time.Time // zero while live
}
