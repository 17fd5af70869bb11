package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/clienttest"
)

func TestSecretCommands(t *testing.T) {
	t.Parallel()
	newSrv := func(t *testing.T) *clienttest.Server { return newAgentServer(t).Server }
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(testSecret+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	usedByProfile := func(t *testing.T, srv *clienttest.Server) {
		if got := run(t, srv, nil, "", "profile", "create", "rev", "--image", "py", "--harness", "claude-code", "--credential", "ant"); got.code != 0 {
			t.Fatalf("profile create: %+v", got)
		}
	}
	runTable(t, newSrv, []cmdTest{
		{name: "create from stdin", args: []string{"secret", "create", "ant2", "--kind", "anthropic_api_key"}, stdin: testSecret + "\n",
			contains: []string{"secret ant2 (anthropic_api_key) is stored, id ", "; its value is never shown again\n"}},
		{name: "create from file", args: []string{"secret", "create", "gl", "--kind", "git_https", "--username", "bot", "--host", "gitlab.com", "--from-file", keyFile, "--json"},
			contains: []string{`"name": "gl"`, `"username": "bot"`, `"host": "gitlab.com"`}},
		{name: "create proxy", args: []string{"secret", "create", "proxy", "--kind", "openai_api_key", "--base-url", "https://10.1.2.3:4000/v1", "--json"}, stdin: testSecret,
			contains: []string{`"base_url": "https://10.1.2.3:4000/v1"`}},
		{name: "create local proxy", args: []string{"secret", "create", "local", "--kind", "openai_api_key", "--base-url", "http://127.0.0.1:4000/v1", "--json"}, stdin: testSecret,
			contains: []string{`"base_url": "http://127.0.0.1:4000/v1"`}},
		{name: "plain http proxy", args: []string{"secret", "create", "x", "--kind", "openai_api_key", "--base-url", "http://10.1.2.3:4000/v1"}, stdin: testSecret, code: 1,
			errContain: []string{`base_url: "http://10.1.2.3:4000/v1": want https; plain http only to this machine`}},
		{name: "git without host", args: []string{"secret", "create", "x", "--kind", "git_https", "--username", "bot"}, stdin: testSecret, code: 1,
			errContain: []string{"a git_https secret needs the git host it is for"}},
		{name: "empty value", args: []string{"secret", "create", "x", "--kind", "generic"}, stdin: "\n", code: 2,
			errContain: []string{"error: the value of secret x on stdin is empty: pipe it in"}},
		{name: "no kind", args: []string{"secret", "create", "x"}, stdin: testSecret, code: 2, errContain: []string{"--kind is required"}},
		{name: "missing file", args: []string{"secret", "create", "x", "--kind", "generic", "--from-file", keyFile + ".nope"}, code: 1,
			errContain: []string{"read the value of secret x from " + keyFile + ".nope"}},
		{name: "bad kind", args: []string{"secret", "create", "x", "--kind", "aws"}, stdin: testSecret, code: 1,
			errContain: []string{`error: create secret x: invalid request: secret x: kind "aws": want one of`}},
		{name: "taken", args: []string{"secret", "create", "ant", "--kind", "generic"}, stdin: testSecret, code: 1,
			errContain: []string{"a secret named ant exists", "hint: a secret with that name exists: delete it first"}},
		{name: "list", args: []string{"secret", "list"}, setup: usedByProfile, contains: []string{
			"NAME  KIND               BASE URL                   USERNAME        HOST        USED BY  ID",
			"ant   anthropic_api_key  https://api.anthropic.com  -               -           rev      ",
			"gh    git_https          -                          x-access-token  github.com  -        "}},
		{name: "list json", args: []string{"secret", "list", "--json"}, contains: []string{`"items": [`, `"kind": "openai_api_key"`}},
		{name: "delete", args: []string{"secret", "delete", "oai"}, contains: []string{"deleted secret oai ("}},
		{name: "delete used", args: []string{"secret", "delete", "ant"}, setup: usedByProfile, contains: []string{"deleted secret ant ("},
			errContain: []string{"warning: profiles rev name it: their tasks cannot start until a secret named ant exists again " +
				"(`engrams secret create ant --kind anthropic_api_key`)"}},
		{name: "delete unknown", args: []string{"secret", "delete", "nope"}, code: 1,
			errContain: []string{`secret "nope": not found`, "hint: list secrets with `engrams secret list`"}},
	})
}

// TestSecretNeverShown checks no command prints a secret's value.
func TestSecretNeverShown(t *testing.T) {
	t.Parallel()
	srv := newAgentServer(t)
	for _, args := range [][]string{
		{"secret", "create", "k", "--kind", "generic"}, {"secret", "list"}, {"secret", "list", "--json"},
		{"profile", "create", "p", "--image", "py", "--harness", "claude-code", "--credential", "ant", "--json"},
		{"profile", "show", "p"}, {"secret", "delete", "k", "--json"},
	} {
		got := run(t, srv.Server, nil, testSecret, args...)
		if got.code != 0 || strings.Contains(got.stdout+got.stderr, testSecret) {
			t.Errorf("%v: %+v", args, got)
		}
	}
}
