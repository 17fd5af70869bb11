package slackapp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/engrams/engrams/internal/domain"
)

// People maps Slack accounts to engrams members (the store).
type People interface {
	GetIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) (domain.Identity, error)
	PutIdentity(ctx context.Context, id domain.Identity) error
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
}

// noAccess is the refusal of a Slack user who is no engrams member: it
// says how to get access, and nothing of who is one.
const noAccess = "your Slack account is not an engrams member's: ask an engrams admin to add you " +
	"with the email your Slack account has confirmed (`engrams member add EMAIL`)"

// slackUser is what users.info says of a workspace member.
type slackUser struct {
	ID             string `json:"id"`
	IsBot          bool   `json:"is_bot"`
	Deleted        bool   `json:"deleted"`
	EmailConfirmed bool   `json:"is_email_confirmed"`
	Profile        struct {
		Email string `json:"email"`
	} `json:"profile"`
}

// member is the engrams member the Slack user of team is: the account's
// mapping in the organisation, else the member whose email Slack has
// confirmed for the account (then remembered). refused says why the
// sender may do nothing ("" when they are one); err is a failure to tell
// (the delivery is retried).
func (a *App) member(ctx context.Context, c conf, team, user string) (uid domain.UserID, refused string, err error) {
	org := domain.FirstOrg
	account := team + ":" + user
	id, err := a.people.GetIdentity(ctx, org, domain.IntegrationSlack, account)
	switch {
	case err == nil:
		return a.stillMember(ctx, org, id.UserID)
	case !errors.Is(err, domain.ErrNotFound):
		return "", "", fmt.Errorf("look up Slack account %s: %w", account, err)
	}
	var out struct {
		User slackUser `json:"user"`
	}
	if err := a.web(c).get(ctx, "users.info", url.Values{"user": {user}}, &out); err != nil {
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.code == "missing_scope":
			a.log.Warn("slack users.info: the app lacks the users:read.email scope; Slack users cannot be matched by email", "err", err)
			return "", noAccess + " (engrams cannot read Slack profiles: the app needs the users:read.email scope)", nil
		case errors.As(err, &ae):
			return "", noAccess, nil // user_not_found, and what else Slack refuses for this user
		}
		return "", "", err
	}
	u := out.User
	email := strings.ToLower(strings.TrimSpace(u.Profile.Email))
	if u.IsBot || u.Deleted || !u.EmailConfirmed || email == "" || len(email) > 254 {
		return "", noAccess, nil
	}
	person, err := a.people.UserByEmail(ctx, email)
	if errors.Is(err, domain.ErrNotFound) {
		return "", noAccess, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("look up a member by email: %w", err)
	}
	uid, refused, err = a.stillMember(ctx, org, person.ID)
	if uid == "" {
		return uid, refused, err
	}
	if err := a.people.PutIdentity(ctx, domain.Identity{OrgID: org, Kind: domain.IntegrationSlack, ExternalID: account, UserID: uid,
		How: domain.IdentityByEmail, CreatedAt: a.now()}); err != nil {
		return "", "", fmt.Errorf("remember Slack account %s: %w", account, err)
	}
	return uid, "", nil
}

// stillMember is user if they are a member of org now.
func (a *App) stillMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.UserID, string, error) {
	_, err := a.people.GetMember(ctx, org, user)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return "", noAccess, nil
	case err != nil:
		return "", "", fmt.Errorf("look up a membership: %w", err)
	}
	return user, "", nil
}
