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
// start the runs of github_pr automations on that repository and event;
// an author below a trigger's floor (min_author, default collaborator)
// is recorded as a refused run.
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
	p, ok := event(kind, d)
	if !ok {
		return connector.Meaning{Ignored: "event"}, nil
	}
	if at := d.happenedAt(); !at.IsZero() && a.now().Sub(at) > keepFor {
		// Older than the memory of deliveries: a replay would pass as new.
		return connector.Meaning{Ignored: "an event from over a week ago is not acted on"}, nil
	}
	admit := func(t connector.Trigger) connector.Admission {
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
		return connector.Admission{Match: true}
	}
	return connector.Meaning{Starts: []connector.Start{{Trigger: TriggerPR, Payload: p, Admit: admit}}}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
