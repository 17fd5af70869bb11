package githubapp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/githubtest"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/secret"
)

const hookSecret = "gh-webhook-secret"

type fakeRuns struct {
	mu    sync.Mutex
	calls []map[string]any
	keys  []string
}

func (f *fakeRuns) StartTriggered(_ context.Context, kind automations.TriggerKind, match func(automations.Trigger) bool, req autorun.RunRequest) ([]autorun.Started, error) {
	if kind != automations.TriggerGitHubPR || !match(automations.Trigger{Kind: kind, Repos: []string{"acme/app"}, Events: []string{"opened", "synchronize", "comment"}}) {
		return nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var p map[string]any
	_ = json.Unmarshal(req.Trigger, &p)
	f.calls, f.keys = append(f.calls, p), append(f.keys, req.DedupKey)
	return []autorun.Started{{Created: true}}, nil
}

func newApp(t *testing.T) (*App, *githubtest.Server, *fakeRuns) {
	t.Helper()
	st := coordinatortest.NewStore(t)
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ins, err := integrations.New(integrations.Deps{Store: st, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	gh := githubtest.Start(t, "ghp_test")
	cfg, _ := json.Marshal(map[string]any{"api_url": gh.URL})
	if _, err := ins.Add(t.Context(), domain.IntegrationGitHub, cfg, map[string]string{"token": "ghp_test", "webhook_secret": hookSecret}); err != nil {
		t.Fatal(err)
	}
	runs := &fakeRuns{}
	a, err := New(Deps{Store: st, Integrations: ins, Runs: runs})
	if err != nil {
		t.Fatal(err)
	}
	return a, gh, runs
}

func deliver(t *testing.T, a *App, event, id string, body []byte, secret string) (int, string) {
	t.Helper()
	h := http.Header{}
	h.Set(HeaderEvent, event)
	h.Set(HeaderDelivery, id)
	h.Set(HeaderSignature, Sign(secret, body))
	st, out := a.HandleEvents(t.Context(), h, body)
	b, _ := json.Marshal(out)
	return st, string(b)
}

// TestDeliveries: pull request events and collaborators' @engrams
// comments start runs, once per delivery; forged deliveries, other
// repositories' and strangers' comments start nothing.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	a, _, runs := newApp(t)
	pr := githubtest.PullRequest("opened", "acme/app", 7, "abc123")
	for _, c := range []struct {
		name, event, id string
		body            []byte
		secret          string
		status          int
	}{
		{"opened", "pull_request", "d1", pr, hookSecret, 200},
		{"replayed", "pull_request", "d1", pr, hookSecret, 200},
		{"forged", "pull_request", "d2", pr, "wrong", 401},
		{"pushed", "pull_request", "d3", githubtest.PullRequest("synchronize", "acme/app", 7, "def456"), hookSecret, 200},
		{"closed", "pull_request", "d4", githubtest.PullRequest("closed", "acme/app", 7, "def456"), hookSecret, 200},
		{"other repo", "pull_request", "d5", githubtest.PullRequest("opened", "evil/app", 1, "x"), hookSecret, 200},
		{"collaborator", "issue_comment", "d6", githubtest.IssueComment("acme/app", 7, "@engrams look at the tests too", "COLLABORATOR"), hookSecret, 200},
		{"stranger", "issue_comment", "d7", githubtest.IssueComment("acme/app", 7, "@engrams rm -rf /", "NONE"), hookSecret, 200},
		{"no mention", "issue_comment", "d8", githubtest.IssueComment("acme/app", 7, "lgtm", "OWNER"), hookSecret, 200},
		{"ping", "ping", "d9", []byte(`{"zen":"x"}`), hookSecret, 200},
		{"not json", "pull_request", "d10", []byte(`{`), hookSecret, 400},
	} {
		if st, out := deliver(t, a, c.event, c.id, c.body, c.secret); st != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, st, out, c.status)
		}
	}
	if len(runs.calls) != 3 {
		t.Fatalf("%d runs started, want 3 (opened, pushed, the collaborator's comment): %v", len(runs.calls), runs.calls)
	}
	if runs.calls[0]["head_sha"] != "abc123" || runs.calls[1]["event"] != "synchronize" || runs.calls[2]["command"] != "look at the tests too" ||
		runs.keys[0] != "github:d1" {
		t.Fatalf("runs: %v %v", runs.calls, runs.keys)
	}
}

// TestReviewAndCommentOnce: one review with its inline comments, posted
// once per key however often it is asked (a block run again after a crash).
func TestReviewAndCommentOnce(t *testing.T) {
	t.Parallel()
	a, gh, _ := newApp(t)
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

func FuzzVerifyDelivery(f *testing.F) {
	f.Add([]byte(`{}`), "sha256=00")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		if Verify(hookSecret, sig, body) == nil && sig != Sign(hookSecret, body) {
			t.Fatalf("a forged signature passed: %q", sig)
		}
	})
}

// TestAsAnApp: GitHub configured as an App (id, installation, private
// key): an installation token is minted for the repository, cached, and
// the review posted with it.
func TestAsAnApp(t *testing.T) {
	t.Parallel()
	st := coordinatortest.NewStore(t)
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ins, err := integrations.New(integrations.Deps{Store: st, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	gh := githubtest.Start(t, "ghs_installation")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	cfg, _ := json.Marshal(map[string]any{"api_url": gh.URL, "app_id": "12345", "installation_id": 678})
	if _, err := ins.Add(t.Context(), domain.IntegrationGitHub, cfg, map[string]string{"private_key": string(pemKey), "webhook_secret": "w"}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Deps{Store: st, Integrations: ins})
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
