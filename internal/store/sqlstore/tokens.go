package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const tokenCols = `id, name, kind, host_id, prefix, hash, created_at, last_used_at, revoked_at`

func scanToken(r scanner) (domain.Token, error) {
	var t domain.Token
	var kind string
	var created, used, revoked int64
	if err := r.Scan(&t.ID, &t.Name, &kind, &t.HostID, &t.Prefix, &t.Hash, &created, &used, &revoked); err != nil {
		return domain.Token{}, err
	}
	t.Kind = domain.TokenKind(kind)
	t.CreatedAt, t.LastUsedAt, t.RevokedAt = fromMicros(created), fromMicros(used), fromMicros(revoked)
	return t, nil
}

func checkToken(t domain.Token) error {
	if t.ID == "" || t.Hash == "" {
		return errors.New("token id and hash are required")
	}
	switch t.Kind {
	case domain.TokenUser:
	case domain.TokenHost:
		if t.HostID == "" {
			return errors.New("a host token needs a host id")
		}
	default:
		return fmt.Errorf("unknown token kind %q", t.Kind)
	}
	return nil
}

func insertToken(ctx context.Context, db execer, t domain.Token) error {
	_, err := db.ExecContext(ctx, `INSERT INTO api_tokens (`+tokenCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		t.ID, t.Name, string(t.Kind), t.HostID, t.Prefix, t.Hash, micros(orNow(t.CreatedAt)),
		micros(t.LastUsedAt), micros(t.RevokedAt))
	return err
}

// CreateToken implements store.Tokens; ErrConflict if the id or hash is taken.
func (s *Store) CreateToken(ctx context.Context, t domain.Token) error {
	if err := checkToken(t); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	err := insertToken(ctx, s.write, t)
	if s.isUnique(err) {
		return fmt.Errorf("create token %s: %w: id or hash already used", t.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create token %s: %w", t.ID, err)
	}
	return nil
}

// TokenByHash implements store.Tokens.
func (s *Store) TokenByHash(ctx context.Context, hash string) (domain.Token, error) {
	t, err := scanToken(s.read.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM api_tokens
		WHERE hash = $1 AND revoked_at = 0`, hash))
	if isNoRows(err) {
		return domain.Token{}, fmt.Errorf("token by hash: %w", store.ErrNotFound)
	}
	if err != nil {
		return domain.Token{}, fmt.Errorf("token by hash: %w", err)
	}
	return t, nil
}

// GetToken implements store.Tokens.
func (s *Store) GetToken(ctx context.Context, id string) (domain.Token, error) {
	t, err := scanToken(s.read.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM api_tokens WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.Token{}, fmt.Errorf("get token %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Token{}, fmt.Errorf("get token %s: %w", id, err)
	}
	return t, nil
}

// ListTokens implements store.Tokens, revoked ones included, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]domain.Token, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+tokenCols+` FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []domain.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken implements store.Tokens. Revoking twice keeps the first time.
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at = 0`,
		id, micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	return s.tokenExists(ctx, "revoke token", id)
}

// TouchToken implements store.Tokens.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = $2 WHERE id = $1`, id, micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("touch token %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	return s.tokenExists(ctx, "touch token", id)
}

func (s *Store) tokenExists(ctx context.Context, action, id string) error {
	var one int
	err := s.write.QueryRowContext(ctx, `SELECT 1 FROM api_tokens WHERE id = $1`, id).Scan(&one)
	if isNoRows(err) {
		return fmt.Errorf("%s %s: %w", action, id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", action, id, err)
	}
	return nil
}

// abandonAfter is how long a key's first request may run before a retry
// takes the key over (its replica died mid-request).
const abandonAfter = 10 * time.Minute

// BeginIdempotent implements store.Idempotency: expired keys are deleted,
// then the key is inserted unless the caller has it (ON CONFLICT DO
// NOTHING), in which case its row is read, in one transaction.
func (s *Store) BeginIdempotent(ctx context.Context, req domain.IdempotentRequest, expireBefore time.Time) (domain.IdempotentResponse, bool, error) {
	var prev domain.IdempotentResponse
	created := false
	err := s.inTx(ctx, func(tx execer) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, micros(expireBefore)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (token_id, key, route, body_hash, created_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (token_id, key) DO NOTHING`, req.TokenID, req.Key, req.Route, req.BodyHash, micros(orNow(req.At)))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			created = n == 1
			return err
		}
		// A request still "running" after abandonAfter died with its
		// replica: this one takes the key over.
		res, err = tx.ExecContext(ctx, `UPDATE idempotency_keys SET created_at = $3, route = $4, body_hash = $5
			WHERE token_id = $1 AND key = $2 AND status = 0 AND created_at < $6`,
			req.TokenID, req.Key, micros(orNow(req.At)), req.Route, req.BodyHash, micros(orNow(req.At).Add(-abandonAfter)))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			created = n == 1
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT route, body_hash, status, content_type, body FROM idempotency_keys WHERE token_id = $1 AND key = $2`,
			req.TokenID, req.Key).Scan(&prev.Route, &prev.BodyHash, &prev.Status, &prev.ContentType, &prev.Body)
	})
	if err != nil {
		return domain.IdempotentResponse{}, false, fmt.Errorf("begin idempotent request %s: %w", req.Route, err)
	}
	return prev, created, nil
}

// FinishIdempotent implements store.Idempotency.
func (s *Store) FinishIdempotent(ctx context.Context, tokenID, key string, resp domain.IdempotentResponse) error {
	var err error
	if resp.Status == 0 {
		_, err = s.wdb.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE token_id = $1 AND key = $2`, tokenID, key)
	} else {
		_, err = s.wdb.ExecContext(ctx, `UPDATE idempotency_keys SET status = $3, content_type = $4, body = $5 WHERE token_id = $1 AND key = $2`,
			tokenID, key, resp.Status, resp.ContentType, resp.Body)
	}
	if err != nil {
		return fmt.Errorf("finish idempotent request: %w", err)
	}
	return nil
}
