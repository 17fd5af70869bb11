package intake_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/githubapp"
	"github.com/engrams/engrams/internal/hookapp"
	"github.com/engrams/engrams/internal/linearapp"
	"github.com/engrams/engrams/internal/slackapp"
)

const key = "the-one-secret"

var now = time.Unix(1_800_000_000, 0)

// settings are every integration configured with key.
type settings struct{}

func (settings) Holder(context.Context, domain.IntegrationKind) (domain.OrgID, error) {
	return domain.FirstOrg, nil
}

func (settings) Open(_ context.Context, kind domain.IntegrationKind) (json.RawMessage, map[string]string, error) {
	return json.RawMessage(`{"default_profile":"agent"}`), map[string]string{"webhook_secret": key, "signing_secret": key, "token": "t",
		"bot_token": "b", "api_key": "a"}, nil
}

type hooks struct{}

func (hooks) GetAutomationBySlug(_ context.Context, slug string) (domain.Automation, error) {
	if slug != "deploy" {
		return domain.Automation{}, domain.ErrNotFound
	}
	return domain.Automation{ID: "a-1", Enabled: true, TriggerKind: hookapp.TriggerKind, HookSecret: []byte(key)}, nil
}

type plain struct{}

func (plain) Open(c, _ []byte) ([]byte, error) { return c, nil }

type noThreads struct{}

func (noThreads) PutThread(context.Context, domain.ChatThread) (domain.ChatThread, bool, error) {
	return domain.ChatThread{}, false, nil
}
func (noThreads) GetThread(context.Context, domain.IntegrationKind, string, string) (domain.ChatThread, error) {
	return domain.ChatThread{}, domain.ErrNotFound
}
func (noThreads) ClaimThreads(context.Context, string, time.Time, time.Time, int) ([]domain.ChatThread, error) {
	return nil, nil
}
func (noThreads) UpdateThread(context.Context, domain.ChatThread, string) error { return nil }
func (noThreads) ListTaskEvents(context.Context, domain.TaskID, int64, int) ([]domain.TaskEvent, error) {
	return nil, nil
}

// Every Slack account is a member's here (the fuzzed decoders never reach
// Slack to ask).
func (noThreads) GetIdentity(context.Context, domain.OrgID, domain.IntegrationKind, string) (domain.Identity, error) {
	return domain.Identity{UserID: "u"}, nil
}
func (noThreads) PutIdentity(context.Context, domain.Identity) error { return nil }
func (noThreads) TakeIdentityCode(context.Context, string, time.Time) (domain.IdentityCode, error) {
	return domain.IdentityCode{}, domain.ErrNotFound
}
func (noThreads) UserByEmail(context.Context, string) (domain.User, error) {
	return domain.User{}, domain.ErrNotFound
}
func (noThreads) GetMember(context.Context, domain.OrgID, domain.UserID) (domain.Member, error) {
	return domain.Member{Role: domain.RoleMember}, nil
}
func (noThreads) SendTask(context.Context, domain.TaskID, string) (domain.TaskEvent, error) {
	return domain.TaskEvent{}, nil
}

// receivers are the four integrations, each with key as its secret; its
// Slack answers to nowhere (an unroutable client: After's reactions fail).
func receivers(t testing.TB) []connector.Receiver {
	clock := func() time.Time { return now }
	offline := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, context.Canceled })}
	h, _ := hookapp.New(hookapp.Deps{Store: hooks{}, Sealer: plain{}, Now: clock})
	gh, _ := githubapp.New(githubapp.Deps{Settings: settings{}, HTTP: offline, Now: clock})
	lin, _ := linearapp.New(linearapp.Deps{Settings: settings{}, HTTP: offline, Now: clock})
	sl, err := slackapp.New(slackapp.Config{Owner: "r1"}, slackapp.Deps{Store: noThreads{}, People: noThreads{}, Settings: settings{}, Tasks: noThreads{}, HTTP: offline, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	return []connector.Receiver{h, sl, gh, lin}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// headers are a delivery of src's headers with sig (and ts where the
// scheme signs one).
func headers(src connector.Source, ts, sig string) http.Header {
	h := http.Header{}
	switch src {
	case connector.SourceHook:
		h.Set(hookapp.HeaderTimestamp, ts)
		h.Set(hookapp.HeaderSignature, sig)
	case connector.SourceSlack:
		h.Set(slackapp.HeaderTimestamp, ts)
		h.Set(slackapp.HeaderSignature, sig)
	case connector.SourceGitHub:
		h.Set(githubapp.HeaderEvent, "pull_request")
		h.Set(githubapp.HeaderSignature, sig)
	case connector.SourceLinear:
		h.Set(linearapp.HeaderSignature, sig)
	}
	return h
}

// realSignature is the signature of body at ts under src's scheme.
func realSignature(src connector.Source, ts string, body []byte) string {
	n, _ := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
	switch src {
	case connector.SourceHook:
		return hookapp.Sign([]byte(key), n, body)
	case connector.SourceSlack:
		return slackapp.Sign(key, n, body)
	case connector.SourceGitHub:
		return githubapp.Sign(key, body)
	}
	return linearapp.Sign(key, body)
}

// FuzzPipeline: random bodies, headers and signatures sent to the four
// receivers through the one pipeline: a run starts only for the real
// signature over the real body.
func FuzzPipeline(f *testing.F) {
	ts := strconv.FormatInt(now.Unix(), 10)
	pr := []byte(`{"action":"opened","pull_request":{"number":1,"title":"t","author_association":"MEMBER","head":{"ref":"x"}},` +
		`"repository":{"full_name":"acme/app"}}`)
	mention := []byte(`{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"app_mention","user":"U1","text":"hi","ts":"1.1","channel":"C1"}}`)
	issue := []byte(`{"action":"create","type":"Issue","webhookTimestamp":1800000000000,"data":{"id":"i","labels":[{"id":"l","name":"engrams"}]}}`)
	for i, body := range [][]byte{[]byte(`{"ref":"v1"}`), mention, pr, issue} {
		src := []connector.Source{connector.SourceHook, connector.SourceSlack, connector.SourceGitHub, connector.SourceLinear}[i]
		f.Add(uint8(i), body, ts, realSignature(src, ts, body))
		f.Add(uint8(i), body, ts, realSignature(src, ts, append(body, ' ')))
	}
	rcv := receivers(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte, ts, sig string) {
		src := rcv[int(which)%len(rcv)].Source()
		runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{hookapp.TriggerKind: {}, slackapp.TriggerMention: {},
			githubapp.TriggerPR: {}, linearapp.TriggerIssue: {Labels: []string{"engrams"}}}}
		p := connectortest.Pipeline(t, runs, func() time.Time { return now }, rcv...)
		out, err := p.Deliver(t.Context(), src, connector.Request{Header: headers(src, ts, sig), Body: body, Slug: "deploy"})
		if err != nil || len(runs.Runs()) == 0 {
			return
		}
		if strings.TrimSpace(sig) != realSignature(src, ts, body) && !strings.Contains(sig, realSignature(src, ts, body)) {
			t.Fatalf("%s: a run started for signature %q over %q (%+v)", src, sig, body, out)
		}
	})
}
