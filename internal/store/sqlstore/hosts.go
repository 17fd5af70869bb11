package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hoststate"
	"github.com/engrams/engrams/internal/store"
)

// hostInsertCols are the columns a new row is written with; the access
// and link columns start at their defaults.
const hostInsertCols = `id, name, state, facts, capacity, replica_id, replica_addr, protocol_version,
	draining, last_heartbeat, connected_at, created_at`

const hostCols = hostInsertCols + `, disabled, deleted_at, link_id, link_remote, link_at`

// hostMayWork is the condition on a hosts row of a host that may link and
// take work: not disabled, not deleted, and holding a host token that is
// not revoked (a host recorded without any token, as tests make them, too).
const hostMayWork = `NOT hosts.disabled AND hosts.deleted_at = 0 AND (
	EXISTS (SELECT 1 FROM api_tokens t WHERE t.host_id = hosts.id AND t.kind = 'host' AND t.revoked_at = 0)
	OR NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.host_id = hosts.id AND t.kind = 'host'))`

func scanHost(r scanner) (domain.Host, error) {
	var h domain.Host
	var state string
	var facts, capacity sql.NullString
	var heartbeat, connected, created, deleted, linkAt int64
	err := r.Scan(&h.ID, &h.Name, &state, &facts, &capacity, &h.ReplicaID, &h.ReplicaAddr,
		&h.ProtocolVersion, &h.Draining, &heartbeat, &connected, &created,
		&h.Disabled, &deleted, &h.Link.ID, &h.Link.Remote, &linkAt)
	if err != nil {
		return domain.Host{}, err
	}
	h.DeletedAt, h.Link.At = fromMicros(deleted), fromMicros(linkAt)
	h.State = domain.HostState(state)
	if err := decodeTyped("facts", facts, &h.Facts); err != nil {
		return domain.Host{}, fmt.Errorf("host %s: %w", h.ID, err)
	}
	if err := decodeTyped("capacity", capacity, &h.Capacity); err != nil {
		return domain.Host{}, fmt.Errorf("host %s: %w", h.ID, err)
	}
	h.LastHeartbeat, h.ConnectedAt, h.CreatedAt = fromMicros(heartbeat), fromMicros(connected), fromMicros(created)
	return h, nil
}

func validHostState(s domain.HostState) bool {
	return slices.Contains(hoststate.States(), s)
}

// hostStateAfter is the SQL expression of the state a hosts row takes when
// ev happens to it: what hoststate.Transition gives its state, or its
// state as it is where that refuses ev.
func hostStateAfter(ev hoststate.Event) string {
	var b strings.Builder
	for _, s := range hoststate.States() {
		if to, err := hoststate.Transition(s, ev); err == nil {
			fmt.Fprintf(&b, " WHEN '%s' THEN '%s'", s, to)
		}
	}
	if b.Len() == 0 {
		return "hosts.state"
	}
	return "CASE hosts.state" + b.String() + " ELSE hosts.state END"
}

// hostStateAfterFlag is hostStateAfter of plain, or of drained when the
// row's drain flag is set.
func hostStateAfterFlag(plain, drained hoststate.Event) string {
	return "CASE WHEN hosts.draining THEN " + hostStateAfter(drained) + " ELSE " + hostStateAfter(plain) + " END"
}

// hostStateAllows is the SQL condition that hoststate.Transition allows ev
// in a hosts row's state.
func hostStateAllows(ev hoststate.Event) string {
	var in []string
	for _, s := range hoststate.States() {
		if _, err := hoststate.Transition(s, ev); err == nil {
			in = append(in, "'"+string(s)+"'")
		}
	}
	if len(in) == 0 {
		return "FALSE"
	}
	return "hosts.state IN (" + strings.Join(in, ", ") + ")"
}

// hostArgs checks h and encodes its facts and capacity columns.
func hostArgs(h domain.Host) (facts, capacity any, err error) {
	if h.ID == "" || h.Name == "" {
		return nil, nil, errors.New("host id and name are required")
	}
	if facts, err = typedArg("facts", h.Facts); err != nil {
		return nil, nil, err
	}
	capacity, err = typedArg("capacity", h.Capacity)
	return facts, capacity, err
}

// CreateHost implements store.Hosts.
func (s *Store) CreateHost(ctx context.Context, h domain.Host, tok domain.Token) error {
	facts, capacity, err := hostArgs(h)
	if err != nil {
		return fmt.Errorf("create host: %w", err)
	}
	if tok.HostID == "" {
		tok.HostID = h.ID
	}
	if tok.Kind == "" {
		tok.Kind = domain.TokenHost
	}
	if tok.Kind != domain.TokenHost || tok.HostID != h.ID {
		return fmt.Errorf("create host %s: the token must be a host token for this host", h.Name)
	}
	if err := checkToken(tok); err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	created := micros(orNow(h.CreatedAt))
	if tok.CreatedAt.IsZero() {
		tok.CreatedAt = fromMicros(created)
	}
	err = s.inTx(ctx, func(tx execer) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO hosts (`+hostInsertCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			h.ID, h.Name, string(domain.HostNew), facts, capacity, h.ReplicaID,
			h.ReplicaAddr, h.ProtocolVersion, h.Draining, micros(h.LastHeartbeat), micros(h.ConnectedAt), created)
		if err != nil {
			return err
		}
		return insertToken(ctx, tx, tok)
	})
	if s.isUnique(err) {
		return fmt.Errorf("create host %s: %w: name, id or token hash already used", h.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create host %s: %w", h.Name, err)
	}
	return nil
}

// RegisterHost implements store.Hosts. The drain flag is admin intent: a
// registration never changes it (a host registering for the first time
// gets it unset), and the state follows it. A host without a row gets the
// state a new host takes when it registers.
func (s *Store) RegisterHost(ctx context.Context, h domain.Host) error {
	facts, capacity, err := hostArgs(h)
	if err != nil {
		return fmt.Errorf("register host: %w", err)
	}
	at := micros(orNow(h.LastHeartbeat))
	created := at
	if !h.CreatedAt.IsZero() {
		created = micros(h.CreatedAt)
	}
	first, err := hoststate.Transition(domain.HostNew, hoststate.Registered)
	if err != nil {
		return fmt.Errorf("register host %s: %w", h.ID, err)
	}
	res, err := s.write.ExecContext(ctx, `INSERT INTO hosts (`+hostInsertCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, FALSE, $9, $9, $10)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name,
			state = `+hostStateAfterFlag(hoststate.Registered, hoststate.RegisteredDraining)+`,
			facts = excluded.facts, capacity = excluded.capacity, replica_id = excluded.replica_id,
			replica_addr = excluded.replica_addr, protocol_version = excluded.protocol_version,
			last_heartbeat = excluded.last_heartbeat, connected_at = excluded.connected_at
		WHERE `+hostMayWork,
		h.ID, h.Name, string(first), facts, capacity, h.ReplicaID,
		h.ReplicaAddr, h.ProtocolVersion, at, created)
	if s.isUnique(err) {
		return fmt.Errorf("register host %s: %w: name %q belongs to another host", h.ID, store.ErrConflict, h.Name)
	}
	if err != nil {
		return fmt.Errorf("register host %s: %w", h.ID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("register host %s: %w: the host is disabled, deleted or its token revoked", h.ID, store.ErrConflict)
	}
	return nil
}

// HostHeartbeat implements store.Hosts. A nil capacity keeps the last one.
func (s *Store) HostHeartbeat(ctx context.Context, hostID domain.HostID, capacity *domain.Capacity, at time.Time) (domain.HostState, error) {
	var capArg any
	if capacity != nil {
		var err error
		if capArg, err = typedArg("capacity", *capacity); err != nil {
			return "", fmt.Errorf("host heartbeat %s: %w", hostID, err)
		}
	}
	var state string
	err := s.write.QueryRowContext(ctx, `UPDATE hosts SET last_heartbeat = $2, capacity = COALESCE($3, capacity)
		WHERE id = $1 RETURNING state`, hostID, micros(orNow(at)), capArg).Scan(&state)
	if isNoRows(err) {
		return "", fmt.Errorf("host heartbeat %s: %w", hostID, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("host heartbeat %s: %w", hostID, err)
	}
	return domain.HostState(state), nil
}

// GetHost implements store.Hosts.
func (s *Store) GetHost(ctx context.Context, id domain.HostID) (domain.Host, error) {
	h, err := scanHost(s.read.QueryRowContext(ctx, `SELECT `+hostCols+` FROM hosts WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.Host{}, fmt.Errorf("get host %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Host{}, fmt.Errorf("get host %s: %w", id, err)
	}
	return h, nil
}

// ListHosts implements store.Hosts, ordered by name.
func (s *Store) ListHosts(ctx context.Context) ([]domain.Host, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+hostCols+` FROM hosts ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	defer rows.Close()
	var out []domain.Host
	for rows.Next() {
		h, err := scanHost(rows)
		if err != nil {
			return nil, fmt.Errorf("list hosts: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return out, nil
}

// SetHostState implements store.Hosts.
func (s *Store) SetHostState(ctx context.Context, id domain.HostID, state domain.HostState) error {
	if !validHostState(state) {
		return fmt.Errorf("set host %s state: unknown state %q", id, state)
	}
	res, err := s.write.ExecContext(ctx, `UPDATE hosts SET state = $2 WHERE id = $1`, id, string(state))
	if err != nil {
		return fmt.Errorf("set host %s state: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("set host %s state: %w", id, store.ErrNotFound)
	}
	return nil
}

// SetHostDraining implements store.Hosts. A host that is new or lost keeps
// its state (hoststate.Transition refuses the flag's event there);
// RegisterHost and ReviveHost apply the flag when it comes back.
func (s *Store) SetHostDraining(ctx context.Context, id domain.HostID, draining bool) error {
	ev := hoststate.DrainFlagCleared
	if draining {
		ev = hoststate.DrainFlagSet
	}
	res, err := s.write.ExecContext(ctx, `UPDATE hosts SET draining = $2, state = `+hostStateAfter(ev)+`
		WHERE id = $1`, id, draining)
	if err != nil {
		return fmt.Errorf("set host %s draining=%v: %w", id, draining, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("set host %s draining=%v: %w", id, draining, store.ErrNotFound)
	}
	return nil
}

// ReviveHost implements store.Hosts.
func (s *Store) ReviveHost(ctx context.Context, id domain.HostID) (domain.HostState, error) {
	var state string
	err := s.write.QueryRowContext(ctx, `UPDATE hosts
		SET state = `+hostStateAfterFlag(hoststate.Revived, hoststate.RevivedDraining)+`
		WHERE id = $1 AND (hosts.draining AND `+hostStateAllows(hoststate.RevivedDraining)+`
			OR NOT hosts.draining AND `+hostStateAllows(hoststate.Revived)+`)
			AND `+hostMayWork+` RETURNING state`, id).Scan(&state)
	if isNoRows(err) {
		// Not lost, may not work, or unknown: report the state as it is.
		err = s.write.QueryRowContext(ctx, `SELECT state FROM hosts WHERE id = $1`, id).Scan(&state)
	}
	if isNoRows(err) {
		return "", fmt.Errorf("revive host %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("revive host %s: %w", id, err)
	}
	return domain.HostState(state), nil
}

// MarkHostsLost implements store.Hosts; the ids come back sorted. The drain
// flag is kept.
func (s *Store) MarkHostsLost(ctx context.Context, cutoff time.Time) ([]domain.HostID, error) {
	rows, err := s.write.QueryContext(ctx, `UPDATE hosts SET state = `+hostStateAfter(hoststate.HeartbeatLost)+`
		WHERE `+hostStateAllows(hoststate.HeartbeatLost)+` AND last_heartbeat < $1 RETURNING id`, micros(cutoff))
	if err != nil {
		return nil, fmt.Errorf("mark hosts lost: %w", err)
	}
	defer rows.Close()
	var ids []domain.HostID
	for rows.Next() {
		var id domain.HostID
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("mark hosts lost: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mark hosts lost: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}
