package api_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

// TestTimeoutsInTheCLIsForms (issue 26): idle_timeout_s (and a session's
// max_lifetime_s) take the CLI's forms as well as seconds, at session
// create and at profile create, edit and receipt preview; answers carry
// seconds.
func TestTimeoutsInTheCLIsForms(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	seedProfiles(t, a)
	forms := []struct {
		given string // the JSON value
		want  int
		bad   string // "" = accepted; else what the 400 says
	}{
		{`900`, 900, ""},
		{`"15m"`, 900, ""},
		{`"1h30m"`, 5400, ""},
		{`"1.5s"`, 2, ""},
		{`"never"`, -1, ""},
		{`-1`, -1, ""},
		{`"0"`, 0, ""},
		{`"soon"`, 0, `\"soon\": want a duration of at least 1s (e.g. 15m), 0 for the server's default, or never`},
		{`"500ms"`, 0, "want a duration of at least 1s"},
		{`true`, 0, "want whole seconds or a duration"},
	}
	version := 1
	if rec := a.do("POST", "/v1/profiles", "application/json", strings.NewReader(
		`{"name":"p-edit","spec":{"image":"py","harness":"claude-code","credentials":["ant"]}}`)); rec.Code != 201 {
		t.Fatalf("create a profile to edit: %d %s", rec.Code, rec.Body)
	}
	for i, f := range forms {
		spec := `{"image":"py","harness":"claude-code","credentials":["ant"],"idle_timeout_s":` + f.given + `}`
		name := "p" + string(rune('a'+i))
		for _, r := range []struct{ route, method, target, body, answer string }{
			{"session create", "POST", "/v1/sessions?wait=false", `{"idle_timeout_s":` + f.given + `,"max_lifetime_s":` + f.given + `}`, `"idle_timeout_s":`},
			{"profile create", "POST", "/v1/profiles", `{"name":"` + name + `","spec":` + spec + `}`, `"idle_timeout_s":`},
			{"profile edit", "PUT", "/v1/profiles/p-edit", `{"version":` + strconv.Itoa(version) + `,"spec":` + spec + `}`, `"idle_timeout_s":`},
			{"receipt preview", "POST", "/v1/profiles/receipt", `{"spec":` + spec + `}`, `"idle_timeout_s":`},
		} {
			rec := a.do(r.method, r.target, "application/json", strings.NewReader(r.body))
			body := rec.Body.String()
			switch {
			case f.bad != "":
				if rec.Code != 400 || !strings.Contains(body, f.bad) {
					t.Errorf("%s with %s: %d %s; want 400 saying %s", r.route, f.given, rec.Code, body, f.bad)
				}
			case rec.Code >= 300:
				t.Errorf("%s with %s: %d %s", r.route, f.given, rec.Code, body)
			case f.want != 0 && !strings.Contains(body, r.answer+strconv.Itoa(f.want)):
				t.Errorf("%s with %s: %s; want %s%d", r.route, f.given, body, r.answer, f.want)
			case r.route == "profile edit":
				version++
			}
		}
	}
	ss, err := a.st.ListSessions(context.Background(), domain.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]bool{}
	for _, s := range ss {
		got[s.Spec.IdleTimeoutSec] = true
		if s.Spec.MaxLifetimeSec != s.Spec.IdleTimeoutSec {
			t.Errorf("session %s: max lifetime %d, idle timeout %d; both were given the same", s.ID, s.Spec.MaxLifetimeSec, s.Spec.IdleTimeoutSec)
		}
	}
	for _, w := range []int{900, 5400, 2, -1} {
		if !got[w] {
			t.Errorf("no session stored with idle timeout %d: %v", w, got)
		}
	}
}
