package githubapp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/githubtest"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/store"
)

const hookSecret = "gh-webhook-secret"

func newApp(t *testing.T) (*App, *githubtest.Server) {
	t.Helper()
	a, gh, _ := newAppWithStore(t)
	return a, gh
}

// newAppWithStore is newApp with its store, which keeps its people: dev
// (githubtest.DevID) is member u-dev's account.
func newAppWithStore(t *testing.T) (*App, *githubtest.Server, store.Store) {
	t.Helper()
	st := coordinatortest.NewStore(t)
	ins := newSettingsOf(t, st)
	gh := githubtest.Start(t, "ghp_test")
	cfg, _ := json.Marshal(map[string]any{"api_url": gh.URL})
	if _, err := ins.Add(t.Context(), domain.FirstOrg, domain.IntegrationGitHub, cfg, map[string]string{"token": "ghp_test", "webhook_secret": hookSecret}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Deps{Settings: ins, People: st, HTTP: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	addMember(t, st, "u-dev")
	if err := st.PutIdentity(t.Context(), domain.Identity{OrgID: domain.FirstOrg, Kind: domain.IntegrationGitHub,
		ExternalID: fmt.Sprint(githubtest.DevID), UserID: "u-dev", How: domain.IdentityByLink}); err != nil {
		t.Fatal(err)
	}
	return a, gh, st
}

func addMember(t *testing.T, st store.Store, id domain.UserID) {
	t.Helper()
	if err := st.CreateUser(t.Context(), domain.User{ID: id, Email: string(id) + "@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutMember(t.Context(), domain.FirstOrg, id, domain.RoleMember, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func newSettings(t *testing.T) *integrations.Service {
	t.Helper()
	return newSettingsOf(t, coordinatortest.NewStore(t))
}

func newSettingsOf(t *testing.T, st store.Store) *integrations.Service {
	t.Helper()
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ins, err := integrations.New(integrations.Deps{Store: st, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

func signed(event, id string) func([]byte, time.Time, bool) http.Header {
	return func(body []byte, _ time.Time, forged bool) http.Header {
		h := http.Header{}
		h.Set(HeaderEvent, event)
		h.Set(HeaderDelivery, id)
		h.Set(HeaderSignature, Sign(map[bool]string{false: hookSecret, true: "wrong"}[forged], body))
		return h
	}
}

// reviewTrigger is pr-review's trigger on acme/app (the default floor).
var reviewTrigger = connector.Trigger{Repos: []string{"acme/app"}, Events: []string{"opened", "synchronize", "comment"}}

// TestConformance: GitHub's deliveries pass the integration seam's suite:
// one signed body sent again under other delivery ids and event headers
// starts one run (GitHub has no timestamp: a week's memory stands for it).
func TestConformance(t *testing.T) {
	t.Parallel()
	a, _ := newApp(t)
	connectortest.Run(t, connectortest.Case{Receiver: a, TriggerKind: TriggerPR, Trigger: reviewTrigger, Now: time.Now(),
		Body: githubtest.PullRequest("opened", "acme/app", 7, "abc123"), Sign: signed("pull_request", "d1"), Variants: []func(http.Header){
			func(h http.Header) { h.Set(HeaderDelivery, "d2") },
			func(h http.Header) { h.Del(HeaderDelivery) },
			func(h http.Header) { h.Set(HeaderEvent, "issue_comment") },
			func(h http.Header) { h["X-Github-Delivery"] = []string{"d3", "d4"} },
		}})
}

// TestDeliveries: pull request events and @engrams comments of authors
// at or above the trigger's floor start runs, once per signed body;
// authors below it are refused runs; forged deliveries, other
// repositories' and comments without a mention start nothing.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	a, _ := newApp(t)
	runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerPR: reviewTrigger}}
	p := connectortest.Pipeline(t, runs, time.Now, a)
	pr := githubtest.PullRequest("opened", "acme/app", 7, "abc123")
	outsider := githubtest.PullRequestOf(githubtest.PREvent{Action: "opened", Repo: "acme/app", Number: 8, SHA: "bad", Author: "drive-by",
		Association: "CONTRIBUTOR"})
	for _, c := range []struct {
		name, event, id string
		body            []byte
		secret          string
		ok              bool
	}{
		{"opened", "pull_request", "d1", pr, hookSecret, true},
		{"replayed under another id", "pull_request", "d1b", pr, hookSecret, true},
		{"forged", "pull_request", "d2", pr, "wrong", false},
		{"pushed", "pull_request", "d3", githubtest.PullRequest("synchronize", "acme/app", 7, "def456"), hookSecret, true},
		{"closed", "pull_request", "d4", githubtest.PullRequest("closed", "acme/app", 7, "def456"), hookSecret, true},
		{"other repo", "pull_request", "d5", githubtest.PullRequest("opened", "evil/app", 1, "x"), hookSecret, true},
		{"collaborator", "issue_comment", "d6", githubtest.IssueComment("acme/app", 7, "@engrams look at the tests too", "COLLABORATOR"), hookSecret, true},
		{"stranger", "issue_comment", "d7", githubtest.IssueComment("acme/app", 7, "@engrams rm -rf /", "NONE"), hookSecret, true},
		{"no mention", "issue_comment", "d8", githubtest.IssueComment("acme/app", 7, "lgtm", "OWNER"), hookSecret, true},
		{"below the floor", "pull_request", "d9", outsider, hookSecret, true},
		{"not json", "pull_request", "d10", []byte(`{`), hookSecret, false},
	} {
		h := signed(c.event, c.id)(c.body, time.Time{}, false)
		h.Set(HeaderSignature, Sign(c.secret, c.body))
		if _, err := connectortest.Deliver(t, p, connector.SourceGitHub, h, c.body); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
	got := runs.Runs()
	if len(got) != 5 {
		t.Fatalf("%d runs, want 5 (opened, pushed, the collaborator's comment; the stranger's and the outsider's refused): %+v", len(got), got)
	}
	if got[0].Payload["head_sha"] != "abc123" || got[1].Payload["event"] != "synchronize" || got[2].Payload["command"] != "look at the tests too" ||
		!strings.HasPrefix(got[0].Key, "github:") {
		t.Fatalf("runs: %+v", got)
	}
	for i, want := range []string{"", "", "", "dev is none of acme/app, below this trigger's floor (min_author: collaborator)",
		"drive-by is contributor of acme/app, below this trigger's floor (min_author: collaborator)"} {
		if got[i].Refused != want {
			t.Errorf("run %d refused %q, want %q", i, got[i].Refused, want)
		}
	}
	// dev's account is member u-dev's: their runs are theirs.
	for i, want := range []domain.UserID{"u-dev", "u-dev", "u-dev"} {
		if got[i].Actor != want {
			t.Errorf("run %d actor %q, want %q", i, got[i].Actor, want)
		}
	}
	// A signed event from over a week ago (past the memory of deliveries)
	// is not acted on: replayed, it would pass as new.
	old := githubtest.PullRequestOf(githubtest.PREvent{Action: "opened", Repo: "acme/app", Number: 12, SHA: "old",
		UpdatedAt: time.Now().Add(-8 * 24 * time.Hour)})
	if out, err := connectortest.Deliver(t, p, connector.SourceGitHub, signed("pull_request", "d12")(old, time.Time{}, false), old); err != nil ||
		!strings.Contains(out.Ignored, "over a week ago") || len(runs.Runs()) != 5 {
		t.Fatalf("a week-old event: %+v %v", out, err)
	}
	// A trigger that lets contributors in takes the outsider's.
	open := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerPR: {Repos: []string{"acme/app"}, MinAuthor: "contributor"}}}
	h := signed("pull_request", "d11")(outsider, time.Time{}, false)
	if _, err := connectortest.Deliver(t, connectortest.Pipeline(t, open, time.Now, a), connector.SourceGitHub, h, outsider); err != nil ||
		len(open.Runs()) != 1 || open.Runs()[0].Refused != "" {
		t.Fatalf("a contributor under a contributor floor: %+v %v", open.Runs(), err)
	}
}

// TestReviewAndCommentOnce: one review with its inline comments, posted
// once per key however often it is asked (a block run again after a crash).
func TestReviewAndCommentOnce(t *testing.T) {
	t.Parallel()
	a, gh := newApp(t)
	text := "README.md:1: say what the app does\n- `main.go:12`: the error is dropped\nLooks fine otherwise."
	for range 2 {
		if _, err := a.Review(t.Context(), "acme/app", "7", text, "step/run-1/3"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Comment(t.Context(), "acme/app", "7", "Review posted.", "step/run-1/4"); err != nil {
			t.Fatal(err)
		}
	}
	rs, cs := gh.Reviews("acme/app", 7), gh.Comments("acme/app", 7)
	if len(rs) != 1 || len(cs) != 1 {
		t.Fatalf("%d reviews, %d comments, want one each", len(rs), len(cs))
	}
	r := rs[0]
	if len(r.Comments) != 2 || r.Comments[0].Path != "README.md" || r.Comments[0].Line != 1 || r.Comments[1].Path != "main.go" ||
		r.Comments[1].Line != 12 || !strings.HasPrefix(r.Body, "Looks fine otherwise.") || r.Event != "COMMENT" {
		t.Fatalf("review %+v", r)
	}
	if _, err := a.Review(t.Context(), "not a repo", "7", text, "k"); err == nil {
		t.Fatal("a bad repository was posted to")
	}
}

func FuzzParseReview(f *testing.F) {
	f.Add("a.go:1: x\nsummary")
	f.Fuzz(func(t *testing.T, text string) {
		body, comments := parseReview(text)
		if len(comments) > 50 || len(body) > len(text) {
			t.Fatalf("%d comments, body %d of %d bytes", len(comments), len(body), len(text))
		}
		for _, c := range comments {
			if c.Line <= 0 || c.Path == "" {
				t.Fatalf("comment %+v", c)
			}
		}
	})
}

// TestAsAnApp: GitHub configured as an App (id, installation, private
// key): an installation token is minted for the repository, cached, and
// the review posted with it.
func TestAsAnApp(t *testing.T) {
	t.Parallel()
	ins := newSettings(t)
	gh := githubtest.Start(t, "ghs_installation")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	cfg, _ := json.Marshal(map[string]any{"api_url": gh.URL, "app_id": "12345", "installation_id": 678})
	if _, err := ins.Add(t.Context(), domain.FirstOrg, domain.IntegrationGitHub, cfg, map[string]string{"private_key": string(pemKey), "webhook_secret": "w"}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Deps{Settings: ins, HTTP: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := a.Review(t.Context(), "acme/app", "7", "Fine.", fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(gh.Reviews("acme/app", 7)) != 2 || gh.Minted() != 1 {
		t.Fatalf("%d reviews, %d tokens minted (want 2, and one token cached)", len(gh.Reviews("acme/app", 7)), gh.Minted())
	}
}
