package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const integrationCols = `id, org_id, config, sealed, created_at, updated_at`

func scanIntegration(r scanner) (domain.Integration, error) {
	var in domain.Integration
	var config string
	var created, updated int64
	if err := r.Scan(&in.Kind, &in.Org, &config, &in.Sealed, &created, &updated); err != nil {
		return domain.Integration{}, err
	}
	in.Config, in.CreatedAt, in.UpdatedAt = []byte(config), fromMicros(created), fromMicros(updated)
	return in, nil
}

// PutIntegration implements store.Integrations.
func (s *Store) PutIntegration(ctx context.Context, in domain.Integration) (domain.Integration, error) {
	action := fmt.Sprintf("put integration %s", in.Kind)
	if in.Kind == "" || in.Org == "" || len(in.Sealed) == 0 {
		return domain.Integration{}, fmt.Errorf("%s: kind, organisation and sealed credentials are required", action)
	}
	if len(in.Config) == 0 {
		in.Config = []byte(`{}`)
	}
	if err := checkJSON("config", in.Config); err != nil {
		return domain.Integration{}, fmt.Errorf("%s: %w", action, err)
	}
	at := micros(orNow(in.UpdatedAt))
	out, err := scanIntegration(s.write.QueryRowContext(ctx, `INSERT INTO integrations (`+integrationCols+`) VALUES ($1, $2, $3, $4, $5, $5)
		ON CONFLICT (id) DO UPDATE SET config = excluded.config, sealed = excluded.sealed, updated_at = excluded.updated_at
		WHERE integrations.org_id = excluded.org_id
		RETURNING `+integrationCols, in.Kind, string(in.Org), string(in.Config), in.Sealed, at))
	if isNoRows(err) {
		return domain.Integration{}, fmt.Errorf("%s: %w: another organisation holds the deployment's %s integration", action, store.ErrConflict, in.Kind)
	}
	if err != nil {
		return domain.Integration{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// GetIntegration implements store.Integrations.
func (s *Store) GetIntegration(ctx context.Context, kind domain.IntegrationKind) (domain.Integration, error) {
	in, err := scanIntegration(s.read.QueryRowContext(ctx, `SELECT `+integrationCols+` FROM integrations WHERE id = $1`, kind))
	return in, rowFound(err, fmt.Sprintf("get integration %s", kind))
}

// ListIntegrations implements store.Integrations.
func (s *Store) ListIntegrations(ctx context.Context, org domain.OrgID) ([]domain.Integration, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+integrationCols+` FROM integrations WHERE org_id = $1 ORDER BY id`, string(org))
	if err != nil {
		return nil, fmt.Errorf("list integrations: %w", err)
	}
	out, err := collect(rows, scanIntegration)
	if err != nil {
		return nil, fmt.Errorf("list integrations: %w", err)
	}
	return out, nil
}

// DeleteIntegration implements store.Integrations.
func (s *Store) DeleteIntegration(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind) error {
	res, err := s.write.ExecContext(ctx, `DELETE FROM integrations WHERE id = $1 AND org_id = $2`, kind, string(org))
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = store.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("delete integration %s: %w", kind, err)
	}
	return nil
}

// RecordDelivery implements store.Integrations.
func (s *Store) RecordDelivery(ctx context.Context, source, key string, at, expires time.Time) (bool, error) {
	action := fmt.Sprintf("record delivery %s of %s", key, source)
	if source == "" || key == "" {
		return false, fmt.Errorf("%s: source and key are required", action)
	}
	now := orNow(at)
	first := false
	err := s.inTx(ctx, func(tx execer) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM integration_deliveries WHERE expires_at < $1`, micros(now)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO integration_deliveries (source, id, received_at, expires_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (source, id) DO NOTHING`, source, key, micros(now), micros(expires))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		first = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", action, err)
	}
	return first, nil
}

// ForgetDelivery implements store.Integrations.
func (s *Store) ForgetDelivery(ctx context.Context, source, key string) error {
	if _, err := s.write.ExecContext(ctx, `DELETE FROM integration_deliveries WHERE source = $1 AND id = $2`, source, key); err != nil {
		return fmt.Errorf("forget delivery %s of %s: %w", key, source, err)
	}
	return nil
}

const threadCols = `kind, channel, thread, task_id, run_id, turn_seq, message, relayed_seq, lease_owner, lease_until, created_at, updated_at, started_by`

func scanThread(r scanner) (domain.ChatThread, error) {
	var t domain.ChatThread
	var until, created, updated int64
	if err := r.Scan(&t.Kind, &t.Channel, &t.Thread, &t.TaskID, &t.RunID, &t.TurnSeq, &t.Message, &t.RelayedSeq, &t.LeaseOwner, &until,
		&created, &updated, &t.StartedBy); err != nil {
		return domain.ChatThread{}, err
	}
	t.LeaseUntil, t.CreatedAt, t.UpdatedAt = fromMicros(until), fromMicros(created), fromMicros(updated)
	return t, nil
}

// PutThread implements store.Integrations.
func (s *Store) PutThread(ctx context.Context, t domain.ChatThread) (domain.ChatThread, bool, error) {
	action := fmt.Sprintf("put %s thread %s/%s", t.Kind, t.Channel, t.Thread)
	if t.Kind == "" || t.Channel == "" || t.Thread == "" || t.TaskID == "" {
		return domain.ChatThread{}, false, fmt.Errorf("%s: kind, channel, thread and task are required", action)
	}
	at := micros(orNow(t.CreatedAt))
	out, err := scanThread(s.write.QueryRowContext(ctx, `INSERT INTO chat_threads (`+threadCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, '', $7, '', 0, $8, $8, $9)
		ON CONFLICT (kind, channel, thread) DO NOTHING RETURNING `+threadCols,
		t.Kind, t.Channel, t.Thread, t.TaskID, t.RunID, t.TurnSeq, t.RelayedSeq, at, t.StartedBy))
	if err == nil {
		return out, true, nil
	}
	if !isNoRows(err) {
		return domain.ChatThread{}, false, fmt.Errorf("%s: %w", action, err)
	}
	out, err = s.GetThread(ctx, t.Kind, t.Channel, t.Thread)
	return out, false, err
}

// GetThread implements store.Integrations.
func (s *Store) GetThread(ctx context.Context, kind domain.IntegrationKind, channel, thread string) (domain.ChatThread, error) {
	t, err := scanThread(s.read.QueryRowContext(ctx, `SELECT `+threadCols+` FROM chat_threads WHERE kind = $1 AND channel = $2 AND thread = $3`,
		kind, channel, thread))
	return t, rowFound(err, fmt.Sprintf("get %s thread %s/%s", kind, channel, thread))
}

// ClaimThreads implements store.Integrations: candidates are read, then
// each taken by a conditional update, so two relays never hold one.
func (s *Store) ClaimThreads(ctx context.Context, owner string, now, until time.Time, limit int) ([]domain.ChatThread, error) {
	action := "claim chat threads for " + owner
	if owner == "" {
		return nil, errors.New(action + ": an owner is required")
	}
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	rows, err := s.read.QueryContext(ctx, `SELECT c.kind, c.channel, c.thread FROM chat_threads c JOIN tasks t ON t.id = c.task_id
		WHERE t.event_seq > c.relayed_seq AND (c.lease_until < $1 OR c.lease_owner = $2) ORDER BY c.updated_at LIMIT $3`,
		micros(now), owner, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	type key struct{ kind, channel, thread string }
	keys, err := collect(rows, func(r scanner) (key, error) {
		var k key
		return k, r.Scan(&k.kind, &k.channel, &k.thread)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	var out []domain.ChatThread
	for _, k := range keys {
		t, err := scanThread(s.write.QueryRowContext(ctx, `UPDATE chat_threads SET lease_owner = $4, lease_until = $5
			WHERE kind = $1 AND channel = $2 AND thread = $3 AND (lease_until < $6 OR lease_owner = $4) RETURNING `+threadCols,
			k.kind, k.channel, k.thread, owner, micros(until), micros(now)))
		if isNoRows(err) {
			continue // another relay took it meanwhile
		}
		if err != nil {
			return out, fmt.Errorf("%s: %w", action, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// UpdateThread implements store.Integrations.
func (s *Store) UpdateThread(ctx context.Context, t domain.ChatThread, owner string) error {
	action := fmt.Sprintf("update %s thread %s/%s", t.Kind, t.Channel, t.Thread)
	res, err := s.write.ExecContext(ctx, `UPDATE chat_threads SET turn_seq = $4, message = $5, relayed_seq = $6, updated_at = $7
		WHERE kind = $1 AND channel = $2 AND thread = $3 AND lease_owner = $8`,
		t.Kind, t.Channel, t.Thread, t.TurnSeq, t.Message, t.RelayedSeq, micros(orNow(t.UpdatedAt)), owner)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err == nil {
			err = fmt.Errorf("%w: %s no longer holds it", store.ErrConflict, owner)
		}
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

const identityCols = `org_id, kind, external_id, user_id, how, created_at`

func scanIdentity(r scanner) (domain.Identity, error) {
	var id domain.Identity
	var created int64
	if err := r.Scan(&id.OrgID, &id.Kind, &id.ExternalID, &id.UserID, &id.How, &created); err != nil {
		return domain.Identity{}, err
	}
	id.CreatedAt = fromMicros(created)
	return id, nil
}

// PutIdentity implements store.Integrations.
func (s *Store) PutIdentity(ctx context.Context, id domain.Identity) error {
	action := fmt.Sprintf("map %s account %s", id.Kind, id.ExternalID)
	if id.OrgID == "" || id.Kind == "" || id.ExternalID == "" || id.UserID == "" {
		return fmt.Errorf("%s: organisation, kind, account and user are required", action)
	}
	if id.How != domain.IdentityByEmail && id.How != domain.IdentityByLink {
		return fmt.Errorf("%s: unknown way %q", action, id.How)
	}
	err := s.inTx(ctx, func(tx execer) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM users WHERE id = $1`, id.UserID).Scan(&one); isNoRows(err) {
			return fmt.Errorf("user %s: %w", id.UserID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO identities (`+identityCols+`) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (org_id, kind, external_id) DO UPDATE SET user_id = excluded.user_id, how = excluded.how, created_at = excluded.created_at`,
			id.OrgID, id.Kind, id.ExternalID, id.UserID, id.How, micros(orNow(id.CreatedAt)))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// GetIdentity implements store.Integrations.
func (s *Store) GetIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) (domain.Identity, error) {
	id, err := scanIdentity(s.read.QueryRowContext(ctx, `SELECT `+identityCols+` FROM identities
		WHERE org_id = $1 AND kind = $2 AND external_id = $3`, org, kind, externalID))
	return id, rowFound(err, fmt.Sprintf("get %s account %s", kind, externalID))
}

// ListIdentities implements store.Integrations.
func (s *Store) ListIdentities(ctx context.Context, org domain.OrgID, user domain.UserID) ([]domain.Identity, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+identityCols+` FROM identities WHERE org_id = $1 AND user_id = $2
		ORDER BY kind, external_id`, org, user)
	if err != nil {
		return nil, fmt.Errorf("list identities: %w", err)
	}
	out, err := collect(rows, scanIdentity)
	if err != nil {
		return nil, fmt.Errorf("list identities: %w", err)
	}
	return out, nil
}

// DeleteIdentity implements store.Integrations.
func (s *Store) DeleteIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) error {
	action := fmt.Sprintf("unmap %s account %s", kind, externalID)
	res, err := s.write.ExecContext(ctx, `DELETE FROM identities WHERE org_id = $1 AND kind = $2 AND external_id = $3`, org, kind, externalID)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	} else if n == 0 {
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	}
	return nil
}

// CreateIdentityCode implements store.Integrations.
func (s *Store) CreateIdentityCode(ctx context.Context, c domain.IdentityCode) error {
	if c.Hash == "" || c.OrgID == "" || c.UserID == "" || c.Kind == "" || c.ExpiresAt.IsZero() {
		return errors.New("create a link code: hash, organisation, user, kind and expiry are required")
	}
	err := s.inTx(ctx, func(tx execer) error {
		now := micros(orNow(c.CreatedAt))
		if _, err := tx.ExecContext(ctx, `DELETE FROM identity_codes WHERE expires_at < $1`, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO identity_codes (hash, org_id, user_id, kind, expires_at, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, c.Hash, c.OrgID, c.UserID, c.Kind, micros(c.ExpiresAt), now)
		return err
	})
	if s.isUnique(err) {
		return fmt.Errorf("create a link code: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create a link code: %w", err)
	}
	return nil
}

// TakeIdentityCode implements store.Integrations.
func (s *Store) TakeIdentityCode(ctx context.Context, hash string, now time.Time) (domain.IdentityCode, error) {
	var c domain.IdentityCode
	var expires, created int64
	err := s.write.QueryRowContext(ctx, `DELETE FROM identity_codes WHERE hash = $1 AND expires_at >= $2
		RETURNING hash, org_id, user_id, kind, expires_at, created_at`, hash, micros(orNow(now))).
		Scan(&c.Hash, &c.OrgID, &c.UserID, &c.Kind, &expires, &created)
	if err != nil {
		return domain.IdentityCode{}, rowFound(err, "take a link code")
	}
	c.ExpiresAt, c.CreatedAt = fromMicros(expires), fromMicros(created)
	return c, nil
}
