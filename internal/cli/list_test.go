package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/clienttest"
)

// listCase is one list command: how to run it and the API route its
// items come from.
type listCase struct {
	args []string // after "--json"
	path string   // the API path it reads
}

// listCases holds every list command of the tree, by command path.
var listCases = map[string]listCase{
	"engrams session list":        {args: []string{"session", "list"}, path: "/v1/sessions"},
	"engrams session outbox list": {args: []string{"session", "outbox", "list", "s1"}, path: "/v1/sessions/s1/outbox"},
	"engrams image list":          {args: []string{"image", "list"}, path: "/v1/images"},
	"engrams image jobs":          {args: []string{"image", "jobs", "web"}, path: "/v1/images/web/jobs"},
	"engrams task list":           {args: []string{"task", "list"}, path: "/v1/tasks"},
	"engrams host list":           {args: []string{"host", "list"}, path: "/v1/hosts"},
	"engrams token list":          {args: []string{"token", "list"}, path: "/v1/tokens"},
	"engrams member list":         {args: []string{"member", "list"}, path: "/v1/members"},
	"engrams identity list":       {args: []string{"identity", "list"}, path: "/v1/me/identities"},
	"engrams profile list":        {args: []string{"profile", "list"}, path: "/v1/profiles"},
	"engrams harness list":        {args: []string{"harness", "list"}, path: "/v1/harnesses"},
	"engrams secret list":         {args: []string{"secret", "list"}, path: "/v1/secrets"},
	"engrams automation list":     {args: []string{"automation", "list"}, path: "/v1/automations"},
	"engrams automation runs":     {args: []string{"automation", "runs", "nightly"}, path: "/v1/automations/nightly/runs"},
	"engrams integration list":    {args: []string{"integration", "list"}, path: "/v1/integrations"},
}

// isList reports whether cmd lists things: it is called list, or its
// summary starts with "List".
func isList(cmd *cobra.Command) bool {
	return cmd.Name() == "list" || strings.HasPrefix(cmd.Short, "List ")
}

func listCommands(cmd *cobra.Command) []string {
	var out []string
	if isList(cmd) {
		out = append(out, cmd.CommandPath())
	}
	for _, c := range cmd.Commands() {
		out = append(out, listCommands(c)...)
	}
	return out
}

// TestListCommandsAreCovered fails when a list command has no case in
// listCases (so TestListJSON checks its shape) or a case names no command.
func TestListCommandsAreCovered(t *testing.T) {
	t.Parallel()
	got := listCommands(cli.NewRoot(cli.Options{}))
	for _, p := range got {
		if _, ok := listCases[p]; !ok {
			t.Errorf("list command %q has no case in listCases", p)
		}
	}
	for p := range listCases {
		if !slices.Contains(got, p) {
			t.Errorf("listCases names %q, which is not a list command", p)
		}
	}
}

// listServer answers one list route: with no items (the field absent, as
// an older server sending null would) or with one item (and a next cursor
// where --limit stops the list).
func listServer(t *testing.T, lc listCase, full bool) *clienttest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != lc.path {
			http.Error(w, `{"error":{"code":"not_found","message":"no such route"}}`, http.StatusNotFound)
			return
		}
		body := map[string]any{}
		if full {
			body["items"] = []map[string]any{{"id": "x1", "name": "x1"}}
			if r.URL.Query().Get("limit") == "20" { // automation runs stops at --limit
				body["next_cursor"] = "c2"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(ts.Close)
	return &clienttest.Server{URL: ts.URL}
}

// TestListJSON checks every list command's --json prints
// {"items": [...], "next_cursor": "..."}: items [] (never null) when empty.
func TestListJSON(t *testing.T) {
	t.Parallel()
	for name, lc := range listCases {
		for _, full := range []bool{false, true} {
			t.Run(name+map[bool]string{false: " empty", true: " one"}[full], func(t *testing.T) {
				t.Parallel()
				got := run(t, listServer(t, lc, full), nil, "", append([]string{"--json"}, lc.args...)...)
				if got.code != 0 {
					t.Fatalf("exit code %d\nstdout: %s\nstderr: %s", got.code, got.stdout, got.stderr)
				}
				var out map[string]json.RawMessage
				if err := json.Unmarshal([]byte(got.stdout), &out); err != nil {
					t.Fatalf("not a JSON object: %v\n%s", err, got.stdout)
				}
				if len(out) != 2 || out["items"] == nil || out["next_cursor"] == nil {
					t.Fatalf("want exactly items and next_cursor, got:\n%s", got.stdout)
				}
				var items []map[string]any
				if err := json.Unmarshal(out["items"], &items); err != nil || items == nil {
					t.Fatalf("items is not an array (%v): %s", err, out["items"])
				}
				want := 0
				if full {
					want = 1
				}
				if len(items) != want {
					t.Errorf("%d items, want %d:\n%s", len(items), want, got.stdout)
				}
				var next string
				if err := json.Unmarshal(out["next_cursor"], &next); err != nil {
					t.Errorf("next_cursor is not a string: %s", out["next_cursor"])
				}
				if wantNext := map[bool]string{true: "c2"}[full && name == "engrams automation runs"]; next != wantNext {
					t.Errorf("next_cursor %q, want %q", next, wantNext)
				}
			})
		}
	}
}
