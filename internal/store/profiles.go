package store

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Harnesses keeps registered harness bundles. Rows are never changed: a new
// bundle is a new version.
type Harnesses interface {
	// PutHarness inserts h (ID, Name, Version and Digest required) and
	// returns the stored row. If (Name, Version) is already registered with
	// the same Digest it is idempotent: nothing is written and the stored
	// row (with its own ID and times) is returned. ErrConflict if (Name,
	// Version) is registered with another digest, or h.ID names another harness.
	PutHarness(ctx context.Context, h domain.Harness) (domain.Harness, error)
	GetHarness(ctx context.Context, id string) (domain.Harness, error)
	// FindHarness returns the harness with that name and version; version ""
	// means the newest by CreatedAt (then by ID). ErrNotFound if none.
	FindHarness(ctx context.Context, name, version string) (domain.Harness, error)
	// ListHarnesses returns every harness by name, then oldest first,
	// deleted ones included (their bundles are still referenced).
	ListHarnesses(ctx context.Context) ([]domain.Harness, error)
	// DeleteHarness marks harness id deleted at at and returns it: GetHarness
	// still finds it (sessions made with it name it by id), FindHarness no
	// longer does, and PutHarness of the same bundle makes it live again.
	// ErrNotFound if id is unknown or already deleted.
	DeleteHarness(ctx context.Context, id string, at time.Time) (domain.Harness, error)
}

// Secrets keeps sealed credentials; profiles name them. Every read returns
// Sealed: callers must never show it (API answers and CLI output carry the
// id, kind, name and meta only). A secret belongs to an organisation (""
// for engrams's own); names are unique within one, and reads by name or
// list are of one organisation's. GetSecret by id is for callers that hold
// an id from that organisation's rows (a task's, a profile's).
type Secrets interface {
	// PutSecret inserts s (ID, Kind, Name and Sealed required; DeletedAt is
	// ignored). ErrConflict if the id is taken or a live secret of s.Org has
	// the name.
	PutSecret(ctx context.Context, s domain.Secret) error
	// GetSecret returns the secret with that id, deleted ones too (DeletedAt
	// set, Sealed nil); ErrNotFound if none.
	GetSecret(ctx context.Context, id domain.SecretID) (domain.Secret, error)
	// GetSecretByName returns org's live secret with that name, else ErrNotFound.
	GetSecretByName(ctx context.Context, org domain.OrgID, name string) (domain.Secret, error)
	// ListSecrets returns org's live secrets by name.
	ListSecrets(ctx context.Context, org domain.OrgID) ([]domain.Secret, error)
	// DeleteSecret marks the secret deleted at at and erases its sealed
	// bytes; the row stays as a record and its name is free again. Deleting
	// a deleted secret changes nothing; ErrNotFound for an unknown id.
	DeleteSecret(ctx context.Context, id domain.SecretID, at time.Time) error
}

// Profiles keeps profiles, with optimistic concurrency on edits. A
// profile belongs to an organisation: names are unique within one, and
// reads by name or list are of one organisation's.
type Profiles interface {
	// CreateProfile inserts p at version 1 (ID, Org and Name required, Grants
	// well formed; Version, UpdatedAt and DeletedAt are ignored; UpdatedAt
	// follows CreatedAt) and returns the stored row. ErrConflict if the id
	// is taken or a live profile of p.Org has the name.
	CreateProfile(ctx context.Context, p domain.Profile) (domain.Profile, error)
	// GetProfile returns the profile with that id, deleted ones too
	// (DeletedAt set); ErrNotFound if none.
	GetProfile(ctx context.Context, id domain.ProfileID) (domain.Profile, error)
	// GetProfileByName returns org's live profile with that name, else ErrNotFound.
	GetProfileByName(ctx context.Context, org domain.OrgID, name string) (domain.Profile, error)
	// ListProfiles returns org's live profiles by name.
	ListProfiles(ctx context.Context, org domain.OrgID) ([]domain.Profile, error)
	// UpdateProfile rewrites p.ID's name, spec and grants, stamps UpdatedAt with
	// p.UpdatedAt (now when zero), bumps the version and returns the stored
	// row; it applies only while the stored version is expectVersion. One
	// conditional write: of concurrent editors of one version exactly one
	// wins. ErrConflict if the version moved on, the profile is deleted or
	// another live profile has the name; ErrNotFound for an unknown id or
	// one of another organisation than p.Org.
	UpdateProfile(ctx context.Context, p domain.Profile, expectVersion int64) (domain.Profile, error)
	// DeleteProfile marks the profile deleted at at; the row stays (tasks
	// name it) and its name is free again. Deleting a deleted profile changes
	// nothing; ErrNotFound for an unknown id.
	DeleteProfile(ctx context.Context, id domain.ProfileID, at time.Time) error
}
