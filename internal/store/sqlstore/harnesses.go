package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const harnessCols = `id, name, version, descriptor, manifest, digest, builtin, created_at, deleted_at`

func scanHarness(r scanner) (domain.Harness, error) {
	var h domain.Harness
	var descriptor, manifest sql.NullString
	var created, deleted int64
	err := r.Scan(&h.ID, &h.Name, &h.Version, &descriptor, &manifest, &h.Digest, &h.Builtin, &created, &deleted)
	if err != nil {
		return domain.Harness{}, err
	}
	h.Descriptor, h.Manifest, h.CreatedAt = fromJSON(descriptor), fromJSON(manifest), fromMicros(created)
	if deleted != 0 {
		h.DeletedAt = fromMicros(deleted)
	}
	return h, nil
}

// PutHarness implements store.Harnesses. The insert comes first; only when
// it hits a unique index is the stored (name, version) read, so concurrent
// puts of one bundle all succeed with the same row.
func (s *Store) PutHarness(ctx context.Context, h domain.Harness) (domain.Harness, error) {
	action := fmt.Sprintf("put harness %s %s", h.Name, h.Version)
	if h.ID == "" || h.Name == "" || h.Version == "" || h.Digest == "" {
		return domain.Harness{}, fmt.Errorf("%s: id, name, version and digest are required", action)
	}
	for field, raw := range map[string][]byte{"descriptor": h.Descriptor, "manifest": h.Manifest} {
		if err := checkJSON(field, raw); err != nil {
			return domain.Harness{}, fmt.Errorf("%s: %w", action, err)
		}
	}
	out, err := scanHarness(s.write.QueryRowContext(ctx, `INSERT INTO harnesses (`+harnessCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0) RETURNING `+harnessCols,
		h.ID, h.Name, h.Version, jsonArg(h.Descriptor), jsonArg(h.Manifest), h.Digest, h.Builtin,
		micros(orNow(h.CreatedAt))))
	if err == nil {
		return out, nil
	}
	if !s.isUnique(err) {
		return domain.Harness{}, fmt.Errorf("%s: %w", action, err)
	}
	old, err := scanHarness(s.write.QueryRowContext(ctx, `SELECT `+harnessCols+` FROM harnesses
		WHERE name = $1 AND version = $2`, h.Name, h.Version))
	switch {
	case isNoRows(err):
		return domain.Harness{}, fmt.Errorf("%s: %w: id %s already used", action, store.ErrConflict, h.ID)
	case err != nil:
		return domain.Harness{}, fmt.Errorf("%s: %w", action, err)
	case old.Digest != h.Digest:
		return domain.Harness{}, fmt.Errorf("%s: %w: registered with digest %s, not %s",
			action, store.ErrConflict, old.Digest, h.Digest)
	case !old.DeletedAt.IsZero(): // the same bundle again: it is live again
		if _, err := s.write.ExecContext(ctx, `UPDATE harnesses SET deleted_at = 0 WHERE id = $1`, old.ID); err != nil {
			return domain.Harness{}, fmt.Errorf("%s: %w", action, err)
		}
		old.DeletedAt = time.Time{}
	}
	return old, nil
}

// GetHarness implements store.Harnesses.
func (s *Store) GetHarness(ctx context.Context, id string) (domain.Harness, error) {
	h, err := scanHarness(s.read.QueryRowContext(ctx, `SELECT `+harnessCols+` FROM harnesses WHERE id = $1`, id))
	return h, rowFound(err, "get harness "+id)
}

// FindHarness implements store.Harnesses.
func (s *Store) FindHarness(ctx context.Context, name, version string) (domain.Harness, error) {
	if version != "" {
		h, err := scanHarness(s.read.QueryRowContext(ctx, `SELECT `+harnessCols+` FROM harnesses
			WHERE name = $1 AND version = $2 AND deleted_at = 0`, name, version))
		return h, rowFound(err, fmt.Sprintf("find harness %s %s", name, version))
	}
	h, err := scanHarness(s.read.QueryRowContext(ctx, `SELECT `+harnessCols+` FROM harnesses
		WHERE name = $1 AND deleted_at = 0 ORDER BY created_at DESC, id DESC LIMIT 1`, name))
	return h, rowFound(err, "find newest harness "+name)
}

// DeleteHarness implements store.Harnesses.
func (s *Store) DeleteHarness(ctx context.Context, id string, at time.Time) (domain.Harness, error) {
	h, err := scanHarness(s.write.QueryRowContext(ctx, `UPDATE harnesses SET deleted_at = $2 WHERE id = $1 AND deleted_at = 0
		RETURNING `+harnessCols, id, micros(orNow(at))))
	return h, rowFound(err, "delete harness "+id)
}

// ListHarnesses implements store.Harnesses.
func (s *Store) ListHarnesses(ctx context.Context) ([]domain.Harness, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+harnessCols+` FROM harnesses ORDER BY name, created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list harnesses: %w", err)
	}
	out, err := collect(rows, scanHarness)
	if err != nil {
		return nil, fmt.Errorf("list harnesses: %w", err)
	}
	return out, nil
}

// collect scans every row with scan and closes rows.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
