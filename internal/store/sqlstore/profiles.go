package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const profileCols = `id, name, spec, version, created_at, updated_at, deleted_at`

func scanProfile(r scanner) (domain.Profile, error) {
	var p domain.Profile
	var spec sql.NullString
	var created, updated int64
	var deleted sql.NullInt64
	if err := r.Scan(&p.ID, &p.Name, &spec, &p.Version, &created, &updated, &deleted); err != nil {
		return domain.Profile{}, err
	}
	p.Spec, p.DeletedAt = fromJSON(spec), fromNullMicros(deleted)
	p.CreatedAt, p.UpdatedAt = fromMicros(created), fromMicros(updated)
	return p, nil
}

// checkProfile validates what CreateProfile and UpdateProfile write.
func checkProfile(p domain.Profile) error {
	if p.ID == "" || p.Name == "" {
		return errors.New("profile id and name are required")
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
		VALUES ($1, $2, $3, 1, $4, $4, NULL) RETURNING `+profileCols,
		p.ID, p.Name, jsonArg(p.Spec), micros(orNow(p.CreatedAt))))
	if s.isUnique(err) {
		return domain.Profile{}, fmt.Errorf("%s: %w: id or name already used", action, store.ErrConflict)
	}
	if err != nil {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// GetProfile implements store.Profiles.
func (s *Store) GetProfile(ctx context.Context, id string) (domain.Profile, error) {
	p, err := scanProfile(s.read.QueryRowContext(ctx, `SELECT `+profileCols+` FROM profiles WHERE id = $1`, id))
	return p, rowFound(err, "get profile "+id)
}

// GetProfileByName implements store.Profiles.
func (s *Store) GetProfileByName(ctx context.Context, name string) (domain.Profile, error) {
	p, err := scanProfile(s.read.QueryRowContext(ctx, `SELECT `+profileCols+` FROM profiles
		WHERE name = $1 AND deleted_at IS NULL`, name))
	return p, rowFound(err, "get profile named "+name)
}

// ListProfiles implements store.Profiles.
func (s *Store) ListProfiles(ctx context.Context) ([]domain.Profile, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+profileCols+` FROM profiles
		WHERE deleted_at IS NULL ORDER BY name`)
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
		SET name = $2, spec = $3, version = version + 1, updated_at = $4
		WHERE id = $1 AND version = $5 AND deleted_at IS NULL RETURNING `+profileCols,
		p.ID, p.Name, jsonArg(p.Spec), micros(orNow(p.UpdatedAt)), expectVersion))
	if s.isUnique(err) {
		return domain.Profile{}, fmt.Errorf("%s: %w: another profile has the name %s", action, store.ErrConflict, p.Name)
	}
	if isNoRows(err) {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, s.whyProfileUnchanged(ctx, p.ID))
	}
	if err != nil {
		return domain.Profile{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// whyProfileUnchanged explains a conditional profile update that matched no
// row: unknown, deleted, or edited since.
func (s *Store) whyProfileUnchanged(ctx context.Context, id string) error {
	cur, err := scanProfile(s.write.QueryRowContext(ctx, `SELECT `+profileCols+` FROM profiles WHERE id = $1`, id))
	switch {
	case isNoRows(err):
		return store.ErrNotFound
	case err != nil:
		return err
	case !cur.DeletedAt.IsZero():
		return fmt.Errorf("%w: deleted", store.ErrConflict)
	}
	return fmt.Errorf("%w: now at version %d", store.ErrConflict, cur.Version)
}

// DeleteProfile implements store.Profiles.
func (s *Store) DeleteProfile(ctx context.Context, id string, at time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE profiles SET deleted_at = $2
		WHERE id = $1 AND deleted_at IS NULL`, id, micros(orNow(at)))
	return softDeleted(ctx, s.write, res, err, "profiles", id, "delete profile "+id)
}
