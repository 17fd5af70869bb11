package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/secrets"
)

// seedProfiles registers image py, harness claude-code@2.1.0 and secrets
// ant (Anthropic) and gh (git).
func seedProfiles(t *testing.T, a *agentAPI) {
	t.Helper()
	ctx := context.Background()
	if err := a.st.CreateImage(ctx, domain.Image{ID: "img-py", Org: domain.FirstOrg, Name: "py", Ref: "reg/python:3.12", Digest: "sha256:py",
		Config: json.RawMessage(`{"libc":"glibc"}`), Manifests: json.RawMessage(`{"rootfs":{}}`), BaseID: "b"}); err != nil {
		t.Fatal(err)
	}
	d := guestapi.HarnessDescriptor{Format: 1, Name: "claude-code", Version: "2.1.0", Entrypoint: []string{"bin/claude"},
		Protocol: guestapi.HarnessProtocolClaudeStreamJSON, Models: []string{"sonnet", "opus"}, Modes: []string{"bypassPermissions"},
		Credentials: []guestapi.HarnessCredential{{Kind: "anthropic_api_key", Env: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"}},
		Hosts:       []string{"api.anthropic.com:443"}, Requires: guestapi.HarnessRequires{Libc: guestapi.LibcGlibc}}
	desc, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.PutHarness(ctx, domain.Harness{ID: "h1", Name: d.Name, Version: d.Version, Descriptor: desc,
		Manifest: json.RawMessage(`{"version":2,"chunk_size":4194304,"size":0,"chunks":[]}`), Digest: "sha256:cc", Builtin: true, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []secrets.SecretRequest{{Name: "ant", Kind: "anthropic_api_key"}, {Name: "gh", Kind: "git_https", Meta: apiv1.SecretMeta{Host: "github.com"}}} {
		s.Org, s.Value = domain.FirstOrg, []byte(apiKey)
		if _, err := a.p.Vault.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProfileRoutes(t *testing.T) {
	t.Parallel()
	audit := &auditRecord{}
	a := newAgentAPI(t, agentOpts{audit: audit})
	seedProfiles(t, a)
	spec := `{"image":"py","harness":"claude-code","credentials":["ant"],"repos":[{"url":"https://github.com/acme/app.git","credential":"gh"}],` +
		`"env":{"LOG_LEVEL":"debug"},"egress":["pypi.org"]}`
	steps := []struct {
		what, method, target, body string
		status                     int
		contains, lacks            []string
	}{
		{"create", "POST", "/v1/profiles", `{"name":"rev","spec":` + spec + `}`, 201, []string{
			`"profile":{"id":`, `"name":"rev"`, `"version":1`, `"path":"app"`,
			`"receipt":{"image":{"id":"img-py","name":"py","ref":"reg/python:3.12","digest":"sha256:py","libc":"glibc"}`,
			`"harness":{"id":"h1","name":"claude-code","version":"2.1.0","digest":"sha256:cc","protocol":"claude-stream-json"}`,
			`"model":"sonnet"`, `"delivery":"gateway-injected"`, `"delivery":"coordinator-clone"`, `"env":["LOG_LEVEL"]`,
			`"host":"pypi.org","why":"listed in the profile's egress","reachable":true,"via":"proxy","enforced":true,"enforced_on":["qemu"]`,
			`"host":"github.com","why":"host of credential gh (git_https)","reachable":true,"via":"brokered"`,
			`"enforcement":[{"backend":"qemu","enforced":true,`, `{"backend":"process","enforced":false,"how":"nothing is enforced`,
			`"skills":[]`, `"apps":[]`}, []string{"problems", apiKey}},
		{"taken", "POST", "/v1/profiles", `{"name":"rev","spec":` + spec + `}`, 409, []string{"a profile named rev exists"}, nil},
		{"invalid", "POST", "/v1/profiles", `{"name":"bad","spec":{"image":"nope","harness":"claude-code","model":"gpt"}}`, 400, []string{
			`"code":"bad_request"`, "profile bad has 3 problems", `image \"nope\"`, `model \"gpt\"`, "needs a credential of kind anthropic_api_key"}, nil},
		{"unknown spec field", "POST", "/v1/profiles", `{"name":"x","spec":{"imgae":"py"}}`, 400, []string{`unknown field \"imgae\"`}, nil},
		{"get", "GET", "/v1/profiles/rev", "", 200, []string{`"receipt":{`, `"powers":["runs as root`}, []string{"problems"}},
		{"preview a receipt", "POST", "/v1/profiles/receipt", `{"spec":{"image":"py","harness":"claude-code","egress":["pkg.example.org"]}}`, 200,
			[]string{`"host":"pkg.example.org","why":"listed in the profile's egress"`, `"problems":["harness claude-code@2.1.0 needs a credential`}, nil},
		{"preview a valid spec", "POST", "/v1/profiles/receipt", `{"spec":` + spec + `}`, 200, []string{`"problems":[]`, `"host":"pypi.org"`}, nil},
		{"preview bad JSON", "POST", "/v1/profiles/receipt", `{"spec":`, 400, []string{`"code":"bad_request"`}, nil},
		{"list", "GET", "/v1/profiles", "", 200, []string{`"items":[{`, `"name":"rev"`, `"LOG_LEVEL":"debug"`}, []string{"receipt"}},
		{"edit", "PUT", "/v1/profiles/rev", `{"version":1,"spec":{"image":"py","harness":"claude-code","model":"opus","credentials":["ant"]}}`, 200,
			[]string{`"version":2`, `"model":"opus"`, `"repos":[]`}, nil},
		{"stale edit", "PUT", "/v1/profiles/rev", `{"version":1,"spec":{"image":"py","harness":"claude-code","credentials":["ant"]}}`, 409,
			[]string{"changed since version 1 (it is at version 2 now)"}, nil},
		{"edit without version", "PUT", "/v1/profiles/rev", `{"spec":{}}`, 400, []string{"send the version the edit was made from"}, nil},
		{"edit unknown", "PUT", "/v1/profiles/nope", `{"version":1,"spec":{}}`, 404, nil, nil},
		{"delete secret", "DELETE", "/v1/secrets/ant", "", 200, []string{`"used_by":["rev"]`}, nil},
		{"get with problems", "GET", "/v1/profiles/rev", "", 200, []string{`"problems":["credentials: no secret \"ant\"`}, nil},
		{"delete", "DELETE", "/v1/profiles/rev", "", 200, []string{`"name":"rev"`, `"deleted_at":`, `"version":2`}, []string{"receipt"}},
		{"get deleted", "GET", "/v1/profiles/rev", "", 404, nil, nil},
		{"list after", "GET", "/v1/profiles", "", 200, []string{`"items":[]`}, nil},
	}
	for _, s := range steps {
		check(t, s.what, a.do(s.method, s.target, "application/json", strings.NewReader(s.body)), s.status, s.contains, s.lacks)
	}
	// The audit log names the profile of each change, the one made too.
	var got []string
	for _, e := range audit.events() {
		if strings.HasPrefix(e.Action, "profile.") {
			got = append(got, e.Action+" "+e.TargetKind+" "+e.TargetID)
		}
	}
	if want := "profile.create profile rev,profile.update profile rev,profile.delete profile rev"; strings.Join(got, ",") != want {
		t.Errorf("the audit log's profile events: %q, want %s", got, want)
	}
}

// auditRecord keeps the audit events an API writes, in order.
type auditRecord struct {
	mu  sync.Mutex
	evs []domain.AuditEvent
}

func (r *auditRecord) AppendAudit(_ context.Context, e domain.AuditEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
	return nil
}

func (r *auditRecord) events() []domain.AuditEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]domain.AuditEvent{}, r.evs...)
}

// auditTo is fakeStore writing the audit log to log.
type auditTo struct {
	fakeStore
	log api.AuditLog
}

func (a auditTo) AppendAudit(ctx context.Context, e domain.AuditEvent) error {
	return a.log.AppendAudit(ctx, e)
}

// TestProfileResponseShape decodes a created profile into the wire types.
func TestProfileResponseShape(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	seedProfiles(t, a)
	rec := a.do("POST", "/v1/profiles", "application/json", strings.NewReader(`{"name":"p","spec":{"image":"py","harness":"claude-code@2.1.0","credentials":["ant"]}}`))
	var r apiv1.ProfileResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || rec.Code != 201 {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	if r.Profile.Spec.Harness != "claude-code@2.1.0" || r.Receipt.Mode != "bypassPermissions" || len(r.Receipt.Hosts) != 1 ||
		!r.Receipt.Hosts[0].Reachable || r.Receipt.Credentials[0].Env != "ANTHROPIC_API_KEY" || r.Receipt.Credentials[0].SecretID == "" {
		t.Errorf("answer %+v", r)
	}
}

// TestIdempotencyKey: a POST retried with its Idempotency-Key is answered
// again without running again; the key reused for another body is 409.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	seedProfiles(t, a)
	post := func(body, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/profiles", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		return rec
	}
	body := `{"name":"once","spec":{"image":"py","harness":"claude-code","credentials":["ant"]}}`
	first := post(body, "key-1")
	again := post(body, "key-1")
	if first.Code != 201 || again.Code != 201 || again.Body.String() != first.Body.String() || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s then %d %s (replayed %q)", first.Code, first.Body, again.Code, again.Body, again.Header().Get("Idempotent-Replayed"))
	}
	if first.Header().Get("Idempotent-Replayed") != "" {
		t.Error("the first answer says it was replayed")
	}
	check(t, "the key for another body", post(`{"name":"other","spec":{"image":"py","harness":"claude-code"}}`, "key-1"), 409,
		[]string{"used for another request"}, nil)
	check(t, "the same body without a key runs again", post(body, ""), 409, []string{"a profile named once exists"}, nil)
	check(t, "a refused request keeps no answer", post(body, "key-2"), 409, []string{"a profile named once exists"}, nil)
	check(t, "so its retry runs again", post(body, "key-2"), 409, []string{"a profile named once exists"}, []string{"used for another"})
	check(t, "a bad key", post(body, "has space"), 400, []string{"Idempotency-Key"}, nil)
}
