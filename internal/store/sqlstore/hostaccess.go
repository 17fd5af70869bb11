package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hoststate"
	"github.com/engrams/engrams/internal/store"
)

// ClaimHostLink implements store.HostAccess.
func (s *Store) ClaimHostLink(ctx context.Context, c store.LinkClaim) (domain.Host, error) {
	if c.HostID == "" || c.Link.ID == "" || c.Link.At.IsZero() {
		return domain.Host{}, fmt.Errorf("claim host link: host id, link id and time are required")
	}
	stale := micros(c.StaleBefore)
	h, err := scanHost(s.write.QueryRowContext(ctx, `UPDATE hosts
		SET link_id = $2, link_remote = $3, link_at = $4, replica_id = $5, replica_addr = $6
		WHERE id = $1 AND `+hostMayWork+` AND (link_id = '' OR link_id = $2 OR link_id = $7
			OR (last_heartbeat < $8 AND link_at < $8))
		RETURNING `+hostCols,
		c.HostID, c.Link.ID, c.Link.Remote, micros(c.Link.At), c.ReplicaID, c.ReplicaAddr, c.Replace, stale))
	if err == nil {
		return h, nil
	}
	if !isNoRows(err) {
		return domain.Host{}, fmt.Errorf("claim host %s for link %s: %w", c.HostID, c.Link.ID, err)
	}
	h, err = s.GetHost(ctx, c.HostID)
	if err != nil {
		return domain.Host{}, fmt.Errorf("claim host link: %w", err)
	}
	return h, fmt.Errorf("claim host %s for link %s: %w: held by link %q, or the host may not work", c.HostID, c.Link.ID, store.ErrConflict, h.Link.ID)
}

// ReleaseHostLink implements store.HostAccess.
func (s *Store) ReleaseHostLink(ctx context.Context, id domain.HostID, linkID string) error {
	if linkID == "" {
		return errors.New("release host link: link id is required")
	}
	if _, err := s.write.ExecContext(ctx, `UPDATE hosts SET link_id = '' WHERE id = $1 AND link_id = $2`, id, linkID); err != nil {
		return fmt.Errorf("release host %s from link %s: %w", id, linkID, err)
	}
	return nil
}

// lostIfConnected sets the state a host takes when it may no longer work
// (lost if it was connected).
func lostIfConnected() string { return `state = ` + hostStateAfter(hoststate.AccessRevoked) }

// DisableHost implements store.HostAccess.
func (s *Store) DisableHost(ctx context.Context, id domain.HostID, disabled bool) (domain.Host, error) {
	q := `UPDATE hosts SET disabled = FALSE WHERE id = $1 AND deleted_at = 0 RETURNING ` + hostCols
	if disabled {
		q = `UPDATE hosts SET disabled = TRUE, link_id = '', ` + lostIfConnected() + `
			WHERE id = $1 AND deleted_at = 0 RETURNING ` + hostCols
	}
	h, err := scanHost(s.write.QueryRowContext(ctx, q, id))
	if isNoRows(err) {
		return domain.Host{}, fmt.Errorf("set host %s disabled=%v: %w", id, disabled, store.ErrNotFound)
	}
	if err != nil {
		return domain.Host{}, fmt.Errorf("set host %s disabled=%v: %w", id, disabled, err)
	}
	return h, nil
}

// DeleteHost implements store.HostAccess.
func (s *Store) DeleteHost(ctx context.Context, id domain.HostID, at time.Time) (domain.Host, error) {
	when := micros(orNow(at))
	var h domain.Host
	err := s.inTx(ctx, func(tx execer) error {
		var err error
		h, err = scanHost(tx.QueryRowContext(ctx, `UPDATE hosts SET deleted_at = $2, link_id = '', `+lostIfConnected()+`
			WHERE id = $1 AND deleted_at = 0 RETURNING `+hostCols, id, when))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = $2
			WHERE host_id = $1 AND kind = 'host' AND revoked_at = 0`, id, when)
		return err
	})
	if isNoRows(err) {
		return domain.Host{}, fmt.Errorf("delete host %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Host{}, fmt.Errorf("delete host %s: %w", id, err)
	}
	return h, nil
}

// MarkHostLost implements store.HostAccess.
func (s *Store) MarkHostLost(ctx context.Context, id domain.HostID) (domain.Host, error) {
	h, err := scanHost(s.write.QueryRowContext(ctx, `UPDATE hosts SET link_id = '', `+lostIfConnected()+`
		WHERE id = $1 RETURNING `+hostCols, id))
	if isNoRows(err) {
		return domain.Host{}, fmt.Errorf("mark host %s lost: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Host{}, fmt.Errorf("mark host %s lost: %w", id, err)
	}
	return h, nil
}
