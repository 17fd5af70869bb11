package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

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
