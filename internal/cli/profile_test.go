package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/clienttest"
	"github.com/engrams/engrams/internal/domain"
)

var revArgs = []string{"profile", "create", "rev", "--image", "py", "--harness", "claude-code", "--credential", "ant",
	"--repo", "https://github.com/acme/app.git#main", "--repo-credential", "app=gh", "--repo-push", "app", "--repo-api", "app", "--repo", "https://gitlab.com/acme/lib=libs",
	"--env", "LOG_LEVEL=debug", "--egress", "pypi.org", "--skill", "review", "--app", "web:8080", "--idle-timeout", "15m"}

// revReceipt is `profile show rev` after revArgs, the id and time masked.
const revReceipt = `Profile rev (version 1, id ID, updated TIME)

Image:         py  reg/python:3.12  sha256:0123456789ab
Harness:       claude-code@2.1.0  (claude-stream-json, sha256:cc0011223344)
Model:         sonnet (the harness's default)
Mode:          bypassPermissions (the harness's default)
Idle timeout:  15m0s
Used by:       owners and admins only

What a task can do:
  - runs as root in its own VM, shared with nothing else
  - runs any command in that VM, with the harness acting on its own
  - reads and writes its own clones of the repositories (app, libs); git logins stay outside the guest
  - through the credential broker, git-fetches app, pushes to app, calls the host's REST API for app; nothing else with their credentials
  - uses the model keys without seeing them: the model gateway adds them to its requests
  - reaches only the hosts this receipt lists, each as its line says: no other name resolves and no other connection leaves the VM (enforced on qemu; firecracker guests get no network yet; the process backend enforces nothing)

Hosts:
  - api.anthropic.com:443: reachable, enforced on qemu (model provider of credential ant (anthropic_api_key)): only through the model gateway, which adds the key outside the guest and forwards to https://api.anthropic.com; also directly, through the egress proxy (TLS passed through, no key added)
  - github.com, api.github.com: reachable, enforced on qemu (host of credential gh (git_https)): through the egress proxy to the coordinator's credential broker, which terminates TLS (the guest trusts the deployment's CA, which signs only the hosts the broker serves), verifies the upstream's certificate, drops what credential the guest sent and adds gh's secret in place of the session's placeholder; a placeholder anywhere else is refused
  - pypi.org: reachable, enforced on qemu (listed in the profile's egress): directly, through the egress proxy: the filtering resolver answers the name, the proxy checks it against the SNI or Host, resolves it itself and dials only an address it checked (never a private or loopback one), and passes TLS through untouched (the guest verifies the server; no credential is added)

Enforcement:
  - qemu: enforced: in the VM's network path: the VM's only network device is a TAP in a network namespace of its own with no route out; its TCP goes to the host's egress proxy and its DNS to the host's filtering resolver, everything else (other UDP, ICMP, IPv6) is dropped; names not listed here and private, loopback and link-local addresses are refused
  - firecracker: enforced: no network at all: the firecracker backend attaches no network device yet, so its guests reach none of the hosts this receipt lists (the same per-VM namespace around Firecracker's TAP device is the plan)
  - process: NOT enforced: nothing is enforced: the guest is a process on the host's own network; HTTP_PROXY and HTTPS_PROXY point its tools at an egress proxy on the host's loopback serving this allowlist, and a tool that ignores them reaches whatever the host can

Credentials:
  - ant (anthropic_api_key, never in the guest on qemu, firecracker, process): gateway-injected: the guest sees a placeholder in ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL points at the gateway; the model gateway swaps in the real key for requests to https://api.anthropic.com
  - gh (git_https, never in the guest on qemu, firecracker, process): used by the coordinator to clone app, never in the guest; the guest's git requests to github.com carry a placeholder, which the credential broker swaps for it there and nowhere else (on qemu), for git fetches of app, pushes to app, and REST API calls for app (reads; with push, pull requests, issues, comments, statuses, check runs, git refs and contents); every other request there is refused

Repos:
  - app: https://github.com/acme/app.git at main, cloned with gh; the guest may push; the guest may call its REST API
  - libs: https://gitlab.com/acme/lib at the default branch

Env (names; values in --json):
  - LOG_LEVEL

Skills:
  - review (not mounted yet)

Apps:
  - web on port 8080 (not exposed yet)
`

var maskRE = regexp.MustCompile(`id [0-9a-f-]{36}, updated [0-9-]+ [0-9:]+`)

func mask(s string) string { return maskRE.ReplaceAllString(s, "id ID, updated TIME") }

func withRev(t *testing.T, srv *clienttest.Server) {
	if got := run(t, srv, nil, "", revArgs...); got.code != 0 {
		t.Fatalf("profile create: %+v", got)
	}
}

func TestProfileCreateAndShow(t *testing.T) {
	t.Parallel()
	srv := newAgentServer(t)
	got := run(t, srv.Server, nil, "", revArgs...)
	if got.code != 0 || mask(got.stdout) != "created profile rev (version 1)\n\n"+revReceipt {
		t.Fatalf("create: code %d\n%s\nwant:\ncreated profile rev (version 1)\n\n%s\nstderr: %s", got.code, mask(got.stdout), revReceipt, got.stderr)
	}
	if got = run(t, srv.Server, nil, "", "profile", "show", "rev"); got.code != 0 || mask(got.stdout) != revReceipt {
		t.Errorf("show:\n%s\nwant:\n%s", mask(got.stdout), revReceipt)
	}
	got = run(t, srv.Server, nil, "", "profile", "show", "--json", "rev")
	var r apiv1.ProfileResponse
	if err := json.Unmarshal([]byte(got.stdout), &r); err != nil || r.Profile.Spec.Env["LOG_LEVEL"] != "debug" || r.Receipt.Repos[1].Path != "libs" ||
		r.Receipt.IdleTimeoutS != 900 || r.Profile.Spec.Repos[0].Ref != "main" || r.Profile.Spec.Apps[0].Port != 8080 {
		t.Errorf("show --json: %v\n%s", err, got.stdout)
	}
	// A secret it names is deleted: show says so first.
	run(t, srv.Server, nil, "", "secret", "delete", "gh")
	got = run(t, srv.Server, nil, "", "profile", "show", "rev")
	if want := "\nProblems (tasks cannot start until they are fixed):\n  - repos[0].credential: no secret \"gh\""; !strings.Contains(got.stdout, want) {
		t.Errorf("show with a deleted secret lacks %q:\n%s", want, got.stdout)
	}
}

func TestProfileCommands(t *testing.T) {
	t.Parallel()
	newSrv := func(t *testing.T) *clienttest.Server { return newAgentServer(t).Server }
	specFile := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(specFile, []byte(`{"image":"py","harness":"claude-code@2.1.0","model":"opus","credentials":["ant"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(badFile, []byte(`{"image":"py","harnes":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	runTable(t, newSrv, []cmdTest{
		{name: "create invalid", args: []string{"profile", "create", "bad", "--image", "nope", "--harness", "claude-code", "--credential", "oai", "--mode", "yolo"},
			code: 1, errContain: []string{
				"error: create profile bad: invalid request: profile bad has 4 problems:\n",
				"  - image \"nope\": no enabled image has that name",
				"  - mode \"yolo\": harness claude-code@2.1.0 offers bypassPermissions, plan\n",
				"  - credentials: secret oai is of kind openai_api_key; harness claude-code@2.1.0 needs anthropic_api_key\n",
				"  - harness claude-code@2.1.0 needs a credential of kind anthropic_api_key, or it cannot authenticate"}},
		{name: "create from file", args: []string{"profile", "create", "f", "--from-file", specFile, "--egress", "x.org"},
			contains: []string{"created profile f (version 1)", "Model:         opus\n", "Harness:       claude-code@2.1.0", "  - x.org: reachable, enforced on qemu (listed in the profile's egress)"}},
		{name: "create from stdin json", args: []string{"profile", "create", "s", "--from-file", "-", "--json"}, stdin: `{"image":"py","harness":"claude-code","credentials":["ant"]}`,
			contains: []string{`"profile": {`, `"receipt": {`, `"model": "sonnet"`}},
		{name: "create from bad file", args: []string{"profile", "create", "b", "--from-file", badFile}, code: 2, errContain: []string{`unknown field "harnes"`}},
		{name: "unknown repo path", args: []string{"profile", "create", "x", "--image", "py", "--harness", "claude-code", "--repo", "https://h.io/a/b.git", "--repo-credential", "c=gh"},
			code: 2, errContain: []string{`--repo-credential "c=gh": no repo has path c (repos: b)`}},
		{name: "push for an unknown repo path", args: []string{"profile", "create", "x", "--image", "py", "--harness", "claude-code", "--repo", "https://h.io/a/b.git", "--repo-push", "c"},
			code: 2, errContain: []string{`--repo-push "c": no repo has path c (repos: b)`}},
		{name: "api neither on nor off", args: []string{"profile", "create", "x", "--image", "py", "--harness", "claude-code", "--repo", "https://h.io/a/b.git", "--repo-api", "b=maybe"},
			code: 2, errContain: []string{`--repo-api "b=maybe": want PATH, or PATH=false to take it away`}},
		{name: "bad app", args: []string{"profile", "create", "x", "--app", "web"}, code: 2, errContain: []string{`--app "web": want NAME:PORT`}},
		{name: "bad repo", args: []string{"profile", "create", "x", "--repo", "https://h.io/a="}, code: 2, errContain: []string{"the path after = is empty"}},
		{name: "taken", args: revArgs, setup: withRev, code: 1, errContain: []string{"a profile named rev exists; change it with `engrams profile edit rev`"}},
		{name: "list", args: []string{"profile", "list"}, setup: withRev, contains: []string{
			"NAME  IMAGE  HARNESS      MODEL  MODE  REPOS     CREDENTIALS  VERSION  UPDATED\n",
			"rev   py     claude-code  -      -     app,libs  ant          1        "}},
		{name: "list json", args: []string{"profile", "list", "--json"}, setup: withRev, contains: []string{`"items": [`, `"LOG_LEVEL": "debug"`}},
		{name: "list empty json", args: []string{"profile", "list", "--json"}, stdout: "{\n  \"items\": [],\n  \"next_cursor\": \"\"\n}\n"},
		{name: "edit", args: []string{"profile", "edit", "rev", "--model", "opus", "--egress", "", "--repo-credential", "app=", "--repo-push", "app=false", "--repo-api", "app=FALSE"}, setup: withRev,
			contains: []string{"updated profile rev to version 2\n", "Model:         opus\n", "\nCredentials:\n  - ant (anthropic_api_key, never in the guest on qemu, firecracker, process): gateway-injected",
				"  - app: https://github.com/acme/app.git at main\n", "\nHosts:\n  - api.anthropic.com:443: reachable, enforced on qemu (model provider of credential ant (anthropic_api_key)): " +
					"only through the model gateway, which adds the key outside the guest and forwards to https://api.anthropic.com; also directly, through the egress proxy (TLS passed through, no key added)\n\nEnforcement:\n  - qemu: enforced: "}},
		{name: "edit repo credential host", args: []string{"profile", "edit", "rev", "--repo-credential", "libs=gh"}, setup: withRev, code: 1,
			errContain: []string{"repos[1].credential: secret gh is for github.com, the repo is on gitlab.com"}},
		{name: "edit keeps the rest", args: []string{"profile", "edit", "rev", "--mode", "plan", "--json"}, setup: withRev,
			contains: []string{`"version": 2`, `"mode": "plan"`, `"egress": [`, `"pypi.org"`, `"LOG_LEVEL": "debug"`}},
		{name: "edit nothing", args: []string{"profile", "edit", "rev", "--json"}, setup: withRev, code: 2, errContain: []string{"nothing to change"}},
		{name: "edit invalid", args: []string{"profile", "edit", "rev", "--credential", ""}, setup: withRev, code: 1,
			errContain: []string{"needs a credential of kind anthropic_api_key"}},
		{name: "edit unknown", args: []string{"profile", "edit", "nope", "--model", "x"}, code: 1,
			errContain: []string{`profile "nope": not found`, "hint: list profiles with `engrams profile list`"}},
		{name: "show unknown", args: []string{"profile", "show", "nope"}, code: 1, errContain: []string{"hint: list profiles"}},
		{name: "delete", args: []string{"profile", "delete", "rev"}, setup: withRev, contains: []string{"deleted profile rev ("}},
	})
}

func TestProfileGrants(t *testing.T) {
	t.Parallel()
	srv := newAgentServer(t)
	withRev(t, srv.Server)
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"profile", "grant", "rev", "everyone", "group:eng"}, 0, "profile rev (version 2) may be used by: everyone, group:eng\n"},
		{[]string{"profile", "grant", "rev", "group:eng"}, 0, "profile rev (version 3) may be used by: everyone, group:eng\n"},
		{[]string{"profile", "revoke", "rev", "everyone"}, 0, "profile rev (version 4) may be used by: group:eng\n"},
		{[]string{"profile", "revoke", "rev", "everyone"}, 2, ""},
		{[]string{"profile", "grant", "rev", "root"}, 2, ""},
		{[]string{"profile", "grant", "rev", "user:u-nobody"}, 1, ""},
		{[]string{"member", "set-groups", string(domain.FirstOwner), "eng", "oncall"}, 0, "- is in: eng, oncall\n"},
		{[]string{"member", "set-groups", string(domain.FirstOwner)}, 2, ""},
		{[]string{"member", "set-groups", string(domain.FirstOwner), "--none"}, 0, "- is in: -\n"},
	} {
		got := run(t, srv.Server, nil, "", c.args...)
		if got.code != c.code || (c.out != "" && got.stdout != c.out) {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want code %d, %q", c.args, got.code, got.stdout, got.stderr, c.code, c.out)
		}
	}
	got := run(t, srv.Server, nil, "", "profile", "show", "rev")
	if !strings.Contains(got.stdout, "Used by:       group:eng\n") {
		t.Errorf("show after the grants:\n%s", got.stdout)
	}
}
