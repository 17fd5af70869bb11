package githubapp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/domain"
)

// MaxEventBody bounds a webhook delivery (GitHub caps payloads at 25 MB;
// the events engrams takes are far smaller).
const MaxEventBody = 1 << 20

// prActions are the pull_request actions that start runs; "comment" is an
// @engrams comment on a pull request from a collaborator.
var prActions = []string{"opened", "synchronize", "reopened", "review_requested"}

// defaultEvents are a trigger's events when it names none.
var defaultEvents = []string{"opened", "synchronize", "reopened"}

// collaborators are the author associations whose @engrams comments count.
var collaborators = []string{"OWNER", "MEMBER", "COLLABORATOR"}

type user struct {
	Login string `json:"login"`
}

// delivery is what engrams reads of a pull_request or issue_comment event.
type delivery struct {
	Action      string `json:"action"`
	Number      int    `json:"number"`
	PullRequest *struct {
		Number  int    `json:"number"`
		Title   string `json:"title"`
		Body    string `json:"body"`
		HTMLURL string `json:"html_url"`
		User    user   `json:"user"`
		Head    struct {
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
		Body              string `json:"body"`
		User              user   `json:"user"`
		AuthorAssociation string `json:"author_association"`
	} `json:"comment"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
}

// trigger turns a delivery into a run's trigger payload and its event
// ("" for a delivery that starts nothing).
func trigger(kind string, d delivery) (string, map[string]any) {
	p := map[string]any{"repo": d.Repository.FullName}
	switch {
	case kind == "pull_request" && d.PullRequest != nil && slices.Contains(prActions, d.Action):
		pr := d.PullRequest
		p["number"], p["title"], p["body"], p["url"], p["author"] = pr.Number, pr.Title, clip(pr.Body, 16<<10), pr.HTMLURL, pr.User.Login
		p["head_sha"], p["head_ref"], p["base_ref"], p["event"] = pr.Head.SHA, pr.Head.Ref, pr.Base.Ref, d.Action
		return d.Action, p
	case kind == "issue_comment" && d.Action == "created" && d.Issue != nil && len(d.Issue.PullRequest) > 0 && d.Comment != nil &&
		slices.Contains(collaborators, d.Comment.AuthorAssociation):
		i := strings.Index(d.Comment.Body, "@engrams")
		if i < 0 {
			return "", nil
		}
		p["number"], p["title"], p["author"], p["event"] = d.Issue.Number, d.Issue.Title, d.Comment.User.Login, "comment"
		p["command"] = strings.TrimSpace(clip(d.Comment.Body[i+len("@engrams"):], 16<<10))
		return "comment", p
	}
	return "", nil
}

// HandleEvents answers one webhook delivery: verified, decoded, acted on
// once per X-GitHub-Delivery; it returns the status and body.
func (a *App) HandleEvents(ctx context.Context, h http.Header, body []byte) (int, any) {
	c, err := a.conf(ctx)
	if errors.Is(err, domain.ErrNotFound) {
		return http.StatusNotFound, map[string]string{"error": "github is not configured"}
	}
	if err != nil {
		return http.StatusInternalServerError, map[string]string{"error": "github settings cannot be read"}
	}
	if err := Verify(c.webhook, h.Get(HeaderSignature), body); err != nil {
		a.log.Info("github delivery refused", "err", err)
		return http.StatusUnauthorized, map[string]string{"error": "signature refused"}
	}
	kind, id := h.Get(HeaderEvent), h.Get(HeaderDelivery)
	if kind == "ping" {
		return http.StatusOK, map[string]string{"ok": "pong"}
	}
	if id == "" || len(id) > 100 || len(body) > MaxEventBody {
		return http.StatusBadRequest, map[string]string{"error": "a delivery needs its X-GitHub-Delivery id, and at most 1 MiB"}
	}
	var d delivery
	if err := json.Unmarshal(body, &d); err != nil {
		return http.StatusBadRequest, map[string]string{"error": "not a GitHub event: " + err.Error()}
	}
	if len(c.Repos) > 0 && !slices.Contains(c.Repos, d.Repository.FullName) {
		return http.StatusOK, map[string]string{"ignored": "repository not configured"}
	}
	event, payload := trigger(kind, d)
	if event == "" {
		return http.StatusOK, map[string]string{"ignored": "event"}
	}
	first, err := a.st.RecordDelivery(ctx, "github", id, a.now(), a.now().Add(-24*time.Hour))
	if err != nil {
		return http.StatusInternalServerError, map[string]string{"error": "deliveries cannot be recorded"}
	}
	if !first {
		return http.StatusOK, map[string]string{"ignored": "delivery seen before"}
	}
	runs := a.starter()
	if runs == nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "automation runs are not running on this server"}
	}
	raw, _ := json.Marshal(payload)
	started, err := runs.StartTriggered(ctx, automations.TriggerGitHubPR, func(t automations.Trigger) bool {
		events := t.Events
		if len(events) == 0 {
			events = defaultEvents
		}
		return (len(t.Repos) == 0 || slices.Contains(t.Repos, d.Repository.FullName)) && slices.Contains(events, event)
	}, autorun.RunRequest{Kind: automations.TriggerGitHubPR, Trigger: raw, DedupKey: "github:" + id})
	if err != nil {
		a.log.Warn("start pull request runs", "delivery", id, "err", err)
	}
	return http.StatusOK, map[string]int{"runs": len(started)}
}

// clip keeps at most n bytes of s, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
