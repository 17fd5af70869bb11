package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const tokenCols = `id, name, kind, host_id, org_id, user_id, role, prefix, hash, created_at, expires_at, idle_seconds, last_used_at, revoked_at`

func scanToken(r scanner) (domain.Token, error) {
	var t domain.Token
	var kind, role string
	var created, expires, idle, used, revoked int64
	if err := r.Scan(&t.ID, &t.Name, &kind, &t.HostID, &t.OrgID, &t.UserID, &role, &t.Prefix, &t.Hash,
		&created, &expires, &idle, &used, &revoked); err != nil {
		return domain.Token{}, err
	}
	t.IdleTimeout = time.Duration(idle) * time.Second
	t.Kind, t.Role = domain.TokenKind(kind), domain.Role(role)
	t.CreatedAt, t.ExpiresAt = fromMicros(created), fromMicros(expires)
	t.LastUsedAt, t.RevokedAt = fromMicros(used), fromMicros(revoked)
	return t, nil
}

func checkToken(t domain.Token) error {
	if t.ID == "" || t.Hash == "" {
		return errors.New("token id and hash are required")
	}
	switch t.Kind {
	case domain.TokenUser, domain.TokenService, domain.TokenSession:
		if t.UserID == "" || (t.Kind == domain.TokenSession && t.OrgID == "") || (t.OrgID != "" && !t.Role.Valid()) || (t.Kind == domain.TokenService && t.OrgID == "") {
			return errors.New("a user key needs its user, and a role in its organisation; a service key or a sign-in its organisation")
		}
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
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		t.ID, t.Name, string(t.Kind), t.HostID, string(t.OrgID), string(t.UserID), string(t.Role), t.Prefix, t.Hash,
		micros(orNow(t.CreatedAt)), micros(t.ExpiresAt), int64(t.IdleTimeout/time.Second), micros(t.LastUsedAt), micros(t.RevokedAt))
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
func (s *Store) ListTokens(ctx context.Context, f store.TokenFilter) ([]domain.Token, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+tokenCols+` FROM api_tokens
		WHERE ($1 = '' OR org_id = $1) AND ($2 = '' OR user_id = $2) AND ($3 = '' OR kind = $3)
		ORDER BY created_at, id`, string(f.OrgID), string(f.UserID), string(f.Kind))
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

// CreateOrg implements store.People.
func (s *Store) CreateOrg(ctx context.Context, o domain.Org) error {
	if o.ID == "" || o.Name == "" {
		return errors.New("create organisation: id and name are required")
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3)`,
		string(o.ID), o.Name, micros(orNow(o.CreatedAt)))
	if s.isUnique(err) {
		return fmt.Errorf("create organisation %s: %w: id or name already used", o.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create organisation %s: %w", o.Name, err)
	}
	return nil
}

// GetOrg implements store.People.
func (s *Store) GetOrg(ctx context.Context, id domain.OrgID) (domain.Org, error) {
	var o domain.Org
	var created int64
	err := s.read.QueryRowContext(ctx, `SELECT id, name, created_at FROM orgs WHERE id = $1`, string(id)).
		Scan(&o.ID, &o.Name, &created)
	if isNoRows(err) {
		return o, fmt.Errorf("get organisation %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return o, fmt.Errorf("get organisation %s: %w", id, err)
	}
	o.CreatedAt = fromMicros(created)
	return o, nil
}

const userCols = `id, email, name, fleet_operator, created_at`

func scanUser(r scanner) (domain.User, error) {
	var u domain.User
	var created int64
	if err := r.Scan(&u.ID, &u.Email, &u.Name, &u.FleetOperator, &created); err != nil {
		return u, err
	}
	u.CreatedAt = fromMicros(created)
	return u, nil
}

// CreateUser implements store.People.
func (s *Store) CreateUser(ctx context.Context, u domain.User) error {
	if u.ID == "" {
		return errors.New("create user: id is required")
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO users (`+userCols+`) VALUES ($1, $2, $3, $4, $5)`,
		string(u.ID), strings.ToLower(u.Email), u.Name, u.FleetOperator, micros(orNow(u.CreatedAt)))
	if s.isUnique(err) {
		return fmt.Errorf("create user %s: %w: id or email already used", u.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create user %s: %w", u.ID, err)
	}
	return nil
}

// GetUser implements store.People.
func (s *Store) GetUser(ctx context.Context, id domain.UserID) (domain.User, error) {
	u, err := scanUser(s.read.QueryRowContext(ctx, `SELECT `+userCols+` FROM users WHERE id = $1`, string(id)))
	if isNoRows(err) {
		return u, fmt.Errorf("get user %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return u, fmt.Errorf("get user %s: %w", id, err)
	}
	return u, nil
}

// UserByEmail implements store.People.
func (s *Store) UserByEmail(ctx context.Context, email string) (domain.User, error) {
	email = strings.ToLower(email)
	if email == "" {
		return domain.User{}, fmt.Errorf("user by email: %w", store.ErrNotFound)
	}
	u, err := scanUser(s.read.QueryRowContext(ctx, `SELECT `+userCols+` FROM users WHERE email = $1`, email))
	if isNoRows(err) {
		return u, fmt.Errorf("user by email: %w", store.ErrNotFound)
	}
	if err != nil {
		return u, fmt.Errorf("user by email: %w", err)
	}
	return u, nil
}

// PutMember implements store.People.
func (s *Store) PutMember(ctx context.Context, org domain.OrgID, user domain.UserID, role domain.Role, at time.Time) error {
	if !role.Valid() {
		return fmt.Errorf("put member %s: %w: role %q", user, domain.ErrInvalid, role)
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO members (org_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role`,
		string(org), string(user), string(role), micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("put member %s: %w", user, err)
	}
	return nil
}

const memberCols = `m.org_id, m.role, m.group_names, m.created_at, u.id, u.email, u.name, u.fleet_operator, u.created_at`

func scanMember(r scanner) (domain.Member, error) {
	var m domain.Member
	var role, groups string
	var created, ucreated int64
	if err := r.Scan(&m.OrgID, &role, &groups, &created, &m.User.ID, &m.User.Email, &m.User.Name, &m.User.FleetOperator, &ucreated); err != nil {
		return m, err
	}
	if err := json.Unmarshal([]byte(groups), &m.Groups); err != nil {
		return m, fmt.Errorf("member %s: read groups: %w", m.User.ID, err)
	}
	m.Role, m.CreatedAt, m.User.CreatedAt = domain.Role(role), fromMicros(created), fromMicros(ucreated)
	return m, nil
}

// GetMember implements store.People.
func (s *Store) GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error) {
	m, err := scanMember(s.read.QueryRowContext(ctx, `SELECT `+memberCols+` FROM members m JOIN users u ON u.id = m.user_id
		WHERE m.org_id = $1 AND m.user_id = $2`, string(org), string(user)))
	if isNoRows(err) {
		return m, fmt.Errorf("get member %s: %w", user, store.ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("get member %s: %w", user, err)
	}
	return m, nil
}

// ListMembers implements store.People.
func (s *Store) ListMembers(ctx context.Context, org domain.OrgID) ([]domain.Member, error) {
	return s.members(ctx, "list members", `m.org_id = $1 ORDER BY m.created_at, u.id`, string(org))
}

// Memberships implements store.People.
func (s *Store) Memberships(ctx context.Context, user domain.UserID) ([]domain.Member, error) {
	return s.members(ctx, "list memberships", `m.user_id = $1 ORDER BY m.created_at, m.org_id`, string(user))
}

// members reads the memberships where says which, in its order.
func (s *Store) members(ctx context.Context, action, where string, arg string) ([]domain.Member, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+memberCols+` FROM members m JOIN users u ON u.id = m.user_id
		WHERE `+where, arg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	defer rows.Close()
	var out []domain.Member
	for rows.Next() {
		m, err := scanMember(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", action, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// SetMemberGroups implements store.People.
func (s *Store) SetMemberGroups(ctx context.Context, org domain.OrgID, user domain.UserID, groups []string) error {
	if err := domain.CheckGroups(groups); err != nil {
		return fmt.Errorf("set groups of member %s: %w: %w", user, domain.ErrInvalid, err)
	}
	b, _ := json.Marshal(append([]string{}, groups...)) // strings: cannot fail
	res, err := s.write.ExecContext(ctx, `UPDATE members SET group_names = $3 WHERE org_id = $1 AND user_id = $2`,
		string(org), string(user), string(b))
	if err != nil {
		return fmt.Errorf("set groups of member %s: %w", user, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("set groups of member %s: %w", user, store.ErrNotFound)
	}
	return nil
}

// RemoveMember implements store.People.
func (s *Store) RemoveMember(ctx context.Context, org domain.OrgID, user domain.UserID, at time.Time) error {
	return s.inTx(ctx, func(tx execer) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM members WHERE org_id = $1 AND user_id = $2`, string(org), string(user))
		if err != nil {
			return fmt.Errorf("remove member %s: %w", user, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return fmt.Errorf("remove member %s: %w", user, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = $3
			WHERE org_id = $1 AND user_id = $2 AND kind IN ('user', 'session') AND revoked_at = 0`,
			string(org), string(user), micros(orNow(at))); err != nil {
			return fmt.Errorf("remove member %s: revoke their keys: %w", user, err)
		}
		return nil
	})
}

const auditCols = `id, org_id, actor_kind, actor_id, actor_name, key_id, action, target_kind, target_id, status, remote, created_at`

// AppendAudit implements store.Audit.
func (s *Store) AppendAudit(ctx context.Context, e domain.AuditEvent) error {
	if e.ID == "" || e.Action == "" || e.ActorKind == "" {
		return errors.New("append audit event: id, action and actor kind are required")
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO audit_events (`+auditCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		e.ID, string(e.OrgID), e.ActorKind, e.ActorID, e.ActorName, e.KeyID, e.Action, e.TargetKind, e.TargetID,
		e.Status, e.Remote, micros(orNow(e.At)))
	if err != nil {
		return fmt.Errorf("append audit event %s: %w", e.Action, err)
	}
	return nil
}

// ListAudit implements store.Audit.
func (s *Store) ListAudit(ctx context.Context, org domain.OrgID, before *domain.AuditEvent, limit int) ([]domain.AuditEvent, error) {
	at, id := int64(1<<62), ""
	if before != nil {
		at, id = micros(before.At), before.ID
	}
	rows, err := s.read.QueryContext(ctx, `SELECT `+auditCols+` FROM audit_events
		WHERE org_id = $1 AND (created_at < $2 OR (created_at = $2 AND id < $3))
		ORDER BY created_at DESC, id DESC LIMIT $4`, string(org), at, id, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	defer rows.Close()
	var out []domain.AuditEvent
	for rows.Next() {
		var e domain.AuditEvent
		var created int64
		if err := rows.Scan(&e.ID, &e.OrgID, &e.ActorKind, &e.ActorID, &e.ActorName, &e.KeyID, &e.Action,
			&e.TargetKind, &e.TargetID, &e.Status, &e.Remote, &created); err != nil {
			return nil, fmt.Errorf("list audit events: %w", err)
		}
		e.At = fromMicros(created)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return out, nil
}
