package linearapp

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Who a Linear account is (issue 27). A Linear user is mapped to an
// engrams member only by a link they make: `engrams identity link linear`
// gives a code, and a comment by them saying "@engrams link CODE" on any
// issue (the workspace's webhook must send comments) maps their account
// (the user's id) to them. Linear's API gives each user's email, but
// documents it only as "the user's email address", not as one it has
// verified (a SAML workspace's users carry whatever its identity provider
// says), so no email maps a Linear account.

// actor is who did what a delivery says (created the issue, added the
// label, wrote the comment): a user, or an integration, an app or an
// external user (Type other than "user").
type actor struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// person is the Linear user who caused d: its actor when that is a user,
// else the issue's creator or the comment's author ("" for none).
func (d delivery) person() string {
	if d.Actor != nil && d.Actor.ID != "" {
		if d.Actor.Type == "" || strings.EqualFold(d.Actor.Type, "user") {
			return d.Actor.ID
		}
		return ""
	}
	if d.Type == "Comment" {
		return d.Data.UserID
	}
	return d.Data.CreatorID
}

// ids maps Linear accounts (user ids) to members.
func (a *App) ids() connector.Identities {
	return connector.Identities{People: a.people, Kind: domain.IntegrationLinear, Now: a.now}
}

// mentionsRE are the mentions that lead a comment: "@engrams", or the
// Markdown link Linear makes of a mention.
var mentionsRE = regexp.MustCompile(`^(?:(?:@[\w.-]+|\[@?[^\]\n]{1,80}\]\([^)\s]{1,500}\))\s*)+`)

// linkCode is the code a comment says ("@engrams link CODE"), or "".
func linkCode(body string) string {
	text := strings.TrimSpace(body)
	rest := mentionsRE.ReplaceAllString(text, "")
	if rest == text {
		return "" // no mention: not said to engrams
	}
	return connector.LinkSaid(rest)
}

// link is what a comment saying a link code asks, once per delivery
// (After): the code, if it is valid (unexpired, unused, for Linear), maps
// the author's account to its person; a reply on the issue says which way
// it went. It starts nothing.
func (a *App) link(d delivery, code string) connector.Meaning {
	issue, author, comment := d.Data.IssueID, d.person(), d.Data.ID
	return connector.Meaning{Ignored: "a link code", After: func(ctx context.Context, _ []connector.Started) error {
		text, key := "Not linked: that code is not valid, was used, or expired. Make a new one with `engrams identity link linear`.", "link-refused"
		user, ok, err := a.ids().Link(ctx, domain.HashLinkCode(code), author)
		switch {
		case err != nil:
			text, key = "Not linked: engrams could not record it; try again in a minute.", "link-failed"
		case ok:
			a.log.Info("linear account linked", "account", author, "user_id", user)
			text, key = "Linked: the tasks your issues start are now yours in engrams.", "linked"
		}
		if _, perr := a.Comment(ctx, issue, text, key+"/"+comment); perr != nil {
			return errors.Join(err, perr)
		}
		return err
	}}
}
