package sqlstore

import (
	"context"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// maxSealedPage bounds one ListSealed page.
const maxSealedPage = 1000

// sealedTables maps each sealed kind to its table and the condition of its
// live rows.
var sealedTables = map[domain.SealedKind]struct{ table, live string }{
	domain.SealedSecret:             {"secrets", "deleted_at IS NULL"},
	domain.SealedRegistryCredential: {"registry_credentials", "TRUE"},
	domain.SealedHookSecret:         {"hook_secrets", "TRUE"},
	domain.SealedIntegration:        {"integrations", "TRUE"},
}

func sealedTable(kind domain.SealedKind) (table, live string, err error) {
	t, ok := sealedTables[kind]
	if !ok {
		return "", "", fmt.Errorf("sealed rows of kind %q: no such kind", kind)
	}
	return t.table, t.live, nil
}

// ListSealed implements store.Sealed.
func (s *Store) ListSealed(ctx context.Context, kind domain.SealedKind, after string, limit int) ([]domain.SealedValue, error) {
	action := fmt.Sprintf("list sealed %s rows after %q", kind, after)
	table, live, err := sealedTable(kind)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	if limit <= 0 || limit > maxSealedPage {
		limit = maxSealedPage
	}
	// table and live are ours, never input.
	rows, err := s.read.QueryContext(ctx, `SELECT id, sealed FROM `+table+`
		WHERE id > $1 AND `+live+` AND length(sealed) > 0 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	out, err := collect(rows, func(r scanner) (domain.SealedValue, error) {
		v := domain.SealedValue{Kind: kind}
		return v, r.Scan(&v.ID, &v.Sealed)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// ReplaceSealed implements store.Sealed.
func (s *Store) ReplaceSealed(ctx context.Context, kind domain.SealedKind, id string, old, sealed []byte) error {
	action := fmt.Sprintf("replace sealed %s %s", kind, id)
	table, live, err := sealedTable(kind)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if len(old) == 0 || len(sealed) == 0 {
		return fmt.Errorf("%s: the old and the new sealed value are required", action)
	}
	res, err := s.write.ExecContext(ctx, `UPDATE `+table+` SET sealed = $3
		WHERE id = $1 AND sealed = $2 AND `+live, id, old, sealed)
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
	var one int
	if err := rowFound(s.write.QueryRowContext(ctx, `SELECT 1 FROM `+table+` WHERE id = $1`, id).Scan(&one), action); err != nil {
		return err
	}
	return fmt.Errorf("%s: %w: its sealed value changed meanwhile", action, store.ErrConflict)
}
