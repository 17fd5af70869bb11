package linearapp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/domain"
)

// Linear signs each webhook delivery: Linear-Signature is the hex
// HMAC-SHA256 of the body keyed by the webhook's secret; the body's
// webhookTimestamp (Unix milliseconds) must be recent; Linear-Delivery
// names the delivery.
const (
	HeaderSignature = "Linear-Signature"
	HeaderDelivery  = "Linear-Delivery"
	// Window is how far a delivery's webhookTimestamp may be from now.
	Window = time.Minute
	// DefaultAPIURL is Linear's GraphQL API.
	DefaultAPIURL = "https://api.linear.app/graphql"
	// MaxEventBody bounds a delivery.
	MaxEventBody = 1 << 20
)

// ErrBadSignature is the category of a refused delivery.
var ErrBadSignature = errors.New("linear signature refused")

// Sign is a delivery's Linear-Signature.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Store remembers deliveries (the store).
type Store interface {
	RecordDelivery(ctx context.Context, source, id string, at, forgetBefore time.Time) (bool, error)
}

// Integrations opens Linear's settings and credentials.
type Integrations interface {
	Open(ctx context.Context, kind domain.IntegrationKind) (json.RawMessage, map[string]string, error)
}

// Runs starts the runs of issue triggers (autorun.Runner).
type Runs interface {
	StartTriggered(ctx context.Context, kind automations.TriggerKind, match func(automations.Trigger) bool, req autorun.RunRequest) ([]autorun.Started, error)
}

// Deps are the collaborators of an App.
type Deps struct {
	Store        Store
	Integrations Integrations
	HTTP         *http.Client
	Logger       *slog.Logger
	Now          func() time.Time
}

// App is the Linear integration.
type App struct {
	st   Store
	ins  Integrations
	http *http.Client
	log  *slog.Logger
	now  func() time.Time
	mu   sync.Mutex
	runs Runs
}

// New returns an App; SetRuns gives it the runner.
func New(deps Deps) (*App, error) {
	if deps.Store == nil || deps.Integrations == nil {
		return nil, errors.New("linearapp: Store and Integrations are required")
	}
	a := &App{st: deps.Store, ins: deps.Integrations, http: deps.HTTP, log: deps.Logger, now: deps.Now}
	if a.http == nil {
		a.http = &http.Client{Timeout: 30 * time.Second}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// SetRuns gives the App the runner (made after it).
func (a *App) SetRuns(r Runs) {
	a.mu.Lock()
	a.runs = r
	a.mu.Unlock()
}

type conf struct {
	APIURL  string `json:"api_url"`
	Profile string `json:"profile"` // the profile issues' tasks start on
	Repo    string `json:"repo"`    // GitHub owner/name their pull requests open on ("": none)
	key     string
	webhook string
}

func (a *App) conf(ctx context.Context) (conf, error) {
	raw, secrets, err := a.ins.Open(ctx, domain.IntegrationLinear)
	if err != nil {
		return conf{}, err
	}
	var c conf
	if err := json.Unmarshal(raw, &c); err != nil {
		return conf{}, fmt.Errorf("decode linear settings: %w", err)
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	c.key, c.webhook = secrets["api_key"], secrets["webhook_secret"]
	return c, nil
}

// delivery is what engrams reads of an Issue event.
type delivery struct {
	Action           string `json:"action"`
	Type             string `json:"type"`
	WebhookTimestamp int64  `json:"webhookTimestamp"`
	Data             struct {
		ID          string `json:"id"`
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

// HandleEvents answers one webhook delivery: verified (signature and
// timestamp), acted on once per Linear-Delivery.
func (a *App) HandleEvents(ctx context.Context, h http.Header, body []byte) (int, any) {
	c, err := a.conf(ctx)
	if errors.Is(err, domain.ErrNotFound) {
		return http.StatusNotFound, map[string]string{"error": "linear is not configured"}
	}
	if err != nil {
		return http.StatusInternalServerError, map[string]string{"error": "linear settings cannot be read"}
	}
	sig := h.Get(HeaderSignature)
	if c.webhook == "" || len(sig) > 200 || !hmac.Equal([]byte(sig), []byte(Sign(c.webhook, body))) {
		return http.StatusUnauthorized, map[string]string{"error": "signature refused"}
	}
	var d delivery
	if len(body) > MaxEventBody || json.Unmarshal(body, &d) != nil {
		return http.StatusBadRequest, map[string]string{"error": "not a Linear event"}
	}
	if at := time.UnixMilli(d.WebhookTimestamp); a.now().Sub(at) > Window || at.Sub(a.now()) > Window {
		return http.StatusUnauthorized, map[string]string{"error": "stale delivery"}
	}
	event, labels := d.event()
	id := h.Get(HeaderDelivery)
	if event == "" || id == "" || len(id) > 100 {
		return http.StatusOK, map[string]string{"ignored": "event"}
	}
	if first, err := a.st.RecordDelivery(ctx, "linear", id, a.now(), a.now().Add(-24*time.Hour)); err != nil || !first {
		return http.StatusOK, map[string]string{"ignored": "delivery seen before"}
	}
	a.mu.Lock()
	runs := a.runs
	a.mu.Unlock()
	if runs == nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "automation runs are not running on this server"}
	}
	profile := c.Profile
	if profile == "" {
		profile = "agent"
	}
	raw, _ := json.Marshal(map[string]any{"issue": d.Data.ID, "identifier": d.Data.Identifier, "title": d.Data.Title,
		"description": clip(d.Data.Description, 16<<10), "url": d.Data.URL, "event": event, "labels": strings.Join(labels, ","), "profile": profile,
		"repo": c.Repo})
	started, err := runs.StartTriggered(ctx, automations.TriggerLinearIssue, func(t automations.Trigger) bool {
		if len(t.Labels) == 0 {
			return event == "created"
		}
		return slices.ContainsFunc(labels, func(l string) bool { return slices.Contains(t.Labels, l) })
	}, autorun.RunRequest{Kind: automations.TriggerLinearIssue, Trigger: raw, DedupKey: "linear:" + id})
	if err != nil {
		a.log.Warn("start issue runs", "delivery", id, "err", err)
	}
	return http.StatusOK, map[string]int{"runs": len(started)}
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
		return fmt.Errorf("linear: %s", clip(msg, 200))
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
		map[string]any{"input": map[string]string{"issueId": issue, "body": clip(text, 60000) + marker(key)}}, &made); err != nil {
		return "", err
	}
	return made.CommentCreate.Comment.ID, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
