package githubapp

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Who a GitHub account is (issue 27). A GitHub account is mapped to an
// engrams member only by a link its person makes: `engrams identity link
// github LOGIN` gives a code made for that login, and a comment by it
// saying "@engrams link CODE" on a pull request or issue of a repository
// engrams serves maps the account (its numeric id, which survives a
// rename) to them. The code is bound to the login because a comment is
// public: the same code said by anyone else is no code, and does not use
// it up. GitHub gives engrams no email it has verified for another user
// (webhooks carry none; a profile's public email is the user's to choose
// and a commit's email anyone may write), so no email maps a GitHub
// account.

// noAccess is the answer to an @engrams comment from an account that is
// no member's. It must not mention the app itself: engrams' own comments
// come back as deliveries.
const noAccess = "Not started: this GitHub account is not linked to an engrams member. If you are one, run " +
	"`engrams identity link github LOGIN` and comment the line it gives (`link CODE`, mentioning engrams) on a " +
	"pull request or issue here; otherwise ask an engrams admin for access."

// mentionRE is a mention at the start of a comment.
var mentionRE = regexp.MustCompile(`^@[A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?\s*`)

// linkCode is the code a comment says ("@engrams link CODE"), or "".
func linkCode(body string) string {
	text := strings.TrimSpace(body)
	if !strings.HasPrefix(strings.ToLower(text), "@engrams") {
		return ""
	}
	return connector.LinkSaid(mentionRE.ReplaceAllString(text, ""))
}

// ids maps GitHub accounts (numeric user ids) to members.
func (a *App) ids() connector.Identities {
	return connector.Identities{People: a.people, Kind: domain.IntegrationGitHub, Now: a.now}
}

// member is the engrams member the GitHub account is ("" for none).
func (a *App) member(ctx context.Context, u user) (domain.UserID, error) {
	if u.ID <= 0 || u.Type == "Bot" {
		return "", nil
	}
	org, err := a.ins.Holder(ctx, domain.IntegrationGitHub)
	if err != nil {
		return "", err
	}
	return a.ids().Member(ctx, org, strconv.FormatInt(u.ID, 10), nil)
}

// link is what a comment saying a link code asks, once per delivery
// (After): the code, if it was made for the commenter's login (and is
// unexpired, unused, for GitHub), maps their account to its person; a
// reply says which way it went. It starts nothing.
func (a *App) link(d delivery, code string) connector.Meaning {
	cm, repo, n := d.Comment, d.Repository.FullName, strconv.Itoa(d.Issue.Number)
	return connector.Meaning{Ignored: "a link code", After: func(ctx context.Context, _ []connector.Started) error {
		text, key := "Not linked: that code is not valid for this GitHub account, was used, or expired. "+
			"Make a new one with `engrams identity link github "+cm.User.Login+"`.", "link-refused"
		account := strconv.FormatInt(cm.User.ID, 10)
		user, ok, err := a.ids().Link(ctx, domain.HashLinkCodeFor(code, cm.User.Login), account)
		switch {
		case err != nil:
			text, key = "Not linked: engrams could not record it; try again in a minute.", "link-failed"
		case ok:
			a.log.Info("github account linked", "account", account, "login", cm.User.Login, "user_id", user)
			text, key = "Linked: your comments that mention engrams now start tasks as your engrams account, "+
				"and the tasks of your pull requests are yours.", "linked"
		}
		if _, perr := a.Comment(ctx, repo, n, text, key+"/"+strconv.FormatInt(cm.ID, 10)); perr != nil {
			return errors.Join(err, perr)
		}
		return err
	}}
}

// refusedReply answers an @engrams comment of an account that is no
// member's, where an automation takes comments (started: the refused
// runs recorded); it starts nothing.
func (a *App) refusedReply(d delivery) func(context.Context, []connector.Started) error {
	return func(ctx context.Context, started []connector.Started) error {
		if len(started) == 0 {
			return nil
		}
		_, err := a.Comment(ctx, d.Repository.FullName, strconv.Itoa(d.Issue.Number), noAccess,
			"refused/"+strconv.FormatInt(d.Comment.ID, 10))
		return err
	}
}
