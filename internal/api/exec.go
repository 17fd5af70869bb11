package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"os"
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
	h(apiv1.RouteExecWS, s.proxyGuest(guestapi.PathExec, false))
	h(apiv1.RouteFileGet, s.proxyGuest(guestapi.PathFiles, true))
	h(apiv1.RouteFilePut, s.proxyGuest(guestapi.PathFiles, true))
	h(apiv1.RouteFileList, s.proxyGuest(guestapi.PathFileList, true))
	h(apiv1.RouteFileStat, s.proxyGuest(guestapi.PathFileStat, true))
}

// proxyGuest forwards a request (WebSocket upgrades included) to the
// session's guest daemon through its host, under the session's epoch. A
// file route's path is checked (and cleaned) first, so a bad one changes
// nothing, not even an Idle session's state.
func (s *guestRouter) proxyGuest(guestPath string, file bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if file {
			p, ok := filePath(w, r)
			if !ok {
				return
			}
			q := r.URL.Query()
			q.Set("path", p)
			r.URL.RawQuery = q.Encode()
		}
		t, err := s.co.Guest(r.Context(), pathSession(r))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if r.Method == http.MethodPut {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes)
		}
		if !file { // the exec WebSocket: kept on the upgrade's answer
			w.Header().Set(apiv1.HeaderSessionEpoch, itoa(t.Session.Epoch))
			if offers(r, apiv1.WSProtocol) { // a browser: its key as a subprotocol, or its sign-in cookie
				w.Header().Set("Sec-WebSocket-Protocol", apiv1.WSProtocol)
			}
		}
		rp := &httputil.ReverseProxy{
			Transport: t.Route.Transport,
			Rewrite: func(pr *httputil.ProxyRequest) {
				guestRequest(pr.Out, t, guestPath)
				pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			},
			ModifyResponse: sanitizeGuestResponse,
			ErrorHandler:   guestProxyError("reach the session's guest"),
		}
		rp.ServeHTTP(w, r)
	}
}

// sanitizeGuestResponse keeps what an untrusted guest answers from acting
// on the API's origin: no cookies, no sniffing, no active content, and
// downloads are attachments. A refusal (of the guest or of its host) is
// answered in the Error schema, with a code and a bounded message.
func sanitizeGuestResponse(resp *http.Response) error {
	if resp.StatusCode >= 400 {
		guestRefusal(resp)
	}
	h := resp.Header
	h.Del(apiv1.HeaderSessionEpoch) // the API's word, not the guest's
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
	out.Header.Del("Sec-WebSocket-Protocol") // a browser's token (wsBearer); the guest speaks none
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
	w.Header().Set(apiv1.HeaderSessionEpoch, itoa(t.Session.Epoch))
	w.WriteHeader(http.StatusOK)
	guestapi.RelayStream(w, resp.Body)
}

// guestStatus maps what a guest daemon or its host refused with to the
// public status and code: the client's mistakes keep their status, a
// newer op or a paused host is a conflict (as for exec), anything else
// means the guest could not serve it.
func guestStatus(status int) (int, string) {
	switch status {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusUnprocessableEntity:
		return status, apiv1.CodeBadRequest
	case http.StatusNotFound:
		return status, apiv1.CodeNotFound
	case http.StatusMethodNotAllowed:
		return status, apiv1.CodeMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return status, apiv1.CodeTooLarge
	case http.StatusRequestTimeout:
		return status, apiv1.CodeBadRequest
	case http.StatusConflict, http.StatusServiceUnavailable:
		return http.StatusConflict, apiv1.CodeConflict
	}
	return http.StatusBadGateway, apiv1.CodeUnavailable
}

// guestRefusal rewrites resp, a refusal, as an Error: the message of its
// JSON body (guestapi.ErrorBody and hostlink's both have "error"), or its
// first bytes, bounded.
func guestRefusal(resp *http.Response) {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorMessage))
	_ = resp.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	status, code := guestStatus(resp.StatusCode)
	b, _ := json.Marshal(apiv1.Error{Error: bounded("session guest: " + msg), Code: code})
	b = append(b, '\n')
	resp.StatusCode, resp.Status = status, http.StatusText(status)
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header = http.Header{"Content-Type": {"application/json"}, "Content-Length": {itoa(int64(len(b)))}}
}

// guestProxyError answers a proxied request that could not reach the
// guest (a 408 when its upload stalled).
func guestProxyError(action string) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		switch {
		case errors.Is(err, context.Canceled):
		case errors.Is(err, os.ErrDeadlineExceeded) && r.ContentLength != 0:
			writeError(w, http.StatusRequestTimeout, apiv1.CodeBadRequest, "the request body came too slowly: "+err.Error())
		default:
			writeError(w, http.StatusBadGateway, apiv1.CodeUnavailable, action+": "+err.Error())
		}
	}
}
