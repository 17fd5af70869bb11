package api_test

import (
	"strings"
	"testing"
)

// TestNotFoundSaysItOnce (issue 26): a 404 names what was not found once
// ("get session nope: not found", never "get session nope: get session
// nope: not found"): each layer adds only its own action.
func TestNotFoundSaysItOnce(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	for _, r := range []struct{ method, target, body, want string }{
		{"GET", "/v1/sessions/nope", "", "get session nope: not found"},
		{"DELETE", "/v1/sessions/nope", "", "get session nope: not found"},
		{"POST", "/v1/sessions/nope/suspend", "", "get session nope: not found"},
		{"POST", "/v1/sessions/nope/resume", "", "get session nope: not found"},
		{"GET", "/v1/sessions/nope/events", "", "get session nope: not found"},
		{"GET", "/v1/sessions/nope/egress", "", "get session nope: not found"},
		{"POST", "/v1/sessions/nope/exec", `{"argv":["true"]}`, "get session nope: not found"},
		{"GET", "/v1/sessions/nope/files?path=/tmp", "", "get session nope: not found"},
		{"GET", "/v1/sessions/nope/outbox", "", "get session nope: not found"},
		{"GET", "/v1/tasks/nope", "", "get task nope: not found"},
		{"GET", "/v1/tasks/nope/events", "", "get task nope: not found"},
		{"POST", "/v1/tasks/nope/messages", `{"text":"x"}`, "get task nope: not found"},
		{"POST", "/v1/tasks/nope/stop", "", "get task nope: not found"},
		{"GET", "/v1/profiles/nope", "", `profile \"nope\": not found`},
		{"GET", "/v1/images/nope", "", `image \"nope\": not found`},
	} {
		rec := a.do(r.method, r.target, "application/json", strings.NewReader(r.body))
		body := rec.Body.String()
		if rec.Code != 404 || !strings.Contains(body, `"error":"`+r.want+`"`) {
			t.Errorf("%s %s: %d %s, want 404 %q", r.method, r.target, rec.Code, strings.TrimSpace(body), r.want)
		}
		if n := strings.Count(body, "nope"); n != 1 {
			t.Errorf("%s %s: %s names it %d times, want once", r.method, r.target, strings.TrimSpace(body), n)
		}
	}
}
