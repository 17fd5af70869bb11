package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const secretCols = `id, org_id, kind, name, sealed, meta, created_at, deleted_at`

func scanSecret(r scanner) (domain.Secret, error) {
	var sec domain.Secret
	var meta sql.NullString
	var created int64
	var deleted sql.NullInt64
	if err := r.Scan(&sec.ID, &sec.Org, &sec.Kind, &sec.Name, &sec.Sealed, &meta, &created, &deleted); err != nil {
		return domain.Secret{}, err
	}
	if len(sec.Sealed) == 0 {
		sec.Sealed = nil
	}
	sec.Meta, sec.CreatedAt, sec.DeletedAt = fromJSON(meta), fromMicros(created), fromNullMicros(deleted)
	return sec, nil
}

// fromNullMicros reads a nullable time column; NULL is the zero time.
func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// PutSecret implements store.Secrets.
func (s *Store) PutSecret(ctx context.Context, sec domain.Secret) error {
	action := fmt.Sprintf("put secret %s", sec.Name)
	if sec.ID == "" || sec.Kind == "" || sec.Name == "" {
		return fmt.Errorf("%s: id, kind and name are required", action)
	}
	if len(sec.Sealed) == 0 {
		return fmt.Errorf("%s: nothing sealed", action)
	}
	if err := checkJSON("meta", sec.Meta); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO secrets (`+secretCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)`,
		sec.ID, string(sec.Org), sec.Kind, sec.Name, sec.Sealed, jsonArg(sec.Meta), micros(orNow(sec.CreatedAt)))
	if s.isUnique(err) {
		return fmt.Errorf("%s: %w: id or name already used", action, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// GetSecret implements store.Secrets.
func (s *Store) GetSecret(ctx context.Context, id domain.SecretID) (domain.Secret, error) {
	sec, err := scanSecret(s.read.QueryRowContext(ctx, `SELECT `+secretCols+` FROM secrets WHERE id = $1`, id))
	return sec, rowFound(err, "get secret "+string(id))
}

// GetSecretByName implements store.Secrets.
func (s *Store) GetSecretByName(ctx context.Context, org domain.OrgID, name string) (domain.Secret, error) {
	sec, err := scanSecret(s.read.QueryRowContext(ctx, `SELECT `+secretCols+` FROM secrets
		WHERE org_id = $1 AND name = $2 AND deleted_at IS NULL`, string(org), name))
	return sec, rowFound(err, "get secret named "+name)
}

// ListSecrets implements store.Secrets.
func (s *Store) ListSecrets(ctx context.Context, org domain.OrgID) ([]domain.Secret, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+secretCols+` FROM secrets
		WHERE org_id = $1 AND deleted_at IS NULL ORDER BY name`, string(org))
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	out, err := collect(rows, scanSecret)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret implements store.Secrets: the sealed bytes are overwritten
// with none, so a deleted key is gone from the live database (not from
// backups or the write-ahead log).
func (s *Store) DeleteSecret(ctx context.Context, id domain.SecretID, at time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE secrets SET deleted_at = $2, sealed = $3
		WHERE id = $1 AND deleted_at IS NULL`, id, micros(orNow(at)), []byte{})
	return softDeleted(ctx, s.write, res, err, "secrets", string(id), "delete secret "+string(id))
}

// softDeleted maps the outcome of an UPDATE ... WHERE id = $1 AND deleted_at
// IS NULL: no row changed is fine when the row exists (already deleted).
func softDeleted(ctx context.Context, db execer, res sql.Result, err error, table, id, action string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if n == 1 {
		return nil
	}
	// table is one of ours, never input.
	var one int
	err = db.QueryRowContext(ctx, `SELECT 1 FROM `+table+` WHERE id = $1`, id).Scan(&one)
	return rowFound(err, action)
}

// rowFound wraps the error of a one-row read: sql.ErrNoRows becomes
// store.ErrNotFound.
func rowFound(err error, action string) error {
	if isNoRows(err) {
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}
