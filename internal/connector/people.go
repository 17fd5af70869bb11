package connector

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// People maps integration accounts to engrams members (the store).
type People interface {
	GetIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) (domain.Identity, error)
	PutIdentity(ctx context.Context, id domain.Identity) error
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
	TakeIdentityCode(ctx context.Context, hash string, now time.Time) (domain.IdentityCode, error)
}

// Identities is the one way every integration tells which engrams member
// one of its accounts is (issue 27): the account's mapping (the
// identities table), made by a link code the person said from that
// account, or by an email that both the integration and engrams hold
// verified. A mapping counts only while its user is a member.
type Identities struct {
	People People // nil: nobody is mapped
	Kind   domain.IntegrationKind
	Now    func() time.Time
}

// linkSaidRE is a message that says a link code and nothing else
// ("link ABCD-EFGH-IJKL-MNOP"), its mentions already taken off.
var linkSaidRE = regexp.MustCompile(`(?i)^link\s+([A-Z0-9]{4}(?:-[A-Z0-9]{4}){3})$`)

// LinkSaid is the code a message says ("link CODE", its mentions taken
// off), or "".
func LinkSaid(text string) string {
	if m := linkSaidRE.FindStringSubmatch(strings.TrimSpace(text)); m != nil {
		return m[1]
	}
	return ""
}

// Member is the member account is in org: the user its mapping names, if
// they are a member now; else, where verifiedEmail is given, the member
// whose email the integration verified for the account (the mapping is
// then remembered, How email). verifiedEmail says "" when the integration
// verified none. No member is "" and a nil error; err is a failure to
// tell (the delivery is retried).
func (ids Identities) Member(ctx context.Context, org domain.OrgID, account string,
	verifiedEmail func(context.Context) (string, error)) (domain.UserID, error) {
	if ids.People == nil || account == "" {
		return "", nil
	}
	id, err := ids.People.GetIdentity(ctx, org, ids.Kind, account)
	switch {
	case err == nil:
		return ids.stillMember(ctx, org, id.UserID)
	case !errors.Is(err, domain.ErrNotFound):
		return "", fmt.Errorf("look up %s account %s: %w", ids.Kind, account, err)
	case verifiedEmail == nil:
		return "", nil
	}
	email, err := verifiedEmail(ctx)
	if err != nil {
		return "", err
	}
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" || len(email) > 254 {
		return "", nil
	}
	person, err := ids.People.UserByEmail(ctx, email)
	if errors.Is(err, domain.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look up a member by email: %w", err)
	}
	uid, err := ids.stillMember(ctx, org, person.ID)
	if uid == "" || err != nil {
		return "", err
	}
	if err := ids.People.PutIdentity(ctx, domain.Identity{OrgID: org, Kind: ids.Kind, ExternalID: account, UserID: uid,
		How: domain.IdentityByEmail, CreatedAt: ids.Now()}); err != nil {
		return "", fmt.Errorf("remember %s account %s: %w", ids.Kind, account, err)
	}
	return uid, nil
}

// stillMember is user if they are a member of org now.
func (ids Identities) stillMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.UserID, error) {
	_, err := ids.People.GetMember(ctx, org, user)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("look up a membership: %w", err)
	}
	return user, nil
}

// Link takes the link code whose hash is hash (domain.HashLinkCode, or
// domain.HashLinkCodeFor for a code made for one account) and maps
// account to the code's person, in the code's organisation. ok false: the
// code is not one to take here (unknown, used, expired, or made for
// another integration); it is used up all the same.
func (ids Identities) Link(ctx context.Context, hash, account string) (user domain.UserID, ok bool, err error) {
	if ids.People == nil || account == "" {
		return "", false, nil
	}
	lc, err := ids.People.TakeIdentityCode(ctx, hash, ids.Now())
	switch {
	case errors.Is(err, domain.ErrNotFound), err == nil && lc.Kind != ids.Kind:
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("take a link code: %w", err)
	}
	if err := ids.People.PutIdentity(ctx, domain.Identity{OrgID: lc.OrgID, Kind: ids.Kind, ExternalID: account,
		UserID: lc.UserID, How: domain.IdentityByLink, CreatedAt: ids.Now()}); err != nil {
		return "", false, fmt.Errorf("link %s account %s: %w", ids.Kind, account, err)
	}
	return lc.UserID, true, nil
}
