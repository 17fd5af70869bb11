package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// TestEgressRefusedWhereGiven (issue 26): an egress entry every host
// refuses at boot (a loopback, private, link-local or unspecified address)
// is a 400 naming the entry where the list is given: at session create,
// at profile save (create and edit), and at task start from a profile
// stored before the check. An entry a host accepts passes each route.
func TestEgressRefusedWhereGiven(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	seedProfiles(t, a)
	if rec := a.do("POST", "/v1/profiles", "application/json", strings.NewReader(
		`{"name":"edit-me","spec":{"image":"py","harness":"claude-code","credentials":["ant"]}}`)); rec.Code != 201 {
		t.Fatalf("create a profile to edit: %d %s", rec.Code, rec.Body)
	}
	blocked := []struct{ entry, why string }{
		{"127.0.0.1:80", "loopback 127.0.0.0/8"},
		{"[::1]:8080", "loopback ::1/128"},
		{"10.1.2.3", "private 10.0.0.0/8"},
		{"192.168.0.10:3000", "private 192.168.0.0/16"},
		{"169.254.169.254", "link-local (cloud metadata)"},
		{"[::ffff:127.0.0.1]:80", "loopback 127.0.0.0/8"},
		{"0.0.0.0:80", "the unspecified address"},
	}
	for i, b := range blocked {
		egress, _ := json.Marshal([]string{"pypi.org", b.entry})
		spec := `{"image":"py","harness":"claude-code","credentials":["ant"],"egress":` + string(egress) + `}`
		prof := domain.Profile{ID: domain.ProfileID("stored-" + string(rune('a'+i))), Org: domain.FirstOrg, Name: "stored-" + string(rune('a'+i)),
			Spec: json.RawMessage(spec), CreatedAt: time.Now()}
		if _, err := a.st.CreateProfile(context.Background(), prof); err != nil {
			t.Fatal(err)
		}
		routes := []struct{ route, method, target, body string }{
			{"session create", "POST", "/v1/sessions", `{"egress":` + string(egress) + `}`},
			{"profile create", "POST", "/v1/profiles", `{"name":"new-` + string(rune('a'+i)) + `","spec":` + spec + `}`},
			{"profile edit", "PUT", "/v1/profiles/edit-me", `{"version":1,"spec":` + spec + `}`},
			{"task start", "POST", "/v1/tasks", `{"profile":"` + prof.Name + `","prompt":"hi"}`},
		}
		for _, r := range routes {
			rec := a.do(r.method, r.target, "application/json", strings.NewReader(r.body))
			body := rec.Body.String()
			want := b.entry + " is blocked: " + b.why
			if rec.Code != 400 || !strings.Contains(body, want) {
				t.Errorf("%s with egress %s: %d %s; want 400 saying %q", r.route, b.entry, rec.Code, body, want)
			}
			if n := strings.Count(body, b.entry); n != 1 {
				t.Errorf("%s with egress %s: the answer names it %d times, want once: %s", r.route, b.entry, n, body)
			}
		}
	}
	if ts, err := a.st.ListTasks(context.Background(), domain.TaskFilter{}); err != nil || len(ts) != 0 {
		t.Errorf("a refused task start recorded tasks: %+v %v", ts, err)
	}
	for _, r := range []struct{ route, method, target, body string }{
		{"session create", "POST", "/v1/sessions?wait=false", `{"egress":["pypi.org","8.8.8.8:53"]}`},
		{"profile create", "POST", "/v1/profiles", `{"name":"good","spec":{"image":"py","harness":"claude-code","credentials":["ant"],"egress":["pypi.org","8.8.8.8:53"]}}`},
	} {
		if rec := a.do(r.method, r.target, "application/json", strings.NewReader(r.body)); rec.Code >= 300 {
			t.Errorf("%s with public entries: %d %s", r.route, rec.Code, rec.Body)
		}
	}
}
