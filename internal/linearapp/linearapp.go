package linearapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Linear signs each webhook delivery: Linear-Signature is the hex
// HMAC-SHA256 of the body keyed by the webhook's secret; the body's
// webhookTimestamp (Unix milliseconds) must be recent; Linear-Delivery
// names the delivery (a hint: the signature does not cover it).
const (
	HeaderSignature = "Linear-Signature"
	HeaderDelivery  = "Linear-Delivery"
	// Window is how far a delivery's webhookTimestamp may be from now.
	Window = time.Minute
	// DefaultAPIURL is Linear's GraphQL API.
	DefaultAPIURL = "https://api.linear.app/graphql"
	// MaxEventBody bounds a delivery.
	MaxEventBody = 1 << 20
	// keepFor is how long a delivery is remembered (Linear retries for
	// hours).
	keepFor = 24 * time.Hour
	// TriggerIssue is the trigger issues start (automations.TriggerLinearIssue).
	TriggerIssue = "linear_issue"
	// BlockComment is the block kind Linear executes.
	BlockComment = "linear_comment"
)

// Sign is a delivery's Linear-Signature.
func Sign(secret string, body []byte) string { return connector.HMAC([]byte(secret), "", body) }

// Deps are the collaborators of an App.
type Deps struct {
	Settings connector.Settings
	// People tells which engrams member a Linear user is (the store);
	// nil: nobody is.
	People connector.People
	// HTTP calls Linear: the deployment's address policy.
	HTTP   *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// App is the Linear integration.
type App struct {
	ins    connector.Settings
	people connector.People
	http   *http.Client
	log    *slog.Logger
	now    func() time.Time
}

// The seam's parts Linear implements.
var (
	_ connector.Receiver = (*App)(nil)
	_ connector.Blocks   = (*App)(nil)
)

// New returns an App.
func New(deps Deps) (*App, error) {
	if deps.Settings == nil || deps.HTTP == nil {
		return nil, errors.New("linearapp: Settings and HTTP are required")
	}
	a := &App{ins: deps.Settings, people: deps.People, http: deps.HTTP, log: deps.Logger, now: deps.Now}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

type conf struct {
	APIURL  string `json:"api_url"`
	Profile string `json:"profile"` // the profile issues' tasks start on
	Repo    string `json:"repo"`    // GitHub owner/name their pull requests open on ("": none)
	key     string
	webhook string
}

func (a *App) conf(ctx context.Context) (conf, error) {
	var c conf
	secrets, err := connector.Open(ctx, a.ins, domain.IntegrationLinear, &c)
	if err != nil {
		return conf{}, err
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	c.key, c.webhook = secrets["api_key"], secrets["webhook_secret"]
	return c, nil
}

// IssueEvent is an issue event's trigger payload.
type IssueEvent struct {
	Issue       string `json:"issue"`
	Identifier  string `json:"identifier"`
	Title       string `json:"title"`
	Description string `json:"description"`
	URL         string `json:"url"`
	Event       string `json:"event"`  // created, labelled
	Labels      string `json:"labels"` // the labels that made it, comma-separated
	Profile     string `json:"profile"`
	Repo        string `json:"repo"`
}

// delivery is what engrams reads of an Issue or Comment event.
type delivery struct {
	Action           string `json:"action"`
	Type             string `json:"type"`
	WebhookTimestamp int64  `json:"webhookTimestamp"`
	Actor            *actor `json:"actor"`
	Data             struct {
		ID          string `json:"id"`
		CreatorID   string `json:"creatorId"` // an issue's
		UserID      string `json:"userId"`    // a comment's author
		IssueID     string `json:"issueId"`   // a comment's issue
		Body        string `json:"body"`      // a comment's
		Identifier  string `json:"identifier"`
		Title       string `json:"title"`
		Description string `json:"description"`
		URL         string `json:"url"`
		Labels      []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"labels"`
	} `json:"data"`
	UpdatedFrom struct {
		LabelIDs []string `json:"labelIds"`
	} `json:"updatedFrom"`
}

// event is what a delivery is to triggers: "created", or "labelled" with
// the labels added; "" for one that starts nothing.
func (d delivery) event() (string, []string) {
	if d.Type != "Issue" {
		return "", nil
	}
	var names, added []string
	for _, l := range d.Data.Labels {
		names = append(names, l.Name)
		if !slices.Contains(d.UpdatedFrom.LabelIDs, l.ID) {
			added = append(added, l.Name)
		}
	}
	switch {
	case d.Action == "create":
		return "created", names
	case d.Action == "update" && d.UpdatedFrom.LabelIDs != nil && len(added) > 0:
		return "labelled", added
	}
	return "", nil
}

// Source implements connector.Receiver.
func (a *App) Source() connector.Source { return connector.SourceLinear }

// MaxBody implements connector.Receiver.
func (a *App) MaxBody() int64 { return MaxEventBody }

// Verify implements connector.Receiver: Linear-Signature over the body,
// whose webhookTimestamp must be within Window of now; a delivery is
// known by its body.
func (a *App) Verify(ctx context.Context, req connector.Request) (connector.Verified, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return connector.Verified{}, err
	}
	if err := connector.VerifyHMAC([]byte(c.webhook), req.Header.Get(HeaderSignature), "", false, req.Body); err != nil {
		return connector.Verified{}, err
	}
	var d struct {
		WebhookTimestamp int64           `json:"webhookTimestamp"`
		Type             string          `json:"type"`
		Action           string          `json:"action"`
		OrganizationID   string          `json:"organizationId"`
		WebhookID        string          `json:"webhookId"`
		UpdatedFrom      json.RawMessage `json:"updatedFrom"`
		Data             struct {
			ID        string `json:"id"`
			UpdatedAt string `json:"updatedAt"`
		} `json:"data"`
	}
	if err := json.Unmarshal(req.Body, &d); err != nil {
		return connector.Verified{}, fmt.Errorf("%w: the body is not a Linear event", connector.ErrBadSignature)
	}
	if err := connector.CheckTime(time.UnixMilli(d.WebhookTimestamp), a.now(), Window); err != nil {
		return connector.Verified{}, err
	}
	// A delivery is known by what it says happened, all signed: Linear
	// stamps each retry (webhookTimestamp) anew.
	covered, _ := json.Marshal([]any{d.OrganizationID, d.WebhookID, d.Type, d.Action, d.Data.ID, d.Data.UpdatedAt, d.UpdatedFrom})
	return connector.Verified{Covered: covered, KeepFor: keepFor, Hint: connector.Clip(req.Header.Get(HeaderDelivery), 100)}, nil
}

// Decode implements connector.Receiver: an issue created (triggers
// without labels) or labelled with a label a trigger names starts its
// runs, as the member who created or labelled it, else as the
// organisation's; a comment saying a link code links its author's
// account (link).
func (a *App) Decode(ctx context.Context, _ connector.Verified, req connector.Request) (connector.Meaning, error) {
	var d delivery
	if err := json.Unmarshal(req.Body, &d); err != nil {
		return connector.Meaning{}, fmt.Errorf("%w: not a Linear event", domain.ErrInvalid)
	}
	if d.Type == "Comment" && d.Action == "create" && d.Data.IssueID != "" && d.person() != "" {
		if code := linkCode(d.Data.Body); code != "" {
			return a.link(d, code), nil
		}
	}
	ev, labels := d.event()
	if ev == "" {
		return connector.Meaning{Ignored: "event"}, nil
	}
	c, err := a.conf(ctx)
	if err != nil {
		return connector.Meaning{}, err
	}
	// The issue's task is the member's who created or labelled it, else
	// the organisation's.
	org, err := a.ins.Holder(ctx, domain.IntegrationLinear)
	if err != nil {
		return connector.Meaning{}, err
	}
	actor, err := a.ids().Member(ctx, org, d.person(), nil)
	if err != nil {
		return connector.Meaning{}, err
	}
	p := IssueEvent{Issue: d.Data.ID, Identifier: d.Data.Identifier, Title: connector.Clip(d.Data.Title, 1024),
		Description: connector.Clip(d.Data.Description, 16<<10), URL: d.Data.URL, Event: ev, Labels: strings.Join(labels, ","),
		Profile: cmpOr(c.Profile, "agent"), Repo: c.Repo}
	admit := func(t connector.Trigger) connector.Admission {
		if len(t.Labels) == 0 {
			return connector.Admission{Match: ev == "created"}
		}
		return connector.Admission{Match: slices.ContainsFunc(labels, func(l string) bool { return slices.Contains(t.Labels, l) })}
	}
	return connector.Meaning{Starts: []connector.Start{{Trigger: TriggerIssue, Payload: p, Actor: actor, Admit: admit}}}, nil
}

// BlockKinds implements connector.Blocks.
func (a *App) BlockKinds() []string { return []string{BlockComment} }

// Escape implements connector.Blocks: values placed in a comment mention
// nobody.
func (a *App) Escape(field, value string) string {
	if field == "text" {
		return connector.EscapeMarkdown(value)
	}
	return value
}

// Execute implements connector.Blocks: linear_comment.
func (a *App) Execute(ctx context.Context, call connector.Call) (string, error) {
	if call.Kind != BlockComment {
		return "", fmt.Errorf("linear executes no %s block", call.Kind)
	}
	return a.Comment(ctx, call.Fields["issue"], call.Fields["text"], call.Key)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// marker is hidden in what engrams posts, to find a post made before a crash.
func marker(key string) string { return "\n\n[//]: # (engrams:" + key + ")" }

// gql runs a GraphQL request.
func (a *App) gql(ctx context.Context, c conf, query string, vars map[string]any, out any) error {
	b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.APIURL, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", c.key)
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("linear: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("linear: %w", err)
	}
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("linear: HTTP %d: not JSON", resp.StatusCode)
	}
	if len(env.Errors) > 0 || resp.StatusCode >= 300 {
		msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
		if len(env.Errors) > 0 {
			msg = env.Errors[0].Message
		}
		return fmt.Errorf("linear: %s", connector.Clip(msg, 200))
	}
	return json.Unmarshal(env.Data, out)
}

// Comment posts a comment on an issue once per key.
func (a *App) Comment(ctx context.Context, issue, text, key string) (string, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return "", err
	}
	var found struct {
		Issue struct {
			Comments struct {
				Nodes []struct {
					ID   string `json:"id"`
					Body string `json:"body"`
				} `json:"nodes"`
			} `json:"comments"`
		} `json:"issue"`
	}
	if err := a.gql(ctx, c, `query($id: String!) { issue(id: $id) { comments(first: 100) { nodes { id body } } } }`,
		map[string]any{"id": issue}, &found); err != nil {
		return "", err
	}
	for _, n := range found.Issue.Comments.Nodes {
		if strings.Contains(n.Body, marker(key)) {
			return n.ID, nil
		}
	}
	var made struct {
		CommentCreate struct {
			Success bool `json:"success"`
			Comment struct {
				ID string `json:"id"`
			} `json:"comment"`
		} `json:"commentCreate"`
	}
	if err := a.gql(ctx, c, `mutation($input: CommentCreateInput!) { commentCreate(input: $input) { success comment { id } } }`,
		map[string]any{"input": map[string]string{"issueId": issue, "body": connector.Clip(text, 60000) + marker(key)}}, &made); err != nil {
		return "", err
	}
	return made.CommentCreate.Comment.ID, nil
}
