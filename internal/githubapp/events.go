package githubapp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// MaxEventBody bounds a webhook delivery (GitHub caps payloads at 25 MB;
// the events engrams takes are far smaller).
const MaxEventBody = 1 << 20

// keepFor is how long a delivery is remembered: GitHub's signature has
// no timestamp, so a captured delivery could be replayed at any time; a
// week outlasts any redelivery a user asks of GitHub.
const keepFor = 7 * 24 * time.Hour

// TriggerPR is the trigger pull request events start (automations.TriggerGitHubPR).
const TriggerPR = "github_pr"

// prActions are the pull_request actions that start runs; "comment" is an
// @engrams comment on a pull request.
var prActions = []string{"opened", "synchronize", "reopened", "review_requested"}

// defaultEvents are a trigger's events when it names none.
var defaultEvents = []string{"opened", "synchronize", "reopened"}

// PullRequestEvent is a pull request event's trigger payload.
type PullRequestEvent struct {
	Repo    string `json:"repo"`
	Number  int    `json:"number"`
	Title   string `json:"title"`
	Body    string `json:"body,omitempty"`
	URL     string `json:"url,omitempty"`
	Author  string `json:"author"`
	HeadSHA string `json:"head_sha,omitempty"`
	HeadRef string `json:"head_ref,omitempty"`
	BaseRef string `json:"base_ref,omitempty"`
	Event   string `json:"event"`             // opened, synchronize, reopened, review_requested, comment
	Command string `json:"command,omitempty"` // what follows @engrams in a comment
	// Association is the author's (of the pull request, or of the
	// comment) relation to the repository, as GitHub says it.
	Association string `json:"author_association"`
}

type user struct {
	Login string `json:"login"`
	ID    int64  `json:"id"`
	Type  string `json:"type"` // User, Bot, Organization
}

// delivery is what engrams reads of a pull_request or issue_comment event.
type delivery struct {
	Action      string `json:"action"`
	PullRequest *struct {
		Number            int       `json:"number"`
		Title             string    `json:"title"`
		Body              string    `json:"body"`
		HTMLURL           string    `json:"html_url"`
		User              user      `json:"user"`
		AuthorAssociation string    `json:"author_association"`
		UpdatedAt         time.Time `json:"updated_at"`
		Head              struct {
			SHA string `json:"sha"`
			Ref string `json:"ref"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
	} `json:"pull_request"`
	Issue *struct {
		Number      int             `json:"number"`
		Title       string          `json:"title"`
		PullRequest json.RawMessage `json:"pull_request"`
	} `json:"issue"`
	Comment *struct {
		ID                int64     `json:"id"`
		Body              string    `json:"body"`
		User              user      `json:"user"`
		AuthorAssociation string    `json:"author_association"`
		CreatedAt         time.Time `json:"created_at"`
	} `json:"comment"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
}

// happenedAt is when the signed event happened: the pull request's last
// update, or the comment's creation (zero when it says neither).
func (d delivery) happenedAt() time.Time {
	switch {
	case d.Comment != nil && !d.Comment.CreatedAt.IsZero():
		return d.Comment.CreatedAt
	case d.PullRequest != nil:
		return d.PullRequest.UpdatedAt
	}
	return time.Time{}
}

// event turns a delivery of kind into a trigger payload (ok false for one
// that starts nothing).
func event(kind string, d delivery) (PullRequestEvent, bool) {
	p := PullRequestEvent{Repo: d.Repository.FullName}
	switch {
	case kind == "pull_request" && d.PullRequest != nil && slices.Contains(prActions, d.Action):
		pr := d.PullRequest
		p.Number, p.Title, p.Body, p.URL, p.Author = pr.Number, connector.Clip(pr.Title, 1024), connector.Clip(pr.Body, 16<<10), pr.HTMLURL, pr.User.Login
		p.HeadSHA, p.HeadRef, p.BaseRef, p.Event, p.Association = pr.Head.SHA, pr.Head.Ref, pr.Base.Ref, d.Action, pr.AuthorAssociation
		return p, true
	case kind == "issue_comment" && d.Action == "created" && d.Issue != nil && len(d.Issue.PullRequest) > 0 && d.Comment != nil:
		i := strings.Index(d.Comment.Body, "@engrams")
		if i < 0 {
			return p, false
		}
		p.Number, p.Title, p.Author, p.Event = d.Issue.Number, connector.Clip(d.Issue.Title, 1024), d.Comment.User.Login, "comment"
		p.Association = d.Comment.AuthorAssociation
		p.Command = strings.TrimSpace(connector.Clip(d.Comment.Body[i+len("@engrams"):], 16<<10))
		return p, true
	}
	return p, false
}

// Source implements connector.Receiver.
func (a *App) Source() connector.Source { return connector.SourceGitHub }

// MaxBody implements connector.Receiver.
func (a *App) MaxBody() int64 { return MaxEventBody }

// Verify implements connector.Receiver: X-Hub-Signature-256 over the
// body, which is what a delivery is known by.
func (a *App) Verify(ctx context.Context, req connector.Request) (connector.Verified, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return connector.Verified{}, err
	}
	if err := connector.VerifyHMAC([]byte(c.webhook), req.Header.Get(HeaderSignature), "sha256=", false, req.Body); err != nil {
		a.log.Info("github delivery refused", "err", err)
		return connector.Verified{}, err
	}
	return connector.Verified{Covered: req.Body, KeepFor: keepFor, Hint: connector.Clip(req.Header.Get(HeaderDelivery), 100)}, nil
}

// Decode implements connector.Receiver: pull request events (and
// @engrams comments on pull requests) of the configured repositories
// start the runs of github_pr automations on that repository and event,
// as the member the author is (asker); an author below a trigger's floor
// (min_author, default collaborator), and a comment by no member, are
// recorded as refused runs. A comment saying a link code links its
// author's account (link); a bot's comment starts nothing.
func (a *App) Decode(ctx context.Context, _ connector.Verified, req connector.Request) (connector.Meaning, error) {
	kind := req.Header.Get(HeaderEvent)
	if kind == "ping" {
		return connector.Meaning{Answer: map[string]string{"ok": "pong"}}, nil
	}
	var d delivery
	if err := json.Unmarshal(req.Body, &d); err != nil {
		return connector.Meaning{}, fmt.Errorf("%w: not a GitHub event: %v", domain.ErrInvalid, err)
	}
	c, err := a.conf(ctx)
	if err != nil {
		return connector.Meaning{}, err
	}
	if len(c.Repos) > 0 && !slices.Contains(c.Repos, d.Repository.FullName) {
		return connector.Meaning{Ignored: "repository not configured"}, nil
	}
	if at := d.happenedAt(); !at.IsZero() && a.now().Sub(at) > keepFor {
		// Older than the memory of deliveries: a replay would pass as new.
		return connector.Meaning{Ignored: "an event from over a week ago is not acted on"}, nil
	}
	if cm := d.Comment; kind == "issue_comment" && d.Action == "created" && cm != nil && d.Issue != nil {
		if cm.User.Type == "Bot" {
			return connector.Meaning{Ignored: "a bot's comment"}, nil
		}
		if code := linkCode(cm.Body); code != "" {
			return a.link(d, code), nil
		}
	}
	p, ok := event(kind, d)
	if !ok {
		return connector.Meaning{Ignored: "event"}, nil
	}
	actor, refused, err := a.asker(ctx, d, p)
	if err != nil {
		return connector.Meaning{}, err
	}
	var after func(context.Context, []connector.Started) error
	if refused != "" {
		after = a.refusedReply(d)
	}
	return connector.Meaning{Starts: []connector.Start{{Trigger: TriggerPR, Payload: p, Actor: actor, Admit: admitPR(p, refused)}},
		After: after}, nil
}

// asker is the member the event's person is: the pull request's author,
// or the comment's ("" for none). A comment asks engrams to act: only a
// member may, as themselves, so refused says why anyone else may not. A
// pull request event runs its automations as its author when they are a
// member, else as the organisation's.
func (a *App) asker(ctx context.Context, d delivery, p PullRequestEvent) (actor domain.UserID, refused string, err error) {
	who := user{}
	switch {
	case p.Event == "comment":
		who = d.Comment.User
	case d.PullRequest != nil:
		who = d.PullRequest.User
	}
	if actor, err = a.member(ctx, who); err != nil || actor != "" || p.Event != "comment" {
		return actor, "", err
	}
	return "", noAccess, nil
}

// admitPR judges a github_pr trigger for p: its repositories and events;
// an author below its floor (min_author), or refused, is a refused run.
func admitPR(p PullRequestEvent, refused string) func(connector.Trigger) connector.Admission {
	return func(t connector.Trigger) connector.Admission {
		events := t.Events
		if len(events) == 0 {
			events = defaultEvents
		}
		if (len(t.Repos) > 0 && !slices.Contains(t.Repos, p.Repo)) || !slices.Contains(events, p.Event) {
			return connector.Admission{}
		}
		floor := cmpOr(t.MinAuthor, domain.DefaultMinAuthor)
		if !domain.AuthorAtLeast(p.Association, floor) {
			return connector.Admission{Match: true, Refused: fmt.Sprintf("%s is %s of %s, below this trigger's floor (min_author: %s)",
				connector.Clip(p.Author, 40), strings.ToLower(cmpOr(p.Association, "none")), p.Repo, floor)}
		}
		return connector.Admission{Match: true, Refused: refused}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
