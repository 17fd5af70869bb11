package api_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/hookapp"
)

const hookDef = `
name: deploy
trigger: {kind: webhook, slug: deploy}
inputs: [{name: env, type: string, required: true}]
blocks:
  - {id: task, kind: start_task, profile: nope, prompt: "deploy {{trigger.ref}} to {{inputs.env}}"}
`

func TestAutomationRoutes(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{automations: true})
	body, _ := json.Marshal(apiv1.CreateAutomationRequest{Definition: hookDef, Enabled: true})
	rec := a.do("POST", "/v1/automations", "application/json", strings.NewReader(string(body)))
	check(t, "create", rec, 201, []string{`"name":"deploy"`, `"hook_url":"/v1/hooks/deploy"`, `"hook_secret":"whsec_`, `"enabled":true`}, nil)
	var saved apiv1.AutomationResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &saved); err != nil {
		t.Fatal(err)
	}
	bad, _ := json.Marshal(apiv1.CreateAutomationRequest{Definition: "name: x\ntrigger: {kind: manual}\nblocks: [{id: a, kind: teleport}]"})
	for _, s := range []struct {
		what, method, target, body string
		status                     int
		contains, lacks            []string
	}{
		{"bad definition", "POST", "/v1/automations", string(bad), 400, []string{`blocks[0].kind: unknown block \"teleport\"`}, nil},
		{"taken", "POST", "/v1/automations", string(body), 409, []string{"already used"}, nil},
		{"get", "GET", "/v1/automations/deploy", "", 200, []string{`"version":1`, `"definition":{"name":"deploy"`}, []string{"hook_secret", "whsec_"}},
		{"list", "GET", "/v1/automations", "", 200, []string{`"items":[{`}, []string{"whsec_"}},
		{"run without its input", "POST", "/v1/automations/deploy/runs", `{}`, 400, []string{"env"}, nil},
		{"disable", "POST", "/v1/automations/deploy/disable", "", 200, []string{`"enabled":false`}, nil},
		{"enable", "POST", "/v1/automations/deploy/enable", "", 200, []string{`"enabled":true`}, nil},
		{"unknown", "GET", "/v1/automations/nope", "", 404, []string{`no automation \"nope\"`}, nil},
	} {
		check(t, s.what, a.do(s.method, s.target, "application/json", strings.NewReader(s.body)), s.status, s.contains, s.lacks)
	}

	payload := `{"ref":"v2","inputs":{"env":"prod"}}`
	deliver := func(ts time.Time, id, sig, b string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/hooks/deploy", strings.NewReader(b))
		req.Header.Set(apiv1.HeaderHookTimestamp, strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set(apiv1.HeaderHookSignature, sig)
		req.Header.Set(apiv1.HeaderHookDelivery, id)
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req) // no token: the signature is the credential
		return rec
	}
	now := time.Now()
	sign := func(ts time.Time, b string) string {
		return hookapp.Sign([]byte(saved.HookSecret), ts.Unix(), []byte(b))
	}
	rec = deliver(now, "d-1", sign(now, payload), payload)
	check(t, "delivery", rec, 202, []string{`"trigger":"webhook"`, `"automation":"deploy"`, `"inputs":{"env":"prod"}`}, []string{"duplicate"})
	var first apiv1.RunResponse
	_ = json.Unmarshal(rec.Body.Bytes(), &first)
	check(t, "the same delivery", deliver(now, "d-1", sign(now, payload), payload), 200, []string{`"duplicate":true`, `"id":"` + first.ID + `"`}, nil)
	const refused = "the delivery's signature or timestamp was refused"
	check(t, "forged", deliver(now, "d-2", sign(now, payload), `{"ref":"evil"}`), 401, []string{refused}, nil)
	stale := now.Add(-6 * time.Minute)
	check(t, "stale", deliver(stale, "d-3", sign(stale, payload), payload), 401, []string{refused}, nil)
	check(t, "unsigned", deliver(now, "d-4", "", payload), 401, []string{refused}, nil)
	big := `{"x":"` + strings.Repeat("a", 300<<10) + `"}`
	check(t, "too big", deliver(now, "d-5", sign(now, big), big), 413, []string{"256 KiB"}, nil)

	// The run fails: its profile does not exist. The step says why.
	var run apiv1.RunDetail
	deadline := time.Now().Add(20 * time.Second)
	for run.State != apiv1.RunFailed && time.Now().Before(deadline) {
		rec = a.do("GET", "/v1/runs/"+first.ID, "", nil)
		_ = json.Unmarshal(rec.Body.Bytes(), &run)
		time.Sleep(20 * time.Millisecond)
	}
	if run.State != apiv1.RunFailed || len(run.Steps) != 1 || run.Steps[0].Attempt != 1 || !strings.Contains(run.Steps[0].Error, "nope") ||
		!strings.Contains(string(run.Steps[0].Input), "deploy v2 to prod") {
		t.Fatalf("run: %s", rec.Body.String())
	}
	check(t, "runs", a.do("GET", "/v1/automations/deploy/runs?limit=1", "", nil), 200, []string{`"items":[{"id":"` + first.ID + `"`, `"next_cursor":""`}, nil)
	check(t, "cancel an ended run", a.do("POST", "/v1/runs/"+first.ID+"/cancel", "", nil), 409, []string{"failed"}, nil)
	check(t, "rotate", a.do("POST", "/v1/automations/deploy/hook-secret", "", nil), 200, []string{`"hook_secret":"whsec_`}, []string{saved.HookSecret})
	check(t, "old secret after rotation", deliver(now, "d-6", sign(now, payload), payload), 401, []string{refused}, nil)
	check(t, "delete", a.do("DELETE", "/v1/automations/deploy", "", nil), 200, []string{`"name":"deploy"`}, nil)
	check(t, "run of a deleted automation", a.do("GET", "/v1/runs/"+first.ID, "", nil), 404, nil, nil)
}

func TestAutomationRoutesOff(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	check(t, "list", a.do("GET", "/v1/automations", "", nil), 503, []string{"runs no automations"}, nil)
	check(t, "hook", a.do("POST", "/v1/hooks/x", "application/json", strings.NewReader(`{}`)), 503, []string{"runs no automations"}, nil)
}

func TestIntegrationRoutes(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{automations: true})
	const bot = "xoxb-very-secret-bot-token"
	for _, s := range []struct {
		what, method, target, body string
		status                     int
		contains, lacks            []string
	}{
		{"unknown kind", "POST", "/v1/integrations", `{"kind":"jira","secrets":{}}`, 400, []string{`no integration \"jira\"`}, nil},
		{"missing credential", "POST", "/v1/integrations", `{"kind":"slack","secrets":{"bot_token":"` + bot + `"}}`, 400, []string{"signing_secret"}, []string{bot}},
		{"unknown setting", "POST", "/v1/integrations", `{"kind":"slack","config":{"color":"red"},"secrets":{"bot_token":"b","signing_secret":"s"}}`, 400,
			[]string{`no setting \"color\"`}, nil},
		{"add", "POST", "/v1/integrations", `{"kind":"slack","config":{"default_profile":"agent"},"secrets":{"bot_token":"` + bot + `","signing_secret":"s"}}`,
			201, []string{`"kind":"slack"`, `"secrets":["bot_token","signing_secret"]`, `"builtins":["slack-threads"]`}, []string{bot}},
		{"built-in installed disabled", "GET", "/v1/automations/slack-threads", "", 200, []string{`"enabled":false`, `"trigger":"slack_mention"`}, nil},
		{"add again", "POST", "/v1/integrations", `{"kind":"slack","secrets":{"bot_token":"` + bot + `","signing_secret":"s2"}}`, 201, nil,
			[]string{bot, "builtins"}},
		{"list", "GET", "/v1/integrations", "", 200, []string{`"kind":"slack"`}, []string{bot, `"s2"`}},
		{"unsigned slack event", "POST", "/v1/integrations/slack/events", `{"type":"url_verification","challenge":"c"}`, 401, nil, []string{`"c"`}},
		{"remove", "DELETE", "/v1/integrations/slack", "", 200, nil, nil},
		{"remove again", "DELETE", "/v1/integrations/slack", "", 404, []string{"not configured"}, nil},
		{"slack event when not configured: refused like a forged one, saying nothing of what is configured", "POST",
			"/v1/integrations/slack/events", `{}`, 401, []string{"signature or timestamp was refused"}, []string{"configured", "slack"}},
	} {
		check(t, s.what, a.do(s.method, s.target, "application/json", strings.NewReader(s.body)), s.status, s.contains, s.lacks)
	}
	if strings.Contains(a.logs.String(), bot) {
		t.Error("the logs quote a credential")
	}
}

// TestSecretAnswersNeverKept: an answer showing a secret once (a hook's
// secret at create and at rotation, a new token) is not kept for an
// Idempotency-Key's replay: the retry runs again (a create finds its name
// taken) and never shows the secret; the SQLite file and its WAL never
// hold it.
func TestSecretAnswersNeverKept(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{automations: true})
	body, _ := json.Marshal(apiv1.CreateAutomationRequest{Definition: hookDef, Enabled: true})
	post := func(target, key, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", target, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(apiv1.HeaderIdempotencyKey, key)
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		return rec
	}
	var secrets []string
	rec := post("/v1/automations", "create-1", string(body))
	var saved apiv1.AutomationResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &saved); err != nil || rec.Code != 201 || saved.HookSecret == "" {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	secrets = append(secrets, saved.HookSecret)
	check(t, "the create retried", post("/v1/automations", "create-1", string(body)), 409, []string{"already used"}, []string{saved.HookSecret})
	for i := range 2 {
		rec = post("/v1/automations/deploy/hook-secret", "rotate-1", "")
		var rotated apiv1.AutomationResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &rotated)
		if rec.Code != 200 || rotated.HookSecret == "" || slices.Contains(secrets, rotated.HookSecret) {
			t.Fatalf("rotate %d: %d %s", i, rec.Code, rec.Body)
		}
		secrets = append(secrets, rotated.HookSecret)
	}
	for _, f := range []string{a.db, a.db + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a hook secret in the clear", filepath.Base(f))
			}
		}
	}
}
