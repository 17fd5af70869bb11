package access

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Principal is who a request acts as.
type Principal struct {
	OrgID  domain.OrgID  // "" when the key reaches no organisation
	UserID domain.UserID // the person, or the service key's maker
	Name   string        // the person's email or name, or the service key's name
	// Role is the key's role bounded by the person's role now ("" none).
	Role domain.Role
	// Groups are the groups the person is in now (profile grants name them).
	Groups []string
	// Fleet is the deployment-level grant: hosts and capacity.
	Fleet   bool
	KeyID   string
	KeyName string
	Service bool // a service key, not a person
	// SignIn says the credential is a browser's sign-in (a cookie), not
	// an API key.
	SignIn bool
}

// ActorKind is how the audit log names the principal's kind.
func (p Principal) ActorKind() string {
	if p.Service {
		return "key"
	}
	return "user"
}

// ActorID is the audit log's id of the principal.
func (p Principal) ActorID() string {
	if p.Service {
		return p.KeyID
	}
	return string(p.UserID)
}

// Error categories Resolve returns; each answers 401.
var (
	ErrUnknownKey = errors.New("the key is not valid or was revoked")
	ErrExpired    = errors.New("the key has expired")
	ErrNoMember   = errors.New("the key's user is no longer a member of its organisation")
)

// Keys is what Resolve reads of the store.
type Keys interface {
	TokenByHash(ctx context.Context, hash string) (domain.Token, error)
	GetUser(ctx context.Context, id domain.UserID) (domain.User, error)
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
}

// Resolve turns the hash of a presented key into the principal it acts
// as at now. Host tokens are not API keys. A personal key's role is its
// own bounded by its user's role now, so a demoted or removed member's
// keys shrink or stop at once.
func Resolve(ctx context.Context, st Keys, hash string, now time.Time) (domain.Token, Principal, error) {
	t, err := st.TokenByHash(ctx, hash)
	if errors.Is(err, domain.ErrNotFound) || (err == nil && !t.Personal() && t.Kind != domain.TokenService) {
		return t, Principal{}, ErrUnknownKey
	}
	if err != nil {
		return t, Principal{}, fmt.Errorf("look up the key: %w", err)
	}
	if t.Expired(now) {
		return t, Principal{}, ErrExpired
	}
	p := Principal{OrgID: t.OrgID, UserID: t.UserID, Role: t.Role, KeyID: t.ID, KeyName: t.Name, SignIn: t.Kind == domain.TokenSession}
	if t.Kind == domain.TokenService {
		p.Service, p.Name = true, t.Name
		return t, p, nil
	}
	u, err := st.GetUser(ctx, t.UserID)
	if errors.Is(err, domain.ErrNotFound) {
		return t, Principal{}, ErrUnknownKey
	}
	if err != nil {
		return t, Principal{}, fmt.Errorf("look up the key's user: %w", err)
	}
	p.Fleet, p.Name = u.FleetOperator, u.Email
	if p.Name == "" {
		p.Name = u.Name
	}
	if p.Name == "" {
		p.Name = string(u.ID)
	}
	if t.OrgID == "" {
		return t, p, nil
	}
	m, err := st.GetMember(ctx, t.OrgID, t.UserID)
	if errors.Is(err, domain.ErrNotFound) {
		return t, Principal{}, ErrNoMember
	}
	if err != nil {
		return t, Principal{}, fmt.Errorf("look up the key's membership: %w", err)
	}
	p.Role, p.Groups = t.Role.Min(m.Role), m.Groups
	return t, p, nil
}
