package slackapp

import (
	"context"
	"errors"
	"net/url"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// People maps Slack accounts to engrams members (the store).
type People = connector.People

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
	account := cmpOr(ev.UserTeam, env.TeamID) + ":" + ev.User
	user, ok, err := a.ids().Link(ctx, domain.HashLinkCode(code), account)
	switch {
	case err != nil:
		return "", "", err
	case !ok:
		return "Not linked: that code is not valid, was used, or expired. Make a new one with `engrams identity link slack`.", "link-refused", nil
	}
	a.log.Info("slack account linked", "account", account, "user_id", user)
	return "Linked: your mentions here now start tasks as your engrams account.", "linked", nil
}

// ids maps Slack accounts ("TEAM:USER") to members.
func (a *App) ids() connector.Identities {
	return connector.Identities{People: a.people, Kind: domain.IntegrationSlack, Now: a.now}
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
	note := ""
	email := func(ctx context.Context) (string, error) {
		var out struct {
			User slackUser `json:"user"`
		}
		if err := a.web(c).get(ctx, "users.info", url.Values{"user": {user}}, &out); err != nil {
			var ae *apiError
			switch {
			case errors.As(err, &ae) && ae.code == "missing_scope":
				a.log.Warn("slack users.info: the app lacks the users:read.email scope; Slack users cannot be matched by email", "err", err)
				note = " (engrams cannot read Slack profiles: the app needs the users:read.email scope)"
				return "", nil
			case errors.As(err, &ae):
				return "", nil // user_not_found, and what else Slack refuses for this user
			}
			return "", err
		}
		if u := out.User; !u.IsBot && !u.Deleted && u.EmailConfirmed {
			return u.Profile.Email, nil
		}
		return "", nil
	}
	org, err := a.ins.Holder(ctx, domain.IntegrationSlack)
	if err != nil {
		return "", "", err
	}
	uid, err = a.ids().Member(ctx, org, team+":"+user, email)
	if uid == "" && err == nil {
		refused = noAccess + note
	}
	return uid, refused, err
}
