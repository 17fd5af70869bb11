package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// makeCurated stores, in the first organisation and in another, a
// profile named "tools" granted to everyone and a secret named "gh"; the
// first organisation also has "curated", granted to no one, and
// "for-eng", granted to the group eng. Each has an image named "debian".
func makeCurated(t *testing.T, st store.Store) {
	ctx := t.Context()
	everyone := []domain.Grant{{Kind: domain.GrantEveryone}}
	for _, p := range []domain.Profile{
		{ID: "p-first", Org: domain.FirstOrg, Name: "tools", Grants: everyone},
		{ID: "p-other", Org: "org-other", Name: "tools", Grants: everyone},
		{ID: "p-curated", Org: domain.FirstOrg, Name: "curated"},
		{ID: "p-eng", Org: domain.FirstOrg, Name: "for-eng", Grants: []domain.Grant{{Kind: domain.GrantGroup, Subject: "eng"}}},
	} {
		p.Spec = json.RawMessage(`{}`)
		if _, err := st.CreateProfile(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, img := range []domain.Image{{ID: "i-first", Org: domain.FirstOrg}, {ID: "i-other", Org: "org-other"}} {
		img.Name, img.Ref = "debian", "debian:12"
		if err := st.CreateImage(ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []domain.Secret{{ID: "s-first", Org: domain.FirstOrg}, {ID: "s-other", Org: "org-other"}} {
		s.Kind, s.Name, s.Sealed = "generic", "gh", []byte("sealed")
		if err := st.PutSecret(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

// curatedWorld is the API over a store holding makeCurated's things and
// a key for each matrix caller.
type curatedWorld struct {
	st      store.Store
	h       http.Handler
	callers []caller
}

func newCuratedWorld(t *testing.T) *curatedWorld {
	t.Helper()
	st := openSQLite(t)
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Images: &coordinatortest.Materializer{}}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &curatedWorld{st: st, h: api.New(api.Config{WaitTimeout: time.Second}, p.APIDeps(st, nil)), callers: matrixCallers(t, st)}
	makeCurated(t, st)
	return w
}

func (w *curatedWorld) do(t *testing.T, c caller, method, path, body string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	c.present(req)
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, req)
	return rec
}

func (w *curatedWorld) caller(name string) caller {
	return w.callers[slices.IndexFunc(w.callers, func(c caller) bool { return c.name == name })]
}

// profilesUsed are the profiles each caller holding the member grant may
// use, written out.
var profilesUsed = map[string][]string{
	"owner":                      {"p-curated", "p-eng", "p-first"},
	"admin":                      {"p-curated", "p-eng", "p-first"},
	"member":                     {"p-first"},
	"admin's member key":         {"p-first"},
	"service key (member)":       {"p-first"},
	"other organisation's owner": {"p-other"},
	"member's sign-in cookie":    {"p-first"},
}

// TestCuratedThingsStayInTheirOrganisation: profiles and secrets are
// their organisation's: each caller lists, reads (by name or by id) and
// changes only its own organisation's, and a member only the profiles
// granted to them; everything else is 404, as a thing that does not
// exist, and left as it was.
func TestCuratedThingsStayInTheirOrganisation(t *testing.T) {
	t.Parallel()
	w := newCuratedWorld(t)
	cells := 0
	for _, c := range w.callers {
		want, ok := profilesUsed[c.name]
		if !ok {
			continue // holds no member grant, or a forged cookie: TestRouteMatrix
		}
		cells += w.profileCells(t, c, want) + w.imageCells(t, c)
		if c.holds(access.Admin) {
			cells += w.adminCells(t, c)
		}
	}
	for _, id := range []domain.SecretID{"s-first", "s-other"} {
		if s, err := w.st.GetSecret(t.Context(), id); err != nil || !s.DeletedAt.IsZero() {
			t.Errorf("secret %s after the matrix: %+v, %v", id, s, err)
		}
	}
	for _, id := range []domain.ImageID{"i-first", "i-other"} {
		if img, err := w.st.GetImage(t.Context(), id); err != nil || img.State == domain.ImageDisabled {
			t.Errorf("image %s after the matrix: %+v, %v", id, img, err)
		}
	}
	for _, id := range []domain.ProfileID{"p-first", "p-other"} {
		if p, err := w.st.GetProfile(t.Context(), id); err != nil || !p.DeletedAt.IsZero() {
			t.Errorf("profile %s after the matrix: %+v, %v", id, p, err)
		}
	}
	t.Logf("%d cells", cells)
}

// profileCells: c lists exactly the profiles it may use, and reads by id
// those and no other.
func (w *curatedWorld) profileCells(t *testing.T, c caller, want []string) int {
	rec := w.do(t, c, "GET", "/v1/profiles", "")
	var list struct{ Items []struct{ ID string } }
	_ = json.Unmarshal(rec.Body.Bytes(), &list)
	var got []string
	for _, it := range list.Items {
		got = append(got, it.ID)
	}
	slices.Sort(got)
	if rec.Code != http.StatusOK || !slices.Equal(got, want) {
		t.Errorf("%s lists profiles %v (%d), want %v", c.name, got, rec.Code, want)
	}
	ids := []string{"p-first", "p-other", "p-curated", "p-eng"}
	for _, id := range ids {
		rec := w.do(t, c, "GET", "/v1/profiles/"+id, "")
		if seen := rec.Code != http.StatusNotFound; seen != slices.Contains(want, id) {
			t.Errorf("%s GET profile %s = %d %s", c.name, id, rec.Code, rec.Body)
		}
	}
	return 1 + len(ids)
}

// imageCells: c lists and reads its organisation's image "debian", by
// name and by id, and not the other's; an admin's disable of the other's
// is 404.
func (w *curatedWorld) imageCells(t *testing.T, c caller) int {
	mine, theirs := "i-first", "i-other"
	if c.name == "other organisation's owner" {
		mine, theirs = theirs, mine
	}
	rec := w.do(t, c, "GET", "/v1/images", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), mine) || strings.Contains(rec.Body.String(), theirs) {
		t.Errorf("%s lists images: %d %s", c.name, rec.Code, rec.Body)
	}
	for path, want := range map[string]int{"/v1/images/debian": 200, "/v1/images/" + mine: 200, "/v1/images/" + theirs: 404} {
		if rec := w.do(t, c, "GET", path, ""); rec.Code != want || (want == 200 && !strings.Contains(rec.Body.String(), mine)) {
			t.Errorf("%s GET %s = %d %s, want %d", c.name, path, rec.Code, rec.Body, want)
		}
	}
	if c.holds(access.Admin) {
		if rec := w.do(t, c, "DELETE", "/v1/images/"+theirs, ""); rec.Code != http.StatusNotFound {
			t.Errorf("%s disables another organisation's image: %d %s", c.name, rec.Code, rec.Body)
		}
	}
	return 5
}

// adminCells: an admin lists its organisation's secrets only, and
// deleting another organisation's secret or profile is 404.
func (w *curatedWorld) adminCells(t *testing.T, c caller) int {
	mine, theirs := "s-first", "s-other"
	if c.name == "other organisation's owner" {
		mine, theirs = theirs, mine
	}
	if rec := w.do(t, c, "GET", "/v1/secrets", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), mine) || strings.Contains(rec.Body.String(), theirs) {
		t.Errorf("%s lists secrets: %d %s", c.name, rec.Code, rec.Body)
	}
	if rec := w.do(t, c, "DELETE", "/v1/secrets/"+theirs, ""); rec.Code != http.StatusNotFound {
		t.Errorf("%s deletes another organisation's secret: %d %s", c.name, rec.Code, rec.Body)
	}
	theirProfile := map[string]string{"s-first": "p-first", "s-other": "p-other"}[theirs]
	if rec := w.do(t, c, "DELETE", "/v1/profiles/"+theirProfile, ""); rec.Code != http.StatusNotFound {
		t.Errorf("%s deletes another organisation's profile: %d %s", c.name, rec.Code, rec.Body)
	}
	return 3
}

// TestMemberGroupsOpenGrantedProfiles: an admin puts a member in group
// eng; the profile granted to it is theirs to use at once.
func TestMemberGroupsOpenGrantedProfiles(t *testing.T) {
	t.Parallel()
	w := newCuratedWorld(t)
	admin, member := w.caller("admin"), w.caller("member")
	if rec := w.do(t, member, "GET", "/v1/profiles/for-eng", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("member outside eng reads the profile granted to eng: %d %s", rec.Code, rec.Body)
	}
	if rec := w.do(t, admin, "PUT", "/v1/members/u-member", `{"groups":["eng"]}`); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"groups":["eng"]`) ||
		!strings.Contains(rec.Body.String(), `"role":"member"`) {
		t.Fatalf("admin sets the member's groups: %d %s", rec.Code, rec.Body)
	}
	if rec := w.do(t, member, "GET", "/v1/profiles/for-eng", ""); rec.Code != 200 {
		t.Errorf("member in eng reads the profile granted to eng: %d %s", rec.Code, rec.Body)
	}
	for _, body := range []string{`{"groups":[""]}`, `{}`} {
		if rec := w.do(t, admin, "PUT", "/v1/members/u-member", body); rec.Code != http.StatusBadRequest {
			t.Errorf("member update %s: %d %s", body, rec.Code, rec.Body)
		}
	}
	if rec := w.do(t, member, "PUT", "/v1/members/u-member", `{"groups":["admins"]}`); rec.Code != http.StatusForbidden {
		t.Errorf("a member sets their own groups: %d %s", rec.Code, rec.Body)
	}
	log := w.do(t, admin, "GET", "/v1/audit?limit=100", "").Body.String()
	if want := `"actor_id":"u-admin","actor_name":"u-admin","key_id":"admin","action":"member.update","target_kind":"member","target_id":"u-member"`; strings.Count(log, want) != 1 ||
		strings.Count(log, `"action"`) != 1 {
		t.Errorf("the audit log after one groups change (refusals are not actions):\n%s", log)
	}
}

// newWorldWithAutomations is a curatedWorld (without makeCurated's things)
// whose server runs automations and keeps secrets.
func newWorldWithAutomations(t *testing.T) *curatedWorld {
	t.Helper()
	st := openSQLite(t)
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{ReplicaID: "r1", Automations: autorun.Config{SQLitePath: filepath.Join(t.TempDir(), "runs.db")}}
	p, err := server.Assemble(cfg, server.Deps{Store: st, Images: &coordinatortest.Materializer{}, Secrets: sealer}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Automations.Close() })
	w := &curatedWorld{st: st, h: api.New(api.Config{WaitTimeout: time.Second}, p.APIDeps(st, nil)), callers: matrixCallers(t, st)}
	return w
}

// TestAutomationsAndIntegrationsStayInTheirOrganisation: another
// organisation's owner neither lists, reads nor changes the first
// organisation's automations, and the deployment's Slack integration,
// held by the first organisation, is neither in its list nor its to
// replace or remove.
func TestAutomationsAndIntegrationsStayInTheirOrganisation(t *testing.T) {
	t.Parallel()
	w := newWorldWithAutomations(t)
	st := w.st
	owner, other := w.caller("owner"), w.caller("other organisation's owner")
	def := `{"definition":"name: nightly\ntrigger: {kind: manual}\nblocks:\n  - {id: t, kind: start_task, profile: dev, prompt: go}\n"}`
	if rec := w.do(t, owner, "POST", "/v1/automations", def); rec.Code != http.StatusCreated {
		t.Fatalf("owner creates an automation: %d %s", rec.Code, rec.Body)
	}
	slack := `{"kind":"slack","config":{},"secrets":{"bot_token":"xoxb-1","signing_secret":"s1"}}`
	if rec := w.do(t, owner, "POST", "/v1/integrations", slack); rec.Code != http.StatusCreated {
		t.Fatalf("owner adds Slack: %d %s", rec.Code, rec.Body)
	}
	// A member starts runs with inputs; a trigger payload (which may name
	// a profile) by hand is a curator's.
	for body, want := range map[string]int{`{"trigger":{"profile":"prod"}}`: http.StatusForbidden, `{"trigger":"x"}`: http.StatusForbidden,
		`{"trigger":{}}`: http.StatusCreated} {
		if rec := w.do(t, w.caller("member"), "POST", "/v1/automations/nightly/runs", body); rec.Code != want {
			t.Errorf("a member's run by hand with %s: %d %s, want %d", body, rec.Code, rec.Body, want)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/automations/nightly", ""},
		{"PUT", "/v1/automations/nightly", `{"definition":"name: nightly\ntrigger: {kind: manual}\nblocks: []\n"}`},
		{"POST", "/v1/automations/nightly/disable", ""},
		{"POST", "/v1/automations/nightly/runs", `{}`},
		{"GET", "/v1/automations/nightly/runs", ""},
		{"DELETE", "/v1/automations/nightly", ""},
		{"DELETE", "/v1/integrations/slack", ""},
	} {
		if rec := w.do(t, other, c.method, c.path, c.body); rec.Code != http.StatusNotFound {
			t.Errorf("another organisation's owner: %s %s = %d %s, want 404", c.method, c.path, rec.Code, rec.Body)
		}
	}
	for path, mine := range map[string]string{"/v1/automations": "nightly", "/v1/integrations": "slack"} {
		if rec := w.do(t, other, "GET", path, ""); rec.Code != 200 || strings.Contains(rec.Body.String(), mine) {
			t.Errorf("another organisation lists %s: %d %s", path, rec.Code, rec.Body)
		}
		if rec := w.do(t, owner, "GET", path, ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), mine) {
			t.Errorf("the owner lists %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if rec := w.do(t, other, "POST", "/v1/integrations", slack); rec.Code != http.StatusConflict {
		t.Errorf("another organisation replaces the deployment's Slack integration: %d %s", rec.Code, rec.Body)
	}
	if in, err := st.GetIntegration(t.Context(), domain.IntegrationSlack); err != nil || in.Org != domain.FirstOrg {
		t.Errorf("the Slack integration after the other organisation's tries: %+v, %v", in, err)
	}
	// The first organisation's GitHub App opens no pull request for
	// another organisation's task.
	github := `{"kind":"github","config":{"repos":["acme/app"]},"secrets":{"token":"ghp_x","webhook_secret":"w"}}`
	if rec := w.do(t, owner, "POST", "/v1/integrations", github); rec.Code != http.StatusCreated {
		t.Fatalf("owner adds GitHub: %d %s", rec.Code, rec.Body)
	}
	makeOwned(t, st)
	rec := w.do(t, other, "POST", "/v1/tasks/t-owned-3/pr", `{"repo":"acme/app","title":"x"}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "no GitHub integration") {
		t.Errorf("another organisation's task opens a pull request with the first's GitHub App: %d %s", rec.Code, rec.Body)
	}
}

// TestSessionKeysAreTheirOwners: a session's idempotency key names a
// session of its caller's only: the same key from another caller makes
// another session, and no key names a task's session.
func TestSessionKeysAreTheirOwners(t *testing.T) {
	t.Parallel()
	w := newCuratedWorld(t)
	create := func(c caller, key string) string {
		t.Helper()
		rec := w.do(t, c, "POST", "/v1/sessions?wait=false", `{"idempotency_key":"`+key+`"}`)
		var out struct{ ID string }
		if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.ID == "" {
			t.Fatalf("%s creates a session with key %s: %d %s", c.name, key, rec.Code, rec.Body)
		}
		return out.ID
	}
	member, other := w.caller("member"), w.caller("other organisation's owner")
	first := create(member, "k1")
	if again := create(member, "k1"); again != first {
		t.Errorf("the member's retry made session %s, want %s", again, first)
	}
	if theirs := create(other, "k1"); theirs == first {
		t.Errorf("another organisation's key k1 answered the member's session %s", first)
	}
	// The key engrams gives a task's session is not a caller's to name.
	if _, _, _, err := w.st.CreateSession(t.Context(), store.NewSession{ID: "s-task", OpID: "op-s-task", IdempotencyKey: "task-t1",
		Spec: domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: "u-admin"}}}); err != nil {
		t.Fatal(err)
	}
	if got := create(member, "task-t1"); got == "s-task" {
		t.Errorf("the member's key task-t1 answered the admin's task's session")
	}
}

// TestDrivingNeedsTheProfilesGrant: a member reads a task shared with
// them, but continues, stops or drives the session of only a task whose
// profile is granted to them (their own included: a grant taken back
// stops them), and may always end their own; admins drive every one; a
// session of no task is its owner's to drive.
func TestDrivingNeedsTheProfilesGrant(t *testing.T) {
	t.Parallel()
	w := newCuratedWorld(t)
	makeOwned(t, w.st) // p-owned, granted to no one; t-owned-0 the member's, t-owned-2 the admin's shared
	if _, _, _, err := w.st.CreateSession(t.Context(), store.NewSession{ID: "s-plain", OpID: "op-s-plain",
		Spec: domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: "u-member"}}}); err != nil {
		t.Fatal(err)
	}
	member, admin := w.caller("member"), w.caller("admin")
	refused := func(c caller, method, path string) bool {
		t.Helper()
		rec := w.do(t, c, method, path, `{"text":"go on","command":["true"]}`)
		return rec.Code == http.StatusForbidden && strings.Contains(rec.Body.String(), "not granted to you")
	}
	for _, c := range []struct {
		who          caller
		method, path string
		refused      bool
	}{
		{member, "GET", "/v1/tasks/t-owned-2", false},
		{member, "POST", "/v1/tasks/t-owned-2/messages", true},
		{member, "POST", "/v1/tasks/t-owned-0/messages", true},
		{member, "POST", "/v1/tasks/t-owned-2/stop", true},
		{member, "POST", "/v1/tasks/t-owned-0/stop", false},
		{member, "POST", "/v1/sessions/s-owned-2/exec", true},
		{member, "POST", "/v1/sessions/s-owned-0/exec", true},
		{member, "POST", "/v1/sessions/s-plain/exec", false},
		{admin, "POST", "/v1/tasks/t-owned-2/messages", false},
	} {
		if got := refused(c.who, c.method, c.path); got != c.refused {
			t.Errorf("%s %s %s: refused %v, want %v", c.who.name, c.method, c.path, got, c.refused)
		}
	}
	p, err := w.st.GetProfile(t.Context(), "p-owned")
	if err != nil {
		t.Fatal(err)
	}
	p.Grants = []domain.Grant{{Kind: domain.GrantEveryone}}
	if _, err := w.st.UpdateProfile(t.Context(), p, p.Version); err != nil {
		t.Fatal(err)
	}
	if refused(member, "POST", "/v1/tasks/t-owned-2/messages") {
		t.Error("a member is refused a shared task whose profile is granted to everyone")
	}
}

// TestRunContentIsItsCausersOrAdmins: a member sees that another's run
// ran, not what it carries (its payload and inputs quote the person and
// its steps their task); its causer and admins see all; a run no person
// caused is every member's to read.
func TestRunContentIsItsCausersOrAdmins(t *testing.T) {
	t.Parallel()
	w := newWorldWithAutomations(t)
	ctx := t.Context()
	if _, err := w.st.CreateAutomation(ctx, domain.Automation{ID: "a-1", Org: domain.FirstOrg, Name: "helper", TriggerKind: "manual"},
		[]byte(`{"name":"helper","trigger":{"kind":"manual"},"blocks":[]}`)); err != nil {
		t.Fatal(err)
	}
	for id, actor := range map[domain.AutomationRunID]domain.UserID{"r-admins": "u-admin", "r-nobodys": ""} {
		if _, _, err := w.st.CreateRun(ctx, domain.AutomationRun{ID: id, AutomationID: "a-1", Org: domain.FirstOrg, Version: 1, State: domain.RunSucceeded,
			TriggerKind: "manual", ActorID: actor, Trigger: json.RawMessage(`{"text":"the secret plan"}`), Inputs: json.RawMessage(`{"topic":"x"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		who, path string
		sees      bool
	}{
		{"member", "/v1/runs/r-admins", false},
		{"member", "/v1/runs/r-nobodys", true},
		{"admin", "/v1/runs/r-admins", true},
		{"owner", "/v1/runs/r-admins", true},
		{"admin's member key", "/v1/runs/r-admins", true}, // the admin is its causer
	} {
		rec := w.do(t, w.caller(c.who), "GET", c.path, "")
		if rec.Code != 200 || strings.Contains(rec.Body.String(), "the secret plan") != c.sees {
			t.Errorf("%s GET %s = %d %s; want content shown %v", c.who, c.path, rec.Code, rec.Body, c.sees)
		}
	}
	list := w.do(t, w.caller("member"), "GET", "/v1/automations/helper/runs", "").Body.String()
	if strings.Count(list, "the secret plan") != 1 || !strings.Contains(list, "r-admins") {
		t.Errorf("the member's list of runs shows another's content: %s", list)
	}
}
