package guestapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/guest"
	"github.com/engrams/engrams/internal/guestapi"
)

// TestRawHTTP checks answers a client other than Client gets.
func TestRawHTTP(t *testing.T) {
	t.Parallel()
	h := guest.New(guest.Config{WorkDir: t.TempDir(), StateDir: t.TempDir()}, guest.Deps{}).Handler()
	v := strconv.Itoa(guestapi.Version)
	tests := []struct {
		name, method, target, version string
		wantStatus                    int
		wantError                     string
	}{
		{"version mismatch", "GET", guestapi.PathReady, "99", 400, "request has Engrams-Guest-Api=99, daemon speaks " + v},
		{"no version header is accepted", "GET", guestapi.PathReady, "", 200, ""},
		{"missing path", "GET", guestapi.PathFileStat, v, 400, "missing query parameter: path"},
		{"relative path", "GET", guestapi.PathFileList + "?path=x", v, 400, "path must be absolute"},
		{"unknown route", "GET", "/v1/nope", v, 404, "no route"},
		{"wrong method", "DELETE", guestapi.PathFiles + "?path=/x", v, 405, "method not allowed"},
		{"sync is POST", "GET", guestapi.PathSync, v, 405, "method not allowed"},
		{"outbox bad body", "POST", guestapi.PathOutbox, v, 400, "decode outbox apply"},
		{"exec without upgrade", "GET", guestapi.PathExec, v, 400, "WebSocket upgrade"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.version != "" {
				req.Header.Set(guestapi.HeaderVersion, tt.version)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d (%s)", rec.Code, tt.wantStatus, rec.Body)
			}
			if got := rec.Header().Get(guestapi.HeaderVersion); got != strconv.Itoa(guestapi.Version) {
				t.Errorf("version header = %q", got)
			}
			if tt.wantError != "" {
				var eb guestapi.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || !strings.Contains(eb.Error, tt.wantError) {
					t.Errorf("body = %s, want error containing %q", rec.Body, tt.wantError)
				}
			}
		})
	}
}

func TestOversizedControlMessage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(guest.New(guest.Config{WorkDir: t.TempDir()}, guest.Deps{}).Handler())
	t.Cleanup(srv.Close)
	ctx := testCtx(t)
	tests := []struct {
		name  string
		first []byte // nil: a valid ExecStart of cat, then a huge control message
	}{
		{"huge ExecStart", []byte(`{"argv":["` + strings.Repeat("x", 70<<10) + `"]}`)},
		{"huge control", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+guestapi.PathExec, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			if tt.first == nil {
				_ = conn.Write(ctx, websocket.MessageText, []byte(`{"argv":["cat"],"stdin":true}`))
				if _, _, err := conn.Read(ctx); err != nil { // started
					t.Fatal(err)
				}
				tt.first = []byte(`{"type":"resize","signal":"` + strings.Repeat("x", 70<<10) + `"}`)
			}
			if err := conn.Write(ctx, websocket.MessageText, tt.first); err != nil {
				t.Fatal(err)
			}
			for {
				_, _, err := conn.Read(ctx)
				if err == nil {
					continue
				}
				if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
					t.Errorf("stream ended with %v, want close status MessageTooBig", err)
				}
				return
			}
		})
	}
}

func TestClientVersionMismatch(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version+1)) // a newer daemon
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"guest API version mismatch"}`))
	}))
	defer srv.Close()
	c := guestapi.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	})
	defer c.Close()
	_, err := c.Ready(testCtx(t))
	if !errors.Is(err, guestapi.ErrVersionMismatch) || !errors.Is(err, guestapi.ErrBadRequest) {
		t.Errorf("Ready = %v, want ErrVersionMismatch", err)
	}
}
