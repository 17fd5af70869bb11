package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const credentialCols = `id, registry, username, sealed, created_at`

// PutCredential implements store.Credentials.
func (s *Store) PutCredential(ctx context.Context, c domain.RegistryCredential) error {
	if c.ID == "" || c.Registry == "" {
		return errors.New("put registry credential: id and registry are required")
	}
	if len(c.Sealed) == 0 {
		return fmt.Errorf("put registry credential %s: nothing sealed", c.ID)
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO registry_credentials (`+credentialCols+`)
		VALUES ($1, $2, $3, $4, $5)`, c.ID, c.Registry, c.Username, c.Sealed, micros(orNow(c.CreatedAt)))
	if s.isUnique(err) {
		return fmt.Errorf("put registry credential %s: %w: id already used", c.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("put registry credential %s: %w", c.ID, err)
	}
	return nil
}

// GetCredential implements store.Credentials.
func (s *Store) GetCredential(ctx context.Context, id string) (domain.RegistryCredential, error) {
	var c domain.RegistryCredential
	var created int64
	err := s.read.QueryRowContext(ctx, `SELECT `+credentialCols+` FROM registry_credentials WHERE id = $1`, id).
		Scan(&c.ID, &c.Registry, &c.Username, &c.Sealed, &created)
	if isNoRows(err) {
		return domain.RegistryCredential{}, fmt.Errorf("get registry credential %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.RegistryCredential{}, fmt.Errorf("get registry credential %s: %w", id, err)
	}
	c.CreatedAt = fromMicros(created)
	return c, nil
}

// DeleteCredential implements store.Credentials.
func (s *Store) DeleteCredential(ctx context.Context, id string) error {
	if _, err := s.write.ExecContext(ctx, `DELETE FROM registry_credentials WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete registry credential %s: %w", id, err)
	}
	return nil
}
