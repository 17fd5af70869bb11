package host

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/hostlink"
)

// TestGuestProxyRefusesBadInput: a file path no file can have and a bad
// session id are refused with 400 and a bounded message before any
// machine is looked up (the api here has none to look up).
func TestGuestProxyRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := (&api{log: slog.New(slog.DiscardHandler)}).routes()
	long := strings.Repeat("A", 10<<10)
	for name, target := range map[string]string{
		"path with NUL":   "/v1/machines/s1/guest/v1/files?path=" + url.QueryEscape("/a\x00b"),
		"relative path":   "/v1/machines/s1/guest/v1/files/list?path=a",
		"10 KB path":      "/v1/machines/s1/guest/v1/files/stat?path=/" + long,
		"no path":         "/v1/machines/s1/guest/v1/files",
		"10 KB id":        "/v1/machines/" + long + "/guest/v1/files?path=/a",
		"id with control": "/v1/machines/" + url.PathEscape("s\x1b[2J") + "/guest/v1/ready",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(http.MethodGet, target, nil)
			req.Header.Set(hostlink.HeaderEpoch, "1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var e hostlink.ErrorBody
			if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != hostlink.CodeBadRequest {
				t.Fatalf("status %d body %.200s; want 400 bad_request", rec.Code, rec.Body)
			}
			if rec.Body.Len() > 512 {
				t.Errorf("the answer repeats the input unbounded (%d bytes)", rec.Body.Len())
			}
		})
	}
}
