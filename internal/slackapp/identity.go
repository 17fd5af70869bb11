package slackapp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// People maps Slack accounts to engrams members (the store).
type People interface {
	GetIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) (domain.Identity, error)
	PutIdentity(ctx context.Context, id domain.Identity) error
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
	TakeIdentityCode(ctx context.Context, hash string, now time.Time) (domain.IdentityCode, error)
}

// linkRE is a mention that says a link code ("link ABCD-EFGH-IJKL-MNOP").
var linkRE = regexp.MustCompile(`^(?i)link\s+([A-Z0-9]{4}(?:-[A-Z0-9]{4}){3})$`)

// link is what a mention saying a link code asks, once per delivery
// (After): the code's person, if it is theirs to give (unexpired, unused,
// for Slack), gets the sender's account; a reply says which way it went.
// It starts nothing.
func (a *App) link(c conf, env envelope, code string) connector.Meaning {
	ev := env.Event
	thread := cmpOr(ev.ThreadTS, ev.TS)
	return connector.Meaning{Ignored: "a link code", After: func(ctx context.Context, _ []connector.Started) error {
		text, key, err := a.linkAccount(ctx, c, env, code)
		if err != nil {
			text, key = "Not linked: engrams could not record it; try again in a minute.", "link-failed"
		}
		if _, perr := a.web(c).post(ctx, ev.Channel, thread, text, key+"/"+ev.TS); perr != nil {
			return errors.Join(err, perr)
		}
		return err
	}}
}

// linkAccount takes code and maps the sender's account to its person;
// the reply says how it went.
func (a *App) linkAccount(ctx context.Context, c conf, env envelope, code string) (reply, key string, err error) {
	ev := env.Event
	if refused := external(c, env); refused != "" {
		return "Not linked: " + connector.EscapeSlack(refused) + ".", "link-refused", nil
	}
	lc, err := a.people.TakeIdentityCode(ctx, domain.HashLinkCode(code), a.now())
	switch {
	case errors.Is(err, domain.ErrNotFound), err == nil && lc.Kind != domain.IntegrationSlack:
		return "Not linked: that code is not valid, was used, or expired. Make a new one with `engrams identity link slack`.", "link-refused", nil
	case err != nil:
		return "", "", fmt.Errorf("take a link code: %w", err)
	}
	account := cmpOr(ev.UserTeam, env.TeamID) + ":" + ev.User
	if err := a.people.PutIdentity(ctx, domain.Identity{OrgID: lc.OrgID, Kind: domain.IntegrationSlack, ExternalID: account,
		UserID: lc.UserID, How: domain.IdentityByLink, CreatedAt: a.now()}); err != nil {
		return "", "", fmt.Errorf("link Slack account %s: %w", account, err)
	}
	a.log.Info("slack account linked", "account", account, "user_id", lc.UserID)
	return "Linked: your mentions here now start tasks as your engrams account.", "linked", nil
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
