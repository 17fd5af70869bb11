package server_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
)

// TestIdentityRoutes: a member makes a link code (shown once, kept
// hashed), lists their own accounts only, may unlink theirs and not
// another's (404), and both actions are in the audit log once, as them.
func TestIdentityRoutes(t *testing.T) {
	t.Parallel()
	st, do := peopleAPI(t)
	var link apiv1.IdentityLink
	if err := json.Unmarshal([]byte(do("member", "POST", "/v1/me/identities", `{"kind":"slack"}`, http.StatusCreated)), &link); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[A-Z2-7]{4}(-[A-Z2-7]{4}){3}$`).MatchString(link.Code) || !strings.Contains(link.Say, "link "+link.Code) ||
		link.ExpiresAt.Before(time.Now().Add(14*time.Minute)) {
		t.Fatalf("link code %+v", link)
	}
	if _, err := st.TakeIdentityCode(t.Context(), domain.HashLinkCode(link.Code), time.Now()); err != nil {
		t.Fatalf("the code is not kept by its hash: %v", err)
	}
	// GitHub's code is said in public: it is made for the login named, and
	// works for it only. Linear's is like Slack's.
	for _, bad := range []string{`{"kind":"github"}`, `{"kind":"github","account":"-no-"}`, `{"kind":"slack","account":"U1"}`, `{"kind":"jira"}`} {
		do("member", "POST", "/v1/me/identities", bad, http.StatusBadRequest)
	}
	var gh, lin apiv1.IdentityLink
	if err := json.Unmarshal([]byte(do("member", "POST", "/v1/me/identities", `{"kind":"github","account":"Octo-Cat"}`, http.StatusCreated)), &gh); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(gh.Say, "as Octo-Cat: @engrams link "+gh.Code) {
		t.Fatalf("github link code %+v", gh)
	}
	if _, err := st.TakeIdentityCode(t.Context(), domain.HashLinkCode(gh.Code), time.Now()); err == nil {
		t.Fatal("a github code is kept unbound to its login")
	}
	if c, err := st.TakeIdentityCode(t.Context(), domain.HashLinkCodeFor(gh.Code, "octo-cat"), time.Now()); err != nil || c.Kind != domain.IntegrationGitHub {
		t.Fatalf("the github code is not kept by its hash bound to the login: %+v %v", c, err)
	}
	if err := json.Unmarshal([]byte(do("member", "POST", "/v1/me/identities", `{"kind":"linear"}`, http.StatusCreated)), &lin); err != nil {
		t.Fatal(err)
	}
	if c, err := st.TakeIdentityCode(t.Context(), domain.HashLinkCode(lin.Code), time.Now()); err != nil || c.Kind != domain.IntegrationLinear ||
		!strings.Contains(lin.Say, "Linear") {
		t.Fatalf("linear link code %+v: %+v %v", lin, c, err)
	}
	do("service key (member)", "POST", "/v1/me/identities", `{"kind":"slack"}`, http.StatusForbidden)
	for _, id := range []domain.Identity{
		{OrgID: domain.FirstOrg, Kind: domain.IntegrationSlack, ExternalID: "T1:UM", UserID: "u-member", How: domain.IdentityByLink},
		{OrgID: domain.FirstOrg, Kind: domain.IntegrationSlack, ExternalID: "T1:UA", UserID: "u-admin", How: domain.IdentityByEmail},
	} {
		if err := st.PutIdentity(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	if got := do("member", "GET", "/v1/me/identities", "", http.StatusOK); !strings.Contains(got, `"account":"T1:UM"`) || strings.Contains(got, "T1:UA") {
		t.Fatalf("the member's accounts: %s", got)
	}
	do("member", "DELETE", "/v1/me/identities/slack/T1:UA", "", http.StatusNotFound)
	do("member", "DELETE", "/v1/me/identities/slack/T1:UM", "", http.StatusNoContent)
	do("member", "DELETE", "/v1/me/identities/slack/T1:UM", "", http.StatusNotFound)
	log := do("owner", "GET", "/v1/audit?limit=100", "", http.StatusOK)
	for _, want := range []string{`"actor_id":"u-member","actor_name":"u-member","key_id":"member","action":"identity.link_code","target_kind":"identity","target_id":"slack"`,
		`"action":"identity.unlink","target_kind":"identity","target_id":"slack:T1:UM"`,
		`"action":"identity.link_code","target_kind":"identity","target_id":"github"`,
		`"action":"identity.link_code","target_kind":"identity","target_id":"linear"`} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("audit log has %q %d times, want once:\n%s", want, n, log)
		}
	}
}
