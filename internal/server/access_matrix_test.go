package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	apidoc "github.com/engrams/engrams/api"
	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// caller is one column of the route matrix: a key (or none) and the
// grants it holds.
type caller struct {
	name   string
	secret string // "" sends no key
	// holds says the caller has what a route needing n asks for.
	holds func(n access.Need) bool
	// cookie sends the secret as a browser's sign-in cookie, with its
	// anti-forgery header unless forged.
	cookie, forged bool
}

// matrixCallers mints a key for each kind of caller in st.
func matrixCallers(t *testing.T, st store.Store) []caller {
	ctx := t.Context()
	now := time.Now()
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(st.CreateOrg(ctx, domain.Org{ID: "org-other", Name: "other"}))
	for _, u := range []domain.User{{ID: "u-admin"}, {ID: "u-member"}, {ID: "u-other"}, {ID: "u-fleet", FleetOperator: true}} {
		mustDo(st.CreateUser(ctx, u))
	}
	mustDo(st.PutMember(ctx, domain.FirstOrg, "u-admin", domain.RoleAdmin, now))
	mustDo(st.PutMember(ctx, domain.FirstOrg, "u-member", domain.RoleMember, now))
	mustDo(st.PutMember(ctx, "org-other", "u-other", domain.RoleOwner, now))
	key := func(name string, t0 domain.Token) string {
		secret, prefix := access.NewSecret()
		t0.ID, t0.Name, t0.Prefix, t0.Hash, t0.CreatedAt = name, name, prefix, coordinator.HashToken(secret), now
		if t0.Kind == "" {
			t0.Kind = domain.TokenUser
		}
		mustDo(st.CreateToken(ctx, t0))
		return secret
	}
	owner := key("owner", domain.Token{OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner})
	signin := func(name string) string {
		return key(name, domain.Token{Kind: domain.TokenSession, OrgID: domain.FirstOrg, UserID: "u-member", Role: domain.RoleOwner,
			ExpiresAt: now.Add(time.Hour), IdleTimeout: time.Hour})
	}
	signedOut := signin("signed-out")
	mustDo(st.RevokeToken(ctx, "signed-out", now))
	revoked := key("revoked", domain.Token{OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner})
	mustDo(st.RevokeToken(ctx, "revoked", now))
	is := func(ns ...access.Need) func(access.Need) bool {
		return func(n access.Need) bool {
			for _, m := range append(ns, access.AnyKey) {
				if n == m {
					return true
				}
			}
			return false
		}
	}
	never := func(access.Need) bool { return false }
	return []caller{
		// The first owner is the install's fleet operator too.
		{"owner", owner, is(access.Member, access.Admin, access.Fleet), false, false},
		{"admin", key("admin", domain.Token{OrgID: domain.FirstOrg, UserID: "u-admin", Role: domain.RoleAdmin}), is(access.Member, access.Admin), false, false},
		{"member", key("member", domain.Token{OrgID: domain.FirstOrg, UserID: "u-member", Role: domain.RoleMember}), is(access.Member), false, false},
		// An admin's key made with the member role is a member's key.
		{"admin's member key", key("admin-as-member", domain.Token{OrgID: domain.FirstOrg, UserID: "u-admin", Role: domain.RoleMember}), is(access.Member), false, false},
		{"service key (member)", key("svc", domain.Token{Kind: domain.TokenService, OrgID: domain.FirstOrg, UserID: "u-admin", Role: domain.RoleMember}), is(access.Member), false, false},
		{"other organisation's owner", key("other", domain.Token{OrgID: "org-other", UserID: "u-other", Role: domain.RoleOwner}), is(access.Member, access.Admin), false, false},
		{"fleet operator", key("fleet", domain.Token{UserID: "u-fleet"}), is(access.Fleet), false, false},
		{"revoked key", revoked, never, false, false},
		{"expired key", key("expired", domain.Token{OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner, ExpiresAt: now.Add(-time.Second)}), never, false, false},
		{"no key", "", never, false, false},
		// A browser's sign-in acts as its member; a write without the
		// anti-forgery header is another site's doing.
		{"member's sign-in cookie", signin("cookie"), is(access.Member), true, false},
		{"member's sign-in cookie, forged write", signin("cookie-forged"), is(access.Member), true, true},
		{"signed-out cookie", signedOut, never, true, false},
	}
}

// present puts the caller's credential on req.
func (c caller) present(req *http.Request) {
	switch {
	case c.secret == "":
	case c.cookie:
		req.AddCookie(&http.Cookie{Name: apiv1.SessionCookie, Value: c.secret})
		if !c.forged {
			req.Header.Set(apiv1.HeaderCSRF, access.CSRFToken(c.secret))
		}
	default:
		req.Header.Set("Authorization", "Bearer "+c.secret)
	}
}

// specRoutes are the operations of api/openapi.yaml as route patterns.
func specRoutes(t *testing.T) []string {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(apidoc.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	return out
}

// TestRouteMatrix: every route of api/openapi.yaml has an access rule,
// and the served API holds every kind of caller to it: no key, a revoked
// or an expired key is 401; a key without the grant the route needs is
// 403; a key with it gets past authorization (whatever the handler then
// says of the request). A route added to the spec without a rule fails.
func TestRouteMatrix(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Images: &coordinatortest.Materializer{}}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{WaitTimeout: time.Second}, p.APIDeps(st, nil))
	callers := matrixCallers(t, st)
	rules := access.Routes()
	param := regexp.MustCompile(`\{[^}]+\}`)
	cells := 0
	for _, route := range specRoutes(t) {
		rule, ok := rules[route]
		if !ok {
			t.Errorf("%s is in api/openapi.yaml but has no rule in access.Routes", route)
			continue
		}
		if rule.Need == access.Public {
			continue
		}
		method, path, _ := strings.Cut(route, " ")
		path = param.ReplaceAllString(path, "none")
		for _, c := range callers {
			cells++
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(`{"zz_not_a_field":1}`))
			req.Header.Set("Content-Type", "application/json")
			c.present(req)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			cancel()
			got := rec.Code
			var want string
			switch {
			case c.secret == "" || !c.holds(access.AnyKey):
				want = fmt.Sprint(http.StatusUnauthorized)
			case !c.holds(rule.Need), c.forged && method != http.MethodGet:
				want = fmt.Sprint(http.StatusForbidden)
			}
			switch {
			case want != "" && fmt.Sprint(got) != want:
				t.Errorf("%s as %s (%s route) = %d, want %s: %s", route, c.name, rule.Need, got, want, rec.Body)
			case want == "" && (got == http.StatusUnauthorized || (got == http.StatusForbidden && rule.Need != access.AnyKey)):
				t.Errorf("%s as %s (%s route) = %d, want past authorization: %s", route, c.name, rule.Need, got, rec.Body)
			}
		}
	}
	t.Logf("route matrix: %d routes x %d callers = %d cells", cells/len(callers), len(callers), cells)
}

// TestKeysMembersAndTheAuditLog walks the people routes as an owner, an
// admin and a member, and reads back the audit log: each admin action
// once, with its actor.
func TestKeysMembersAndTheAuditLog(t *testing.T) {
	t.Parallel()
	_, do := peopleAPI(t)
	// A member may not make a key above their role, nor a service key.
	do("member", "POST", "/v1/tokens", `{"name":"up","role":"admin"}`, http.StatusForbidden)
	do("member", "POST", "/v1/tokens", `{"name":"svc","kind":"service"}`, http.StatusForbidden)
	do("member", "POST", "/v1/tokens", `{"name":"mine","expires_in":"720h"}`, http.StatusCreated)
	// Another's key is not there for a member; the owner's admin may revoke the member's.
	do("member", "DELETE", "/v1/tokens/owner", "", http.StatusNotFound)
	do("other organisation's owner", "DELETE", "/v1/tokens/member", "", http.StatusNotFound)
	do("admin", "DELETE", "/v1/tokens/member", "", http.StatusNoContent)
	do("member", "GET", "/v1/me", "", http.StatusUnauthorized) // that was their key

	// Members: an admin adds up to admin, never an owner; the last owner stays.
	do("admin", "POST", "/v1/members", `{"email":"ada@example.com","role":"owner"}`, http.StatusForbidden)
	body := do("admin", "POST", "/v1/members", `{"email":"Ada@Example.com","role":"member","name":"Ada"}`, http.StatusCreated)
	if !strings.Contains(body, `"email":"ada@example.com"`) {
		t.Fatalf("added member: %s", body)
	}
	do("admin", "POST", "/v1/members", `{"email":"ada@example.com","role":"member"}`, http.StatusConflict)
	do("admin", "PUT", "/v1/members/"+string(domain.FirstOwner), `{"role":"member"}`, http.StatusForbidden)
	do("owner", "PUT", "/v1/members/"+string(domain.FirstOwner), `{"role":"admin"}`, http.StatusConflict)
	do("owner", "PUT", "/v1/members/u-admin", `{"role":"member"}`, http.StatusOK)
	// The admin's keys shrink with their role at once.
	do("admin", "GET", "/v1/members", "", http.StatusForbidden)
	do("owner", "DELETE", "/v1/members/u-admin", "", http.StatusNoContent)
	do("admin", "GET", "/v1/me", "", http.StatusUnauthorized)
	do("other organisation's owner", "GET", "/v1/members/u-admin", "", http.StatusMethodNotAllowed)

	log := do("owner", "GET", "/v1/audit?limit=100", "", http.StatusOK)
	for _, want := range []string{
		`"actor_name":"owner","key_id":"owner","action":"member.update"`,
		`"actor_name":"owner","key_id":"owner","action":"member.remove"`,
		`"actor_id":"u-admin","actor_name":"u-admin","key_id":"admin","action":"member.add"`,
		`"action":"key.revoke","target_kind":"key","target_id":"member"`,
		`"action":"key.create"`,
	} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("audit log has %q %d times, want once:\n%s", want, n, log)
		}
	}
	// Refusals are not actions; another organisation's log is its own.
	if strings.Count(log, `"action"`) != 5 {
		t.Errorf("audit log holds %d events, want 5:\n%s", strings.Count(log, `"action"`), log)
	}
	if other := do("other organisation's owner", "GET", "/v1/audit", "", http.StatusOK); strings.Contains(other, `"action"`) {
		t.Errorf("another organisation reads this one's audit log: %s", other)
	}
}

// peopleAPI serves the API over a fresh store with matrixCallers' keys;
// do sends a request as one of them (by name) and fails the test unless
// it answers want.
func peopleAPI(t *testing.T) (store.Store, func(who, method, path, body string, want int) string) {
	st := openSQLite(t)
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Images: &coordinatortest.Materializer{}}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{}, p.APIDeps(st, nil))
	keys := map[string]string{}
	for _, c := range matrixCallers(t, st) {
		keys[c.name] = c.secret
	}
	return st, func(who, method, path, body string, want int) string {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keys[who])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Fatalf("%s %s as %s = %d, want %d: %s", method, path, who, rec.Code, want, rec.Body)
		}
		return rec.Body.String()
	}
}
