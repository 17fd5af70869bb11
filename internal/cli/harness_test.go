package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/clienttest"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
)

// tokenStore admits clienttest.Token; the API's other store methods are
// not used by the agent routes.
type tokenStore struct {
	api.FleetStore
	api.AccessStore
}

func (tokenStore) TokenByHash(_ context.Context, hash string) (domain.Token, error) {
	if hash == coordinator.HashToken(clienttest.Token) {
		return domain.Token{ID: "t1", Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner}, nil
	}
	return domain.Token{}, store.ErrNotFound
}

func (tokenStore) TouchToken(context.Context, string, time.Time) error { return nil }

func (tokenStore) GetUser(context.Context, domain.UserID) (domain.User, error) {
	return domain.User{ID: domain.FirstOwner, Name: "owner", FleetOperator: true}, nil
}

func (tokenStore) GetMember(context.Context, domain.OrgID, domain.UserID) (domain.Member, error) {
	return domain.Member{OrgID: domain.FirstOrg, User: domain.User{ID: domain.FirstOwner}, Role: domain.RoleOwner}, nil
}

// SetMemberGroups takes any groups: the API answers with what it set.
func (tokenStore) SetMemberGroups(context.Context, domain.OrgID, domain.UserID, []string) error {
	return nil
}

// agentServer is the real API over a coordinator with SQLite, a secrets
// key and a harness builder. It holds image py (glibc), harness
// claude-code@2.1.0 (needs an Anthropic key), and secrets ant (Anthropic),
// gh (git, github.com) and oai (OpenAI).
type agentServer struct {
	*clienttest.Server
	p  *server.Parts
	st store.Store
}

func newAgentServer(t *testing.T) *agentServer {
	t.Helper()
	ctx := context.Background()
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testutil.SkipOrFail(t, "mkfs.erofs not found (scripts/install-deps.sh installs erofs-utils): %v", err)
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	b, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: t.TempDir()}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := localdir.New(localdir.Config{Dir: t.TempDir()}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.Close)
	p, err := server.Assemble(server.Config{ReplicaID: "r1", Harnesses: harnessreg.Config{WorkDir: t.TempDir()}},
		server.Deps{Store: st, Secrets: sealer, HarnessBuilder: b, HarnessChunks: cs}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deps := p.APIDeps(st, nil)
	deps.Fleet, deps.Access = tokenStore{}, tokenStore{}
	ts := httptest.NewServer(api.New(api.Config{}, deps))
	t.Cleanup(ts.Close)
	s := &agentServer{Server: &clienttest.Server{URL: ts.URL}, p: p, st: st}
	s.seed(t)
	return s
}

func (s *agentServer) seed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := s.st.CreateImage(ctx, domain.Image{ID: "img-py", Org: domain.FirstOrg, Name: "py", Ref: "reg/python:3.12", Digest: "sha256:0123456789abcdef",
		Config: json.RawMessage(`{"libc":"glibc"}`), Manifests: json.RawMessage(`{"rootfs":{}}`), BaseID: "b"}); err != nil {
		t.Fatal(err)
	}
	d := guestapi.HarnessDescriptor{Format: 1, Name: "claude-code", Version: "2.1.0", Entrypoint: []string{"bin/claude"},
		Protocol: guestapi.HarnessProtocolClaudeStreamJSON, Models: []string{"sonnet", "opus", guestapi.AnyModel}, Modes: []string{"bypassPermissions", "plan"},
		Credentials: []guestapi.HarnessCredential{{Kind: "anthropic_api_key", Env: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"}},
		Hosts:       []string{"api.anthropic.com:443"}, Requires: guestapi.HarnessRequires{Libc: guestapi.LibcGlibc, GlibcMin: "2.17"}}
	desc, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.PutHarness(ctx, domain.Harness{ID: "h-cc", Name: d.Name, Version: d.Version, Descriptor: desc,
		Manifest: json.RawMessage(`{"version":2,"chunk_size":4194304,"size":188743680,"chunks":[]}`), Digest: "sha256:cc00112233445566",
		Builtin: true, CreatedAt: clienttest.BaseTime()}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []secrets.SecretRequest{{Name: "ant", Kind: "anthropic_api_key"}, {Name: "oai", Kind: "openai_api_key"},
		{Name: "gh", Kind: "git_https", Meta: apiv1SecretMeta("x-access-token", "github.com")}} {
		r.Org, r.Value = domain.FirstOrg, []byte(testSecret)
		if _, err := s.p.Vault.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

const testSecret = "sk-test-s3cret-never-shown"

// writeHarnessDir makes a custom harness directory named name.
func writeHarnessDir(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	desc := `{"format":1,"name":"` + name + `","version":"0.3","entrypoint":["bin/agent"],"protocol":"shell","models":["m1"],"modes":[],` +
		`"credentials":[],"hosts":[],"requires":{"libc":"none"}}`
	for p, body := range map[string]string{"harness.json": desc, "bin/agent": "#!/bin/sh\necho hi\n", "lib/data.txt": "data\n"} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../lib/data.txt", filepath.Join(dir, "bin", "data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHarnessCommands(t *testing.T) {
	t.Parallel()
	newSrv := func(t *testing.T) *clienttest.Server { return newAgentServer(t).Server }
	built := func(t *testing.T, srv *clienttest.Server) {
		if got := run(t, srv, nil, "", "harness", "build", "shell"); got.code != 0 {
			t.Fatalf("build shell: %+v", got)
		}
	}
	good := writeHarnessDir(t, "my-agent")
	escaping := writeHarnessDir(t, "escaper")
	if err := os.Symlink("../../etc", filepath.Join(escaping, "bin", "etc")); err != nil {
		t.Fatal(err)
	}
	badDesc := writeHarnessDir(t, "Bad Name")
	runTable(t, newSrv, []cmdTest{
		{name: "build", args: []string{"harness", "build", "shell"},
			contains:   []string{"harness shell@1 is registered (sha256:", "KiB, built-in)\nname it in a profile with --harness shell@1\n"},
			errContain: []string{"building shell@latest …\n"}},
		{name: "build json", args: []string{"harness", "build", "--json", "shell", "--version", "1"},
			contains: []string{`"name": "shell"`, `"builtin": true`, `"protocol": "shell"`}, errContain: []string{"building shell@1 …"}},
		{name: "build unknown", args: []string{"harness", "build", "aider"}, code: 1, errContain: []string{
			`error: build harness aider@latest: invalid request: "aider" is not a built-in harness: built in are claude-code, codex, shell`}},
		{name: "build bad libc", args: []string{"harness", "build", "shell", "--libc", "musl"}, code: 1,
			errContain: []string{"building shell@latest (musl) …", "only claude-code has builds to choose from"}},
		{name: "build no name", args: []string{"harness", "build"}, code: 2, errContain: []string{"hint: see `engrams harness build --help`"}},
		{name: "add", args: []string{"harness", "add", good},
			contains:   []string{"harness my-agent@0.3 is registered (sha256:", "custom)\n"},
			errContain: []string{"adding my-agent@0.3 from " + good + " (3 files, "}},
		{name: "add escaping symlink", args: []string{"harness", "add", escaping}, code: 1,
			errContain: []string{"is a symlink to ../../etc, outside " + escaping}},
		{name: "add bad descriptor", args: []string{"harness", "add", badDesc}, code: 1, errContain: []string{`name "Bad Name": want 1-64 of a-z`}},
		{name: "add missing dir", args: []string{"harness", "add", filepath.Join(good, "nope")}, code: 2, errContain: []string{"no such file or directory"}},
		{name: "list", args: []string{"harness", "list"}, setup: built, contains: []string{
			"NAME         VERSION  PROTOCOL            LIBC   KIND      SIZE       DIGEST               CREATED\n",
			"claude-code  2.1.0    claude-stream-json  glibc  built-in  180.0 MiB  sha256:cc0011223344  2026-11-30 06:00:00\n",
			"shell        1        shell               none   built-in"}},
		{name: "list json", args: []string{"harness", "list", "--json"}, contains: []string{`"items": [`, `"name": "claude-code"`}},
		{name: "show", args: []string{"harness", "show", "claude-code"}, stdout: "" +
			"Name:         claude-code\n" +
			"Version:      2.1.0\n" +
			"ID:           h-cc\n" +
			"Kind:         built-in\n" +
			"Protocol:     claude-stream-json\n" +
			"Entrypoint:   bin/claude\n" +
			"Models:       sonnet (default), opus, any other (*)\n" +
			"Modes:        bypassPermissions (default), plan\n" +
			"Credentials:  anthropic_api_key (in ANTHROPIC_API_KEY; base URL in ANTHROPIC_BASE_URL)\n" +
			"Hosts:        api.anthropic.com:443\n" +
			"Requires:     glibc 2.17 or newer\n" +
			"Digest:       sha256:cc00112233445566\n" +
			"Size:         180.0 MiB\n" +
			"Created:      2026-11-30 06:00:00\n"},
		{name: "show version", args: []string{"harness", "show", "shell@1"}, setup: built, contains: []string{"Requires:     nothing (static programs: any image)\n"}},
		{name: "show unknown", args: []string{"harness", "show", "claude-code@9"}, code: 1, errContain: []string{
			"error: show harness claude-code@9: harness claude-code@9: not found (HTTP 404 not_found)",
			"hint: list registered harnesses with `engrams harness list`"}},
	})
}

// TestHarnessBuildOnTerminal checks the spinner on a terminal: drawn on
// one line, finished with the time taken and a newline.
func TestHarnessBuildOnTerminal(t *testing.T) {
	t.Parallel()
	srv := newAgentServer(t)
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	var out strings.Builder
	root := cli.NewRoot(cli.Options{
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: stderr,
		Getenv: func(k string) string {
			return map[string]string{"ENGRAMS_URL": srv.URL, "ENGRAMS_TOKEN": clienttest.Token, "ENGRAMS_CONFIG": filepath.Join(t.TempDir(), "none")}[k]
		},
		Now:        clienttest.BaseTime,
		IsTerminal: func(int) bool { return true },
	})
	root.SetArgs([]string{"harness", "build", "shell"})
	if code := cli.Execute(t.Context(), root); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	got, _ := os.ReadFile(stderr.Name())
	if !strings.HasPrefix(string(got), "\rbuilding shell@latest … | 0s\x1b[K") || !strings.HasSuffix(string(got), "\rbuilding shell@latest … 0s\x1b[K\n") {
		t.Errorf("terminal output %q", got)
	}
	if !strings.Contains(out.String(), "harness shell@1 is registered") {
		t.Errorf("stdout %q", out.String())
	}
}

// noHosts is a fleet without hosts: the agent routes never reach one.
type noHosts struct{}

func (noHosts) Transport(context.Context, domain.HostID) (http.RoundTripper, error) {
	return nil, errors.New("no hosts in this test")
}

func apiv1SecretMeta(user, host string) apiv1.SecretMeta {
	return apiv1.SecretMeta{Username: user, Host: host}
}

// AppendAudit keeps nothing: these tests do not read the audit log.
func (tokenStore) AppendAudit(context.Context, domain.AuditEvent) error { return nil }
