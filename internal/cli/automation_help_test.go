package cli_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/clienttest"
)

// TestDocumentedDefinitionsAreValid: the definition `automation --help`
// shows and the README's webhook definition pass the server's checks.
func TestDocumentedDefinitionsAreValid(t *testing.T) {
	t.Parallel()
	help := run(t, &clienttest.Server{URL: "http://127.0.0.1:1"}, nil, "", "automation", "--help").stdout
	_, def, ok := strings.Cut(help, "nightly.yaml (profile web must exist: engrams profile list):\n\n")
	def, _, ok2 := strings.Cut(def, "\nTriggers:")
	if !ok || !ok2 {
		t.Fatalf("automation --help shows no definition:\n%s", help)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, hello, ok := strings.Cut(string(readme), "cat > hello.yaml <<'YAML'\n")
	hello, _, ok2 = strings.Cut(hello, "\nYAML\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no hello.yaml definition")
	}
	for name, text := range map[string]string{"automation --help": dedent(def), "README.md": hello} {
		d, err := automations.DecodeDefinition([]byte(text))
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, text)
			continue
		}
		if probs := automations.Validate(d, automations.DefaultLimits()); len(probs) > 0 {
			t.Errorf("%s: %v", name, probs)
		}
	}
}

func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	return strings.Join(lines, "\n")
}

// TestWebhookURLIsWhole: the webhook URL shown is whole (the coordinator's
// URL and the hook's path) also when the URL comes from the config file.
func TestWebhookURLIsWhole(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"a1","name":"hello","version":1,"trigger":"webhook","enabled":true,"hook_url":"/v1/hooks/hello","definition":{}}`)
	}))
	t.Cleanup(ts.Close)
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"url":"`+ts.URL+`","token":"`+clienttest.Token+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got := run(t, &clienttest.Server{URL: ts.URL}, env{"ENGRAMS_URL": "", "ENGRAMS_TOKEN": "", "ENGRAMS_CONFIG": cfg}, "", "automation", "get", "hello")
	if want := "webhook:  POST " + ts.URL + "/v1/hooks/hello\n"; got.code != 0 || !strings.Contains(got.stdout, want) {
		t.Errorf("exit %d, stdout:\n%s\nwant a line %q (stderr %s)", got.code, got.stdout, want, got.stderr)
	}
}
