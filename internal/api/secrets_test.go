package api_test

import (
	"strings"
	"testing"
)

const apiKey = "sk-ant-api03-s3cret-k3y"

func TestSecretRoutes(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	steps := []struct {
		what, method, target, body string
		status                     int
		contains, lacks            []string
	}{
		{"create", "POST", "/v1/secrets", `{"name":"ant","kind":"anthropic_api_key","value":"` + apiKey + `"}`, 201,
			[]string{`"name":"ant"`, `"kind":"anthropic_api_key"`, `"meta":{"base_url":"https://api.anthropic.com"}`}, []string{"value"}},
		{"create git", "POST", "/v1/secrets", `{"name":"gh","kind":"git_https","value":"` + apiKey + `","meta":{"username":"x-access-token","host":"github.com"}}`, 201,
			[]string{`"meta":{"username":"x-access-token","host":"github.com"}`}, nil},
		{"taken", "POST", "/v1/secrets", `{"name":"ant","kind":"generic","value":"` + apiKey + `"}`, 409, []string{"a secret named ant exists"}, nil},
		{"bad kind", "POST", "/v1/secrets", `{"name":"x","kind":"aws","value":"` + apiKey + `"}`, 400, []string{`kind \"aws\"`}, nil},
		{"plain http base url", "POST", "/v1/secrets", `{"name":"x","kind":"openai_api_key","value":"` + apiKey + `","meta":{"base_url":"http://10.0.0.5/v1"}}`, 400,
			[]string{`want https; plain http only to this machine`}, nil},
		{"git without host", "POST", "/v1/secrets", `{"name":"x","kind":"git_https","value":"` + apiKey + `","meta":{"username":"bot"}}`, 400,
			[]string{"a git_https secret needs the git host it is for"}, nil},
		{"newline", "POST", "/v1/secrets", `{"name":"x","kind":"openai_api_key","value":"` + apiKey + `\n"}`, 400, []string{"line breaks"}, nil},
		{"malformed", "POST", "/v1/secrets", `{"name":"x","value":"` + apiKey, 400, []string{"malformed JSON body: the body ends early"}, nil},
		{"value of wrong type", "POST", "/v1/secrets", `{"name":"x","value":987654321}`, 400, []string{"field value: want a string"}, nil},
		{"syntax error in value", "POST", "/v1/secrets", `{"name":"x","value":"` + apiKey + "\x01" + `"}`, 400, []string{"invalid JSON at byte"}, nil},
		{"unknown meta field", "POST", "/v1/secrets", `{"name":"x","kind":"generic","value":"v","meta":{"region":"eu"}}`, 400, []string{`unknown field \"region\"`}, nil},
		{"list", "GET", "/v1/secrets", "", 200, []string{`"items":[{`, `"name":"ant"`, `"name":"gh"`}, nil},
		{"delete", "DELETE", "/v1/secrets/gh", "", 200, []string{`"name":"gh"`, `"deleted_at":`}, []string{"used_by"}},
		{"delete again", "DELETE", "/v1/secrets/gh", "", 404, []string{`"code":"not_found"`}, nil},
		{"list after", "GET", "/v1/secrets", "", 200, []string{`"name":"ant"`}, []string{`"name":"gh"`, "deleted_at"}},
	}
	for _, s := range steps {
		rec := a.do(s.method, s.target, "application/json", strings.NewReader(s.body))
		check(t, s.what, rec, s.status, s.contains, append(s.lacks, apiKey, "987654321"))
	}
	if logs := a.logs.String(); strings.Contains(logs, apiKey) || strings.Contains(logs, "987654321") || !strings.Contains(logs, "secret created") {
		t.Errorf("logs quote a secret, or log nothing:\n%s", logs)
	}
}
