package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const profileCols = `id, org_id, name, spec, grants, version, created_at, updated_at, deleted_at`

func scanProfile(r scanner) (domain.Profile, error) {
	var p domain.Profile
	var spec sql.NullString
	var grants string
	var created, updated int64
	var deleted sql.NullInt64
	if err := r.Scan(&p.ID, &p.Org, &p.Name, &spec, &grants, &p.Version, &created, &updated, &deleted); err != nil {
		return domain.Profile{}, err
	}
	var err error
	if p.Grants, err = decodeGrants(grants); err != nil {
		return domain.Profile{}, fmt.Errorf("profile %s: %w", p.ID, err)
	}
	p.Spec, p.DeletedAt = fromJSON(spec), fromNullMicros(deleted)
	p.CreatedAt, p.UpdatedAt = fromMicros(created), fromMicros(updated)
	return p, nil
}

// checkProfile validates what CreateProfile and UpdateProfile write.
func checkProfile(p domain.Profile) error {
	if p.ID == "" || p.Name == "" || p.Org == "" {
		return errors.New("profile id, organisation and name are required")
	}
	if err := domain.CheckGrants(p.Grants); err != nil {
		return fmt.Errorf("%w: %w", domain.ErrInvalid, err)
	}
	return checkJSON("spec", p.Spec)
}

// CreateProfile implements store.Profiles.
func (s *Store) CreateProfile(ctx context.Context, p domain.Profile) (domain.Profile, error) {
	action := "create profile " + p.Name
	if err := checkProfile(p); err != nil {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, err)
	}
	out, err := scanProfile(s.write.QueryRowContext(ctx, `INSERT INTO profiles (`+profileCols+`)
		VALUES ($1, $2, $3, $4, $5, 1, $6, $6, NULL) RETURNING `+profileCols,
		p.ID, string(p.Org), p.Name, jsonArg(p.Spec), encodeGrants(p.Grants), micros(orNow(p.CreatedAt))))
	if s.isUnique(err) {
		return domain.Profile{}, fmt.Errorf("%s: %w: id or name already used", action, store.ErrConflict)
	}
	if err != nil {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// GetProfile implements store.Profiles.
func (s *Store) GetProfile(ctx context.Context, id domain.ProfileID) (domain.Profile, error) {
	p, err := scanProfile(s.read.QueryRowContext(ctx, `SELECT `+profileCols+` FROM profiles WHERE id = $1`, id))
	return p, rowFound(err, "get profile "+string(id))
}

// GetProfileByName implements store.Profiles.
func (s *Store) GetProfileByName(ctx context.Context, org domain.OrgID, name string) (domain.Profile, error) {
	p, err := scanProfile(s.read.QueryRowContext(ctx, `SELECT `+profileCols+` FROM profiles
		WHERE org_id = $1 AND name = $2 AND deleted_at IS NULL`, string(org), name))
	return p, rowFound(err, "get profile named "+name)
}

// ListProfiles implements store.Profiles.
func (s *Store) ListProfiles(ctx context.Context, org domain.OrgID) ([]domain.Profile, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+profileCols+` FROM profiles
		WHERE org_id = $1 AND deleted_at IS NULL ORDER BY name`, string(org))
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	out, err := collect(rows, scanProfile)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	return out, nil
}

// UpdateProfile implements store.Profiles: one UPDATE conditioned on the
// version, so the database arbitrates between concurrent editors.
func (s *Store) UpdateProfile(ctx context.Context, p domain.Profile, expectVersion int64) (domain.Profile, error) {
	action := fmt.Sprintf("update profile %s at version %d", p.ID, expectVersion)
	if err := checkProfile(p); err != nil {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, err)
	}
	out, err := scanProfile(s.write.QueryRowContext(ctx, `UPDATE profiles
		SET name = $2, spec = $3, grants = $4, version = version + 1, updated_at = $5
		WHERE id = $1 AND org_id = $7 AND version = $6 AND deleted_at IS NULL RETURNING `+profileCols,
		p.ID, p.Name, jsonArg(p.Spec), encodeGrants(p.Grants), micros(orNow(p.UpdatedAt)), expectVersion, string(p.Org)))
	if s.isUnique(err) {
		return domain.Profile{}, fmt.Errorf("%s: %w: another profile has the name %s", action, store.ErrConflict, p.Name)
	}
	if isNoRows(err) {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, s.whyProfileUnchanged(ctx, p.Org, p.ID))
	}
	if err != nil {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// whyProfileUnchanged explains a conditional profile update that matched no
// row: unknown, deleted, or edited since.
func (s *Store) whyProfileUnchanged(ctx context.Context, org domain.OrgID, id domain.ProfileID) error {
	cur, err := scanProfile(s.write.QueryRowContext(ctx, `SELECT `+profileCols+` FROM profiles WHERE id = $1`, id))
	switch {
	case isNoRows(err), err == nil && cur.Org != org:
		return store.ErrNotFound
	case err != nil:
		return err
	case !cur.DeletedAt.IsZero():
		return fmt.Errorf("%w: deleted", store.ErrConflict)
	}
	return fmt.Errorf("%w: now at version %d", store.ErrConflict, cur.Version)
}

// DeleteProfile implements store.Profiles.
func (s *Store) DeleteProfile(ctx context.Context, id domain.ProfileID, at time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE profiles SET deleted_at = $2
		WHERE id = $1 AND deleted_at IS NULL`, id, micros(orNow(at)))
	return softDeleted(ctx, s.write, res, err, "profiles", string(id), "delete profile "+string(id))
}

// grantJSON is a grant as the grants column keeps it.
type grantJSON struct {
	Kind    domain.GrantKind `json:"kind"`
	Subject string           `json:"subject,omitempty"`
}

func encodeGrants(gs []domain.Grant) string {
	out := make([]grantJSON, 0, len(gs))
	for _, g := range gs {
		out = append(out, grantJSON(g))
	}
	b, _ := json.Marshal(out) // plain strings: cannot fail
	return string(b)
}

func decodeGrants(s string) ([]domain.Grant, error) {
	var in []grantJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, fmt.Errorf("read grants: %w", err)
	}
	out := make([]domain.Grant, 0, len(in))
	for _, g := range in {
		out = append(out, domain.Grant(g))
	}
	return out, nil
}
