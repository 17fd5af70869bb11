package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const snapshotCols = `id, session_id, parent_id, host_id, epoch, manifests, facts, bytes, uploaded, outbox_seq,
	reason, created_at, harness_seq`

func scanSnapshot(r scanner) (domain.Snapshot, error) {
	var s domain.Snapshot
	var manifests, facts sql.NullString
	var created int64
	err := r.Scan(&s.ID, &s.SessionID, &s.ParentID, &s.HostID, &s.Epoch, &manifests, &facts, &s.Bytes,
		&s.Uploaded, &s.OutboxSeq, &s.Reason, &created, &s.HarnessSeq)
	if err != nil {
		return domain.Snapshot{}, err
	}
	s.Manifests, s.CreatedAt = fromJSON(manifests), fromMicros(created)
	if err := decodeTyped("facts", facts, &s.Facts); err != nil {
		return domain.Snapshot{}, fmt.Errorf("snapshot %s: %w", s.ID, err)
	}
	return s, nil
}

// terminalStates is the SQL list of domain.SessionState.Terminal states.
const terminalStates = `('completed', 'dead')`

// CommitSnapshot implements store.Snapshots. In one transaction it moves the
// session's head from its current value to snap.ID (fenced by epoch and by
// that head, which also locks the row against a concurrent claim), inserts
// the row with ParentID = the previous head, and marks the covered outbox
// items durable. snap.Epoch is taken from epoch; a zero CreatedAt means now.
func (s *Store) CommitSnapshot(ctx context.Context, snap domain.Snapshot, epoch int64) error {
	if snap.ID == "" || snap.SessionID == "" {
		return errors.New("commit snapshot: snapshot id and session id are required")
	}
	if err := checkJSON("manifests", snap.Manifests); err != nil {
		return fmt.Errorf("commit snapshot %s: %w", snap.ID, err)
	}
	facts, err := typedArg("facts", snap.Facts)
	if err != nil {
		return fmt.Errorf("commit snapshot %s: %w", snap.ID, err)
	}
	at := micros(orNow(snap.CreatedAt))
	err = s.inTx(ctx, func(tx execer) error {
		head, err := commitPrecheck(ctx, tx, snap, epoch)
		if err != nil {
			return err
		}
		// Fenced again where the write lands: a claim or commit that got in
		// since the read makes this match no row.
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET head_snapshot_id = $2
			WHERE id = $1 AND epoch = $3 AND head_snapshot_id = $4 AND state NOT IN `+terminalStates,
			snap.SessionID, snap.ID, epoch, head)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if _, err := commitPrecheck(ctx, tx, snap, epoch); err != nil {
				return err
			}
			return fmt.Errorf("%w: session changed concurrently", store.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_snapshots (`+snapshotCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			snap.ID, snap.SessionID, head, snap.HostID, epoch, jsonArg(snap.Manifests), facts,
			snap.Bytes, snap.Uploaded, snap.OutboxSeq, snap.Reason, at, snap.HarnessSeq)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE session_outbox SET state = 'durable'
			WHERE session_id = $1 AND seq <= $2 AND state = 'delivered'`, snap.SessionID, snap.OutboxSeq)
		return err
	})
	if s.isUnique(err) {
		return fmt.Errorf("commit snapshot %s of %s: %w: snapshot id already used", snap.ID, snap.SessionID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("commit snapshot %s of %s: %w", snap.ID, snap.SessionID, err)
	}
	return nil
}

// commitPrecheck returns the session's head, or why snap cannot be
// committed on top of it with epoch.
func commitPrecheck(ctx context.Context, db execer, snap domain.Snapshot, epoch int64) (domain.SnapshotID, error) {
	var head domain.SnapshotID
	var state string
	var cur int64
	err := db.QueryRowContext(ctx, `SELECT head_snapshot_id, epoch, state FROM sessions WHERE id = $1`,
		snap.SessionID).Scan(&head, &cur, &state)
	switch {
	case isNoRows(err):
		return "", store.ErrNotFound
	case err != nil:
		return "", err
	case cur != epoch:
		return "", fmt.Errorf("%w: epoch is %d, not %d", store.ErrStaleEpoch, cur, epoch)
	case domain.SessionState(state).Terminal():
		return "", fmt.Errorf("%w: session is %s", store.ErrConflict, state)
	case snap.ParentID != "" && snap.ParentID != head:
		return "", fmt.Errorf("%w: parent %s is not the session's head %q", store.ErrConflict, snap.ParentID, head)
	}
	return head, nil
}

// GetSnapshot implements store.Snapshots.
func (s *Store) GetSnapshot(ctx context.Context, id domain.SnapshotID) (domain.Snapshot, error) {
	snap, err := scanSnapshot(s.read.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM session_snapshots WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.Snapshot{}, fmt.Errorf("get snapshot %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Snapshot{}, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return snap, nil
}

// ListSnapshots implements store.Snapshots, ordered by created_at, then id;
// an unknown session has none.
func (s *Store) ListSnapshots(ctx context.Context, sessionID domain.SessionID) ([]domain.Snapshot, error) {
	out, err := s.querySnapshots(ctx, `SELECT `+snapshotCols+` FROM session_snapshots
		WHERE session_id = $1 ORDER BY created_at, id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", sessionID, err)
	}
	return out, nil
}

// snapshotPage is how many rows ForEachSnapshot reads at a time.
const snapshotPage = 500

// ForEachSnapshot implements store.Snapshots in id order. It reads a page
// at a time and holds no cursor while fn runs, so fn may use the store.
func (s *Store) ForEachSnapshot(ctx context.Context, fn func(domain.Snapshot) error) error {
	var after domain.SnapshotID
	for {
		page, err := s.querySnapshots(ctx, `SELECT `+snapshotCols+` FROM session_snapshots
			WHERE id > $1 ORDER BY id LIMIT $2`, after, snapshotPage)
		if err != nil {
			return fmt.Errorf("for each snapshot: %w", err)
		}
		for _, snap := range page {
			if err := fn(snap); err != nil {
				return err
			}
		}
		if len(page) < snapshotPage {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

func (s *Store) querySnapshots(ctx context.Context, q string, args ...any) ([]domain.Snapshot, error) {
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []domain.Snapshot
	for rows.Next() {
		snap, err := scanSnapshot(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, snap)
	}
	return out, rows.Err()
}

// DeleteSnapshots implements store.Snapshots. It also clears the session's
// head, which would otherwise name a row that no longer exists.
func (s *Store) DeleteSnapshots(ctx context.Context, sessionID domain.SessionID) error {
	err := s.inTx(ctx, func(tx execer) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET head_snapshot_id = ''
			WHERE id = $1 AND state IN `+terminalStates, sessionID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			var state string
			err := tx.QueryRowContext(ctx, `SELECT state FROM sessions WHERE id = $1`, sessionID).Scan(&state)
			if isNoRows(err) {
				return store.ErrNotFound
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: session is %s, not terminal", store.ErrConflict, state)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM session_snapshots WHERE session_id = $1`, sessionID)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete snapshots of %s: %w", sessionID, err)
	}
	return nil
}
