package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
)

// TestNoRoomAnswers503: on a host full of sessions that never idle, a
// create waits out the queue and answers 503 no_capacity with Retry-After,
// leaving no live (nor dead) session; resuming an idle session answers the
// same and leaves it idle.
func TestNoRoomAnswers503(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := coordinatortest.New(t, coordinator.Config{QueueWait: 10 * time.Second}, nil)
		host, _ := e.AddHost(t, "a", 1)
		e.KeepAlive(t, host)
		srv := api.New(api.Config{}, api.Deps{Sessions: e.Co, Reads: e.St, Fleet: fakeStore{}, Access: fakeStore{}})
		owner := domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}
		start := func(spec domain.SessionSpec) domain.SessionID {
			spec.Owner = owner
			s, err := e.Co.CreateSession(ctx, spec, "")
			if err != nil {
				t.Fatal(err)
			}
			e.Wait(t, s.ID, domain.SessionActive)
			return s.ID
		}
		sleeper := start(domain.SessionSpec{})
		if _, _, err := e.Co.Suspend(ctx, sleeper); err != nil {
			t.Fatal(err)
		}
		e.Wait(t, sleeper, domain.SessionIdle)
		start(domain.SessionSpec{IdleTimeoutSec: -1})

		post := func(path, body string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			return rec
		}
		for _, c := range []struct{ name, path, body string }{
			{"create", "/v1/sessions", `{}`},
			{"resume", "/v1/sessions/" + string(sleeper) + "/resume", ``},
		} {
			rec := post(c.path, c.body)
			var got apiv1.Error
			_ = json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != http.StatusServiceUnavailable || got.Code != apiv1.CodeNoCapacity || rec.Header().Get("Retry-After") != "30" ||
				!strings.Contains(got.Error, "not started") && !strings.Contains(got.Error, "not resumed") || !strings.Contains(got.Error, "no host has room") {
				t.Fatalf("%s: %d %s Retry-After %q; want 503 no_capacity, Retry-After 30", c.name, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
			}
		}
		ss, err := e.St.ListSessions(ctx, domain.SessionFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ss {
			switch {
			case s.State == domain.SessionDead:
				t.Errorf("session %s is dead: %s", s.ID, s.Reason)
			case s.ID == sleeper && s.State != domain.SessionIdle:
				t.Errorf("the refused resume left its session %s, want idle", s.State)
			case s.State == domain.SessionCompleted && !strings.Contains(s.Reason, "not started: no host has room"):
				t.Errorf("session %s completed for %q", s.ID, s.Reason)
			}
		}
	})
}
