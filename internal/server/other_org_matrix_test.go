package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// otherOrgThing is, for a route's path pattern, the path naming another
// organisation's thing of that kind and a well-formed body, so that the
// only reason left to refuse is whose the thing is.
type otherOrgThing struct{ path, body string }

// otherOrgThings are the matrix's rows by route pattern. A route with a
// path parameter must have a row, or a reason in notAnOrgsThing.
var otherOrgThings = map[string]otherOrgThing{
	"/v1/profiles/{name}":                {"/v1/profiles/p-other", `{"spec":{},"version":1}`},
	"/v1/secrets/{name}":                 {"/v1/secrets/s-other", ""},
	"/v1/images/{name}":                  {"/v1/images/i-other", ""},
	"/v1/images/{name}/refresh":          {"/v1/images/i-other/refresh", ""},
	"/v1/images/{name}/jobs":             {"/v1/images/i-other/jobs", ""},
	"/v1/image-jobs/{id}":                {"/v1/image-jobs/j-other", ""},
	"/v1/automations/{name}":             {"/v1/automations/a-other", `{"definition":"name: x\ntrigger: {kind: manual}\nblocks: []\n"}`},
	"/v1/automations/{name}/enable":      {"/v1/automations/a-other/enable", ""},
	"/v1/automations/{name}/disable":     {"/v1/automations/a-other/disable", ""},
	"/v1/automations/{name}/hook-secret": {"/v1/automations/a-other/hook-secret", ""},
	"/v1/automations/{name}/runs":        {"/v1/automations/a-other/runs", `{}`},
	"/v1/runs/{id}":                      {"/v1/runs/r-other", ""},
	"/v1/runs/{id}/cancel":               {"/v1/runs/r-other/cancel", ""},
	"/v1/integrations/{kind}":            {"/v1/integrations/linear", ""},
	"/v1/members/{id}":                   {"/v1/members/u-other", `{"role":"member"}`},
	"/v1/tokens/{id}":                    {"/v1/tokens/other", ""},
	"/v1/me/identities/{kind}/{account}": {"/v1/me/identities/slack/T1:UOTHER", ""},
}

// notAnOrgsThing are the routes with a path parameter that name no
// organisation's thing, and why.
var notAnOrgsThing = map[string]string{
	"/v1/harnesses/{name}": "harness bundles are the deployment's",
	"/v1/hooks/{slug}":     "public: signed by the hook's secret",
	"/v1/hosts/":           "hosts are the fleet's, not an organisation's",
}

// makeOtherOrgThings stores a thing of every kind as org-other's.
func makeOtherOrgThings(t *testing.T, st store.Store) {
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := st.CreateProfile(ctx, domain.Profile{ID: "p-other", Org: "org-other", Name: "tools", Spec: json.RawMessage(`{}`)})
	must(err)
	must(st.PutSecret(ctx, domain.Secret{ID: "s-other", Org: "org-other", Kind: "generic", Name: "gh", Sealed: []byte("x")}))
	must(st.CreateImage(ctx, domain.Image{ID: "i-other", Org: "org-other", Name: "debian", Ref: "debian:12"}))
	_, err = st.CreateJob(ctx, domain.ImageJob{ID: "j-other", ImageID: "i-other", Kind: domain.ImageJobEnable})
	must(err)
	_, err = st.CreateAutomation(ctx, domain.Automation{ID: "a-other", Org: "org-other", Name: "nightly", TriggerKind: "manual"},
		[]byte(`{"name":"nightly","trigger":{"kind":"manual"},"blocks":[]}`))
	must(err)
	_, _, err = st.CreateRun(ctx, domain.AutomationRun{ID: "r-other", AutomationID: "a-other", Org: "org-other", Version: 1,
		State: domain.RunSucceeded, TriggerKind: "manual"})
	must(err)
	_, err = st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationLinear, Org: "org-other", Sealed: []byte("x")})
	must(err)
	must(st.PutIdentity(ctx, domain.Identity{OrgID: "org-other", Kind: domain.IntegrationSlack, ExternalID: "T1:UOTHER", UserID: "u-other",
		How: domain.IdentityByLink}))
}

// TestRouteMatrixOtherOrganisation: every route naming a thing of an
// organisation, generated from the policy (every route of
// api/openapi.yaml has one), as every caller of the first organisation
// holding its grant, on org-other's thing: 404, as a thing that does not
// exist. TestRouteMatrix has the 401s and 403s; TestRouteMatrixOwnership
// sessions and tasks.
func TestRouteMatrixOtherOrganisation(t *testing.T) {
	t.Parallel()
	w := newWorldWithAutomations(t)
	st := w.st
	makeOtherOrgThings(t, st)
	cells := 0
	for route, rule := range access.Routes() {
		method, pattern, _ := strings.Cut(route, " ")
		if !strings.Contains(pattern, "{") || rule.Scope != "" || skipped(pattern) {
			continue
		}
		row, ok := otherOrgThings[strings.TrimSuffix(pattern, "/{$}")]
		if !ok {
			t.Errorf("route %s names a thing but has no row in otherOrgThings (nor a reason in notAnOrgsThing)", route)
			continue
		}
		for _, c := range w.callers {
			if !c.holds(rule.Need) || (c.forged && method != http.MethodGet) || strings.HasPrefix(c.name, "other organisation") {
				continue
			}
			cells++
			if rec := w.do(t, c, method, row.path, row.body); rec.Code != http.StatusNotFound {
				t.Errorf("%s: %s %s = %d %s, want 404", c.name, method, row.path, rec.Code, rec.Body)
			}
		}
	}
	if cells < 80 {
		t.Errorf("only %d cells: the matrix lost its rows", cells)
	}
	t.Logf("%d cells", cells)
}

func skipped(pattern string) bool {
	for prefix := range notAnOrgsThing {
		if strings.HasPrefix(pattern, prefix) {
			return true
		}
	}
	return false
}
