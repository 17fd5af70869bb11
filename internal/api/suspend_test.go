package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
)

// TestSuspendAnswersItsOutcome: the suspend route says how the suspend
// ended, in the public names of the outcomes.
func TestSuspendAnswersItsOutcome(t *testing.T) {
	t.Parallel()
	for _, r := range []coordinator.SuspendResult{coordinator.SuspendedNow, coordinator.SuspendedThenResumed, coordinator.SuspendedThenEnded,
		coordinator.SuspendAlreadyIdle, coordinator.SuspendFailed, coordinator.SuspendSuperseded} {
		switch string(r) {
		case apiv1.SuspendSuspended, apiv1.SuspendResumedSince, apiv1.SuspendEndedSince, apiv1.SuspendAlreadyIdle, apiv1.SuspendFailed, apiv1.SuspendSuperseded:
		default:
			t.Errorf("coordinator result %q has no apiv1 name", r)
		}
	}
	e := coordinatortest.New(t, coordinator.Config{}, nil)
	_, h := e.AddHost(t, "a", 4)
	srv := api.New(api.Config{}, api.Deps{Sessions: e.Co, Reads: e.St, Fleet: fakeStore{}, Access: fakeStore{}})
	suspend := func(id domain.SessionID) (int, apiv1.Session) {
		req := httptest.NewRequest(http.MethodPost, "/v1/sessions/"+string(id)+"/suspend", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var s apiv1.Session
		_ = json.Unmarshal(rec.Body.Bytes(), &s)
		return rec.Code, s
	}
	s, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{IdleTimeoutSec: -1, Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.Wait(t, s.ID, domain.SessionActive)
	code, got := suspend(s.ID)
	if code != 200 || got.State != "idle" || got.Suspend == nil || got.Suspend.Result != apiv1.SuspendSuspended ||
		got.Suspend.SnapshotID == "" || got.Suspend.SnapshotID != got.HeadSnapshot || got.Suspend.OpID == "" {
		t.Fatalf("suspend: %d %+v %+v", code, got, got.Suspend)
	}
	// The op log says "suspend", the word users see, whatever name the
	// op is stored under.
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions/"+string(s.ID), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if body := rec.Body.String(); !strings.Contains(body, `"id":"`+got.Suspend.OpID+`","kind":"suspend"`) || strings.Contains(body, "evict") {
		t.Errorf("session after the suspend: %s; want its op %s of kind suspend, no evict", body, got.Suspend.OpID)
	}
	if code, again := suspend(s.ID); code != 200 || again.Suspend == nil || again.Suspend.Result != apiv1.SuspendAlreadyIdle ||
		again.Suspend.SnapshotID != got.HeadSnapshot {
		t.Fatalf("suspend again: %d %+v", code, again.Suspend)
	}
	if _, err := e.Co.Resume(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	h.Mu.Lock()
	h.FailSnapshot = "disk full"
	h.Mu.Unlock()
	if code, failed := suspend(s.ID); code != 200 || failed.State != "active" || failed.Suspend == nil ||
		failed.Suspend.Result != apiv1.SuspendFailed || !strings.Contains(failed.Suspend.Why, "disk full") {
		t.Fatalf("failed suspend: %d %+v %+v", code, failed, failed.Suspend)
	}
}
