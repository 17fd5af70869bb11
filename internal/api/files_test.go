package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

// fakeGuests counts the sessions it was asked to reach (reaching one
// resumes it) and answers every guest request with status and body.
type fakeGuests struct {
	mu      sync.Mutex
	reached int
	queries []string
	status  int
	body    string
}

func (f *fakeGuests) Guest(_ context.Context, id domain.SessionID) (coordinator.GuestTarget, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reached++
	return coordinator.GuestTarget{Session: domain.Session{ID: id, Epoch: 7}, Route: hostlink.GuestRoute{Transport: f, Prefix: "/guest", Header: http.Header{}}}, nil
}

func (f *fakeGuests) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, r.URL.RawQuery)
	return &http.Response{StatusCode: f.status, Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=b"},
		apiv1.HeaderSessionEpoch: {"99"}}, // a guest's say has no weight
		Body: io.NopCloser(strings.NewReader(f.body)), Request: r}, nil
}

func filesAPI(g *fakeGuests) http.Handler {
	return api.New(api.Config{}, api.Deps{Guests: g, Reads: ownedSessions{}, Fleet: fakeStore{}, Access: fakeStore{}})
}

// ownedSessions has every session, each the test key's owner's.
type ownedSessions struct{ api.SessionReads }

func (ownedSessions) GetSession(_ context.Context, id domain.SessionID) (domain.Session, error) {
	return domain.Session{ID: id, Spec: domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}}}, nil
}

// TestFileRoutesCheckPaths: a path no file can have is refused with 400
// before the session is reached (so an Idle one stays Idle); a good one
// goes to the guest cleaned.
func TestFileRoutesCheckPaths(t *testing.T) {
	t.Parallel()
	for _, route := range []string{apiv1.RouteFileGet, apiv1.RouteFilePut, apiv1.RouteFileList, apiv1.RouteFileStat} {
		method, p, _ := strings.Cut(route, " ")
		p = strings.Replace(p, "{id}", "s1", 1)
		for _, tt := range []struct {
			name, path string
			status     int
			sent       string // the query the guest got
		}{
			{"missing", "", 400, ""},
			{"relative", "etc/passwd", 400, ""},
			{"NUL", "/a\x00b", 400, ""},
			{"over PATH_MAX", "/" + strings.Repeat("d/", 2100), 400, ""},
			{"unclean", "/work//a/../b/", 200, "path=%2Fwork%2Fb"},
		} {
			t.Run(route+" "+tt.name, func(t *testing.T) {
				t.Parallel()
				g := &fakeGuests{status: 200, body: "{}"}
				req := httptest.NewRequest(method, p+"?path="+url.QueryEscape(tt.path), strings.NewReader("x"))
				req.Header.Set("Authorization", "Bearer "+testToken)
				rec := httptest.NewRecorder()
				filesAPI(g).ServeHTTP(rec, req)
				if rec.Code != tt.status {
					t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
				}
				if tt.status == 400 {
					var e apiv1.Error
					if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != apiv1.CodeBadRequest || len(rec.Body.Bytes()) > 512 {
						t.Errorf("body %.300s; want a bounded bad_request Error", rec.Body)
					}
					if g.reached != 0 {
						t.Errorf("the session was reached (and would have resumed) for a bad path")
					}
					return
				}
				if len(g.queries) != 1 || !strings.Contains(g.queries[0], tt.sent) {
					t.Errorf("the guest got %q, want %q", g.queries, tt.sent)
				}
			})
		}
	}
}

// TestFileRoutesGuestRefusals: what the guest or its host refuses with
// reaches the client in the Error schema, with a code and a bounded
// message, whatever the guest's body was.
func TestFileRoutesGuestRefusals(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("B", 64<<10)
	tests := []struct {
		name, body string
		status     int
		want       int
		code       string
	}{
		{"not found", `{"error":"open /x: no such file or directory"}`, 404, 404, apiv1.CodeNotFound},
		{"forbidden", `{"error":"open /root/x: permission denied"}`, 403, 403, apiv1.CodeBadRequest},
		{"bad request", `{"error":"/x is a directory"}`, 400, 400, apiv1.CodeBadRequest},
		{"stale epoch (host)", `{"error":"epoch 3 is stale","code":"stale_epoch"}`, 409, 409, apiv1.CodeConflict},
		{"paused host", `{"error":"paused","code":"paused"}`, 503, 409, apiv1.CodeConflict},
		{"guest failure", `{"error":"disk on fire"}`, 500, 502, apiv1.CodeUnavailable},
		{"not JSON", "<html>oops</html>", 404, 404, apiv1.CodeNotFound},
		{"huge message", `{"error":"` + huge + `"}`, 400, 400, apiv1.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := &fakeGuests{status: tt.status, body: tt.body}
			req := httptest.NewRequest(http.MethodGet, "/v1/sessions/s1/files?path=/x", nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			rec := httptest.NewRecorder()
			filesAPI(g).ServeHTTP(rec, req)
			var e apiv1.Error
			if rec.Code != tt.want || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != tt.code || !strings.HasPrefix(e.Error, "session guest: ") {
				t.Fatalf("status %d body %.200s; want %d with code %s", rec.Code, rec.Body, tt.want, tt.code)
			}
			if rec.Body.Len() > 4<<10+128 || rec.Header().Get("Set-Cookie") != "" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("answer %d bytes, headers %v", rec.Body.Len(), rec.Header())
			}
		})
	}
}

// TestExecAnswersCarryTheEpoch: both exec routes answer with the epoch the
// command started at (the guest cannot set it), so a client can tell what
// cut a stream short.
func TestExecAnswersCarryTheEpoch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ method, target, body string }{
		{http.MethodPost, "/v1/sessions/s1/exec", `{"argv":["true"]}`},
		{http.MethodGet, "/v1/sessions/s1/exec/ws", ""},
	} {
		g := &fakeGuests{status: 200, body: `{"type":"exit"}`}
		req := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		filesAPI(g).ServeHTTP(rec, req)
		if got := rec.Header().Values(apiv1.HeaderSessionEpoch); rec.Code != 200 || len(got) != 1 || got[0] != "7" {
			t.Errorf("%s %s: status %d, epoch header %q; want 200 and [7]", tt.method, tt.target, rec.Code, got)
		}
	}
}
