package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// Guests reaches a session's guest daemon, resuming an Idle session first
// (the coordinator).
type Guests interface {
	Guest(ctx context.Context, id domain.SessionID) (coordinator.GuestTarget, error)
}

// guestRouter serves what runs in a session's guest: exec (plain and
// WebSocket) and files, relayed to its daemon through its host.
type guestRouter struct {
	*base
	co Guests
}

func (s *guestRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteExec, s.exec)
	h(apiv1.RouteExecWS, s.proxyGuest(guestapi.PathExec))
	h(apiv1.RouteFileGet, s.proxyGuest(guestapi.PathFiles))
	h(apiv1.RouteFilePut, s.proxyGuest(guestapi.PathFiles))
	h(apiv1.RouteFileList, s.proxyGuest(guestapi.PathFileList))
	h(apiv1.RouteFileStat, s.proxyGuest(guestapi.PathFileStat))
}

// proxyGuest forwards a request (WebSocket upgrades included) to the
// session's guest daemon through its host, under the session's epoch.
func (s *guestRouter) proxyGuest(guestPath string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := s.co.Guest(r.Context(), pathSession(r))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if r.Method == http.MethodPut {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes)
		}
		rp := &httputil.ReverseProxy{
			Transport: t.Route.Transport,
			Rewrite: func(pr *httputil.ProxyRequest) {
				guestRequest(pr.Out, t, guestPath)
				pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			},
			ModifyResponse: sanitizeGuestResponse,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				if errors.Is(err, context.Canceled) {
					return
				}
				writeError(w, http.StatusBadGateway, apiv1.CodeUnavailable, "reach the session's guest: "+err.Error())
			},
		}
		rp.ServeHTTP(w, r)
	}
}

// sanitizeGuestResponse keeps what an untrusted guest answers from acting
// on the API's origin: no cookies, no sniffing, no active content, and
// downloads are attachments.
func sanitizeGuestResponse(resp *http.Response) error {
	h := resp.Header
	h.Del("Set-Cookie")
	h.Del("Set-Cookie2")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if resp.StatusCode == http.StatusOK && strings.HasSuffix(resp.Request.URL.Path, guestapi.PathFiles) &&
		resp.Request.Method == http.MethodGet {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", "attachment")
	}
	return nil
}

// guestRequest points out at a guest route through the session's host.
func guestRequest(out *http.Request, t coordinator.GuestTarget, guestPath string) {
	out.URL.Scheme, out.URL.Host, out.Host = "http", "host", "host"
	out.URL.Path = t.Route.Prefix + guestPath
	out.URL.RawPath = ""
	out.Header.Del("Authorization")
	out.Header.Del("Cookie")
	for k, v := range t.Headers() {
		out.Header[k] = v
	}
}

// exec runs a command to completion and streams its output as NDJSON. The
// request and the frames have the same JSON as the guest's plain exec, so
// it is forwarded over the pooled connections of every hop, with no
// WebSocket upgrade on the way.
func (s *guestRouter) exec(w http.ResponseWriter, r *http.Request) {
	var req apiv1.ExecRequest
	if !s.decode(w, r, &req) {
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "argv must name a command")
		return
	}
	t, err := s.co.Guest(r.Context(), pathSession(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, _ := json.Marshal(guestapi.ExecRequest(req))
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://host"+t.Route.Prefix+guestapi.PathExecRun, bytes.NewReader(body))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out.Header = t.Headers()
	out.Header.Set("Content-Type", "application/json")
	resp, err := t.Route.Transport.RoundTrip(out)
	if err != nil {
		writeError(w, http.StatusBadGateway, apiv1.CodeUnavailable, "run the command in the session's guest: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		status, code := resp.StatusCode, apiv1.CodeUnavailable
		switch resp.StatusCode {
		case http.StatusBadRequest:
			code = apiv1.CodeBadRequest
		case http.StatusConflict, http.StatusServiceUnavailable:
			status, code = http.StatusConflict, apiv1.CodeConflict // a newer op holds it, or its host is paused
		default:
			status = http.StatusBadGateway
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		writeError(w, status, code, "session guest refused the command: "+strings.TrimSpace(string(msg)))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	guestapi.RelayStream(w, resp.Body)
}
