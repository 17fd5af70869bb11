package profiles

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
)

// seedAgents seeds what coordinatortest.SeedAgents says, secrets through
// the vault.
func seedAgents(t *testing.T, e *agentEnv) {
	t.Helper()
	coordinatortest.SeedAgents(t, e.st, func(name, kind string, meta apiv1.SecretMeta, value []byte) error {
		_, err := e.vault.Create(context.Background(), secrets.SecretRequest{Org: domain.FirstOrg, Name: name, Kind: kind, Meta: meta, Value: value})
		return err
	})
}

func fullSpec() apiv1.ProfileSpec {
	return apiv1.ProfileSpec{
		Image: "py", Harness: "claude-code", Credentials: []string{"ant"},
		Repos: []apiv1.ProfileRepo{{URL: "https://github.com/acme/app.git", Ref: "main", Credential: "gh", Push: true, API: true}, {URL: "https://gitlab.com/acme/lib/"}},
		Env:   map[string]string{"LOG_LEVEL": "debug"}, Egress: []string{"pypi.org"}, Skills: []string{"review"},
		Apps: []apiv1.ProfileApp{{Name: "web", Port: 8080}}, IdleTimeoutS: 900,
	}
}

func TestCreateProfileReceipt(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	seedAgents(t, e)
	ctx := context.Background()
	v, err := e.co.CreateProfile(ctx, domain.FirstOrg, "reviewer", fullSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Profile.Version != 1 || v.Spec.Repos[0].Path != "app" || v.Spec.Repos[1].Path != "lib" || len(v.Problems) != 0 {
		t.Fatalf("created %+v", v)
	}
	var stored apiv1.ProfileSpec
	_ = json.Unmarshal(v.Profile.Spec, &stored)
	if stored.Repos[1].Path != "lib" {
		t.Errorf("stored spec without derived repo paths: %+v", stored)
	}
	r := v.Receipt
	vms, every := []string{"qemu"}, []string{"qemu", "firecracker", "process"}
	ant, _ := e.st.GetSecretByName(ctx, domain.FirstOrg, "ant")
	gh, _ := e.st.GetSecretByName(ctx, domain.FirstOrg, "gh")
	want := apiv1.Receipt{
		Image:   apiv1.ReceiptImage{ID: "img-py", Name: "py", Ref: "reg/python:3.12", Digest: "sha256:py", Libc: "glibc"},
		Harness: apiv1.ReceiptHarness{ID: "h-claude-code", Name: "claude-code", Version: "2.1.0", Digest: "sha256:claude-code", Protocol: guestapi.HarnessProtocolClaudeStreamJSON},
		Model:   "sonnet", Mode: "bypassPermissions",
		Credentials: []apiv1.ReceiptCredential{
			{Name: "ant", SecretID: string(ant.ID), Kind: "anthropic_api_key", Delivery: apiv1.DeliveryGateway, Env: "ANTHROPIC_API_KEY", EnforcedOn: every,
				Detail: "gateway-injected: the guest sees a placeholder in ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL points at the gateway; " +
					"the model gateway swaps in the real key for requests to https://api.anthropic.com"},
			{Name: "gh", SecretID: string(gh.ID), Kind: "git_https", Delivery: apiv1.DeliveryClone, EnforcedOn: every,
				Detail: "used by the coordinator to clone app, never in the guest; the guest's git requests to github.com carry a placeholder, " +
					"which the credential broker swaps for it there and nowhere else (on qemu), for git fetches of app, pushes to app, and REST API " +
					"calls for app (reads; with push, pull requests, issues, comments, statuses, check runs, git refs and contents); every other " +
					"request there is refused"},
		},
		Repos:  v.Spec.Repos,
		Env:    []string{"LOG_LEVEL"},
		Skills: []apiv1.ReceiptSkill{{Name: "review"}},
		Apps:   []apiv1.ReceiptApp{{Name: "web", Port: 8080}},
		Hosts: []apiv1.ReceiptHost{
			{Host: "api.anthropic.com:443", Why: "model provider of credential ant (anthropic_api_key)", Reachable: true, Via: apiv1.ViaGateway,
				Enforced: true, EnforcedOn: vms, Reason: "only through the model gateway, which adds the key outside the guest and forwards to " +
					"https://api.anthropic.com; also directly, through the egress proxy (TLS passed through, no key added)"},
			{Host: "github.com", Why: "host of credential gh (git_https)", Reachable: true, Via: apiv1.ViaBrokered, Enforced: true, EnforcedOn: vms,
				Reason: fmt.Sprintf(brokeredReason, "gh")},
			{Host: "api.github.com", Why: "host of credential gh (git_https)", Reachable: true, Via: apiv1.ViaBrokered, Enforced: true, EnforcedOn: vms,
				Reason: fmt.Sprintf(brokeredReason, "gh")},
			{Host: "pypi.org", Why: "listed in the profile's egress", Reachable: true, Via: apiv1.ViaProxy, Enforced: true, EnforcedOn: vms,
				Reason: viaProxyReason},
		},
		Enforcement: []apiv1.ReceiptEnforcement{
			{Backend: "qemu", Enforced: true, How: receiptEnforcement()[0].How},
			{Backend: "firecracker", Enforced: true, How: receiptEnforcement()[1].How},
			{Backend: "process", Enforced: false, How: receiptEnforcement()[2].How},
		},
		IdleTimeoutS: 900,
	}
	want.Powers = r.Powers
	if !reflect.DeepEqual(r, want) {
		g, _ := json.MarshalIndent(r, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("receipt:\n%s\nwant:\n%s", g, w)
	}
	powers := strings.Join(r.Powers, "\n")
	for _, s := range []string{"root in its own VM", "(app, lib)", "without seeing them", "reaches only the hosts this receipt lists",
		"through the credential broker, git-fetches app, pushes to app, calls the host's REST API for app; nothing else", "enforced on qemu; firecracker guests get no network yet; the process backend enforces nothing"} {
		if !strings.Contains(powers, s) {
			t.Errorf("powers lack %q:\n%s", s, powers)
		}
	}
	if _, err := e.co.CreateProfile(ctx, domain.FirstOrg, "reviewer", fullSpec(), nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("the same name again: %v, want a conflict", err)
	}
	secrets, _ := e.vault.List(ctx, domain.FirstOrg)
	for _, s := range secrets {
		if used := strings.Join(s.UsedBy, ","); (s.Secret.Name == "ant" || s.Secret.Name == "gh") != (used == "reviewer") {
			t.Errorf("secret %s used by %q", s.Secret.Name, used)
		}
	}
}

func TestProfileValidation(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	seedAgents(t, e)
	tests := []struct {
		name string
		spec func(*apiv1.ProfileSpec)
		want []string // each a problem; exactly these
	}{
		{"nothing", func(s *apiv1.ProfileSpec) { *s = apiv1.ProfileSpec{} }, []string{"image is required", "harness is required"}},
		{"unknown names", func(s *apiv1.ProfileSpec) { s.Image, s.Harness = "nope", "claude-code@9" }, []string{
			`image "nope": no enabled image`, "harness claude-code@9 is not registered"}},
		{"wrong libc", func(s *apiv1.ProfileSpec) { s.Image = "alp" }, []string{"harness claude-code@2.1.0 cannot run on image alp: harness incompatible with the image: it needs glibc, the image has musl"}},
		{"model and mode", func(s *apiv1.ProfileSpec) { s.Model, s.Mode = "gpt 5", "yolo" }, []string{
			`model "gpt 5": want at most 128 characters without spaces`, `mode "yolo": harness claude-code@2.1.0 offers bypassPermissions, plan`}},
		{"credentials", func(s *apiv1.ProfileSpec) { s.Credentials = []string{"oai", "ghost", "gen", "oai"} }, []string{
			"credentials: oai is listed twice", "secret oai is of kind openai_api_key; harness claude-code@2.1.0 needs anthropic_api_key",
			`credentials: no secret "ghost"`, "secret gen is of kind generic", "needs a credential of kind anthropic_api_key, or it cannot authenticate"}},
		{"two keys of a kind", func(s *apiv1.ProfileSpec) { s.Credentials = []string{"ant", "ant2"} }, []string{"ant and ant2 are both anthropic_api_key"}},
		{"no credentials for shell", func(s *apiv1.ProfileSpec) { s.Harness = "shell" }, []string{"harness shell@1 takes no credentials"}},
		{"repos", func(s *apiv1.ProfileSpec) {
			s.Repos = []apiv1.ProfileRepo{
				{URL: "git@github.com:acme/app.git"}, {URL: "https://tok@github.com/acme/x"}, {URL: "https://github.com/a/app", Ref: "a..b"},
				{URL: "https://github.com/b/app.git"}, {URL: "https://gitlab.com/c/d", Credential: "gh"}, {URL: "https://github.com/e/f", Credential: "ant"},
				{URL: "https://github.com/g/h", Path: "../h"},
			}
		}, []string{`repos[0]: url "git@github.com:acme/app.git": want an http or https URL`, `repos[1]: url "https://tok@github.com/acme/x" carries a login`,
			`repos[2]: ref "a..b"`, `repos[3]: path "app" is also repos[2]'s`, "repos[4].credential: secret gh is for github.com, the repo is on gitlab.com",
			"repos[5].credential: secret ant is of kind anthropic_api_key; a repo needs a git_https or github_app secret", `repos[6]: path "../h"`}},
		{"push and api without a brokered credential", func(s *apiv1.ProfileSpec) {
			s.Repos = []apiv1.ProfileRepo{{URL: "https://github.com/acme/app", Push: true}, {URL: "http://plain.test/a/b", Credential: "gh", API: true},
				{URL: "https://github.com/acme/x%20y", Path: "xy", Credential: "gh", Push: true}}
		}, []string{"repos[0]: push and api let the guest use the repo's credential through the broker: name one",
			"repos[1]: push and api are brokered for https URLs naming a host; http://plain.test/a/b is not one",
			"repos[2]: https://github.com/acme/x%20y: the broker serves repositories at a path of plain elements",
			"repos[1].credential: secret gh is for github.com, the repo is on plain.test"}},
		{"env", func(s *apiv1.ProfileSpec) {
			s.Env = map[string]string{"ANTHROPIC_BASE_URL": "x", "lower": "x", "ENGRAMS_SESSION_ID": "x"}
		}, []string{`env "lower"`, "env ENGRAMS_SESSION_ID: names starting with ENGRAMS_", "env ANTHROPIC_BASE_URL is the harness's credential variable"}},
		{"egress skills apps idle", func(s *apiv1.ProfileSpec) {
			s.Egress = []string{"pypi.org", "Bad_Host", "pypi.org", "x.org:99999"}
			s.Skills = []string{"ok", "Not OK"}
			s.Apps = []apiv1.ProfileApp{{Name: "web", Port: 0}, {Name: "web", Port: 80}, {Name: "api", Port: 80}}
			s.IdleTimeoutS = -5
		}, []string{`egress[1]: "Bad_Host"`, `egress[2] "pypi.org" is listed twice`, `egress[3]: "x.org:99999": port`, `skills[1] "Not OK"`,
			"apps[0] web: port 0", `apps[1]: name "web" is listed twice`, "apps[2] api: port 80 is listed twice", "idle_timeout_s -5"}},
		{"egress to blocked addresses", func(s *apiv1.ProfileSpec) {
			s.Egress = []string{"10.0.0.5", "[::1]:8080", "169.254.169.254:80", "8.8.8.8"}
		}, []string{`egress[0]: 10.0.0.5 is blocked: private 10.0.0.0/8`, `egress[1]: [::1]:8080 is blocked: loopback`,
			`egress[2]: 169.254.169.254:80 is blocked: link-local`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := fullSpec()
			tt.spec(&spec)
			_, err := e.co.CreateProfile(context.Background(), domain.FirstOrg, "p-"+strings.ReplaceAll(tt.name, " ", "-"), spec, nil)
			if !errors.Is(err, domain.ErrInvalid) {
				t.Fatalf("%v, want domain.ErrInvalid", err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("lacks %q:\n%s", w, msg)
				}
			}
			if n := len(tt.want); n > 1 && !strings.Contains(msg, "has "+strconv.Itoa(n)+" problems:\n  - ") {
				t.Errorf("want %d problems listed:\n%s", n, msg)
			}
		})
	}
	if ps, _ := e.co.Profiles(context.Background(), curatorOfFirstOrg); len(ps) != 0 {
		t.Errorf("invalid profiles were stored: %+v", ps)
	}
}

func TestProfileChoices(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	seedAgents(t, e)
	ctx := context.Background()
	tests := []struct {
		name       string
		spec       apiv1.ProfileSpec
		model      string
		mode       string
		wantDigest string
	}{
		{"any model", apiv1.ProfileSpec{Image: "py", Harness: "claude-code@2.1.0", Model: "claude-x-99", Mode: "plan", Credentials: []string{"ant"}}, "claude-x-99", "plan", "sha256:py"},
		{"image being enabled", apiv1.ProfileSpec{Image: "new", Harness: "claude-code", Credentials: []string{"ant"}}, "sonnet", "bypassPermissions", ""},
		{"static harness on musl", apiv1.ProfileSpec{Image: "alp", Harness: "shell"}, "", "", "sha256:alp"},
	}
	for i, tt := range tests {
		v, err := e.co.CreateProfile(ctx, domain.FirstOrg, "c"+strconv.Itoa(i), tt.spec, nil)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if r := v.Receipt; r.Model != tt.model || r.Mode != tt.mode || r.Image.Digest != tt.wantDigest {
			t.Errorf("%s: model %q mode %q digest %q", tt.name, r.Model, r.Mode, r.Image.Digest)
		}
	}
}

func TestEditDeleteResolveProfile(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	seedAgents(t, e)
	ctx := context.Background()
	v, err := e.co.CreateProfile(ctx, domain.FirstOrg, "rev", fullSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := v.Spec
	spec.Model = "opus"
	v2, err := e.co.UpdateProfile(ctx, domain.FirstOrg, "rev", ProfileEdit{Spec: spec, Version: 1})
	if err != nil || v2.Profile.Version != 2 || v2.Receipt.Model != "opus" {
		t.Fatalf("edit: %+v %v", v2.Profile, err)
	}
	_, err = e.co.UpdateProfile(ctx, domain.FirstOrg, "rev", ProfileEdit{Spec: spec, Version: 1})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "changed since version 1 (it is at version 2 now)") {
		t.Errorf("a stale edit: %v", err)
	}
	if _, err := e.co.UpdateProfile(ctx, domain.FirstOrg, "rev", ProfileEdit{Spec: spec, Version: 0}); !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("an edit without a version: %v", err)
	}
	spec.Mode = "yolo"
	if _, err := e.co.UpdateProfile(ctx, domain.FirstOrg, "rev", ProfileEdit{Spec: spec, Version: 2}); !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), `mode "yolo"`) {
		t.Errorf("an invalid edit: %v", err)
	}
	p, gotSpec, r, err := e.co.ResolveProfile(ctx, curatorOfFirstOrg, "rev")
	if err != nil || p.Version != 2 || gotSpec.Model != "opus" || r.Harness.Version != "2.1.0" {
		t.Fatalf("resolve: %+v %+v %+v %v", p, gotSpec, r, err)
	}

	// A secret it names is deleted: shown with the problem, refused at resolve.
	if _, err := e.vault.Delete(ctx, domain.FirstOrg, "ant"); err != nil {
		t.Fatal(err)
	}
	shown, err := e.co.Profile(ctx, curatorOfFirstOrg, "rev")
	if err != nil || len(shown.Problems) != 2 || !strings.Contains(strings.Join(shown.Problems, "\n"), `no secret "ant"`) {
		t.Errorf("show with a deleted secret: %+v %v", shown.Problems, err)
	}
	if _, _, _, err := e.co.ResolveProfile(ctx, curatorOfFirstOrg, string(p.ID)); !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), `no secret "ant"`) {
		t.Errorf("resolve with a deleted secret: %v", err)
	}

	d, err := e.co.DeleteProfile(ctx, domain.FirstOrg, "rev")
	if err != nil || d.Profile.DeletedAt.IsZero() {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, _, _, err := e.co.ResolveProfile(ctx, curatorOfFirstOrg, string(p.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("resolve a deleted profile: %v", err)
	}
	if _, err := e.co.UpdateProfile(ctx, domain.FirstOrg, string(p.ID), ProfileEdit{Spec: spec, Version: 2}); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "was deleted") {
		t.Errorf("edit a deleted profile: %v", err)
	}
	if _, err := e.co.Profile(ctx, curatorOfFirstOrg, "rev"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("show a deleted profile by name: %v", err)
	}
	if byID, err := e.co.Profile(ctx, curatorOfFirstOrg, string(p.ID)); err != nil || byID.Profile.DeletedAt.IsZero() {
		t.Errorf("show a deleted profile by id: %+v %v", byID.Profile, err)
	}
	if ps, _ := e.co.Profiles(ctx, curatorOfFirstOrg); len(ps) != 0 {
		t.Errorf("list after delete: %+v", ps)
	}
}

// appKeyPEM is a GitHub App private key (made once: it is slow).
var appKeyPEM = sync.OnceValue(func() []byte {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
})

// TestProfileGitHubApp: a repo's credential may be a GitHub App: its repos
// must be on the app's host and one account, and the receipt says what
// the minted token is scoped to.
func TestProfileGitHubApp(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	seedAgents(t, e)
	ctx := context.Background()
	app, err := e.vault.Create(ctx, secrets.SecretRequest{Org: domain.FirstOrg, Name: "bot", Kind: apiv1.SecretGitHubApp, Value: appKeyPEM(),
		Meta: apiv1.SecretMeta{AppID: "Iv23bot", InstallationID: 4242}})
	if err != nil {
		t.Fatal(err)
	}
	spec := fullSpec()
	spec.Repos = []apiv1.ProfileRepo{
		{URL: "https://github.com/acme/app.git", Credential: "bot"},
		{URL: "https://github.com/acme/lib", Credential: "bot"},
		{URL: "https://github.com/acme/app.git", Path: "app2", Credential: "bot"},
		{URL: "https://github.com/acme/docs", Credential: "gh"},
	}
	v, err := e.co.CreateProfile(ctx, domain.FirstOrg, "app-profile", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	gh, _ := e.st.GetSecretByName(ctx, domain.FirstOrg, "gh")
	every := []string{"qemu", "firecracker", "process"}
	brokered := func(paths string) string {
		return "; the guest's git requests to github.com carry a placeholder, which the credential broker swaps for it there and nowhere else " +
			"(on qemu), for git fetches of " + paths + "; every other request there is refused"
	}
	want := []apiv1.ReceiptCredential{
		{Name: "bot", SecretID: string(app.Secret.ID), Kind: "github_app", Delivery: apiv1.DeliveryClone, EnforcedOn: every,
			Detail: "GitHub App Iv23bot (installation 4242): the coordinator mints an installation token for each task, lasting an hour, " +
				"scoped to acme/{app,lib} with contents:read and metadata:read, and clones app, lib, app2 with it; neither the key nor the token is in the guest" + brokered("app, lib, app2") +
				"; the broker mints the guest's tokens with contents:read (write for repos it may push to) and metadata:read, plus pull_requests and issues for repos it may call the API for"},
		{Name: "gh", SecretID: string(gh.ID), Kind: "git_https", Delivery: apiv1.DeliveryClone, EnforcedOn: every,
			Detail: "used by the coordinator to clone docs, never in the guest" + brokered("docs")},
	}
	if got := v.Receipt.Credentials[1:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("repo credentials in the receipt:\n%+v\nwant:\n%+v", got, want)
	}
	for _, s := range []string{"Iv23bot", "4242"} {
		if !strings.Contains(v.Receipt.Credentials[1].Detail, s) {
			t.Errorf("the receipt does not name %s", s)
		}
	}

	spec.Repos = []apiv1.ProfileRepo{
		{URL: "https://github.com/acme/app", Credential: "bot"},
		{URL: "https://github.com/other/lib", Credential: "bot"},
		{URL: "https://github.com/acme/mono/sub", Credential: "bot"},
		{URL: "https://gitlab.com/acme/x", Credential: "bot"},
	}
	_, err = e.co.CreateProfile(ctx, domain.FirstOrg, "bad-app", spec, nil)
	for _, w := range []string{
		"repos[1].credential: GitHub App secret bot is installed on one account, and its repos are on acme and other",
		`repos[2].credential: repository url "https://github.com/acme/mono/sub": want https://HOST/OWNER/NAME`,
		"repos[3].credential: secret bot is for github.com, the repo is on gitlab.com",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("%v: lacks %q", err, w)
		}
	}
}

// agentEnv is the profile service over SQLite with the image service and
// a vault it reads.
type agentEnv struct {
	st    store.Store
	co    *Profiles
	vault *secrets.Vault
}

// noHosts is a fleet without hosts: profile tests never reach one.
type noHosts struct{}

func (noHosts) Transport(context.Context, domain.HostID) (http.RoundTripper, error) {
	return nil, errors.New("no hosts in this test")
}

func newAgentEnv(t *testing.T, _ bool) *agentEnv {
	t.Helper()
	st := coordinatortest.NewStore(t)
	im, err := imagejobs.New(imagejobs.Config{}, imagejobs.Deps{Store: st, Hosts: noHosts{}, Place: coordinator.NewPlacement(st, 0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := secrets.New(secrets.Deps{Store: st, Sealer: coordinatortest.Sealer{}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Deps{Store: st, Images: im})
	if err != nil {
		t.Fatal(err)
	}
	return &agentEnv{st: st, co: p, vault: v}
}

// curatorOfFirstOrg uses profiles as an admin of the first organisation.
var curatorOfFirstOrg = domain.Grantee{OrgID: domain.FirstOrg, Curator: true}

// TestProfilesByOrganisationAndGrant: a member sees and resolves only
// the profiles granted to them, a group they are in or everyone; nothing
// of another organisation, by name or by id; a grant must name a member.
func TestProfilesByOrganisationAndGrant(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	seedAgents(t, e)
	ctx := context.Background()
	spec := apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Credentials: []string{"ant"}}
	for name, grants := range map[string][]domain.Grant{
		"for-all": {{Kind: domain.GrantEveryone}},
		"for-eng": {{Kind: domain.GrantGroup, Subject: "eng"}},
		"for-ada": {{Kind: domain.GrantUser, Subject: string(domain.FirstOwner)}},
		"admins":  nil,
	} {
		if _, err := e.co.CreateProfile(ctx, domain.FirstOrg, name, spec, grants); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.co.CreateProfile(ctx, domain.FirstOrg, "ghost", spec, []domain.Grant{{Kind: domain.GrantUser, Subject: "u-nobody"}})
	if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "u-nobody is not a member") {
		t.Fatalf("a grant to a stranger: %v", err)
	}
	_, err = e.co.CreateProfile(ctx, domain.FirstOrg, "twice", spec, []domain.Grant{{Kind: domain.GrantEveryone}, {Kind: domain.GrantEveryone}})
	if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "granted twice") {
		t.Fatalf("a repeated grant: %v", err)
	}
	for _, c := range []struct {
		name string
		who  domain.Grantee
		want []string
	}{
		{"admin", curatorOfFirstOrg, []string{"admins", "for-ada", "for-all", "for-eng"}},
		{"member in eng", domain.Grantee{OrgID: domain.FirstOrg, UserID: "u-bob", Groups: []string{"eng"}}, []string{"for-all", "for-eng"}},
		{"the granted member", domain.Grantee{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}, []string{"for-ada", "for-all"}},
		{"another organisation's admin", domain.Grantee{OrgID: "org-other", Curator: true}, nil},
		{"no organisation", domain.Grantee{UserID: domain.FirstOwner, Curator: true}, nil},
	} {
		vs, err := e.co.Profiles(ctx, c.who)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range vs {
			got = append(got, v.Profile.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s lists %v, want %v", c.name, got, c.want)
		}
		for _, name := range []string{"admins", "for-ada", "for-all", "for-eng"} {
			byName, err := e.co.Profile(ctx, c.who, name)
			want := slices.Contains(c.want, name)
			if (err == nil) != want || (err != nil && !errors.Is(err, store.ErrNotFound)) {
				t.Errorf("%s gets %s: %v, want seen=%v", c.name, name, err, want)
			}
			if err != nil {
				continue
			}
			if _, _, _, err := e.co.ResolveProfile(ctx, c.who, string(byName.Profile.ID)); err != nil {
				t.Errorf("%s resolves %s by id: %v", c.name, name, err)
			}
		}
	}
	all, _ := e.co.Profiles(ctx, curatorOfFirstOrg)
	other := domain.Grantee{OrgID: "org-other", Curator: true}
	if _, err := e.co.Profile(ctx, other, string(all[0].Profile.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another organisation reads a profile by id: %v", err)
	}
	if _, err := e.co.DeleteProfile(ctx, "org-other", string(all[0].Profile.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another organisation deletes a profile by id: %v", err)
	}
	edit := ProfileEdit{Spec: spec, Version: 1, Grants: &[]domain.Grant{{Kind: domain.GrantEveryone}}}
	if _, err := e.co.UpdateProfile(ctx, "org-other", all[0].Profile.Name, edit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another organisation edits a profile: %v", err)
	}
	up, err := e.co.UpdateProfile(ctx, domain.FirstOrg, "admins", edit)
	if err != nil || up.Profile.Version != 2 || len(up.Profile.Grants) != 1 {
		t.Fatalf("granting admins' profile to everyone: %+v, %v", up.Profile, err)
	}
	if _, err := e.co.Profile(ctx, domain.Grantee{OrgID: domain.FirstOrg, UserID: "u-bob"}, "admins"); err != nil {
		t.Errorf("a member after the grant to everyone: %v", err)
	}
}
